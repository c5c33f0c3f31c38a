"""What root's commands are given: where their programs are looked up (PATH), and which of
root's index credentials another account's processes get (none)."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

from steps.building.lessons import Learned
from steps.core.sizes import GiB
from tests.harness import SYSTEM_PATH, USER_UID, FakeServer


def test_a_path_with_another_accounts_directory_first_is_not_searched_as_root(
    server: FakeServer,
):
    """The venv owner's directory first on a carried PATH (sudo with an env_keep'd PATH), one
    root owns but its group may write, and one below the owner's home: each is left
    out of where root looks commands up, with a notice; the system's apt-get runs."""
    owners = server.base / "owners-bin"
    shared = server.base / "shared-bin"
    below = server.home / "tools"
    for where in (owners, shared, below):
        where.mkdir(parents=True)
        fake = where / "apt-get"
        fake.write_text(f"#!/bin/sh\ntouch {server.base}/ran-$(basename $(dirname $0))\nexit 0\n")
        fake.chmod(0o755)
    for path in (server.home, owners):  # the home is the owner's, as the harness makes it
        os.chown(path, USER_UID, USER_UID)
    shared.chmod(0o775)
    server.machine.driver_loaded("580.105.08")
    server.script({"apt-get cuda-toolkit-13-0": {"exit": 100}})  # the run stops there
    path = f"{owners}:{shared}:{below}:{server.bin}:{server.tools}:{SYSTEM_PATH}"
    run = server.mlsetup("apply", "--answers", str(server.answers), PATH=path)
    assert run.returncode == 1, run.stdout + run.stderr
    assert not list(server.base.glob("ran-*"))  # none of them ran
    assert "apt-get cuda-toolkit-13-0" in server.commands()  # the system's did
    notice = next(line for line in run.stdout.splitlines() if "note: PATH: left out" in line)
    assert f"{owners}: {owners} belongs to uid {USER_UID}, not root" in notice
    assert f"{shared}: {shared} is writable by other accounts (mode 0775)" in notice
    assert f"{below}: {server.home} belongs to uid {USER_UID}" in notice


def _recording_environs(server: FakeServer) -> Path:
    """The server's uv behind a script that writes the environment each uv process was given
    (/proc/PID/environ, what the account it runs as can read) to DIR/UID-PID. Returns DIR."""
    real = server.tools / "uv.real"
    (server.tools / "uv").rename(real)
    environs = server.base / "environs"
    environs.mkdir(mode=0o1777)
    environs.chmod(0o1777)
    wrapper = server.tools / "uv"
    wrapper.write_text(
        "#!/bin/sh\n"
        f"tr '\\0' '\\n' < /proc/$$/environ > {environs}/$(id -u)-$$\n"
        f'exec {real} "$@"\n'
    )
    wrapper.chmod(0o755)
    return environs


def _owners_environs(environs: Path) -> list[str]:
    return [p.read_text() for p in environs.iterdir() if p.name.startswith(f"{USER_UID}-")]


def test_roots_index_credentials_never_reach_the_environment_of_the_owners_uv(
    server: FakeServer,
):
    """Credentials in a root-only /etc/uv/uv.toml, in root's PIP_INDEX_URL and in a
    UV_INDEX_<NAME>_PASSWORD: the venv owner's uv runs with none of them (what the account can
    read in /proc/PID/environ of its processes), and the run says so."""
    environs = _recording_environs(server)
    uv_toml = server.root / "etc/uv/uv.toml"
    uv_toml.parent.mkdir(parents=True)
    uv_toml.write_text(
        '[[index]]\nurl = "http://dave:S3-TOML@127.0.0.1:9/simple"\ndefault = true\n'
    )
    uv_toml.chmod(0o600)
    server.machine.driver_loaded("580.105.08")
    run = server.mlsetup(
        "apply",
        "--answers",
        str(server.answers),
        PIP_INDEX_URL="http://bob:S3-PIP@127.0.0.1:9/simple",
        UV_INDEX_MIRROR_PASSWORD="S3-UV",
    )
    owners = _owners_environs(environs)
    assert owners, run.stdout + run.stderr  # the owner's uv ran (the resolution)
    assert not [e for e in owners if "S3-" in e]
    assert all("UV_DEFAULT_INDEX=http://127.0.0.1:9/simple" in e.split("\n") for e in owners)
    assert all("PIP_INDEX_URL=http://127.0.0.1:9/simple" in e.split("\n") for e in owners)
    notice = next(s for s in run.stdout.splitlines() if "without root's index credentials" in s)
    assert "UV_INDEX_MIRROR_PASSWORD" in notice and "PIP_INDEX_URL" in notice
    assert "UV_DEFAULT_INDEX" in notice and "S3-" not in run.stdout + run.stderr


PROXIES = {  # root's proxies, each with a user:password, and what the owner's uv is given
    "https_proxy": ("http://carol:S3-https@127.0.0.1:9", "http://127.0.0.1:9"),
    "HTTP_PROXY": ("http://carol:S3-HTTP@127.0.0.1:9/", "http://127.0.0.1:9/"),
    "ALL_PROXY": ("socks5h://dan:S3-ALL@127.0.0.1:9", "socks5h://127.0.0.1:9"),
    "all_proxy": ("erin:S3-bare@127.0.0.1:9", "127.0.0.1:9"),  # no scheme: curl and uv read http
    "http_proxy": ("http://frank:S3-port@127.0.0.1:port", None),  # unreadable: left out whole
}


