# ruff: noqa: RUF001 - the lookalike digits and letters are the point
"""Malformed input, generated, through `mlsetup plan` and `mlsetup apply --dry-run`.

Answers and facts files (syntax errors, every key with every wrong type, unknown keys at every
level, huge/negative/NaN numbers, unicode digits, traversal, option injection, binary, a FIFO,
a directory, /dev/zero, a symlink, more than 1 MiB) and MLSETUP_* settings. Every one must end
with exit 2 and a message naming the key (or the file and line), no traceback, no hang, and
nothing run: stand-ins for the system commands are first on PATH and must never be called,
and no state may be written.

The many cases run in this process through `app.cli.main` (the console script's own entry:
same parser, same loading, same engine), with a SIGALRM timeout each; a sample runs through
real subprocesses as well, so the in-process path is checked against the real one.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import resource
import signal
import subprocess
import sys
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from app.cli import main
from steps.formats.answers import Answers
from steps.known.knowledge import knowledge
from tests.common import MACHINES, REPO
from tests.fakemachine import FakeMachine
from tests.harness import STANDINS, SYSTEM_PATH

H200 = MACHINES / "h200-ubuntu2404.json"
TIMEOUT_S = 5  # per case; a well-behaved refusal takes milliseconds
# Address space a case may add: an unbounded read (of /dev/zero, say) must end in a
# MemoryError, which counts as a traceback, not in the OOM killer.
HEADROOM_BYTES = 2 << 30
GOOD_ANSWERS = """version = 1
[torch]
packages = ["transformers"]
[[extensions]]
name = "flash-attn"
version = "2.8.3"
"""
SPECIAL = ("fifo", "directory", "dev-zero", "symlink", "over-1MiB", "missing")


@dataclass
class Case:
    """One malformed input: `data` (or a special file), where it goes, what the error names."""

    name: str
    kind: str  # "answers" | "facts" | "env"
    expect: str  # a key path, "line N", the file's path ("@FILE"), or a variable name
    data: bytes | None = None
    special: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    live_only: bool = False  # only the machine can refuse it (venv.user that does not exist)
    also: str = ""  # a second thing the message must name (a recipe's key beside its file)


# -- answers ------------------------------------------------------------------------------------

# TOML literals of every type: none is valid for any answers key but max_jobs (which takes 7)
WRONG_TOML = {
    "int": "7",
    "bool": "true",
    "float": "1.5",
    "int-array": "[1]",
    "table": "{ a = 1 }",
    "date": "1979-05-27",
    "text": '"x y"',
    "nan": "nan",
    "neg-inf": "-inf",
}


def _answers_keys() -> Iterator[tuple[str, str]]:
    """(section, key) for every key of the answers schema, extensions as "extensions"."""
    for section, info in Answers.model_fields.items():
        model = info.annotation
        if section == "version":
            yield "", "version"
        elif section == "extensions":
            for key in ("name", "version", "archs", "source"):
                yield "extensions", key
        else:
            for key in model.model_fields:  # type: ignore[union-attr]
                yield section, key


def _answers_with(section: str, key: str, value: str) -> tuple[str, str]:
    """Answers text with `key` set to the TOML literal `value`, and the key path."""
    if section == "":
        return f"{key} = {value}\n", key
    if section == "extensions":
        ext = {"name": '"flash-attn"', "version": '"2.8.3"', key: value}
        body = "".join(f"{k} = {v}\n" for k, v in ext.items())
        return f"version = 1\n[[extensions]]\n{body}", f"extensions[0].{key}"
    return f"version = 1\n[{section}]\n{key} = {value}\n", f"{section}.{key}"


BAD_VALUES = [  # (section, key, TOML value, why)
    ("driver", "branch", '"５８０"', "unicode digits"),
    ("driver", "branch", '"99999999999999999999"', "huge"),
    ("driver", "branch", '"-1"', "negative"),
    ("driver", "action", '"--purge"', "option"),
    ("toolkit", "versions", '["１２.８"]', "unicode digits"),
    ("toolkit", "versions", '["../../etc"]', "traversal"),
    ("toolkit", "versions", "[]", "empty"),
    ("venv", "python", '"３.１２"', "unicode digits"),
    ("venv", "python", '"--help"', "option"),
    ("venv", "python", '"3.12\\n"', "newline"),
    ("venv", "path", '"~/../../etc"', "traversal"),
    ("venv", "path", '"/home/../etc/x"', "traversal"),
    ("venv", "path", '"/"', "system"),
    ("venv", "path", '"/etc"', "system"),
    ("venv", "path", '"/usr"', "system"),
    ("venv", "path", '"/usr/local/bin/env"', "system"),
    ("venv", "path", '"/var/lib/mlsetup"', "system"),
    ("venv", "path", '"/boot/env"', "system"),
    ("venv", "path", '"/home"', "system"),
    ("venv", "path", '"~"', "a home itself"),
    ("venv", "path", '"--prefix=/"', "option"),
    ("venv", "path", '"/srv/a\\u0000b"', "NUL"),
    ("venv", "user", '"-oProxyCommand=x"', "option"),
    ("venv", "user", '"../root"', "traversal"),
    ("venv", "user", '"a b"', "space"),
    ("torch", "version", '"--pre"', "option"),
    ("torch", "version", '"===../x"', "arbitrary equality"),
    ("torch", "version", '"==２.８"', "unicode digits"),
    ("torch", "cuda", '"cu999"', "unknown build"),
    ("torch", "packages", '["--index-url=http://evil.example"]', "option"),
    ("torch", "packages", '["-e ."]', "option"),
    ("torch", "packages", '["foo=="]', "incomplete specifier"),
    ("torch", "packages", '["foo @ https://evil.example/foo.whl"]', "URL"),
    ("torch", "packages", '["foo @ file:///etc"]', "path"),
    ("torch", "packages", '["foo===x"]', "arbitrary equality"),
    ("torch", "packages", '[""]', "empty"),
    ("torch", "packages", '["ｆｏｏ"]', "unicode"),
    ("torch", "index_url", '"ftp://mirror/x"', "scheme"),
    ("torch", "index_url", '"--trusted-host=x"', "option"),
    ("torch", "index_url", '"/srv/../etc"', "traversal"),
    ("torch", "index_url", '"https://"', "no host"),
    ("extensions", "name", '"--no-deps"', "option"),
    ("extensions", "name", '"../flash-attn"', "traversal"),
    ("extensions", "version", '"2.8.3/../../etc"', "traversal"),
    ("extensions", "version", '"２.８.３"', "unicode digits"),
    ("extensions", "version", '"v2.8.3"', "not canonical"),
    ("extensions", "version", '"-2"', "option"),
    ("extensions", "archs", '["９.０"]', "unicode digits"),
    ("extensions", "archs", '["../x"]', "traversal"),
    ("extensions", "archs", "[]", "empty"),
    ("build", "max_jobs", "-1", "negative"),
    ("build", "max_jobs", "0", "zero"),
    ("build", "max_jobs", "1025", "too many"),
    ("build", "max_jobs", "9" * 40, "huge"),
    ("build", "max_jobs", "inf", "infinite"),
    ("build", "memory_reserve", '"' + "9" * 400 + 'GiB"', "huge"),
    ("build", "memory_reserve", '"100%"', "all of it"),
    ("build", "memory_reserve", '"-5GiB"', "negative"),
    ("build", "memory_reserve", '"１０%"', "unicode digits"),
    ("build", "memory_reserve", '"nan%"', "NaN"),
    ("build", "memory_limit", '"1e999GiB"', "infinite"),
    ("build", "memory_limit", '"0GiB"', "zero"),
    ("build", "memory_limit", '"10%"', "a share"),
    ("build", "wheelhouse", '"relative/dir"', "relative"),
    ("build", "wheelhouse", '"/etc"', "system"),
    ("build", "wheelhouse", '"/var/cache/mlsetup/../../../etc"', "traversal"),
    ("reboot", "policy", '"now"', "unknown"),
    ("", "version", "2", "unknown format"),
]

ANSWERS_SYNTAX = [  # (text, line the error is on)
    ('version = 1\n[driver]\naction = "auto\n', 3),
    ("version = 1\n[driver\n", 2),
    ("version = 1\nversion = 1\n", 2),
    ("version = 1\n[venv]\n[venv]\n", 3),
    ("version = \n", 1),
    ('version = 1\n[torch]\npackages = ["a",\n', 3),
    ("version = 1\n[[extensions]\n", 2),
    ("= 1\n", 1),
    ("version = 1\n\n\nbuild.max_jobs = " + "9" * 5000 + "\n", 4),  # past Python's int limit
    ("version = 1\nx = " + "[" * 50_000 + "\n", 2),  # nested past the stack
]


def answers_cases() -> list[Case]:
    cases = []
    for section, key in _answers_keys():
        for label, value in WRONG_TOML.items():
            if (section, key, label) in {
                ("build", "max_jobs", "int"),  # 7 jobs is a fine answer
                ("build", "for_other_machines", "bool"),  # and true is one here
            }:
                continue
            text, path = _answers_with(section, key, value)
            cases.append(Case(f"answers {path}={label}", "answers", path, text.encode()))
    for section, key, value, why in BAD_VALUES:
        text, path = _answers_with(section, key, value)
        cases.append(Case(f"answers {path} {why}: {value[:30]}", "answers", path, text.encode()))
    for section in [s for s in Answers.model_fields if s != "version"]:
        if section == "extensions":
            text = GOOD_ANSWERS + "bogus = 1\n"
            cases.append(
                Case(
                    "answers unknown extensions[0] key",
                    "answers",
                    "extensions[0].bogus",
                    text.encode(),
                )
            )
            cases.append(
                Case(
                    "answers extensions a string",
                    "answers",
                    "extensions",
                    b'version = 1\nextensions = "flash-attn"\n',
                )
            )
            cases.append(
                Case(
                    "answers extensions [1]",
                    "answers",
                    "extensions[0]",
                    b"version = 1\nextensions = [1]\n",
                )
            )
            continue
        cases.append(
            Case(
                f"answers unknown {section} key",
                "answers",
                f"{section}.bogus",
                f"version = 1\n[{section}]\nbogus = 1\n".encode(),
            )
        )
        cases.append(
            Case(
                f"answers {section} not a table",
                "answers",
                section,
                f"version = 1\n{section} = 1\n".encode(),
            )
        )
    cases.append(Case("answers unknown top key", "answers", "bogus", b"version = 1\nbogus = 1\n"))
    for i, (text, line) in enumerate(ANSWERS_SYNTAX):
        cases.append(Case(f"answers syntax {i}", "answers", f"line {line}", text.encode()))
    cases += [
        Case("answers binary", "answers", "line 1", b"\x7fELF\x02\x01\x01\x00" + bytes(64)),
        Case("answers NUL", "answers", "line 2", b"version = 1\n\x00\n"),
        Case("answers latin-1", "answers", "line 2", "version = 1\n# caf\xe9\n".encode("latin-1")),
        Case("answers UTF-16", "answers", "line 1", "version = 1\n".encode("utf-16")),
        Case(
            "answers venv.user missing",
            "answers",
            "venv.user",
            b'version = 1\n[venv]\nuser = "nosuchuser"\n',
            live_only=True,
        ),
    ]
    cases += [Case(f"answers {s}", "answers", "@FILE", special=s) for s in SPECIAL]
    return cases


# -- facts --------------------------------------------------------------------------------------


def _key(path: tuple[str | int, ...]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def _leaves(node: object, path: tuple = ()) -> Iterator[tuple[tuple, object]]:
    yield path, node
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(node, list) and node:
        yield from _leaves(node[0], (*path, 0))


def _wrong_for(value: object) -> dict[str, object]:
    """JSON values of other types than `value`'s (NaN is what Python's json lets through)."""
    if isinstance(value, bool):
        return {"int": 1, "str": "true", "list": []}
    if isinstance(value, int):
        return {
            "str": "16",
            "bool": True,
            "float": 1.5,
            "nan": float("nan"),
            "negative": -1,
            "huge": 10**30,
        }
    if isinstance(value, str):
        return {"int": 7, "bool": False, "list": [value], "object": {}}
    if isinstance(value, list):
        return {"str": "x", "object": {}, "list-of-int": [1]}
    if isinstance(value, dict):
        return {"str": "x", "list": [], "int": 3}
    return {"list": [], "object": {"a": 1}}  # null: neither fits any key that may be null


FACTS_BAD_VALUES = [  # (path, value, why)
    (("gpus", 0, "compute_capability"), "../x", "traversal"),
    (("gpus", 0, "compute_capability"), "９.０", "unicode digits"),
    (("toolkits", 0, "path"), "/usr/local/../../etc", "traversal"),
    (("toolkits", 0, "path"), "usr/local/cuda", "relative"),
    (("toolkits", 0, "version"), "１３.０", "unicode digits"),
    (("pythons", 0, "path"), "python3", "relative"),
    (("pythons", 0, "version"), "3.12.3; rm -rf /", "injection"),
    (("kernel", "release"), "-oAPT::Update::Pre-Invoke::=x", "option"),
    (("kernel", "release"), "6.8.0/../../x", "traversal"),
    (("driver", "version"), "--help", "option"),
    (("driver", "cuda_max"), "13.0.0.0", "malformed"),
    (("user", "name"), "../root", "traversal"),
    (("user", "home"), "../../etc", "relative"),
    (("user", "uid"), 2**40, "huge"),
    (("cpu", "logical"), 0, "zero"),
    (("cpu", "logical"), 10**300, "huge"),
    (("memory", "total_bytes"), 2**70, "huge"),
    (("os", "pretty"), "x" * 5000, "long"),
    (("os", "id"), "ubuntu\n", "newline"),
    (("boot_id",), "../../x", "traversal"),
    (("secure_boot",), "maybe", "unknown"),
    (("gpus", 0, "source"), "guess", "unknown"),
    (("gpus", 0, "pci_device_id"), "0x23355", "malformed"),
    (("disk_free_bytes", "/"), -5, "negative"),
]

FACTS_SYNTAX = [  # (text, line)
    ('{"schema": "mlsetup.facts/1",\n"os": }', 2),
    ('{\n"schema": "mlsetup.facts/1",\n}', 3),
    ("[1, 2", 1),
    ('{"schema": "mlsetup.facts/1", \n\n"cpu": {"logical": ' + "9" * 5000 + "}}", 3),
    ('{"schema": "mlsetup.facts/1",\n"os": ' + "[" * 100_000, 2),
    ("", 1),
]


def _set(data: dict, path: tuple, value: object) -> None:
    node = data
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value


def _facts_bytes(data: object) -> bytes:
    return json.dumps(data).encode()


def facts_cases() -> list[Case]:
    base = json.loads(H200.read_text())
    cases = []
    for path, value in _leaves(base):
        if not path or path == ("schema",):
            continue
        for label, wrong in _wrong_for(value).items():
            if path[0] == "disk_free_bytes" and label == "object" and len(path) == 1:
                continue
            data = copy.deepcopy(base)
            _set(data, path, wrong)
            cases.append(
                Case(f"facts {_key(path)}={label}", "facts", _key(path), _facts_bytes(data))
            )
        if isinstance(value, dict) and path[0] != "disk_free_bytes":  # keys there are paths
            data = copy.deepcopy(base)
            _set(data, (*path, "bogus_key"), 1)
            cases.append(
                Case(
                    f"facts unknown key in {_key(path)}",
                    "facts",
                    _key((*path, "bogus_key")),
                    _facts_bytes(data),
                )
            )
    for key in [k for k in base if k != "schema"]:
        data = copy.deepcopy(base)
        del data[key]
        cases.append(Case(f"facts missing {key}", "facts", key, _facts_bytes(data)))
    data = copy.deepcopy(base)
    data["bogus_key"] = 1
    cases.append(Case("facts unknown top key", "facts", "bogus_key", _facts_bytes(data)))
    for path, value, why in FACTS_BAD_VALUES:
        data = copy.deepcopy(base)
        _set(data, path, value)
        cases.append(Case(f"facts {_key(path)} {why}", "facts", _key(path), _facts_bytes(data)))
    for schema in ("mlsetup.facts/2", 1, None):
        data = {**copy.deepcopy(base), "schema": schema}
        cases.append(Case(f"facts schema {schema}", "facts", "schema", _facts_bytes(data)))
    for i, (text, line) in enumerate(FACTS_SYNTAX):
        cases.append(Case(f"facts syntax {i}", "facts", f"line {line}", text.encode()))
    cases += [
        Case("facts binary", "facts", "line 1", b"\x89PNG\r\n\x1a\n" + bytes(range(256))),
        Case("facts latin-1", "facts", "line 1", '{"os": "caf\xe9"}'.encode("latin-1")),
        Case("facts top-level list", "facts", "JSON object", b"[]"),
    ]
    cases += [Case(f"facts {s}", "facts", "@FILE", special=s) for s in SPECIAL]
    return cases


# -- extension recipes (MLSETUP_EXTENSIONS_DIR/*.toml) -------------------------------------------

GOOD_RECIPE = """[myext]
package = "myext"
import_name = "myext"
arch_variable = "TORCH_CUDA_ARCH_LIST"
arch_map = { "9.0" = "9.0" }
threads_variable = "NVCC_THREADS"
threads = 1
force_build_variable = "MYEXT_FORCE_BUILD"
peak_job_gib = 1.0
build_requires = ["setuptools"]
prebuilt_cuda_majors = []
requirement = "{package}=={version}"
smoke_test = "import myext"
"""

RECIPE_BAD = [  # (key, TOML value)
    ("package", "7"),
    ("package", '"--no-deps"'),
    ("package", '"../x"'),
    ("import_name", "[]"),
    ("arch_variable", "1"),
    ("arch_map", '"9.0"'),
    ("arch_map", '{ "９.０" = "90" }'),
    ("threads_variable", "true"),
    ("threads", '"4"'),
    ("threads", "-1"),
    ("threads", "9" * 40),
    ("force_build_variable", "{}"),
    ("force_build_variable", '""'),
    ("peak_job_gib", '"lots"'),
    ("peak_job_gib", "nan"),
    ("peak_job_gib", "-1.0"),
    ("peak_job_gib", "inf"),
    ("build_requires", '"setuptools"'),
    ("build_requires", '["-e ."]'),
    ("prebuilt_cuda_majors", "13"),
    ("requirement", "1"),
    ("smoke_test", "[1]"),
]


def recipe_cases() -> list[Case]:
    def with_value(key: str, value: str) -> bytes:
        lines = [
            f"{key} = {value}" if line.startswith(f"{key} =") else line
            for line in GOOD_RECIPE.splitlines()
        ]
        return ("\n".join(lines) + "\n").encode()

    cases = [
        Case(f"recipe {k}={v[:20]}", "recipe", "@FILE", with_value(k, v), also=k)
        for k, v in RECIPE_BAD
    ]
    cases += [
        Case(
            "recipe unknown key",
            "recipe",
            "@FILE",
            (GOOD_RECIPE + "bogus = 1\n").encode(),
            also="bogus",
        ),
        Case(
            "recipe missing package",
            "recipe",
            "@FILE",
            GOOD_RECIPE.replace('package = "myext"\n', "").encode(),
            also="package",
        ),
        Case(
            "recipe name traversal",
            "recipe",
            "@FILE",
            GOOD_RECIPE.replace("[myext]", '["../../etc"]').encode(),
            also="../../etc",
        ),
        Case("recipe not a table", "recipe", "@FILE", b"myext = 1\n", also="myext"),
        Case("recipe syntax", "recipe", "@FILE", b"[myext]\npackage = \n", also="line 2"),
        Case("recipe binary", "recipe", "@FILE", b"\x00\xff\xfe" * 50),
        Case("recipe latin-1", "recipe", "@FILE", "[myext]\n# caf\xe9\n".encode("latin-1")),
    ]
    cases += [Case(f"recipe {s}", "recipe", "@FILE", special=s) for s in SPECIAL if s != "missing"]
    return cases


# -- MLSETUP_* ----------------------------------------------------------------------------------


def env_cases(tmp: Path) -> list[Case]:
    a_file = tmp / "a-file"
    a_file.write_text("x")
    bad = [
        ("MLSETUP_DPKG_LOCK_TIMEOUT", "soon"),
        ("MLSETUP_DPKG_LOCK_TIMEOUT", "nan"),
        ("MLSETUP_DPKG_LOCK_TIMEOUT", "-1"),
        ("MLSETUP_DPKG_LOCK_TIMEOUT", "1e999"),
        ("MLSETUP_DPKG_LOCK_TIMEOUT", "9" * 5000),
        ("MLSETUP_DPKG_LOCK_TIMEOUT", "６００"),
        ("MLSETUP_ASCII", "maybe"),
        ("MLSETUP_EXTENSIONS_DIR", "relative/dir"),
        ("MLSETUP_EXTENSIONS_DIR", "/nonexistent/extensions.d"),
        ("MLSETUP_EXTENSIONS_DIR", str(a_file)),
        ("MLSETUP_NVML_SNAPSHOT", "/dev/zero"),
        ("MLSETUP_NVML_SNAPSHOT", str(tmp)),
        ("MLSETUP_EXTENSION_DIR", str(tmp)),  # misspelt
    ]
    cases = [Case(f"env {k}={v[:20]}", "env", k, env={k: v}) for k, v in bad]
    not_nvml = tmp / "not-nvml.json"
    not_nvml.write_text('{"driver": 1}')
    # what the snapshot holds is read only where the machine is probed
    cases.append(
        Case(
            "env MLSETUP_NVML_SNAPSHOT not a snapshot",
            "env",
            "MLSETUP_NVML_SNAPSHOT",
            env={"MLSETUP_NVML_SNAPSHOT": str(not_nvml)},
            live_only=True,
        )
    )
    return cases


# -- running ------------------------------------------------------------------------------------


class _Hang(BaseException):
    pass


@dataclass
class Outcome:
    code: object
    stdout: str
    stderr: str
    hung: bool = False


def run_in_process(argv: list[str], env: dict[str, str]) -> Outcome:
    """`mlsetup ARGV` through the console script's entry, in this process."""
    saved = dict(os.environ)
    out, err = io.StringIO(), io.StringIO()

    def alarm(_signum: int, _frame: object) -> None:
        raise _Hang

    previous = signal.signal(signal.SIGALRM, alarm)
    limits = resource.getrlimit(resource.RLIMIT_AS)
    in_use = int(Path("/proc/self/statm").read_text().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (in_use + HEADROOM_BYTES, limits[1]))
    os.environ.clear()
    os.environ.update(env)
    knowledge.cache_clear()  # recipes come from the environment
    code: object = None
    hung = False
    try:
        signal.setitimer(signal.ITIMER_REAL, TIMEOUT_S)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main(argv)
    except SystemExit as exc:
        code = exc.code
    except _Hang:
        hung = True
    except BaseException:  # what a user would see as a traceback
        err.write(traceback.format_exc())
        code = 1
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        resource.setrlimit(resource.RLIMIT_AS, limits)
        os.environ.clear()
        os.environ.update(saved)
        knowledge.cache_clear()
    return Outcome(code, out.getvalue(), err.getvalue(), hung)


