"""A new user's first hour: what mlsetup runs as a normal user uses that user's HOME, a failed
run goes on with changed answers as its "next:" line says, the report names what failed, and a
dry run ends saying that nothing changed."""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from steps.apply.diagnose import diagnose, failed_url
from steps.core.rootfs import RootFS
from steps.formats.answers import Answers
from steps.formats.events import ActionStarted
from steps.formats.facts import load_facts
from steps.formats.plan import Action
from steps.planning import registry
from steps.planning.planner import make_plan
from steps.run.runner import Runner
from tests.common import MACHINES, NOBODY, as_a_user
from tests.harness import FakeServer


def test_a_command_of_no_account_runs_with_the_home_of_the_account_running_mlsetup():
    """`mlsetup plan` as a user resolves with uv, an action of no account: it gets that user's
    HOME (uv's cache and Pythons live under it), not root's /root, which the user cannot
    write; and root's own runs get root's."""
    base = Path(tempfile.mkdtemp(prefix="mlsetup-home-"))
    base.chmod(0o777)  # the child that is not root writes the action's log here

    def environment() -> str:
        runner = Runner(RootFS(base), lambda event: None, environ={"PATH": "/usr/bin:/bin"})
        action = Action(id="env", kind="resolve", title="its environment", argv=["env"])
        result = runner.run(action, base / "logs" / f"env-{os.geteuid()}.log")
        return "\n".join(result.tail)

    try:
        as_user = dict(line.split("=", 1) for line in as_a_user(environment).splitlines())
        user = pwd.getpwuid(NOBODY if os.geteuid() == 0 else os.geteuid())
        assert as_user["HOME"] == user.pw_dir and as_user["USER"] == user.pw_name, as_user
        assert as_user["HOME"] != "/root" or user.pw_uid == 0
        if os.geteuid() == 0:
            as_root = dict(line.split("=", 1) for line in environment().splitlines())
            assert as_root["HOME"] == pwd.getpwuid(0).pw_dir and as_root["USER"] == "root"
    finally:
        shutil.rmtree(base)


def next_command(output: str) -> list[str]:
    """The command the failure's "next:" line ends with (after its last "then: "), as argv."""
    [line] = [line for line in output.splitlines() if line.strip().startswith("next:")]
    return shlex.split(line.rsplit("then: ", 1)[1])


def run_as_printed(server: FakeServer, argv: list[str], **env: str) -> subprocess.CompletedProcess:
    """`sudo mlsetup ...` as the next line printed it (the fake server is root's already)."""
    assert argv[:2] == ["sudo", "mlsetup"], argv
    return server.mlsetup(*argv[2:], **env)


def test_an_unreachable_index_is_reported_and_the_printed_command_goes_on_after_the_edit(
    server: FakeServer,
):
    """torch.index_url points where nothing answers: the report names the resolution that
    failed, its log, its output and the URL; the next line says which answer to edit and the
    command that then goes on, and it does (`--resume` would go on with the old answers)."""
    server.machine.driver_loaded("580.105.08")
    working = str(server.index)
    closed = "http://127.0.0.1:9/whl/{build}"  # a closed port: nothing answers
    server.answers.write_text(server.answers.read_text().replace(working, closed))
    failed = server.mlsetup("apply", "--answers", str(server.answers), UV_HTTP_RETRIES="0")
    # exit 2: the index configured cannot serve the run, and nothing ran (issue 20)
    assert failed.returncode == 2, failed.stdout + failed.stderr
    failure = server.report()["failure"]
    assert failure["diagnosis"] == "index-unreachable"
    assert failure["action"].startswith("venv.resolve-"), failure
    assert failure["log"].endswith(f"/{failure['action']}.log")
    assert Path(failure["log"]).is_file()  # a harness path: the fake root is this machine's
    assert any("Failed to fetch" in line for line in failure["last_output"]), failure
    assert failure["url"].startswith("http://127.0.0.1:9/whl/"), failure
    assert "torch.index_url" in failure["next"] and str(server.answers) in failure["next"]
    assert failure["url"] in failed.stdout  # the console says which URL too

    command = next_command(failed.stdout)
    assert command == ["sudo", "mlsetup", "apply", "--answers", str(server.answers)]
    # --resume goes on with the answers the run started with, and says so
    server.answers.write_text(server.answers.read_text().replace(closed, working))
    resumed = server.mlsetup("apply", "--resume", UV_HTTP_RETRIES="0")
    assert resumed.returncode == 2 and "has changed since this run started" in resumed.stderr
    done = run_as_printed(server, command)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    report = server.report()
    assert report["result"] == "done" and report["failure"] is None
    assert (server.venv / "bin/python").exists()


