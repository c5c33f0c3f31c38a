"""Answers: defaults, the example file, and every class of bad input -> exit 2 naming the key."""

from __future__ import annotations

import json
import os
import pwd
import resource
import time

import pytest

from steps.core.accounts import account_by_uid, lookup_account
from steps.core.errors import InputError
from steps.core.rootfs import RootFS
from steps.core.settings import settings_from
from steps.decide.choices import check_on_machine, choose
from steps.formats.answers import Answers, answers_from_toml, load_answers, unsafe_directory
from steps.formats.facts import facts_from_json, load_facts
from tests.common import MACHINES, REPO, run_cli
from tests.fakemachine import FakeMachine

EXAMPLE = REPO / "assets" / "answers.example.toml"
H200 = MACHINES / "h200-ubuntu2404.json"


def test_example_file_is_valid_and_documents_every_key():
    answers = load_answers(EXAMPLE)
    assert answers.extensions[0].name == "flash-attn"
    text = EXAMPLE.read_text()
    for section, model in Answers.model_fields.items():
        if section in ("version", "extensions"):
            continue
        for key in model.annotation.model_fields:
            assert f"\n{key} = " in text, f"{section}.{key} is not in the example"


def test_defaults_round_trip_through_toml():
    answers = load_answers(EXAMPLE)
    assert answers_from_toml(answers.to_toml(), "saved") == answers
    assert answers_from_toml("", "empty") == Answers()


BAD = [
    ("bogus = 1", "bogus", "unknown key"),
    ("version = 2", "version", "1"),
    ('[driver]\naction = "reinstall"', "driver.action", "'auto', 'install' or 'skip'"),
    ('[driver]\nbranch = "latest"', "driver.branch", '"580"'),
    ('[driver]\nmodules = "closed"', "driver.modules", "'open'"),
    ('[driver]\nactoin = "auto"', "driver.actoin", "unknown key"),
    ('[toolkit]\nversions = ["12.7"]', "toolkit.versions", "12.8"),
    ('[toolkit]\nversions = "latest"', "toolkit.versions", "auto"),
    ('[venv]\npath = "ml-env"', "venv.path", "absolute path"),
    ('[venv]\npython = "3"', "venv.python", '"3.12"'),
    ('[torch]\ncuda = "cu999"', "torch.cuda", "cu128"),
    ('[torch]\nversion = "latest"', "torch.version", "PEP 440"),
    ('[torch]\nversion = "==2.6.0"\ncuda = "cu130"', "torch.cuda", "cu126"),
    # a name no recipe will take (xformers was one, until design.md's own example recipe)
    ('[[extensions]]\nname = "no-such-ext"\nversion = "1"', "extensions[0].name", "flash-attn"),
    ('[[extensions]]\nname = "flash-attn"', "extensions[0].version", "missing"),
    (
        '[[extensions]]\nname = "flash-attn"\nversion = "2.8.3"\narchs = ["9.5"]',
        "extensions[0].archs",
        "9.0",
    ),
    (
        '[[extensions]]\nname = "flash-attn"\nversion = "2.8.3"\nsource = "pypi"',
        "extensions[0].source",
        "'wheel'",
    ),
    ("[build]\nmax_jobs = -4", "build.max_jobs", "1 to 1024"),
    ("[build]\nmax_jobs = 0", "build.max_jobs", "1 to 1024"),
    ('[build]\nmemory_reserve = "lots"', "build.memory_reserve", "8GiB"),
    ('[reboot]\npolicy = "now"', "reboot.policy", "'never'"),
    # values that become argv elements or paths (issue 9)
    ('[torch]\npackages = ["ok", "--index-url=http://x"]', "torch.packages[1]", "PEP 508"),
    ('[torch]\npackages = ["foo=="]', "torch.packages[0]", "no option"),
    ('[torch]\npackages = ["foo @ https://x/foo.whl"]', "torch.packages[0]", "no URL"),
    ('[torch]\nversion = "===x"', "torch.version", 'not "==="'),
    ('[torch]\nindex_url = "ftp://x/{build}"', "torch.index_url", "http(s)://"),
    (
        '[[extensions]]\nname = "flash-attn"\nversion = "2.8.3/../../etc"',
        "extensions[0].version",
        '"2.8.3"',
    ),
    ('[[extensions]]\nname = "flash-attn"\nversion = "v2.8.3"', "extensions[0].version", "PEP 440"),
    ('[venv]\nuser = "-oX"', "venv.user", '"alice"'),
    ('[venv]\npath = "/usr"', "venv.path", "system's own"),
    ('[venv]\npath = "~/../../etc"', "venv.path", "normalized"),
    ('[venv]\npath = "~"', "venv.path", "~/ml-env"),
    ('[venv]\npython = "3.\uff11\uff12"', "venv.python", '"3.12"'),
    ('[driver]\nbranch = "\uff15\uff18\uff10"', "driver.branch", '"580"'),
    (f'[build]\nmemory_reserve = "{"9" * 5000}GiB"', "build.memory_reserve", "7 digits"),
    ("[build]\nmax_jobs = nan", "build.max_jobs", "1 to 1024"),
    ("[build]\nmax_jobs = true", "build.max_jobs", "1 to 1024"),
    ('[build]\nwheelhouse = "/var/lib/mlsetup/w"', "build.wheelhouse", "system's own"),
    ("version = true", "version", "1"),
]


