"""After the sync, torch is frozen: nothing installed into the venv after `uv pip sync` (the build
requirements, an extension's wheel, what that wheel requires) can move torch or leave the lock.

Against a fake server (tests/harness.py): real uv, real venvs, real builds of tiny extensions,
and the local package index (tests/pkgindex.py) with a stand-in torch. The venv is synced to
torch 2.9.0+cu128 (`torch.version = "==2.9.0"`), while the extra index also serves a torch
2.11.0: the one an unconstrained install of a wheel requiring torch>=2.10 swaps in
(`- torch==2.9.0+cu128 + torch==2.11.0`, as issue 20 saw).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from steps.building.wheels import wheel_key
from steps.core.rootfs import RootFS
from steps.stack.venvstate import VenvState, probe_venv
from tests.harness import USER_UID, FakeServer
from tests.pkgindex import FAKE_TORCH_INIT, PackageIndex, build_wheel, standard_index

PYTHON = "{}.{}".format(*sys.version_info[:2])
LOCKED_TORCH = "2.9.0+cu128"


@pytest.fixture(scope="session")
def build_tools(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Real pip and setuptools wheels, which the builds run: from the package registry once a
    session (the test's own pip), then served by the local index like everything else."""
    dest = tmp_path_factory.mktemp("build-tools")
    got = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--only-binary",
            ":all:",
            "--no-deps",
            "--dest",
            str(dest),
            "pip",
            "setuptools",
        ],
        capture_output=True,
        text=True,
    )
    assert got.returncode == 0, f"the package registry could not be reached: {got.stderr}"
    return sorted(dest.glob("*.whl"))


def frozen_machine(server: FakeServer, build_tools: list[Path]) -> PackageIndex:
    """An H200 with a loaded 580 driver and its system Python, and the local index as the only
    one: torch 2.9.0+cu128 on the cu128 index; `helper`, a plain torch 2.11.0, pip and
    setuptools on the default index."""
    real = Path(os.path.realpath(sys.executable))
    link = server.root / f"usr/bin/python{PYTHON}"
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(real)
    server.machine.driver_loaded("580.105.08")
    index = standard_index(server.base / "pkgs")
    for wheel in build_tools:
        index.add_file("pypi", wheel.name.split("-")[0], wheel)
    index.add(
        "pypi",
        "torch",
        "2.11.0",
        {
            "torch/__init__.py": FAKE_TORCH_INIT,
            "torch/version.py": "__version__ = '2.11.0'\ncuda = '13.0'\n",
        },
    )
    return index


def env(index: PackageIndex) -> dict[str, str]:
    return {"UV_DEFAULT_INDEX": index.default_url}


def write_answers(
    server: FakeServer,
    index: PackageIndex,
    extension: str | None,
    extra: str = "",
    lock: str = "",
    version: str = "0.1.0",
) -> None:
    server.answers.write_text(
        f'version = 1\n[venv]\npath = "~/ml-env"\npython = "auto"\nlock = "{lock}"\n'
        f'[torch]\nindex_url = "{index.torch_url}"\nversion = "==2.9.0"\n'
        + (f'[[extensions]]\nname = "{extension}"\nversion = "{version}"\n' if extension else "")
        + f'[reboot]\npolicy = "never"\n{extra}'
    )


