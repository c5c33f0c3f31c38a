"""Fixtures for the real-host tests: the cached Debian 12 image, booted containers, mlsetup's
wheel, and fake servers (tests/harness.py) laid out so that the containers see them."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.common import REPO
from tests.realhost.container import CannotBoot, Container, build_image, make_key, why_not
from tests.realhost.hosts import TIMINGS


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "realhost: boots Debian 12 containers (systemd-nspawn)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/realhost/" in item.nodeid:
            item.add_marker(pytest.mark.realhost)


@pytest.fixture(scope="session")
def realhost_image() -> Path:
    reason = why_not()
    if reason is not None:
        pytest.skip(f"real-host tests cannot run here: {reason}")
    try:
        image, built = build_image()
    except CannotBoot as exc:
        pytest.fail(str(exc))
    TIMINGS["image build (cold)" if built else "image (cached)"] = built
    return image


@pytest.fixture(scope="session")
def realhost_base(realhost_image: Path) -> Iterator[Path]:
    """A world-traversable directory (the venvs' owner, uid 1000, must reach into it) that
    every container sees at the same path: paths the harness writes hold inside too."""
    base = Path(tempfile.mkdtemp(prefix="mlsetup-realhost-", dir="/var/tmp"))  # /tmp is a
    base.chmod(0o755)  # tmpfs of its own in each container
    (base / "shared").mkdir(mode=0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def ssh_key(realhost_base: Path) -> Path:
    return make_key(realhost_base)


@pytest.fixture(scope="session")
def boot(
    realhost_image: Path, realhost_base: Path, ssh_key: Path
) -> Iterator[Callable[..., Container]]:
    """boot(name) -> a running container; every one is powered off and removed at the end."""
    booted: list[Container] = []

    def start(name: str) -> Container:
        container = Container(
            realhost_image,
            name,
            realhost_base / "containers",
            ssh_key,
            binds=(realhost_base / "shared",),
        )
        booted.append(container)
        t0 = time.monotonic()
        container.start()
        TIMINGS["boots"] = TIMINGS.get("boots", 0.0) + time.monotonic() - t0
        return container

    yield start
    left = []
    for container in booted:
        container.stop()
        left += container.leftovers()
    assert not left, f"left behind after the containers stopped: {left}"


@pytest.fixture(scope="session")
def mlsetup_wheel(realhost_base: Path) -> Path:
    """A wheel of this checkout, built from its source tarball (as the role packs it), so the
    containers run the installed product, not the checkout."""
    sys.path.insert(0, str(REPO / "assets/ansible/roles/mlsetup/files"))
    try:
        from mlsetup_controller import pack
    finally:
        sys.path.pop(0)
    t0 = time.monotonic()
    dist = realhost_base / "shared" / "dist"
    tarball = Path(pack(REPO, realhost_base / "sdist")["tarball"])
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "-w",
            str(dist),
            str(tarball),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    TIMINGS["mlsetup wheel"] = time.monotonic() - t0
    (wheel,) = dist.glob("mlsetup-*.whl")
    return wheel
