"""Root among other accounts' files (docs/design.md, "Trust"): each attack an account can make on
the trees root works in, made from that account (a process with its uid) against a real apply
or plan on the fake server. A root-only file stands in for /etc/shadow; each test checks that it
keeps its content, owner and mode, and that the attack was really in place."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import psutil
import pytest

from steps.building.governor import Governor
from steps.building.lessons import Lessons
from steps.core.safefs import UnsafeFile, make_dir, open_dir
from steps.formats.events import ActionStarted, Notice, RunStarted
from tests.common import REPO
from tests.harness import USER_UID, FakeServer, install_extension, wait_for
from tests.wheels import STANDIN_TORCH

OTHER_UID = 1001  # an account that is neither root nor the operator
USER_PYTHON = "/usr/bin/python3"  # one every account can run (the test venv may not be)
WHEEL = "tinyext-0.1.0-py3-none-any.whl"
PY = "{}.{}".format(*sys.version_info[:2])
KEY = f"tinyext-0.1.0_torch-{STANDIN_TORCH}+cu130_py{PY}_archs-native_by-mluser"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="gives files to another account")
SECRET = b"root:$y$j9T$only-root-may-read-this:20000:0:99999:7:::\n"


def as_account(code: str, *args: str, uid: int = USER_UID) -> subprocess.Popen:
    """Python `code` run by the account `uid` (no group of root's), started now."""
    return subprocess.Popen(
        [USER_PYTHON, "-c", code, *args],
        user=uid,
        group=uid,
        extra_groups=[],
        cwd="/",
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def by_account(code: str, *args: str, uid: int = USER_UID) -> str:
    proc = as_account(code, *args, uid=uid)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    return out


def root_only_file(path: Path, content: bytes = SECRET) -> tuple[bytes, int, int, int]:
    path.write_bytes(content)
    os.chown(path, 0, 0)
    path.chmod(0o600)
    return fingerprint(path)


def fingerprint(path: Path) -> tuple[bytes, int, int, int]:
    st = path.lstat()
    assert stat.S_ISREG(st.st_mode), f"{path} is no longer a regular file"
    return path.read_bytes(), st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)


def notices(server: FakeServer) -> list[str]:
    return [e.text for e in server.events() if isinstance(e, Notice)]


def apply(server: FakeServer) -> subprocess.CompletedProcess:
    return server.mlsetup("apply", "--answers", str(server.answers))


# -- (a) a link among the wheels just built ------------------------------------------------------

PLANT_IN_WHEELS = """
import os, sys, time
tree, target, name = sys.argv[1:]
deadline = time.time() + 120
while not (os.path.isdir(tree) and os.stat(tree).st_uid == os.getuid()):
    assert time.time() < deadline, "the build tree never became mine"
    time.sleep(0.01)
os.makedirs(tree + "/wheels", exist_ok=True)
os.symlink(target, f"{tree}/wheels/{name}")
print("planted")
"""


def test_a_link_planted_among_the_built_wheels_is_not_copied_into_the_cache(
    server: FakeServer,
):
    shadow = server.base / "shadow"
    before = root_only_file(shadow)
    server.machine.driver_loaded("580.105.08")
    tree = server.root / "var/cache/mlsetup/build/tinyext-0.1.0"
    planted = "tinyext-0.1.0-cp39-none-any.whl"  # a wheel of the package to root's eye
    planter = as_account(PLANT_IN_WHEELS, str(tree), str(shadow), planted)
    run = apply(server)
    assert planter.communicate(timeout=30)[0].strip() == "planted"
    assert run.returncode == 0, run.stdout
    assert (tree / "wheels" / planted).is_symlink()  # in place when root published
    cache = server.root / "var/cache/mlsetup/wheels" / KEY
    # the wheel and the sha256 mlsetup records beside it; not the planted link
    assert sorted(p.name for p in cache.iterdir()) == [WHEEL, f"{WHEEL}.sha256"]
    assert (cache / WHEEL).read_bytes() == (tree / "wheels" / WHEEL).read_bytes()
    assert fingerprint(shadow) == before
    assert any(planted in text and "is a symbolic link" in text for text in notices(server))


# -- (b) links planted in a wheelhouse -----------------------------------------------------------

PLANT_IN_WHEELHOUSE = """
import os, sys
key_dir, tmp_target, final_target, wheel = sys.argv[1:]
os.mkdir(key_dir)
os.symlink(tmp_target, f"{key_dir}/.{wheel}.tmp")  # where root used to write first
os.symlink(final_target, f"{key_dir}/{wheel}")
"""


def test_links_planted_in_the_operators_wheelhouse_are_replaced_not_followed(
    server: FakeServer,
):
    shadow, other = server.base / "shadow", server.base / "other-root-file"
    before, other_before = root_only_file(shadow), root_only_file(other, b"keep me\n")
    wheelhouse = server.base / "wheelhouse"
    wheelhouse.mkdir(mode=0o755)
    os.chown(wheelhouse, USER_UID, USER_UID)  # the operator's own, as a fleet share may be
    by_account(PLANT_IN_WHEELHOUSE, str(wheelhouse / KEY), str(shadow), str(other), WHEEL)
    server.machine.driver_loaded("580.105.08")
    server.write_answers(extra=f'[build]\nwheelhouse = "{wheelhouse}"\n')
    run = apply(server)
    assert run.returncode == 0, run.stdout
    assert fingerprint(shadow) == before and fingerprint(other) == other_before
    published = wheelhouse / KEY / WHEEL
    assert not published.is_symlink() and published.stat().st_uid == 0
    cached = server.root / "var/cache/mlsetup/wheels" / KEY / WHEEL
    assert published.read_bytes() == cached.read_bytes()
    assert (wheelhouse / KEY / f".{WHEEL}.tmp").is_symlink()  # left alone, never written


PLANT_KEY_LINK = """
import os, sys
os.symlink(sys.argv[2], f"{sys.argv[1]}")
"""


def test_a_wheelhouse_other_accounts_can_write_is_refused_with_the_reason(server: FakeServer):
    victim = server.base / "root-dir"
    victim.mkdir(mode=0o700)
    wheelhouse = server.base / "shared"
    wheelhouse.mkdir()
    wheelhouse.chmod(0o1777)  # like /tmp
    # a third account points the key at a directory of root's
    by_account(PLANT_KEY_LINK, str(wheelhouse / KEY), str(victim), uid=OTHER_UID)
    server.machine.driver_loaded("580.105.08")
    server.write_answers(extra=f'[build]\nwheelhouse = "{wheelhouse}"\n')
    run = apply(server)
    assert run.returncode == 0, run.stdout
    assert list(victim.iterdir()) == []
    assert sorted(p.name for p in wheelhouse.iterdir()) == [KEY]
    refused = [t for t in notices(server) if str(wheelhouse) in t and "did not keep" in t]
    assert refused and "writable by other accounts (mode 1777)" in refused[0]
    assert "chmod go-w" in refused[0]
    # the machine's own cache still got it
    assert (server.root / "var/cache/mlsetup/wheels" / KEY / WHEEL).is_file()


# -- (c) a version that walks out of the build root ----------------------------------------------


@pytest.mark.parametrize("victim", ["etc/cron.d", "etc/made-by-mlsetup"])
def test_a_version_with_dot_dots_creates_or_chowns_nothing_outside_the_build_root(
    server: FakeServer, victim: str
):
    existing = server.root / "etc/cron.d"
    existing.mkdir(mode=0o755)
    # an earlier build of this extension left its tree, so ".." below it resolves
    earlier = server.root / "var/cache/mlsetup/build/tinyext-0.1.0"
    earlier.mkdir(parents=True, mode=0o700)
    os.chown(earlier, USER_UID, USER_UID)
    server.machine.driver_loaded("580.105.08")
    server.write_answers()
    version = f"0.1.0/../../../../../{victim}"
    server.answers.write_text(
        server.answers.read_text().replace('version = "0.1.0"', f'version = "{version}"')
    )
    run = apply(server)
    assert run.returncode in (1, 2), run.stdout  # refused: by the fs ops or by validation
    assert "Traceback" not in run.stdout + run.stderr
    st = existing.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, 0o755)
    assert not (server.root / "etc/made-by-mlsetup").exists()
    build_root = server.root / "var/cache/mlsetup/build"
    for top, dirs, files in os.walk(server.root):
        for name in dirs + files:
            path = Path(top) / name
            if path.lstat().st_uid == USER_UID:
                assert path.is_relative_to(build_root), f"{path} was given to the user"