def add_extension(
    server: FakeServer,
    name: str,
    requires: tuple[str, ...] = (),
    runtime_requires: tuple[str, ...] = (),
    smoke: str = "",
    from_index: bool = False,
) -> None:
    """A tiny extension whose wheel requires `requires` (setup.py install_requires), with its
    recipe (`runtime_requires` as the recipe declares them), its source owned by the venv's
    account, as an operator's own would be; `from_index`: the recipe names the release, whose
    sdist comes from the index (see `publish_sdist`)."""
    src = server.base / "src" / name
    (src / name).mkdir(parents=True)
    (src / name / "__init__.py").write_text("import torch  # built and run against the venv's\n")
    (src / "setup.py").write_text(
        "from setuptools import setup\n"
        f"setup(name={name!r}, version='0.1.0', packages=[{name!r}], "
        f"install_requires={list(requires)!r})\n"
    )
    for path in [src, *src.rglob("*")]:
        os.chown(path, USER_UID, USER_UID)
    (server.recipes / f"{name}.toml").write_text(
        f"[{name}]\npackage = {name!r}\nimport_name = {name!r}\narch_variable = ''\n"
        "arch_map = { '9.0' = '90' }\nthreads_variable = 'NVCC_THREADS'\nthreads = 1\n"
        f"force_build_variable = 'FORCE'\npeak_job_gib = 0.5\nbuild_requires = ['setuptools']\n"
        + (f"runtime_requires = {json.dumps(list(runtime_requires))}\n" if runtime_requires else "")
        + "prebuilt_cuda_majors = []\n"
        + ("" if from_index else f"requirement = '{src}'\n")
        + f"smoke_test = '''{smoke or f'import {name}'}'''\n"
    )


def publish_sdist(index: PackageIndex, where: str, name: str, ran: Path, note: str = "") -> Path:
    """An sdist of `name` 0.1.0 on the `where` index, whose setup.py appends the uid of every
    process that runs it to `ran` (`note` changes its bytes, not what it does)."""
    files = {
        "PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1.0\n",
        "setup.py": f"# {note}\nimport os\nwith open({str(ran)!r}, 'a') as f:\n"
        "    f.write(f'{os.geteuid()}\\n')\nfrom setuptools import setup\n"
        f"setup(name={name!r}, version='0.1.0', packages=[{name!r}])\n",
        f"{name}/__init__.py": "import torch  # built and run against the venv's\n",
    }
    made = index.root.parent / f"sdist-{where}" / f"{name}-0.1.0.tar.gz"
    made.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(made, "w:gz") as tar:
        for member, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{name}-0.1.0/{member}")
            info.size, info.mtime, info.mode = len(data), 1_764_547_200, 0o644
            tar.addfile(info, io.BytesIO(data))
    return index.add_file(where, name, made)


def venv(server: FakeServer) -> VenvState:
    state = probe_venv(RootFS(server.root), str(server.venv))
    assert state is not None
    return state


def action_log(server: FakeServer, action: str) -> str:
    logs = (server.root / "var/log/mlsetup").glob(f"*/{action}.log")
    (log,) = [p for p in logs if not p.parent.is_symlink()]  # not again through "current"
    return log.read_text()


def test_a_wheel_built_earlier_that_needs_another_torch_is_refused_before_anything_runs(
    server: FakeServer, build_tools: list[Path]
):
    index = frozen_machine(server, build_tools)
    wheelhouse = server.base / "wheelhouse"
    key = wheel_key("tinyext", "0.1.0", LOCKED_TORCH, PYTHON, "native", "mluser")
    build_wheel(wheelhouse / key, "tinyext", "0.1.0", {"tinyext/__init__.py": ""}, ("torch>=2.10",))
    for d in (wheelhouse, wheelhouse / key):
        d.chmod(0o755)
    for built in (wheelhouse / key).glob("*.whl"):  # its sha256 beside it, as a builder writes
        digest = hashlib.sha256(built.read_bytes()).hexdigest()
        built.with_name(f"{built.name}.sha256").write_text(f"{digest}  {built.name}\n")
    write_answers(server, index, "tinyext", f'[build]\nwheelhouse = "{wheelhouse}"\n')

    run = server.mlsetup("apply", "--answers", str(server.answers), **env(index))
    assert run.returncode == 2, run.stdout + run.stderr
    report = server.report()
    failure = report["failure"]
    assert failure["step"] == "extensions" and failure["diagnosis"] == "outside-the-lock"
    for words in (
        "tinyext 0.1.0",
        f"{wheelhouse}/{key}",
        "requires torch>=2.10 (the lock has torch 2.9.0+cu128)",
        "nothing of tinyext was installed",
    ):
        assert words in failure["what"], failure["what"]
        assert words in run.stdout
    assert "Traceback" not in run.stdout + run.stderr
    # known from the lock before any step: nothing ran, no toolkit, no venv
    assert report["ran"] == [] and server.calls() == [] and not server.venv.exists()

    # a venv already synced to the lock (an earlier apply without the extension): still
    # refused before the extensions step, and torch stays
    write_answers(server, index, None)
    assert server.mlsetup("apply", "--answers", str(server.answers), **env(index)).returncode == 0
    write_answers(server, index, "tinyext", f'[build]\nwheelhouse = "{wheelhouse}"\n')
    again = server.mlsetup("apply", "--answers", str(server.answers), **env(index))
    assert again.returncode == 2, again.stdout + again.stderr
    assert "requires torch>=2.10 (the lock has torch 2.9.0+cu128)" in again.stdout
    assert server.report()["ran"] == []
    assert venv(server).version_of("torch") == LOCKED_TORCH
    assert venv(server).version_of("tinyext") is None