def test_a_step_the_answers_refuse_goes_on_after_the_edit_without_redoing_the_done_steps(
    server: FakeServer,
):
    """The extension may only come from a wheel built earlier, and there is none: the run stops
    at the extensions step after the toolkit and the venv. After the answer is changed as the
    next line says, its command goes on: the done steps are checked again, not run again."""
    server.machine.driver_loaded("580.105.08")
    text = server.answers.read_text()
    server.answers.write_text(
        text.replace('version = "0.1.0"\n', 'version = "0.1.0"\nsource = "wheel"\n')
    )
    failed = server.mlsetup("apply", "--answers", str(server.answers))
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert server.report()["failure"]["step"] == "extensions"
    assert (server.venv / "bin/python").exists() and (server.root / "usr/local/cuda-13.0").is_dir()
    before = len(server.calls())

    server.answers.write_text(text)  # source = "auto": build it
    command = next_command(failed.stdout)
    assert command == ["sudo", "mlsetup", "apply", "--answers", str(server.answers)]
    done = run_as_printed(server, command)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    assert server.commands()[before:] == []  # no apt-get, dpkg or curl again
    started = [e.action for e in server.events() if isinstance(e, ActionStarted)]
    assert not any(a.startswith(("toolkit.", "venv.create", "venv.sync")) for a in started)
    for step in registry.step_names():  # all but the extensions, which built after the fix
        if step != "extensions":
            assert f"{step:<{registry.label_width()}} ✓" in done.stdout
    assert "extensions.tinyext.build" in server.report()["ran"]


def test_a_dry_run_ends_saying_nothing_changed_and_what_a_real_apply_would_leave(
    server: FakeServer,
):
    run = server.mlsetup("apply", "--answers", str(server.answers), "--dry-run")
    assert run.returncode == 0, run.stdout + run.stderr
    last = run.stdout.strip().splitlines()[-1]
    assert "done: every step is satisfied" not in run.stdout
    assert "dry run: nothing was changed" in last
    assert f"sudo mlsetup apply --answers {server.answers} would leave" in last
    assert "NVIDIA driver 580" in last and "CUDA 13.0 at /usr/local/cuda-13.0" in last
    assert f"venv at {server.venv}" in last and "tinyext 0.1.0" in last
    assert not server.venv.exists()


def test_a_next_step_that_changes_an_answer_names_the_file_and_the_command_that_reads_it():
    """`--resume` goes on with the saved answers: a fix in the answers needs `apply --answers`
    with the file the run was started from (quoted as a shell reads it)."""
    answers = "/home/ops/my answers.toml"
    d = diagnose(["  x No solution found when resolving dependencies:"], 1, "/l.log", answers)
    assert d is not None and d.id == "resolver-conflict"
    assert "in '/home/ops/my answers.toml'" in d.next
    assert d.next.endswith("then: sudo mlsetup apply --answers '/home/ops/my answers.toml'")
    assert "--resume" not in d.next
    unnamed = diagnose(
        ["c++: fatal error: Killed signal terminated program cc1plus"], 1, "/l", None
    )
    assert unnamed is not None and unnamed.next.endswith("sudo mlsetup apply --answers FILE")
    assert failed_url(["error: Failed to fetch: https://download.pytorch.org/whl/cpu/torch/"]) == (
        "https://download.pytorch.org/whl/cpu/torch/"
    )
    curl = ["curl", "-fsSL", "-o", "/k.deb", "https://developer.download.nvidia.com/k.deb"]
    assert failed_url(["curl: (6) Could not resolve host: x"], curl) == curl[-1]
    assert (
        failed_url(["error"], ["uv", "pip", "compile", "--index-url", "https://x/simple"]) is None
    )


def test_the_step_that_sets_the_repo_up_brings_the_download_tools_when_the_driver_does_not():
    """A server whose driver is fine: a later step (the first pending one that needs NVIDIA's
    repo, the toolkit's here) sets the repo up, and its keyring comes with curl over HTTPS,
    which a bare Debian or Ubuntu lacks: that step refreshes the lists and installs
    ca-certificates and curl first (apt-get: nothing if present)."""
    facts = load_facts(MACHINES / "rtx-pro-6000-ubuntu2404.json")
    plan = make_plan(facts, Answers())
    assert plan.step("driver").status == "satisfied"
    [actions] = [
        step.actions
        for step in plan.steps
        if any(a.id == "nvidia-repo.keyring-download" for a in step.actions)
    ]
    ids = [a.id for a in actions]
    assert ids[:3] == [
        "nvidia-repo.apt-update",
        "nvidia-repo.tools",
        "nvidia-repo.keyring-download",
    ]
    assert actions[0].argv == ["apt-get", "update"]
    assert actions[1].argv[-2:] == ["ca-certificates", "curl"] and "--no-remove" in actions[1].argv
    assert actions[2].argv[0] == "curl"
