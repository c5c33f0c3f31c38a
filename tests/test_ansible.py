"""The Ansible role (assets/ansible) in real ansible-playbook runs of the example playbook.

Three fake servers (tests/harness.py) are three hosts of one inventory, all on this machine
(connection local), mlsetup pointed at each one's root with the role's variables: gpu1 builds
the extension and publishes its wheel, gpu2 installs that wheel, gpu3's apt-get fails. The
plays run in order: --check (plans, nothing changed), the first play (changes, one reboot per
host, gpu3 failed with its diagnosis), the second play (nothing changed anywhere).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

from steps.formats.events import PlanMade
from steps.planning import registry
from tests.common import REPO
from tests.harness import FakeServer, wait_for

pytest.importorskip("ansible", reason="ansible-core is a test extra: pip install -e .[test]")

PLAYBOOK = REPO / "assets" / "ansible" / "site.yml"
HOSTS = ("gpu1", "gpu2", "gpu3")
RECAP = re.compile(
    r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)\s+"
    r"skipped=(\d+)\s+rescued=(\d+)\s+ignored=(\d+)",
    re.MULTILINE,
)
APT_BROKEN = "E: Unable to correct problems, you have held broken packages."

pytestmark = pytest.mark.slow
# under xdist (tests/run.sh) the fleet's tests keep to one worker: its plays share one fleet, in
# order; the module's other tests (a play of their own each) go to whichever worker is free
FLEET = pytest.mark.xdist_group("ansible")


def ansible_playbook() -> str:
    beside = Path(sys.executable).parent / "ansible-playbook"
    found = str(beside) if beside.exists() else shutil.which("ansible-playbook")
    if found is None:
        pytest.skip("ansible-playbook is not installed")
    return found


def run_playbook(
    base: Path, cfg: Path, inventory: Path, *args: str, timeout: float, **settings: str
) -> subprocess.CompletedProcess:
    """The role's playbook as an operator runs it from `base` (`playbook_command`), to its end."""
    argv, env = playbook_command(base, cfg, inventory, *args, **settings)
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=base, timeout=timeout)