def test_a_wheel_built_here_that_needs_another_torch_is_refused_before_its_install(
    server: FakeServer, build_tools: list[Path]
):
    index = frozen_machine(server, build_tools)
    add_extension(server, "needsnew", requires=("torch>=2.10",))
    write_answers(server, index, "needsnew")

    run = server.mlsetup("apply", "--answers", str(server.answers), **env(index))
    assert run.returncode == 2, run.stdout + run.stderr
    report = server.report()
    assert "extensions.needsnew.build" in report["ran"]  # the metadata is known once built
    assert "extensions.needsnew.install" not in report["ran"]
    what = report["failure"]["what"]
    assert "needsnew 0.1.0" in what and "/var/cache/mlsetup/build/needsnew-0.1.0/wheels" in what
    assert "requires torch>=2.10 (the lock has torch 2.9.0+cu128)" in what
    assert "torch.version" in report["failure"]["next"]
    assert venv(server).version_of("torch") == LOCKED_TORCH
    assert venv(server).version_of("needsnew") is None


def test_what_an_extension_requires_comes_from_the_lock_with_its_hash_then_the_stack_is_checked(
    server: FakeServer, build_tools: list[Path]
):
    """flash-attn's einops, played by `helper`: declared by the recipe, resolved into the lock
    with its hash, installed by the sync; the wheel itself goes in alone, by the hash root read;
    after the last extension the stack check confirms torch, the lock and the import."""
    index = frozen_machine(server, build_tools)
    add_extension(server, "withdep", requires=("helper", "torch"), runtime_requires=("helper",))
    write_answers(server, index, "withdep")

    run = server.mlsetup("apply", "--answers", str(server.answers), **env(index))
    assert run.returncode == 0, run.stdout + run.stderr
    report = server.report()
    lock = report["lock"]["text"]
    published = hashlib.sha256(
        (index.root / "pypi/helper/helper-1.2.3-py3-none-any.whl").read_bytes()
    )
    assert f"helper==1.2.3 \\\n    --hash=sha256:{published.hexdigest()}" in lock
    assert "+ helper==1.2.3" in action_log(server, "venv.sync")  # installed --require-hashes
    install = action_log(server, "extensions.withdep.install")
    assert "+ withdep==0.1.0" in install and "helper" not in install.split("\n", 1)[1]
    assert venv(server).version_of("helper") == "1.2.3"

    # the build requirements came from the lock too: its versions, its hashes
    setuptools = report["lock"]["packages"]["setuptools"]
    prerequisites = action_log(server, "extensions.withdep.prerequisites").splitlines()[0]
    assert f"setuptools=={setuptools}" in prerequisites and "--require-hashes" in prerequisites
    # the wheel went in by the hash root read of it
    (cached,) = (server.root / "var/cache/mlsetup/wheels").glob("withdep-0.1.0_*/*.whl")
    pin = server.root / "var/cache/mlsetup/stack/withdep-0.1.0.wheel.txt"
    digest = hashlib.sha256(cached.read_bytes()).hexdigest()
    assert pin.read_text() == f"withdep==0.1.0 --hash=sha256:{digest}\n"

    # the stack check ran after the last extension, and the report says what it found
    assert report["ran"][-2:] == ["extensions.withdep.smoke", "extensions.stack-check"]
    after = report["smoke"]["after_extensions"]
    assert after["ok"] is True and after["torch"] == LOCKED_TORCH and after["cuda"] == "12.8"
    assert after["imports"] == {"withdep": "ok"}
    assert "every locked version held" in after["summary"]
    assert report["smoke"]["stack"]["ok"] is True  # the one after the sync, still there