def test_roots_proxy_credentials_never_reach_the_environment_of_the_owners_uv(
    server: FakeServer,
):
    """root's http(s)_proxy and ALL_PROXY, any case, with a user:password: the venv owner's uv
    gets each without it (one urllib cannot read, none of it), and the run says so. The proxy
    is not reached (no_proxy: the index is local)."""
    environs = _recording_environs(server)
    server.machine.driver_loaded("580.105.08")
    given = {name: value for name, (value, _) in PROXIES.items()}
    run = server.mlsetup(
        "apply", "--answers", str(server.answers), no_proxy="127.0.0.1,localhost", **given
    )
    owners = _owners_environs(environs)
    assert owners, run.stdout + run.stderr  # the owner's uv ran (the resolution)
    for environ in owners:
        lines = environ.split("\n")
        assert "S3-" not in environ, environ
        for name, (_, public) in PROXIES.items():
            assert (f"{name}={public}" in lines) if public else not environ.count(f"{name}=")
    notice = next(s for s in run.stdout.splitlines() if "without root's proxy credentials" in s)
    assert all(name in notice for name in PROXIES), notice
    assert "let this server through it without a password" in notice
    assert "S3-" not in run.stdout + run.stderr


def test_what_another_accounts_build_taught_never_sizes_or_orders_roots_build(
    server: FakeServer,
):
    """uid 1000 compiled tinyext; what root kept of that build (the governor's lessons, the
    .ninja_log) is keyed to uid 1000, 0600. Lessons that account's jobs could have made small
    (10 MiB a job) are not root's: the next build, root's, sets the tree aside and forgets them
    with it, and root's governor starts from its own key."""
    server.machine.driver_loaded("580.105.08")
    first = server.mlsetup("apply", "--answers", str(server.answers))
    assert first.returncode == 0, first.stdout + first.stderr
    builds = server.root / "var/cache/mlsetup/build"
    small = {"largest_peak": 10 * 2**20, "peaks": [10 * 2**20] * 4, "ramps": [1.0] * 4}
    owners = builds / "tinyext-0.1.0.by-1000.governor.json"
    unkeyed = builds / "tinyext-0.1.0.governor.json"  # as releases before this one kept them
    for planted in (owners, unkeyed):
        planted.write_text(json.dumps({**small, "plateau": 0.5}))
        planted.chmod(0o600)
    assert Learned.starting_from(GiB, 40.0, owners).peak_job < 20 * 2**20  # believed for 1000
    roots = builds / "tinyext-0.1.0.by-0.governor.json"
    assert Learned.starting_from(GiB, 40.0, roots).peak_job == GiB  # not for root

    shutil.rmtree(server.root / "var/cache/mlsetup/wheels")  # no wheel kept: it compiles again
    venvs = server.base / "root-venvs"
    venvs.mkdir(mode=0o755)
    (server.root / str(venvs).lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
    (server.root / str(venvs).lstrip("/")).symlink_to(venvs)
    server.write_answers(venv=str(venvs / "ml-env"))
    text = server.answers.read_text().replace("[venv]\n", '[venv]\nuser = "root"\n')
    server.answers.write_text(text)
    sources = server.base / "src"
    for path in [sources, *sources.rglob("*")]:  # the extension's source: root's, for root
        os.chown(path, 0, 0)
    second = server.mlsetup("apply", "--answers", str(server.answers))
    assert second.returncode == 0, second.stdout + second.stderr
    assert "extensions.tinyext.build" in server.report()["ran"]
    assert list(builds.glob("tinyext-0.1.0.set-aside-*"))  # uid 1000's tree
    assert not owners.exists() and not unkeyed.exists()  # forgotten with it
    for kept in builds.glob("tinyext-0.1.0.by-*"):
        assert kept.name.startswith("tinyext-0.1.0.by-0.") and kept.stat().st_uid == 0
        assert stat.S_IMODE(kept.stat().st_mode) == 0o600


def test_roots_own_cache_is_never_handed_to_the_owners_uv(server: FakeServer, tmp_path: Path):
    """root's UV_CACHE_DIR (a root-only directory, as `mktemp -d` makes one) named in the
    environment sudo keeps: the venv owner's uv could not write it ("Could not acquire lock" at
    venv.create) and is not given root's paths; each uv the owner runs uses the owner's cache."""
    environs = _recording_environs(server)
    server.machine.driver_loaded("580.105.08")
    roots = tmp_path / "roots-uv-cache"
    roots.mkdir(mode=0o700)
    run = server.mlsetup(
        "apply", "--answers", str(server.answers), UV_CACHE_DIR=str(roots), PIP_CACHE_DIR=str(roots)
    )
    assert run.returncode == 0, run.stdout + run.stderr
    owners = _owners_environs(environs)
    assert owners, run.stdout
    for environ in owners:
        assert str(roots) not in environ, environ
        assert f"UV_CACHE_DIR={server.home}/.cache/uv" in environ.split("\n"), environ