def run_subprocess(argv: list[str], env: dict[str, str]) -> Outcome:
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "app.cli", *argv],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            timeout=TIMEOUT_S * 3,
        )
    except subprocess.TimeoutExpired:
        return Outcome(None, "", "", hung=True)
    return Outcome(proc.returncode, proc.stdout, proc.stderr)


class Bench:
    """A fake machine root, stand-ins that record any call, and the case files."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.root = tmp / "root"
        FakeMachine(self.root).gpu()
        self.calls = tmp / "standin-calls"
        bin_dir = tmp / "bin"
        bin_dir.mkdir()
        for name in (*STANDINS, "uv"):
            script = bin_dir / name
            script.write_text(f'#!/bin/sh\necho "$0 $*" >> {self.calls}\nexit 0\n')
            script.chmod(0o755)
        self.env = {
            "PATH": f"{bin_dir}:{SYSTEM_PATH}",
            "HOME": str(tmp),
            "SUDO_USER": "alice",
            "LANG": "C.UTF-8",
            "PYTHONPATH": str(REPO),
        }
        self.good_answers = tmp / "good.toml"
        self.good_answers.write_text(GOOD_ANSWERS)
        self.good_recipe = tmp / "good-recipe.toml"
        self.good_recipe.write_text(GOOD_RECIPE)
        self.files = tmp / "cases"
        self.files.mkdir()
        self._n = 0

    def materialize(self, case: Case) -> Path:
        self._n += 1
        path = self.files / f"{self._n}-{case.kind}"
        if case.kind == "recipe":  # a directory of recipes, this one among them
            path.mkdir()
            case.env = {"MLSETUP_EXTENSIONS_DIR": str(path)}
            path = path / "myext.toml"
        if case.special == "fifo":
            os.mkfifo(path)
        elif case.special == "directory":
            path.mkdir()
        elif case.special == "dev-zero" and case.kind == "recipe":
            path.symlink_to("/dev/zero")
        elif case.special == "dev-zero":
            path = Path("/dev/zero")
        elif case.special == "symlink":  # to a good file: root follows no symlink it is given
            good = {"facts": H200, "answers": self.good_answers, "recipe": self.good_recipe}
            path.symlink_to(good[case.kind])
        elif case.special == "over-1MiB":  # valid but for its size: a comment in each
            head = b"version = 1\n" if case.kind == "answers" else b""
            path.write_bytes(head + (b"#" if case.kind == "answers" else b" ") * (1 << 20 | 1))
        elif case.special == "missing":
            pass
        else:
            assert case.data is not None
            path.write_bytes(case.data)
        return path

    def commands(self, case: Case, path: Path | None) -> list[list[str]]:
        """`plan` and `apply --dry-run` for the case."""
        if case.kind == "answers":
            assert path is not None
            runs = [["apply", "--dry-run", "--answers", str(path), "--root", str(self.root)]]
            if not case.live_only:  # a recorded machine's accounts are trusted
                runs.insert(0, ["plan", "--facts", str(H200), "--answers", str(path)])
            return runs
        if case.kind == "facts":
            assert path is not None
            return [
                ["plan", "--facts", str(path)],
                ["apply", "--dry-run", "--answers", str(self.good_answers), "--facts", str(path)],
            ]
        # MLSETUP_* and recipes: read whatever the answers say
        runs = [
            ["apply", "--dry-run", "--answers", str(self.good_answers), "--root", str(self.root)]
        ]
        if not case.live_only:
            runs.insert(0, ["plan", "--facts", str(H200), "--answers", str(self.good_answers)])
        return runs

    def nothing_ran(self) -> bool:
        return not self.calls.exists() and not (self.root / "var/lib/mlsetup").exists()


@dataclass
class Tally:
    inputs: int = 0
    runs: int = 0
    tracebacks: list[str] = field(default_factory=list)
    hangs: list[str] = field(default_factory=list)
    named: int = 0
    failures: list[str] = field(default_factory=list)

    def check(self, case: Case, argv: list[str], path: Path | None, got: Outcome) -> None:
        self.runs += 1
        label = f"{case.name} | mlsetup {' '.join(argv[:2])}"
        if got.hung:
            self.hangs.append(label)
            return
        if "Traceback" in got.stderr or "Traceback" in got.stdout:
            self.tracebacks.append(f"{label}\n{got.stderr[-2000:]}")
            return
        expect = str(path) if case.expect == "@FILE" else case.expect
        named = expect in got.stderr and case.also in got.stderr
        if got.code == 2 and named and not got.stdout.strip():
            self.named += 1
        else:
            self.failures.append(
                f"{label}: exit {got.code}, wanted 2 naming {expect!r} "
                f"{case.also!r}:\n"
                f"{got.stderr[-600:]}{got.stdout[-300:]}"
            )

    def report(self, what: str) -> str:
        return (
            f"{what}: inputs tried {self.inputs} ({self.runs} runs), tracebacks "
            f"{len(self.tracebacks)}, hangs {len(self.hangs)}, exit-2-names-the-key "
            f"{self.named}/{self.runs}"
        )


def _run_all(bench: Bench, cases: list[Case], runner, tally: Tally) -> None:
    for case in cases:
        tally.inputs += 1
        path = bench.materialize(case) if case.kind != "env" else None
        if case.kind == "recipe":
            path = path.parent if case.special == "dev-zero" else path
        for argv in bench.commands(case, path):
            tally.check(case, argv, path, runner(argv, {**bench.env, **case.env}))


def _assert_clean(tally: Tally, bench: Bench) -> None:
    problems = tally.tracebacks + [f"HANG {h}" for h in tally.hangs] + tally.failures
    assert not problems, f"{len(problems)} problem(s):\n\n" + "\n\n".join(problems[:15])
    assert bench.nothing_ran(), "a stand-in command ran or state was written"


def _show(capsys: pytest.CaptureFixture[str], figures: str) -> None:
    with capsys.disabled():  # the figures belong in every run's output, not only a failure's
        print("\n" + figures)


@pytest.fixture
def bench(tmp_path: Path) -> Bench:
    return Bench(tmp_path)


def test_good_inputs_pass_so_the_refusals_below_mean_something(bench: Bench):
    for argv in bench.commands(Case("good", "env", ""), None):
        got = run_in_process(argv, bench.env)
        assert got.code == 0, (argv, got.stderr[-2000:])
    got = run_in_process(["plan", "--facts", str(H200)], bench.env)
    assert got.code == 0, got.stderr


def test_fuzz_answers_facts_and_settings(bench: Bench, capsys):
    cases = answers_cases() + facts_cases() + env_cases(bench.tmp)
    assert len(cases) >= 150
    tally = Tally()
    _run_all(bench, cases, run_in_process, tally)
    _show(capsys, tally.report("fuzz (in process)"))
    _assert_clean(tally, bench)


def test_fuzz_recipe_files(bench: Bench, capsys):
    cases = recipe_cases()
    tally = Tally()
    _run_all(bench, cases, run_in_process, tally)
    _show(capsys, tally.report("fuzz recipes (in process)"))
    _assert_clean(tally, bench)


def test_fuzz_sample_through_real_processes(bench: Bench, capsys):
    """The same checks through `python -m app.cli` processes: the in-process path is the real
    one (a FIFO must not block a real open, a traceback must not reach a real stderr)."""
    everything = answers_cases() + facts_cases() + env_cases(bench.tmp)
    wanted = (
        "answers fifo",
        "facts dev-zero",
        "answers over-1MiB",
        "answers syntax 9",
        "extensions[0].version traversal",
        "answers venv.user missing",
        "env MLSETUP_DPKG_LOCK_TIMEOUT=nan",
    )
    cases = [c for c in everything if any(w in c.name for w in wanted)]
    assert len(cases) >= len(wanted)
    tally = Tally()
    _run_all(bench, cases, run_subprocess, tally)
    _show(capsys, tally.report("fuzz (subprocess sample)"))
    _assert_clean(tally, bench)