def test_the_stack_check_fails_when_something_left_the_lock(
    server: FakeServer, build_tools: list[Path]
):
    """An extension's smoke test that takes a locked package out of the venv: the check after
    the last extension sees it, the run fails, and the report says what moved."""
    index = frozen_machine(server, build_tools)
    remove = (
        "import subprocess, sys\n"
        "subprocess.run([sys.executable, '-m', 'pip', 'uninstall', '-y', 'helper'], check=True)\n"
    )
    add_extension(server, "withdep", ("helper",), ("helper",), smoke=remove)
    write_answers(server, index, "withdep")

    run = server.mlsetup("apply", "--answers", str(server.answers), **env(index))
    assert run.returncode == 1, run.stdout + run.stderr
    report = server.report()
    assert report["failure"]["action"] == "extensions.stack-check"
    after = report["smoke"]["after_extensions"]
    assert after["ok"] is False
    assert "helper (locked 1.2.3) is not installed" in after["summary"]


def test_a_venv_lock_without_the_build_requirements_is_refused_before_the_step(
    server: FakeServer, build_tools: list[Path]
):
    """A lock handed from a host without this extension lacks what the build needs: the build
    requirements come only from the lock, so the step refuses before installing anything."""
    index = frozen_machine(server, build_tools)
    add_extension(server, "withdep", ("helper",), ("helper",))
    write_answers(server, index, None)  # the same stack without the extension
    assert server.mlsetup("apply", "--answers", str(server.answers), **env(index)).returncode == 0
    handed = server.root / "srv/stack.lock"
    handed.parent.mkdir()
    handed.write_bytes((server.root / "var/lib/mlsetup/stack.lock").read_bytes())

    write_answers(server, index, "withdep", lock="/srv/stack.lock")
    run = server.mlsetup("apply", "--answers", str(server.answers), **env(index))
    assert run.returncode == 2, run.stdout + run.stderr
    failure = server.report()["failure"]
    assert "withdep's build needs pip, setuptools, which the lock does not hold" in failure["what"]
    assert server.report()["ran"] == []


def sources_env(index: PackageIndex, pip_index: Path | None = None) -> dict[str, str]:
    """pip, which downloads the sdist, reads its own index setting: the same local index (or
    `pip_index`), and no configuration file of this machine."""
    return {
        **env(index),
        "PIP_INDEX_URL": (pip_index or index.root / "pypi").as_uri(),
        "PIP_CONFIG_FILE": os.devnull,
    }


def ran_setup_file(server: FakeServer) -> Path:
    ran = server.base / "ran-setup.txt"
    ran.write_text("")
    ran.chmod(0o666)  # the venv's account runs the sdist's setup.py too
    return ran


def test_an_extensions_sdist_is_downloaded_by_the_hash_its_index_publishes(
    server: FakeServer, build_tools: list[Path]
):
    index = frozen_machine(server, build_tools)
    ran = ran_setup_file(server)
    sdist = publish_sdist(index, "pypi", "srcext", ran)
    add_extension(server, "srcext", from_index=True)
    write_answers(server, index, "srcext")

    run = server.mlsetup("apply", "--answers", str(server.answers), **sources_env(index))
    assert run.returncode == 0, run.stdout + run.stderr
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    pins = (server.root / "var/cache/mlsetup/stack/sources.txt").read_text()
    assert pins == f"srcext==0.1.0 \\\n    --hash=sha256:{digest}\n"
    download = action_log(server, "extensions.srcext.source")
    assert "--require-hashes --constraint /var/cache/mlsetup/stack/sources.txt" in download
    assert venv(server).version_of("srcext") == "0.1.0"
    # resolving the hash ran no code of the sdist as root: only the venv's account ran setup.py
    assert "extensions.source-hashes" in [e.action for e in server.events() if hasattr(e, "action")]
    assert set(ran.read_text().split()) == {str(USER_UID)}