@needs_root
def test_a_tree_name_is_made_below_the_directory_it_is_given_or_refused(tmp_path: Path):
    build = tmp_path / "build"
    build.mkdir()
    (tmp_path / "etc").mkdir()
    (build / "link").symlink_to(tmp_path / "etc")
    fd = open_dir(build)
    try:
        for name in ("x/../../etc", "..", "link"):
            with pytest.raises(UnsafeFile):
                make_dir(fd, name, 0o700, uid=USER_UID, gid=USER_UID)
        os.close(make_dir(fd, "ok-1.0", 0o700, uid=USER_UID, gid=USER_UID))
    finally:
        os.close(fd)
    assert (tmp_path / "etc").stat().st_uid == 0 and (build / "ok-1.0").stat().st_uid == USER_UID


# -- (d) the venv's files: a FIFO, /dev/zero, a huge file ----------------------------------------

PLANT_IN_VENV = """
import os, sys
venv, python, which, kind = sys.argv[1:]
site = f"{venv}/lib/python{python}/site-packages"
os.makedirs(f"{site}/torch")
os.makedirs(f"{site}/torch-2.14.0+cu130.dist-info")
files = {"cfg": f"{venv}/pyvenv.cfg", "torch": f"{site}/torch/version.py"}
with open(files["cfg"], "w") as f:
    f.write("home = /usr/bin\\nversion = 3.11.2\\n")
with open(files["torch"], "w") as f:
    f.write("__version__ = '2.14.0+cu130'\\ncuda: Optional[str] = '13.0'\\n")
path = files[which]
os.unlink(path)
if kind == "fifo":
    os.mkfifo(path)
elif kind == "dev-zero":
    os.symlink("/dev/zero", path)
else:  # 3 GiB, sparse: nothing for the account to pay, all for a reader that reads it whole
    with open(path, "wb") as f:
        f.write(b"version = 3.11.2\\n")
        f.truncate(3 << 30)
"""


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "huge"])
@pytest.mark.parametrize("which", ["cfg", "torch"])
def test_a_venv_file_that_never_ends_leaves_plan_prompt_and_small(
    server: FakeServer, which: str, kind: str
):
    python = "{}.{}".format(*sys.version_info[:2])
    by_account(PLANT_IN_VENV, str(server.venv), python, which, kind)
    code, elapsed, rss_kib, out, err = server.measured(
        "plan", "--answers", str(server.answers), "--json", timeout=60
    )
    assert code == 0, out + err
    plan = json.loads(out)
    venv = next(s for s in plan["steps"] if s["name"] == "venv")
    # the venv is seen (not created again); the value root would not read is unknown
    assert str(server.venv) in venv["reason"]
    assert "venv.create" not in [a["id"] for a in venv["actions"]]
    assert elapsed < 30 and rss_kib < 512 * 1024, (elapsed, rss_kib)