@pytest.mark.parametrize(("toml", "key", "allowed"), BAD, ids=[b[1] + ":" + b[0] for b in BAD])
def test_bad_answers_name_key_value_and_allowed(toml, key, allowed):
    with pytest.raises(InputError) as err:
        answers_from_toml(toml, "a.toml")
    message = str(err.value)
    assert f"  {key}" in message
    assert allowed in message


def test_toml_syntax_error_gives_the_line():
    with pytest.raises(InputError, match=r"line 3"):
        answers_from_toml('version = 1\n[driver]\naction = "auto\n', "a.toml")


# 1 MiB answers files whose shape costs tomllib the most per byte (steps.core.inputfiles bounds them
# before parsing): the largest of each kind that is let through, and those just past the bounds.
MiB = 1 << 20
SHAPES = {
    "dotted-keys-of-16-parts": "".join(f"k{i}" + ".a" * 15 + " = 1\n" for i in range(1170)),
    "tables-of-16-parts": "".join(f"[t{i}" + ".a" * 15 + "]\n" for i in range(1110)),
    "one-part-keys": "".join(f"k{i} = 1\n" for i in range(9990)),
    "an-array-of-floats": "a = [" + ",".join("1.5" for _ in range(9990)) + "]\n",
    "nested-32-deep": "".join(f"k{i} = " + "[" * 32 + "]" * 32 + "\n" for i in range(300)),
    "long-strings": "".join(f'k{i} = "{"x." * 500}"\n' for i in range(1030)),
    "a-100000-part-key": "a" + ".a" * 99_999 + " = 1\n",
    "dotted-keys-past-the-mark-limit": "".join(
        f"k{i}" + ".a" * 15 + " = 1\n" for i in range(40_000)
    ),
    "nested-33-deep": "a = " + "[" * 33 + "]" * 33 + "\n",
}


@pytest.mark.parametrize("shape", SHAPES)
def test_any_1_mib_answers_shape_is_read_or_refused_within_a_second(shape):
    text = SHAPES[shape][:MiB]
    # this process's CPU time, not the wall clock: a loaded runner (CI's two cores shared by
    # three workers) stretches the wall time of a parse that costs a few milliseconds
    started = time.process_time()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        answers_from_toml(text, "a.toml")
        outcome = "parsed"
    except InputError as exc:
        outcome = str(exc).split(": ", 2)[-1][:60]
    took = time.process_time() - started
    grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    print(
        f"{shape} ({len(text) // 1024} KiB): {took * 1000:.0f} ms, +{grew // 1024} MiB: {outcome}"
    )
    assert took < 1.0 and grew < 200 * 1024, (took, grew)