def playbook_command(
    base: Path, cfg: Path, inventory: Path, *args: str, **settings: str
) -> tuple[list[str], dict[str, str]]:
    """The argv and environment of the role's playbook as an operator runs it from `base`, with
    this test's ansible.cfg and home (never the invoking account's ANSIBLE_* settings) and
    plain YAML results; `settings`: more ANSIBLE_* variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(
        ANSIBLE_CONFIG=str(cfg),
        ANSIBLE_HOME=str(base / "ansible-home"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_CALLBACK_RESULT_FORMAT="yaml",
        # the async jobs' results of a local host, which went to the runner's ~/.ansible_async
        ANSIBLE_ASYNC_DIR=str(base / "ansible-async"),
    )
    env.update(settings)
    return [ansible_playbook(), "-i", str(inventory), str(PLAYBOOK), *args], env


class Fleet:
    """Three fake servers, an inventory and an ansible.cfg; the plays, each run once, in order."""

    def __init__(self, base: Path, uv: Path) -> None:
        self.base = base
        self.controller = base / "controller"
        self.controller.mkdir()
        self.servers: dict[str, FakeServer] = {}
        for host in HOSTS:
            (base / host).mkdir()
            server = FakeServer(base / host, uv)
            wheelhouse = server.base / "wheelhouse"  # each host's own: the role syncs them
            server.write_answers(extra=f'[build]\nwheelhouse = "{wheelhouse}"\n')
            self.servers[host] = server
        self.servers["gpu3"].script(
            {"apt-get cuda-toolkit-13-0": {"exit": 100, "output": APT_BROKEN}}
        )
        self.inventory = base / "inventory.yml"
        self.inventory.write_text(json.dumps(self._inventory(), indent=2))  # JSON is YAML
        self.cfg = base / "ansible.cfg"
        self.cfg.write_text(
            "[defaults]\n"
            "forks = 5\n"
            "retry_files_enabled = False\n"
            f"local_tmp = {base}/ansible-local\n"
            f"remote_tmp = {base}/ansible-remote\n"
            "interpreter_python = auto_silent\n"
        )
        self.results: dict[str, subprocess.CompletedProcess] = {}

    def _inventory(self) -> dict:
        hosts = {
            name: {
                "mlsetup_root": str(s.root),
                "mlsetup_answers": str(s.answers),
                "mlsetup_environment": s.env(),
                "fake_bin": str(s.bin),
            }
            for name, s in self.servers.items()
        }
        return {
            "all": {
                "children": {
                    "gpu_servers": {
                        "hosts": hosts,
                        "vars": {
                            "ansible_connection": "local",
                            "ansible_python_interpreter": sys.executable,
                            "ansible_become": False,  # root already; site.yml asks for sudo
                            "mlsetup_install": False,  # this checkout, not /opt/mlsetup
                            "mlsetup_command": [sys.executable, "-m", "app.cli"],
                            "mlsetup_reboot_tasks": str(REPO / "tests/ansible/fake_reboot.yml"),
                            "mlsetup_poll": 1,
                            "mlsetup_wheelhouse_sync": str(self.controller / "wheelhouse"),
                            "mlsetup_reports_dir": str(self.controller / "reports"),
                            "mlsetup_plans_dir": str(self.controller / "plans"),
                            "mlsetup_facts_dir": str(self.controller / "facts"),
                        },
                    }
                }
            }
        }

    def play(self, *args: str) -> subprocess.CompletedProcess:
        async_dir = str(self.base / "ansible-async")
        return run_playbook(
            self.base, self.cfg, self.inventory, *args, timeout=600, ANSIBLE_ASYNC_DIR=async_dir
        )

    def _once(self, name: str, *args: str) -> subprocess.CompletedProcess:
        if name not in self.results:
            self.results[name] = self.play(*args)
        return self.results[name]

    def check(self) -> subprocess.CompletedProcess:
        return self._once("check", "--check")

    def first(self) -> subprocess.CompletedProcess:
        self.check()
        return self._once("first")

    def second(self) -> subprocess.CompletedProcess:
        self.first()
        return self._once("second")

    def third(self) -> subprocess.CompletedProcess:
        self.second()
        if "third" not in self.results:
            self.servers["gpu3"].script({})  # the operator fixed apt on gpu3
        return self._once("third")

    def report(self, host: str) -> dict:
        """The host's report on the controller (mlsetup.fleet-report/1)."""
        return json.loads((self.controller / "reports" / f"{host}.json").read_text())

    def last(self, host: str) -> dict:
        """mlsetup's own report (mlsetup.report/1) of the play's last apply on the host."""
        return self.report(host)["runs"][-1]


def recap(run: subprocess.CompletedProcess) -> dict[str, dict[str, int]]:
    keys = ("ok", "changed", "unreachable", "failed", "skipped", "rescued", "ignored")
    out = run.stdout.split("PLAY RECAP")[-1]
    return {m[0]: dict(zip(keys, map(int, m[1:]), strict=True)) for m in RECAP.findall(out)}


def shown(run: subprocess.CompletedProcess) -> str:
    return f"--- stdout\n{run.stdout[-12000:]}\n--- stderr\n{run.stderr[-4000:]}"


def boots(server: FakeServer) -> int:
    path = server.state / "machine.json"
    return json.loads(path.read_text()).get("boots", 0) if path.exists() else 0