# -- (e) the jobserver directory -----------------------------------------------------------------

SWAP_JOBSERVER_DIR = """
import errno, json, os, sys, time
victim, report, server = sys.argv[1:]
deadline, result = time.time() + 180, {}
while not result and time.time() < deadline:
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:  # only this fake server's build (its venv's python): other builds may be running
            if server.encode() not in open(f"/proc/{pid}/cmdline", "rb").read():
                continue
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\\0")
        except OSError:
            continue
        fifo = next((v.split(b"fifo:", 1)[1].decode() for v in env
                     if v.startswith(b"MAKEFLAGS=") and b"fifo:" in v), None)
        if not fifo:
            continue
        result["fifo"] = fifo
        directory = os.path.dirname(fifo)
        try:
            os.rename(directory, directory + ".moved")
            os.symlink(victim, directory)
            result["swapped"] = True
        except OSError as exc:
            result["refused"] = errno.errorcode[exc.errno]
        break
    time.sleep(0.01)
json.dump(result, open(report, "w"))
"""


def test_the_jobserver_directory_cannot_be_swapped_for_a_link(server: FakeServer):
    victim = server.base / "victim"
    victim.mkdir(mode=0o755)
    before = root_only_file(victim / "fifo")  # what root would unlink through a swapped dir
    report = server.home / "swap.json"
    server.machine.driver_loaded("580.105.08")
    watcher = as_account(SWAP_JOBSERVER_DIR, str(victim), str(report), str(server.base))
    run = apply(server)
    assert run.returncode == 0, run.stdout
    out, _ = watcher.communicate(timeout=200)
    result = json.loads(report.read_text())
    assert result.get("fifo"), f"the account never saw the jobserver: {out}"
    assert "swapped" not in result and result["refused"] in ("EACCES", "EPERM"), result
    assert fingerprint(victim / "fifo") == before
    fifo = Path(result["fifo"])
    runtime = server.root / "run/mlsetup"
    assert fifo.parent.parent == runtime
    st = runtime.stat()
    assert st.st_uid == 0 and not st.st_mode & 0o022
    assert list(runtime.iterdir()) == []  # the build's jobserver is gone with it


DEAD_GOVERNOR = """
import sys, time
from pathlib import Path
from steps.building.governor import Governor
gov = Governor(budget_bytes=1 << 30, jobserver_dir=Path(sys.argv[1]))
gov.share_with(1000, 1000)
print(gov.env()["MAKEFLAGS"], flush=True)
time.sleep(600)
"""


