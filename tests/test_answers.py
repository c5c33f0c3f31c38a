"""Answers: defaults, the example file, and every class of bad input -> exit 2 naming the key."""

from __future__ import annotations

import json

import pytest

from steps.answers import Answers, answers_from_toml, load_answers
from steps.errors import InputError
from tests.common import MACHINES, REPO, run_cli

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
    ('[[extensions]]\nname = "xformers"\nversion = "1"', "extensions[0].name", "flash-attn"),
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