@pytest.mark.parametrize(
    "toml",
    ['[driver]\naction = "reinstall"\n', "[build]\nmax_jobs = -1\n", "version = 1\n[driver\n"],
)
def test_cli_exits_2_and_runs_nothing_on_bad_answers(tmp_path, toml):
    bad = tmp_path / "bad.toml"
    bad.write_text(toml)
    out = run_cli("plan", "--facts", str(H200), "--answers", str(bad))
    assert out.returncode == 2
    assert out.stdout == ""
    assert str(bad) in out.stderr


def test_cli_bad_facts_exit_2_naming_the_key(tmp_path):
    data = json.loads(H200.read_text())
    data["gpus"][0]["compute_capability"] = "nine"
    del data["boot_id"]
    bad = tmp_path / "facts.json"
    bad.write_text(json.dumps(data))
    out = run_cli("plan", "--facts", str(bad))
    assert out.returncode == 2
    assert "gpus[0].compute_capability" in out.stderr and '"nine"' in out.stderr
    assert "boot_id: required key is missing" in out.stderr

    bad.write_text("{not json")
    out = run_cli("plan", "--facts", str(bad))
    assert out.returncode == 2 and "line 1" in out.stderr

    bad.write_text(json.dumps({**json.loads(H200.read_text()), "schema": "mlsetup.facts/2"}))
    out = run_cli("plan", "--facts", str(bad))
    assert out.returncode == 2 and "mlsetup.facts/1" in out.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["plan", "--facts"],
        ["frobnicate"],
        ["plan", "--jsn"],
        ["plan", "--facts", "/nonexistent.json"],
        ["probe", "--root", "/nonexistent"],
    ],
)
def test_cli_bad_usage_exit_2(args):
    out = run_cli(*args)
    assert out.returncode == 2, out
    assert out.stderr.strip()


def test_schema_is_generated_from_the_models():
    out = run_cli("answers", "--schema")
    assert out.returncode == 0
    schema = json.loads(out.stdout)
    assert schema == Answers.model_json_schema()
    assert set(schema["properties"]) == set(Answers.model_fields)


@pytest.mark.parametrize(
    ("path", "ok"),
    [
        ("/", False),
        ("/etc", False),
        ("/usr/lib/x", False),
        ("/usr/local", False),
        ("/usr/local/cuda-12.8", False),
        ("/usr/local/bin/env", False),
        ("/boot/x", False),
        ("/var/lib/mlsetup/x", False),
        ("/home", False),
        ("/root", False),
        ("/opt", False),
        ("/usr/local/ml-env", True),
        ("/opt/ml", True),
        ("/home/alice/ml-env", True),
        ("/root/ml-env", True),
        ("/srv/fleet/wheels", True),
        ("/var/lib/postgresql/env", True),
    ],
)
def test_system_directories_are_never_a_venv(path, ok):
    assert (unsafe_directory(path) is None) == ok


def test_a_file_is_read_bounded_never_blocking(tmp_path):
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    for path, why in [
        (fifo, "FIFO"),
        (tmp_path, "directory"),
        ("/dev/zero", "character"),
        (tmp_path / "none.toml", "No such file"),
    ]:
        with pytest.raises(InputError, match=why):
            load_answers(path)
    big = tmp_path / "big.toml"
    big.write_bytes(b"version = 1\n" + b"#" * (1 << 20))
    link = tmp_path / "link.toml"
    link.symlink_to(REPO / "assets" / "answers.example.toml")
    with pytest.raises(InputError, match="larger than 1048576 bytes"):
        load_answers(big)
    with pytest.raises(InputError, match=r"symbolic link.*answers\.example\.toml"):
        load_answers(link)
    with pytest.raises(InputError, match="line 2: facts file is not UTF-8"):
        bad = tmp_path / "facts.json"
        bad.write_bytes(b"{\n\xff}")
        load_facts(bad)