@needs_root
def test_jobserver_directories_of_dead_engines_are_removed_at_the_next_start(tmp_path: Path):
    runtime = tmp_path / "run"
    dead = subprocess.Popen(
        [sys.executable, "-c", DEAD_GOVERNOR, str(runtime)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert dead.stdout is not None
    dead_fifo = Path(dead.stdout.readline().strip().split("fifo:", 1)[1])
    assert dead_fifo.exists()
    dead.send_signal(signal.SIGKILL)
    dead.wait()
    live = Governor(budget_bytes=1 << 30, jobserver_dir=runtime)
    assert not dead_fifo.parent.exists()  # swept by the next start
    again = Governor(budget_bytes=1 << 30, jobserver_dir=runtime)
    live_dir = Path(live.env()["MAKEFLAGS"].split("fifo:", 1)[1]).parent
    assert live_dir.exists()  # a live governor's is kept
    live.stop()
    again.stop()
    assert list(runtime.iterdir()) == []


# -- the governor's lessons ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["fifo", "link", "huge"])
def test_lessons_that_are_not_a_small_file_of_roots_are_a_guess(tmp_path: Path, kind: str):
    path = tmp_path / "x.governor.json"
    good = '{"largest_peak": 1, "peaks": [1], "ramps": [1.0], "plateau": 0.5}'
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "link":
        (tmp_path / "real.json").write_text(good)
        path.symlink_to(tmp_path / "real.json")
    else:
        path.write_text(good + " " * (1 << 20))
    start = time.monotonic()
    assert Lessons.load(path) is None
    assert time.monotonic() - start < 5


def test_open_dir_refuses_a_link_with_a_reason(tmp_path: Path):
    (tmp_path / "link").symlink_to(tmp_path)
    with pytest.raises(UnsafeFile) as caught:
        open_dir(tmp_path / "link")
    assert str(caught.value) == f"{tmp_path / 'link'}: is a symbolic link"
    assert caught.value.errno in (errno.ELOOP, errno.ENOTDIR)


# -- (f) a link planted at an action's log -------------------------------------------------------


def _failed_toolkit_run(server: FakeServer) -> Path:
    """An apply that stops at the toolkit (apt-get exits 100): its run directory, where the
    resume writes the toolkit's log again."""
    server.machine.driver_loaded("580.105.08")
    server.script({"apt-get cuda-toolkit-13-0": {"exit": 100}})
    first = apply(server)
    assert first.returncode == 1, first.stdout + first.stderr
    assert server.report()["failure"]["action"] == "toolkit.install-13.0"  # it ended cleanly
    server.script({})
    return (server.root / "var/log/mlsetup/current").resolve()


def test_a_link_planted_at_an_action_log_is_set_aside_not_appended_to(server: FakeServer):
    shadow = server.base / "shadow"
    before = root_only_file(shadow)
    run_dir = _failed_toolkit_run(server)
    log = run_dir / "toolkit.install-13.0.log"
    log.unlink()
    log.symlink_to(shadow)
    resume = server.mlsetup("apply", "--resume")
    assert resume.returncode == 0, resume.stdout + resume.stderr
    assert fingerprint(shadow) == before
    assert not log.is_symlink() and "cuda-toolkit-13-0" in log.read_text()
    aside = list(run_dir.glob("toolkit.install-13.0.log.refused-*"))
    assert len(aside) == 1 and aside[0].is_symlink()
    assert any(f"{log} was not a log file of root's own" in t for t in notices(server))


# -- (g) the environment a resume restores -------------------------------------------------------

SITECUSTOMIZE = """
import os
with open({marker!r}, "a") as f:
    f.write(f"uid {{os.getuid()}} ran sitecustomize\\n")
"""
PRELOAD_C = """
#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void planted(void) {
    FILE *f = fopen("%s", "a");
    if (f) { fprintf(f, "uid %%d loaded the planted library\\n", (int)getuid()); fclose(f); }
}
"""


def test_a_tampered_state_environment_is_filtered_like_the_one_taken_at_start(
    server: FakeServer,
):
    """`environment` in state.json is restored by `apply --resume`: LD_PRELOAD and PYTHONPATH
    edited into it on disk reach neither the resumed engine nor anything it starts."""
    _failed_toolkit_run(server)
    planted = server.base / "planted"
    planted.mkdir()
    marker = server.base / "planted-ran.txt"
    (planted / "sitecustomize.py").write_text(SITECUSTOMIZE.format(marker=str(marker)))
    environment = {"PYTHONPATH": f"{planted}:{REPO}", "PYTHONINSPECT": "1"}
    if shutil.which("cc"):
        source = planted / "planted.c"
        source.write_text(PRELOAD_C % marker)
        library = planted / "planted.so"
        subprocess.run(["cc", "-shared", "-fPIC", "-o", library, source], check=True)
        environment["LD_PRELOAD"] = str(library)
    state_file = server.root / "var/lib/mlsetup/state.json"
    state = json.loads(state_file.read_text())
    state["environment"].update(environment)
    state_file.write_text(json.dumps(state))
    resume = server.mlsetup("apply", "--resume")
    assert resume.returncode == 0, resume.stdout + resume.stderr
    assert not marker.exists(), marker.read_text()
    kept = server.state_file()  # the run is done: its environment is dropped
    assert kept["phase"] == "done" and kept["environment"] == {}


def _root_venv(server: FakeServer, extension: str = "tinyext") -> Path:
    """Answers for a venv of root's (venv.user = "root"), in a directory of root's that the
    machine's root reaches too (as the user's home is)."""
    venvs = server.base / "root-venvs"
    venvs.mkdir(mode=0o755, exist_ok=True)
    inside = server.root / str(venvs).lstrip("/")
    if not inside.is_symlink():
        inside.parent.mkdir(parents=True, exist_ok=True)
        inside.symlink_to(venvs)
    _venv_of(server, "root", venvs / "ml-env", extension)
    return venvs / "ml-env"


def _venv_of(server: FakeServer, account: str, venv: Path, extension: str) -> None:
    server.write_answers(venv=str(venv), extension=extension)
    text = server.answers.read_text().replace("[venv]\n", f'[venv]\nuser = "{account}"\n')
    server.answers.write_text(text)


# -- (h) a uv cache of the invoking user's ------------------------------------------------------


def test_root_runs_uv_with_its_own_cache_not_the_invoking_users(server: FakeServer):
    """venv.user = "root": every uv command runs as root. The invoking user's UV_CACHE_DIR
    (kept by sudo -E, say) is theirs, with their links in it: root's uv never writes there."""
    victim = server.base / "root-dir"
    victim.mkdir(mode=0o700)
    cache = server.base / "user-cache"
    cache.mkdir()
    os.chown(cache, USER_UID, USER_UID)
    for name in ("interpreter-v4", "wheels-v5", "archive-v0", "simple-v16", "sdists-v9"):
        by_account(PLANT_KEY_LINK, str(cache / name), str(victim))
    venv = _root_venv(server)
    sources = server.base / "src"
    for path in [sources, *sources.rglob("*")]:  # the extension's source: root's, for root
        os.chown(path, 0, 0)
    server.machine.driver_loaded("580.105.08")
    run = server.mlsetup("apply", "--answers", str(server.answers), UV_CACHE_DIR=str(cache))
    assert run.returncode == 0, run.stdout + run.stderr
    assert (venv / "bin/python").exists() and venv.stat().st_uid == 0
    assert list(victim.iterdir()) == []
    written = [p for p in cache.rglob("*") if p.lstat().st_uid == 0]
    assert written == [], written


# -- (i) recipe variables that load code ---------------------------------------------------------


@pytest.mark.parametrize(
    "variable", ["LD_AUDIT", "GCONV_PATH", "PYTHONINSPECT", "UV_CACHE_DIR", "PIP_CONFIG_FILE"]
)
def test_a_recipe_may_not_name_a_variable_that_loads_code(server: FakeServer, variable: str):
    recipe = server.recipes / "tinyext.toml"
    recipe.write_text(recipe.read_text().replace('"TINYEXT_FORCE_BUILD"', f'"{variable}"'))
    server.machine.driver_loaded("580.105.08")
    run = apply(server)
    assert run.returncode == 2, run.stdout + run.stderr
    assert f"{recipe}" in run.stderr and "force_build_variable" in run.stderr, run.stderr
    assert "loads no code" in run.stderr and "Traceback" not in run.stderr
    assert server.calls() == []  # nothing ran


# -- (j) PID reuse --------------------------------------------------------------------------------

SLOW_BUILD_SETUP = """
import os, sys, time
from setuptools import setup

marker = os.path.expanduser("~/slow-build-started")
if "bdist_wheel" in sys.argv and not os.path.exists(marker):
    open(marker, "w").close()
    time.sleep(300)
setup(name="slowext", version="0.1.0", packages=["slowext"])
"""
# Another account's program, started at the pid the interrupted build had, named as the build
# was (a `python` on its command line), with a child of its own.
IMPOSTOR = """
import subprocess, sys, time
child = subprocess.Popen(["sleep", "600"])
print(child.pid, flush=True)
time.sleep(600)
"""


def _spawn_at_pid(pid: int, argv: list[str], uid: int) -> subprocess.Popen:
    """`argv` run by `uid` with process id `pid` (the kernel's next pid set through
    /proc/sys/kernel/ns_last_pid; tried again while another process takes it first)."""
    for _ in range(200):
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(pid - 1))
        proc = subprocess.Popen(
            argv, user=uid, group=uid, extra_groups=[], cwd="/", stdout=subprocess.PIPE, text=True
        )
        if proc.pid == pid:
            return proc
        proc.kill()
        proc.wait()
    pytest.fail(f"could not start a process at pid {pid}")


def _tree(pid: int) -> list[psutil.Process]:
    try:
        top = psutil.Process(pid)
        return [top, *top.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


@needs_root
def test_a_reused_pid_of_another_account_is_not_ended_as_the_interrupted_build(
    server: FakeServer,
):
    """The engine dies (kill -9, its watchdog too) while the build runs; the build is gone
    by the time the account 1001 gets its pid (ns_last_pid) for a program called `python`.
    The resume must see that this is not the build: it started later, as another account."""
    server.machine.driver_loaded("580.105.08")
    install_extension(server, "slowext", SLOW_BUILD_SETUP)
    viewer = server.popen("apply", "--answers", str(server.answers))
    build = "extensions.slowext.build"
    wait_for(lambda: (server.home / "slow-build-started").exists(), timeout=240)
    pid = server.state_file()["actions"][build]["pid"]
    engine = [e for e in server.events() if isinstance(e, RunStarted)][-1].pid
    watchdogs = [
        p
        for p in psutil.process_iter(["cmdline"])
        if "steps.building.orphans" in (p.info["cmdline"] or [])
        and str(server.root) in " ".join(p.info["cmdline"])
    ]
    for p in [psutil.Process(engine), *watchdogs]:
        p.kill()
    viewer.wait(timeout=30)
    for p in _tree(pid):  # the build too: its pid is free again
        p.kill()
    wait_for(lambda: not psutil.pid_exists(pid), timeout=30)
    named = server.base / "impostor"
    named.mkdir()
    (named / "python").symlink_to(USER_PYTHON)
    impostor = _spawn_at_pid(pid, [str(named / "python"), "-c", IMPOSTOR], OTHER_UID)
    try:
        assert impostor.stdout is not None
        child = int(impostor.stdout.readline())
        wait_for(server.apply_lock_free)
        resume = server.mlsetup("apply", "--resume", timeout=300)
        assert resume.returncode == 0, resume.stdout + resume.stderr
        assert impostor.poll() is None, "the other account's process was ended"
        assert psutil.pid_exists(child) and psutil.Process(child).uids().real == OTHER_UID
        assert "still running (pid" not in resume.stdout
    finally:
        for p in _tree(pid):
            p.kill()
        impostor.wait()
    print(f"pid reuse: account {OTHER_UID}'s process at the build's pid {pid} was left alone")


# -- (k) a recipe directory other accounts can write ---------------------------------------------

OVERRIDE_SMOKE = """
import sys
recipe, marker = sys.argv[1:]
smoke = f"open('{marker}', 'a').write(str(__import__('os').getuid()))"
text = open(recipe).read().replace("smoke_test = ", f"smoke_test = \\"{smoke}\\"\\n#")
open(sys.argv[1].rsplit("/", 1)[0] + "/zz-other.toml", "w").write(text)
"""


@pytest.mark.parametrize("where", ["MLSETUP_EXTENSIONS_DIR", "/etc/mlsetup/extensions.d"])
def test_a_recipe_directory_other_accounts_can_write_is_refused_with_the_chmod(
    server: FakeServer, where: str
):
    """uid 1001 drops zz-other.toml into a 0777 recipe directory, overriding the recipe's
    smoke test: the apply refuses the directory (exit 2), runs nothing, and says the fix."""
    env = {}
    recipes = server.recipes
    if where.startswith("/"):
        recipes = server.root / where.lstrip("/")
        recipes.parent.mkdir(parents=True)
        shutil.copytree(server.recipes, recipes)
        env["MLSETUP_EXTENSIONS_DIR"] = ""  # unset: the machine's own directory
    recipes.chmod(0o777)
    drop = server.base / "drop"
    drop.mkdir()
    drop.chmod(0o777)  # where the smoke test, whoever runs it, can say so
    marker = drop / "smoke-ran"
    by_account(OVERRIDE_SMOKE, str(recipes / "tinyext.toml"), str(marker), uid=OTHER_UID)
    assert (recipes / "zz-other.toml").stat().st_uid == OTHER_UID  # the attack is in place
    server.machine.driver_loaded("580.105.08")
    run = server.mlsetup("apply", "--answers", str(server.answers), **env)
    assert run.returncode == 2, run.stdout + run.stderr
    assert f"{recipes} is writable by other accounts (mode 0777)" in run.stderr, run.stderr
    assert f"sudo chmod go-w {recipes}" in run.stderr and "Traceback" not in run.stderr
    assert not marker.exists() and server.calls() == []


@pytest.mark.parametrize("attack", ["file-0666", "file-of-another-account", "parent-0777"])
def test_a_recipe_file_or_a_directory_above_that_others_can_change_is_refused(
    server: FakeServer, attack: str
):
    recipe = server.recipes / "tinyext.toml"
    bad: Path = recipe
    if attack == "file-0666":
        recipe.chmod(0o666)
        fix = f"sudo chmod go-w {recipe}"
    elif attack == "file-of-another-account":
        os.chown(recipe, OTHER_UID, OTHER_UID)
        fix = f"sudo chown root {recipe}"
    else:
        bad = server.base
        bad.chmod(0o777)  # anyone may rename the recipe directory away and put theirs there
        fix = f"sudo chmod go-w {bad}"
    server.machine.driver_loaded("580.105.08")
    run = apply(server)
    assert run.returncode == 2, run.stdout + run.stderr
    assert f"{bad} " in run.stderr and fix in run.stderr, run.stderr
    assert server.calls() == []


# -- (l) a build tree another account compiled in, or whose files changed ------------------------

PLAIN_SETUP = """
from setuptools import setup
setup(name="treeext", version="0.1.0", packages=["treeext"])
"""
# What uid 1000 does to the tree it compiled in: its setup.py and the package it builds say who
# runs them, in a directory anyone may write to.
EDIT_TREE = """
import sys
src, marker = sys.argv[1:]
line = f"open({marker!r}, 'a').write('ran as uid %d\\\\n' % __import__('os').getuid())\\n"
for name in ("setup.py", "treeext/__init__.py"):
    text = open(f"{src}/{name}").read()
    open(f"{src}/{name}", "w").write(line + text)
print("edited")
"""


def _tree_edited_by_the_user(server: FakeServer) -> tuple[Path, Path]:
    """An apply for the venv of uid 1000 that compiles treeext from a root-owned archive in
    its build tree, then that account's edits in the tree. The tree and the marker the edited
    code would write."""
    install_extension(server, "treeext", PLAIN_SETUP, archive=True, owner=0)
    server.machine.driver_loaded("580.105.08")
    first = apply(server)
    assert first.returncode == 0, first.stdout + first.stderr
    tree = server.root / "var/cache/mlsetup/build/treeext-0.1.0"
    assert tree.stat().st_uid == USER_UID and (tree / "src/setup.py").stat().st_uid == USER_UID
    drop = server.base / "drop"
    drop.mkdir()
    drop.chmod(0o777)
    marker = drop / "edited-code-ran"
    assert by_account(EDIT_TREE, str(tree / "src"), str(marker)).strip() == "edited"
    return tree, marker


@pytest.mark.parametrize("account", ["root", "other"])
def test_a_build_tree_another_account_compiled_in_is_set_aside_not_run(
    server: FakeServer, account: str
):
    """uid 1000 compiled treeext and then edited its setup.py and its package in the build
    tree. A later apply for root's venv (venv.user = "root"), or for the venv of uid 1001,
    must not run or import any of it: the tree is set aside and the source unpacked afresh."""
    tree, marker = _tree_edited_by_the_user(server)
    shutil.rmtree(server.root / "var/cache/mlsetup/wheels")  # no wheel kept: it compiles again
    if account == "root":
        _root_venv(server, "treeext")
        uid = 0
    else:
        home = server.base / "home" / "other"
        server.machine.user("other", OTHER_UID, home)
        _venv_of(server, "other", home / "ml-env", "treeext")
        uid = OTHER_UID
    run = apply(server)
    assert not marker.exists(), marker.read_text()  # nothing uid 1000 wrote ran
    assert run.returncode == 0, run.stdout + run.stderr
    assert "extensions.treeext.build" in server.report()["ran"]
    assert tree.stat().st_uid == uid and (tree / "src/setup.py").stat().st_uid == uid
    (aside,) = tree.parent.glob("treeext-0.1.0.set-aside-*")
    assert aside.stat().st_uid == USER_UID and "ran as uid" in (aside / "src/setup.py").read_text()
    told = [t for t in notices(server) if "set it aside" in t]
    assert told and f"belongs to uid {USER_UID} (" in told[0], notices(server)


def test_a_build_tree_whose_unpacked_files_changed_is_unpacked_afresh(server: FakeServer):
    """The same account's tree, its setup.py edited since root recorded the unpack: the next
    build of it starts from the source, not from the edit."""
    tree, marker = _tree_edited_by_the_user(server)
    shutil.rmtree(server.root / "var/cache/mlsetup/wheels")
    by_account(UNINSTALL, str(server.tools / "uv"), str(server.venv), str(server.home))
    run = apply(server)
    assert run.returncode == 0, run.stdout + run.stderr
    assert not marker.exists(), marker.read_text()
    assert "ran as uid" not in (tree / "src/setup.py").read_text()
    assert any(
        "unpacked files that changed since the unpack (setup.py, treeext/__init__.py)" in t
        for t in notices(server)
    ), notices(server)


UNINSTALL = """
import subprocess, sys
uv, venv, home = sys.argv[1:]
argv = [uv, "pip", "uninstall", "--python", f"{venv}/bin/python", "treeext"]
subprocess.run(argv, check=True, env={"HOME": home, "PATH": "/usr/bin:/bin"})
"""


# -- (m) a wheel another account built -------------------------------------------------------------

MARKING_INIT = "open({marker!r}, 'a').write('imported as uid %d\\n' % __import__('os').getuid())\n"


def test_a_wheel_another_account_built_never_goes_into_roots_venv(server: FakeServer):
    """uid 1000's build of treeext (from its own source, which writes a marker when imported)
    is kept in the machine's cache. An apply for root's venv with the same torch, Python and
    GPUs must not install it: root builds its own (from root's source) and keeps it apart."""
    drop = server.base / "drop"
    drop.mkdir()
    drop.chmod(0o777)
    marker = drop / "imported"
    users = install_extension(server, "treeext", PLAIN_SETUP, archive=True)  # uid 1000's
    with tarfile.open(users, "r:gz") as tar:
        # filter= exists from Python 3.11.4 (and 3.10.12); Debian 12's 3.11.2 lacks it, and the
        # archive is the test's own
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(server.base / "users-src", **safe)
    init = server.base / "users-src/treeext-0.1.0/treeext/__init__.py"
    init.write_text(MARKING_INIT.format(marker=str(marker)))
    with tarfile.open(users, "w:gz") as tar:
        tar.add(init.parent.parent, arcname="treeext-0.1.0")
    server.machine.driver_loaded("580.105.08")
    first = apply(server)
    assert first.returncode == 0, first.stdout + first.stderr
    # its own venv's smoke test and the stack check after it, both as its owner
    assert set(marker.read_text().splitlines()) == {f"imported as uid {USER_UID}"}
    cache = server.root / "var/cache/mlsetup/wheels"
    (users_key,) = [p.name for p in cache.iterdir()]
    clean = server.base / "root-src" / "treeext-0.1.0.tar.gz"  # the operator's, root's
    clean.parent.mkdir()
    init.write_text("")
    with tarfile.open(clean, "w:gz") as tar:
        tar.add(init.parent.parent, arcname="treeext-0.1.0")
    recipe = server.recipes / "treeext.toml"
    recipe.write_text(recipe.read_text().replace(str(users), str(clean)))
    _root_venv(server, "treeext")
    run = apply(server)
    assert run.returncode == 0, run.stdout + run.stderr
    assert set(marker.read_text().splitlines()) == {f"imported as uid {USER_UID}"}  # never root
    assert "extensions.treeext.build" in server.report()["ran"]
    assert users_key.endswith("_by-mluser") and sorted(p.name for p in cache.iterdir()) == sorted(
        [users_key, users_key.replace("_by-mluser", "_by-root")]
    )
    # a second root venv gets root's wheel, and the plan says whose and from where
    shutil.rmtree(server.base / "root-venvs")
    _root_venv(server, "treeext")
    again = apply(server)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "extensions.treeext.build" not in server.report()["ran"]
    (install,) = [
        e
        for e in server.events()
        if isinstance(e, ActionStarted) and e.action_kind == "install-wheel"
    ]
    assert "from the wheel root built earlier" in install.title
    assert "/var/cache/mlsetup/wheels/" in install.title and "_by-root" in install.title
    assert set(marker.read_text().splitlines()) == {f"imported as uid {USER_UID}"}


# -- (n) an operator's source another account can write ------------------------------------------

MARK_SETUP = """
import sys
setup_py, marker = sys.argv[1:]
text = open(setup_py).read()
line = f"open({marker!r}, 'a').write('setup.py ran as uid %d\\\\n' % __import__('os').getuid())\\n"
open(setup_py, "w").write(line + text)
"""


def test_root_never_builds_a_source_directory_another_account_can_write(server: FakeServer):
    """venv.user = "root" with a recipe whose source directory belongs to uid 1000 (as the
    harness's tinyext does): root would run that account's setup.py. The build is refused,
    with the fix, before anything of it runs."""
    drop = server.base / "drop"
    drop.mkdir()
    drop.chmod(0o777)
    marker = drop / "ran"
    source = server.base / "src" / "tinyext"
    by_account(MARK_SETUP, str(source / "setup.py"), str(marker))
    _root_venv(server)
    server.machine.driver_loaded("580.105.08")
    run = apply(server)
    assert not marker.exists(), marker.read_text()
    assert run.returncode == 1, run.stdout + run.stderr
    assert f"refused to build tinyext as root from {source}" in run.stdout, run.stdout
    # the first directory at fault is the one above it, uid 1000's too
    assert f"{source.parent} belongs to uid {USER_UID}" in run.stdout
    assert f"sudo chown root {source.parent}" in run.stdout
    assert not any(r.startswith("extensions.") for r in server.report()["ran"])