def test_an_sdist_that_is_not_the_one_the_index_published_is_refused(
    server: FakeServer, build_tools: list[Path]
):
    """pip is handed another copy of the release (a mirror gone wrong, a tampered file): the
    download fails on the hash and nothing of it runs or is built."""
    index = frozen_machine(server, build_tools)
    ran = ran_setup_file(server)
    publish_sdist(index, "pypi", "srcext", ran)
    other = PackageIndex(server.base / "other")
    publish_sdist(other, "pypi", "srcext", ran, note="not the published bytes")
    add_extension(server, "srcext", from_index=True)
    write_answers(server, index, "srcext")

    run = server.mlsetup(
        "apply", "--answers", str(server.answers), **sources_env(index, other.root / "pypi")
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert server.report()["failure"]["action"] == "extensions.srcext.source"
    assert "DO NOT MATCH THE HASHES" in action_log(server, "extensions.srcext.source")
    assert "extensions.srcext.build" not in server.report()["ran"]
    assert ran.read_text() == ""


def test_an_extension_release_the_index_lacks_is_exit_2_before_the_step(
    server: FakeServer, build_tools: list[Path]
):
    index = frozen_machine(server, build_tools)
    publish_sdist(index, "pypi", "srcext", ran_setup_file(server))
    add_extension(server, "srcext", from_index=True)
    write_answers(server, index, "srcext", version="9.9.9")

    run = server.mlsetup("apply", "--answers", str(server.answers), **sources_env(index))
    assert run.returncode == 2, run.stdout + run.stderr
    what = server.report()["failure"]["what"]
    # the index's one release named as what would work (uv says "only srcext==0.1.0 is
    # available" of an index with one release: read as the newest, not as a partial mirror)
    assert 'extensions[0].version = "9.9.9": no srcext 9.9.9 on' in what, what
    assert 'allowed: a release that index has, such as "0.1.0"' in what, what
    assert "partial mirror" not in what and "Traceback" not in run.stdout
    assert not [a for a in server.report()["ran"] if a.startswith("extensions.")]


def test_the_stack_check_imports_every_requested_package_after_the_extensions(
    server: FakeServer, build_tools: list[Path]
):
    """After the last extension the check imports each requested package's top-level modules
    (from its wheel's RECORD) after torch and the extensions: one that fails to import (a wheel
    linked against another CUDA) fails the run, named with its error."""
    index = frozen_machine(server, build_tools)
    index.add(
        "pypi", "cu12only", "1.0",
        {"cu12only/__init__.py": "raise ImportError('libcudart.so.12: cannot open shared object')"},
    )  # fmt: skip
    add_extension(server, "withdep", ("helper",), ("helper",))
    write_answers(server, index, "withdep")
    answers = server.answers.read_text()
    server.answers.write_text(
        answers.replace('version = "==2.9.0"\n', 'version = "==2.9.0"\npackages = ["cu12only"]\n')
    )

    run = server.mlsetup("apply", "--answers", str(server.answers), **env(index))
    assert run.returncode == 1, run.stdout + run.stderr
    report = server.report()
    assert report["failure"]["action"] == "extensions.stack-check"
    assert report["smoke"]["stack"]["ok"] is True  # no import before the extensions are in
    after = report["smoke"]["after_extensions"]
    assert after["ok"] is False and after["imports"] == {"withdep": "ok"}
    assert "ImportError: libcudart.so.12" in after["packages"]["cu12only: cu12only"]
    assert "import cu12only (from cu12only)" in after["summary"]