def test_the_venv_account_is_looked_up_through_nss_on_the_machine(tmp_path):
    me = pwd.getpwuid(os.getuid())
    assert lookup_account(RootFS(), me.pw_name).home == me.pw_dir
    assert account_by_uid(RootFS(), os.getuid()).name == me.pw_name
    assert lookup_account(RootFS(), "no-such-account-mlsetup") is None
    # under another root, that tree's accounts (this process's NSS speaks for the host)
    machine = FakeMachine(tmp_path / "root")
    assert lookup_account(RootFS(machine.root), "alice").home == "/home/alice"
    # (the fake tree has root and alice: a tester called alice finds the tree's own)
    assert lookup_account(RootFS(machine.root), me.pw_name) is None or me.pw_name in (
        "root",
        "alice",
    )

    facts = load_facts(H200)
    answers = answers_from_toml('[venv]\nuser = "no-such-account-mlsetup"', "a.toml")
    with pytest.raises(InputError, match=r"venv.user = \"no-such-account-mlsetup\": no such"):
        check_on_machine(choose(facts, answers), answers, RootFS())
    check_on_machine(choose(facts, answers), answers, None)  # a recorded machine: trusted
    ok = answers_from_toml(f'[venv]\nuser = "{me.pw_name}"', "a.toml")
    check_on_machine(choose(facts, ok), ok, RootFS())


def test_the_venv_directory_is_checked_once_home_is_known():
    data = json.loads(H200.read_text())
    data["user"]["home"] = "/usr/sbin"  # a system account's home
    facts = facts_from_json(json.dumps(data), "f.json")
    with pytest.raises(InputError, match=r"venv\.path.*/usr/sbin/ml-env.*system.s own"):
        check_on_machine(choose(facts, Answers()), Answers(), None)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"MLSETUP_DPKG_LOCK_TIMEOUT": "nan"},
            'MLSETUP_DPKG_LOCK_TIMEOUT="nan": allowed: a number',
        ),
        ({"MLSETUP_DPKG_LOCK_TIMEOUT": "1e999"}, "0 to 86400"),
        (  # 0 would end every command of the venv's owner at once
            {"MLSETUP_ACCOUNT_TIMEOUT": "0"},
            'MLSETUP_ACCOUNT_TIMEOUT="0": allowed: a number of seconds from 1 to 604800, such as '
            "86400",
        ),
        ({"MLSETUP_ASCII": "maybe"}, 'MLSETUP_ASCII="maybe": allowed: one of 1, yes'),
        ({"MLSETUP_EXTENSIONS_DIR": "/nonexistent"}, 'MLSETUP_EXTENSIONS_DIR="/nonexistent"'),
        ({"MLSETUP_NVML_SNAPSHOT": "/dev/zero"}, "a regular file"),
        ({"MLSETUP_EXTENSION_DIR": "/tmp"}, "MLSETUP_EXTENSION_DIR: unknown setting"),
    ],
)
def test_bad_settings_name_the_variable(env, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(")):
        settings_from(env)


def test_settings_parse():
    s = settings_from(
        {
            "MLSETUP_DPKG_LOCK_TIMEOUT": "20",
            "MLSETUP_ACCOUNT_TIMEOUT": "7200",
            "MLSETUP_ASCII": "1",
            "MLSETUP_EXTENSIONS_DIR": str(REPO),
            "MLSETUP_PREFIX": "/opt/mlsetup",
            "MLSETUP_NVML_SNAPSHOT": "",
        }
    )
    assert (s.dpkg_lock_timeout, s.account_timeout, s.ascii, s.extensions_dir, s.nvml_snapshot) == (
        20.0,
        7200.0,
        True,
        REPO,
        None,
    )
    out = run_cli("plan", "--facts", str(H200), env={"MLSETUP_DPKG_LOCK_TIMEOUT": "soon"})
    assert out.returncode == 2 and "MLSETUP_DPKG_LOCK_TIMEOUT" in out.stderr