def _one_local_host(tmp_path: Path, host: dict) -> tuple[list[str], dict[str, str]]:
    """The argv and environment of site.yml over one host "box" on this machine
    (ansible_connection local), with an ANSIBLE_HOME of its own."""
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(json.dumps({"gpu_servers": {"hosts": {"box": host}}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(
        ANSIBLE_HOME=str(tmp_path / "ansible-home"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_ASYNC_DIR=str(tmp_path / "ansible-async"),  # not the runner's ~/.ansible_async
    )
    return [ansible_playbook(), "-i", str(inventory), str(PLAYBOOK)], env


def _play_one_local_host(tmp_path: Path, host: dict) -> subprocess.CompletedProcess:
    """site.yml over one host "box" on this machine (`_one_local_host`)."""
    argv, env = _one_local_host(tmp_path, host)
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture(scope="module")
def fleet(uv_binary: Path):
    if os.geteuid() != 0:
        pytest.skip("the fake servers run commands as another account: they need root")
    ansible_playbook()
    base = Path(tempfile.mkdtemp(prefix="mlsetup-fleet-", dir="/tmp"))
    base.chmod(0o755)  # the venvs' owner (uid 1000) must reach each server's home
    try:
        yield Fleet(base, uv_binary)
    finally:
        shutil.rmtree(base, ignore_errors=True)


@FLEET
def test_check_mode_previews_every_host_and_changes_nothing(fleet: Fleet):
    run = fleet.check()
    assert run.returncode == 0, shown(run)
    counts = recap(run)
    assert set(counts) == set(HOSTS), shown(run)
    for host, server in fleet.servers.items():
        assert counts[host]["failed"] == 0
        assert counts[host]["changed"] >= 1  # "would change": its plan has pending steps
        text = (fleet.controller / "plans" / f"{host}.txt").read_text()
        assert "driver" in text and "pending" in text
        plan = json.loads((fleet.controller / "plans" / f"{host}.json").read_text())
        assert plan["schema"] == "mlsetup.plan/1"
        status = {s["name"]: s["status"] for s in plan["steps"]}
        assert list(status) == list(registry.step_names())
        assert status.pop("fabric") == "satisfied"  # no NVSwitch on these servers
        assert set(status.values()) == {"pending"}
        facts = json.loads((fleet.controller / "facts" / f"{host}.json").read_text())
        assert facts["schema"] == "mlsetup.facts/1" and facts["driver"] is None
        assert facts["gpus"][0]["compute_capability"] == "9.0"
        # the fake machine is as it was: no command ran, nothing written under its root
        assert server.calls() == [], host
        assert not (server.root / "var/lib/mlsetup").exists()
        assert not (server.root / "etc/mlsetup").exists()
        assert not (server.base / "wheelhouse").exists()
        assert not server.venv.exists()
    assert not (fleet.controller / "reports").exists()


@FLEET
def test_first_play_sets_up_reboots_once_and_fails_only_the_broken_host(fleet: Fleet):
    run = fleet.first()
    assert run.returncode == 2, shown(run)  # 2: a host failed
    counts = recap(run)
    for host in ("gpu1", "gpu2"):
        assert counts[host]["failed"] == 0 and counts[host]["unreachable"] == 0, shown(run)
        assert counts[host]["changed"] > 0
        report = fleet.report(host)
        assert report["schema"] == "mlsetup.fleet-report/1" and report["host"] == host
        assert report["outcome"] == "done" and report["code"] == 0 and report["next"] == ""
        # the play's two applies, before and after the reboot, each mlsetup's own report
        before, after = report["runs"]
        assert before["schema"] == after["schema"] == "mlsetup.report/1"
        assert before["result"] == "reboot" and before["run_id"] == after["run_id"]
        assert after["result"] == "done" and after["code"] == 0 and after["failure"] is None
        assert report["ran"] == before["ran"] + after["ran"] and "driver.install" in before["ran"]
        assert report["changed"] is True
        venv_python = fleet.servers[host].venv / "bin/python"
        subprocess.run([str(venv_python), "-c", "import tinyext, torch"], check=True)
    for host, server in fleet.servers.items():
        assert boots(server) == 1, host  # the driver's reboot, once, by the role

    # gpu3: rebooted, then its toolkit install failed; the play says why, and what next
    assert counts["gpu3"]["failed"] == 1, shown(run)
    failure = fleet.last("gpu3")["failure"]
    assert fleet.last("gpu3")["result"] == "failed" and fleet.report("gpu3")["outcome"] == "failed"
    assert failure["next"] in fleet.report("gpu3")["next"]
    assert failure["action"] == "toolkit.install-13.0" and failure["diagnosis"] == "apt-broken"
    out = run.stdout
    assert "mlsetup failed on gpu3 in step toolkit, action toolkit.install-13.0 (exit 100)" in out
    for line in (failure["what"], failure["why"], failure["next"], failure["log"], APT_BROKEN):
        assert line in out, line
    assert "diagnosis: apt-broken" in out


@FLEET
def test_one_build_for_the_fleet(fleet: Fleet):
    """gpu1 builds tinyext and publishes the wheel; the role brings it to the controller and
    to gpu2, which installs it instead of compiling (the engine's wheelhouse contract)."""
    fleet.first()
    wheels = sorted((fleet.controller / "wheelhouse").glob("*/tinyext-0.1.0-*.whl"))
    assert len(wheels) == 1, list((fleet.controller / "wheelhouse").rglob("*"))
    assert (
        fleet.servers["gpu2"].base / "wheelhouse" / wheels[0].parent.name / wheels[0].name
    ).exists()
    assert "extensions.tinyext.build" in fleet.report("gpu1")["ran"]
    ran = fleet.report("gpu2")["ran"]
    assert "extensions.tinyext.install-wheel" in ran and "extensions.tinyext.build" not in ran, ran
    # the builder's report names the wheel's sha256, and so does the file beside it
    digest = hashlib.sha256(wheels[0].read_bytes()).hexdigest()
    on_gpu1 = fleet.servers["gpu1"].base / "wheelhouse" / wheels[0].parent.name / wheels[0].name
    built = {k: v for run in fleet.report("gpu1")["runs"] for k, v in run["wheels"].items()}
    assert built[str(on_gpu1)] == digest, built
    beside = wheels[0].with_name(wheels[0].name + ".sha256")
    assert beside.read_text() == f"{digest}  {wheels[0].name}\n"


@FLEET
def test_second_play_changes_nothing(fleet: Fleet):
    run = fleet.second()
    counts = recap(run)
    assert set(counts) == set(HOSTS), shown(run)
    for host in HOSTS:
        assert counts[host]["changed"] == 0, (host, shown(run))
        assert boots(fleet.servers[host]) == 1, host
        assert fleet.report(host)["changed"] is False
    assert counts["gpu1"]["failed"] == counts["gpu2"]["failed"] == 0
    assert fleet.report("gpu1")["ran"] == [] and fleet.report("gpu1")["outcome"] == "done"
    # gpu3 is still broken: failed again, with the same diagnosis, and nothing changed
    assert counts["gpu3"]["failed"] == 1
    assert fleet.last("gpu3")["failure"]["diagnosis"] == "apt-broken"


@FLEET
def test_the_fixed_host_finishes_on_the_next_play_from_the_fleets_wheel(fleet: Fleet):
    run = fleet.third()
    assert run.returncode == 0, shown(run)
    counts = recap(run)
    assert counts["gpu1"]["changed"] == counts["gpu2"]["changed"] == 0, shown(run)
    assert counts["gpu3"]["changed"] > 0 and counts["gpu3"]["failed"] == 0
    report = fleet.report("gpu3")
    assert fleet.last("gpu3")["result"] == "done" and report["changed"] is True
    assert report["ran"][0] == "toolkit.install-13.0"  # it went on where it had failed
    assert "extensions.tinyext.build" not in report["ran"]  # gpu1's wheel, from the controller
    assert boots(fleet.servers["gpu3"]) == 1


def another_wheel(good: bytes, where: Path) -> bytes:
    """A valid wheel of the same name and version with other code in it."""
    out = where.with_suffix(".evil")
    with zipfile.ZipFile(where) as src, zipfile.ZipFile(out, "w") as dst:
        for item in src.infolist():
            dst.writestr(item, src.read(item))
        dst.writestr("tinyext/evil.py", "print('not what gpu1 built')\n")
    bad = out.read_bytes()
    out.unlink()
    assert bad != good
    return bad


@FLEET
def test_a_replaced_wheel_is_passed_over_built_from_source_and_reaches_no_finished_host(
    fleet: Fleet,
):
    """gpu1's wheel replaced on the controller and on gpu3 by a valid wheel with other code;
    gpu3 needs tinyext again. gpu3's mlsetup finds the hash is not the one gpu1 recorded and
    builds from source; the finished hosts keep their wheel; the controller gets gpu3's."""
    fleet.third()
    (wheel,) = sorted((fleet.controller / "wheelhouse").glob("*/tinyext-0.1.0-*.whl"))
    good = wheel.read_bytes()
    relative = wheel.relative_to(fleet.controller / "wheelhouse")
    gpu3 = fleet.servers["gpu3"]
    bad = another_wheel(good, wheel)
    for copy in (wheel, gpu3.base / "wheelhouse" / relative):
        copy.write_bytes(bad)
    python = str(gpu3.venv / "bin/python")
    uninstall = [str(gpu3.tools / "uv"), "pip", "uninstall", "--python", python, "tinyext"]
    done = subprocess.run(uninstall, capture_output=True, text=True)  # as root: removes only
    assert done.returncode == 0, done.stderr
    run = fleet.play()
    assert run.returncode == 0, shown(run)
    # gpu3's plan said so (the console of its apply, its event stream)
    warnings = [w for e in gpu3.events() if isinstance(e, PlanMade) for w in e.plan["warnings"]]
    assert [w for w in warnings if "passed over, built from source" in w and "sha256" in w], (
        warnings
    )
    assert "extensions.tinyext.build" in fleet.report("gpu3")["ran"]
    assert not list(gpu3.venv.glob("lib/python3*/site-packages/tinyext/evil.py"))
    for host in ("gpu1", "gpu2"):  # finished: their copy stays the one gpu1 built
        assert (fleet.servers[host].base / "wheelhouse" / relative).read_bytes() == good, host
    now = wheel.read_bytes()
    recorded = wheel.with_name(wheel.name + ".sha256").read_text().split()[0]
    assert now != bad and hashlib.sha256(now).hexdigest() == recorded


def test_install_from_source_then_skip_the_same_version(tmp_path: Path):
    """The role's install: a source tarball of this checkout, install.sh into a prefix of its
    own, a stamp; run again with the same source, it installs nothing."""
    if os.geteuid() != 0:
        pytest.skip("install.sh installs as root")
    answers = tmp_path / "answers.toml"
    answers.write_text("version = 1\n")
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(
        json.dumps(
            {
                "gpu_servers": {
                    "hosts": {
                        "box": {
                            "ansible_connection": "local",
                            "ansible_python_interpreter": sys.executable,
                            "ansible_become": False,
                            "mlsetup_answers": str(answers),
                            "mlsetup_prefix": str(tmp_path / "opt/mlsetup"),
                            "mlsetup_bindir": str(tmp_path / "bin"),
                            "mlsetup_dist_dir": str(tmp_path / "dist"),
                        }
                    }
                }
            }
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_HOME=str(tmp_path / "ansible-home"), ANSIBLE_NOCOLOR="1")
    argv = [ansible_playbook(), "-i", str(inventory), str(PLAYBOOK), "--tags", "mlsetup_install"]

    first = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    assert first.returncode == 0, shown(first)
    assert recap(first)["box"]["changed"] > 0
    version = subprocess.run(
        [str(tmp_path / "bin/mlsetup"), "--version"], capture_output=True, text=True, check=True
    )
    assert version.stdout.startswith("mlsetup ")
    share = tmp_path / "share"  # beside the bin directory, as /usr/local/share is
    for shipped, installed in [
        ("completion/mlsetup.bash", "bash-completion/completions/mlsetup"),
        ("completion/_mlsetup", "zsh/site-functions/_mlsetup"),
        ("man/mlsetup.1", "man/man1/mlsetup.1"),
    ]:
        assert (share / installed).read_text() == (REPO / "assets" / shipped).read_text()
    stamp = (tmp_path / "opt/mlsetup/.mlsetup-source").read_text()
    assert re.fullmatch(r"\S+ sha256:[0-9a-f]{64}\n", stamp)
    assert not (tmp_path / "mlsetup-0.1.0").exists()

    again = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    assert again.returncode == 0, shown(again)
    assert recap(again)["box"]["changed"] == 0, shown(again)
    assert "Run install.sh" in again.stdout and "skipping: [box]" in again.stdout


def test_invalid_answers_stop_on_the_controller_before_anything_is_copied(tmp_path: Path):
    """mlsetup's own validation runs on the controller: the host keeps its good answers, and the
    controller's report of the host is this play's (refused input, no apply), not an earlier
    one's."""
    root = tmp_path / "root"
    good = root / "etc/mlsetup/answers.toml"
    good.parent.mkdir(parents=True)
    good.write_text("version = 1\n")
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "box.json").write_text(
        json.dumps({"schema": "mlsetup.report/1", "result": "done", "what": "an old report"})
    )
    answers = tmp_path / "answers.toml"
    answers.write_text('version = 1\n[torch]\ncuda = "cu999"\n')
    host = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "ansible_become": False,
        "mlsetup_install": False,
        "mlsetup_command": [sys.executable, "-m", "app.cli"],
        "mlsetup_environment": {"PYTHONPATH": str(REPO)},
        "mlsetup_root": str(root),
        "mlsetup_answers": str(answers),
        "mlsetup_reports_dir": str(reports),
        "mlsetup_poll": 1,
    }
    run = _play_one_local_host(tmp_path, host)
    assert run.returncode == 2, shown(run)
    assert recap(run)["box"]["failed"] == 1
    assert "Check the answers file on the controller" in run.stdout
    assert "torch.cuda" in run.stdout and "cu999" in run.stdout, shown(run)
    assert "nothing was copied to the hosts" in run.stdout
    assert good.read_text() == "version = 1\n"  # the host's answers are untouched
    assert not (root / "var/lib/mlsetup").exists()  # mlsetup never ran there
    report = json.loads((reports / "box.json").read_text())  # this play's, not the old one
    assert report["outcome"] == "refused input" and report["runs"] == [], report
    assert "cu999" in report["message"] and str(answers) in report["next"], report


# An mlsetup that writes a report of another schema (as a newer release might): `plan`
# (the role's check of the copied answers) passes, `apply` writes that report and exits 0.
_OTHER_SCHEMA_MLSETUP = """
import json, pathlib, sys
args = sys.argv[1:]
if args[0] == "apply":
    report = pathlib.Path(args[args.index("--root") + 1]) / "var/lib/mlsetup/report.json"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(json.dumps({"schema": "mlsetup.report/2", "result": "done", "code": 0,
                                  "changed": True, "failure": None}))
"""


def test_a_report_of_another_schema_fails_the_host_naming_both_schemas(tmp_path: Path):
    answers = tmp_path / "answers.toml"
    answers.write_text("version = 1\n")
    fake = tmp_path / "fake_mlsetup.py"
    fake.write_text(_OTHER_SCHEMA_MLSETUP)
    host = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "ansible_become": False,
        "mlsetup_install": False,
        "mlsetup_command": [sys.executable, str(fake)],
        "mlsetup_root": str(tmp_path / "root"),
        "mlsetup_answers": str(answers),
        "mlsetup_reports_dir": str(tmp_path / "reports"),
        "mlsetup_poll": 1,
    }
    run = _play_one_local_host(tmp_path, host)
    assert run.returncode == 2, shown(run)
    assert recap(run)["box"]["failed"] == 1
    assert "Check the report's schema" in run.stdout, shown(run)
    assert "mlsetup.report/2" in run.stdout and "reads mlsetup.report/1" in run.stdout


def test_install_runs_install_sh_in_mlsetup_environment(tmp_path: Path):
    """The operator's proxies and index reach install.sh's pip: with a dead index given in
    mlsetup_environment the install fails, naming that index (pip tried it)."""
    if os.geteuid() != 0:
        pytest.skip("install.sh installs as root")
    answers = tmp_path / "answers.toml"
    answers.write_text("version = 1\n")
    (tmp_path / "no-links").mkdir()
    dead = "http://127.0.0.1:9/mlsetup-dead-index/simple"
    box = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "ansible_become": False,
        "mlsetup_answers": str(answers),
        "mlsetup_prefix": str(tmp_path / "opt/mlsetup"),
        "mlsetup_bindir": str(tmp_path / "bin"),
        "mlsetup_dist_dir": str(tmp_path / "dist"),
        "mlsetup_environment": {
            "PIP_CONFIG_FILE": os.devnull,  # this machine's pip.conf has indexes of its own
            "PIP_INDEX_URL": dead,
            "PIP_FIND_LINKS": str(tmp_path / "no-links"),
            "PIP_RETRIES": "0",
            "PIP_TIMEOUT": "2",
        },
    }
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(json.dumps({"gpu_servers": {"hosts": {"box": box}}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "PIP_"))}
    env.update(ANSIBLE_HOME=str(tmp_path / "ansible-home"), ANSIBLE_NOCOLOR="1")
    run = subprocess.run(
        [ansible_playbook(), "-i", str(inventory), str(PLAYBOOK), "--tags", "mlsetup_install"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert run.returncode == 2, shown(run)
    assert recap(run)["box"]["failed"] == 1
    assert "Run install.sh" in run.stdout and "127.0.0.1:9" in run.stdout, shown(run)
    assert not (tmp_path / "bin/mlsetup").exists()


def _server_host(tmp_path: Path, server: FakeServer, **role_vars: object) -> dict[str, object]:
    """The inventory entry of a fake server played on this machine; `role_vars` over the
    role's defaults."""
    return {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "ansible_become": False,
        "mlsetup_install": False,
        "mlsetup_command": [sys.executable, "-m", "app.cli"],
        "mlsetup_environment": server.env(),
        "mlsetup_root": str(server.root),
        "mlsetup_answers": str(server.answers),
        "mlsetup_reports_dir": str(tmp_path / "reports"),
        "mlsetup_reboot_tasks": str(REPO / "tests/ansible/fake_reboot.yml"),
        "fake_bin": str(server.bin),
        "mlsetup_poll": 1,
        **role_vars,
    }


def _play_on_server(tmp_path: Path, server: FakeServer, **role_vars: object):
    """site.yml over one fake server "box" on this machine: the run and box's report."""
    run = _play_one_local_host(tmp_path, _server_host(tmp_path, server, **role_vars))
    path = tmp_path / "reports" / "box.json"
    return run, (json.loads(path.read_text()) if path.exists() else None)


def test_answers_the_hosts_mlsetup_refuses_are_refused_input_with_its_kind(
    tmp_path: Path, server: FakeServer
):
    """The controller's check passes (the file is valid); the host's own `mlsetup plan`, which
    validates the copy against that machine, refuses it: no such account there."""
    text = server.answers.read_text().replace("[venv]\n", '[venv]\nuser = "nosuchacct"\n')
    server.answers.write_text(text)
    run, report = _play_on_server(tmp_path, server)
    assert run.returncode == 2, shown(run)
    assert report is not None and report["outcome"] == "refused input", report
    assert "refused its input: answers" in report["message"], report
    assert "nosuchacct" in report["message"] and "no such account" in report["message"], report
    assert report["next"].startswith(f"fix {server.answers} on the controller"), report
    assert not (server.root / "etc/mlsetup/answers.toml").exists()  # never replaced
    assert server.calls() == []  # mlsetup never ran an apply there


def test_no_space_for_the_fleet_lock_names_the_path_and_what_to_run(
    tmp_path: Path, server: FakeServer
):
    """The fleet's stack lock is copied into a full /var/lib/mlsetup (mlsetup never runs): the
    host's report says there is no space at that path, and what to do."""
    lock = tmp_path / "stack.lock"
    lock.write_text("# a fleet lock\ntinyext==0.1.0\n")
    full = server.root / "var/lib/mlsetup"
    full.mkdir(parents=True, mode=0o700)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", str(full)], check=True
    )
    try:
        subprocess.run(["dd", "if=/dev/zero", f"of={full}/filler", "bs=4k"], capture_output=True)
        run, report = _play_on_server(
            tmp_path, server, mlsetup_lock_file=str(lock), mlsetup_builder="elsewhere"
        )
    finally:
        subprocess.run(["umount", str(full)], check=True)
    assert run.returncode == 2, shown(run)
    assert report is not None and report["outcome"] == "failed", report
    assert report["runs"] == [] and server.calls() == [], report  # mlsetup never ran
    assert f"no space left on the device at {full}" in report["message"], report
    assert "Copy the lock" in report["message"], report
    assert report["next"] == (
        f"on box: free space in {full} (df -h {full}), then run the play again"
    ), report


def test_a_bad_role_variable_is_named_and_not_blamed_on_the_answers(
    tmp_path: Path, server: FakeServer
):
    run, report = _play_on_server(tmp_path, server, mlsetup_environment="PATH=/usr/bin")
    assert run.returncode == 2, shown(run)
    assert report is not None and report["outcome"] == "refused input", report
    assert "role variable mlsetup_environment" in report["message"], report
    assert report["next"] == (
        "fix the role variable mlsetup_environment for box (the inventory, host_vars or "
        "group_vars), then run the play again"
    ), report
    assert str(server.answers) not in report["message"] + report["next"], report
    assert server.calls() == [] and not (server.root / "var/lib/mlsetup").exists()


def test_a_second_play_over_the_same_reports_is_refused_while_the_first_runs(
    tmp_path: Path, server: FakeServer
):
    """The first play waits for a building host that is not in it ("elsewhere") until the test
    lets it go; meanwhile a second play over the same reports directory is refused, touching
    nothing; then the first ends (box's own mlsetup refuses its answers: a short apply) with
    its report, which is the first play's."""
    wheelhouse = server.base / "wheelhouse"
    text = server.answers.read_text().replace("[venv]\n", '[venv]\nuser = "nosuchacct"\n')
    server.answers.write_text(text + f'[build]\nwheelhouse = "{wheelhouse}"\n')
    reports = tmp_path / "reports"
    host = _server_host(tmp_path, server, mlsetup_builder="elsewhere")
    first_dir, second_dir = tmp_path / "first", tmp_path / "second"
    first_dir.mkdir()
    second_dir.mkdir()
    argv, env = _one_local_host(first_dir, host)
    first = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    try:
        claim = reports / ".play"
        wait_for(lambda: claim.exists() and len(claim.read_text().split()) == 3, timeout=300)
        play, pid, _ = claim.read_text().split()
        assert int(pid) == first.pid
        second = _play_one_local_host(second_dir, host)
        assert second.returncode == 2, shown(second)
        said = f"another play (ansible-playbook pid {pid}) is using the reports directory {reports}"
        assert said in " ".join(second.stdout.split()), shown(second)
        assert "Forget the host's report" not in second.stdout, shown(second)
        assert claim.read_text().split()[0] == play
        assert not (reports / "box.json").exists()  # the second wrote no report of box
        # the building host "reports": the first play goes on
        (reports / "elsewhere.json").write_text(json.dumps({"play": play}))
        out, _ = first.communicate(timeout=600)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 2, out[-6000:]
    report = json.loads((reports / "box.json").read_text())
    assert report["play"] == play and report["outcome"] == "refused input", report


def test_a_read_only_var_lib_is_mlsetups_diagnosis_naming_the_path(
    tmp_path: Path, server: FakeServer
):
    """/var/lib read-only on the host (remounted after a disk error): the host's mlsetup says
    so, naming the path and how to make it writable, and the role passes that on."""
    var_lib = server.root / "var/lib"
    var_lib.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "--bind", str(var_lib), str(var_lib)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(var_lib)], check=True)
        run, report = _play_on_server(tmp_path, server)
    finally:
        subprocess.run(["umount", str(var_lib)], check=True)
    assert run.returncode == 2, shown(run)
    assert report is not None and report["outcome"] == "failed", report
    assert "read-only" in report["message"] and str(var_lib) in report["message"], report
    assert f"findmnt -T {var_lib}" in report["next"], report
    assert "Traceback" not in run.stdout, shown(run)
