"""tools/refresh_knowledge.py against PyPI's JSON as recorded on 2026-12-01 (tests/fixtures/pypi/:
the real responses for torch, flash-attn, causal-conv1d and mamba-ssm, trimmed to the fields the
tool reads: Linux wheel file names, requires_python, upload time, yanked) and the lines it read
on 2026-12-03 from the files on PyPI (tests/fixtures/pypi/cxx/: the first lines of each torch
series' ATen.h, the -std lines of each recipe's setup.py, with the file's URL and sha256; and
the CUDA runtime lines of each series' wheel METADATA, torch-*-metadata.json)."""

from __future__ import annotations

import copy
import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from steps.core.assetdir import ASSETS_DIR
from steps.known.knowledge import knowledge
from tests.common import REPO

sys.path.insert(0, str(REPO / "tools"))
import refresh_knowledge

RECORDED = REPO / "tests" / "fixtures" / "pypi"
PYPI = "https://pypi.example"


def recorded(directory: Path = RECORDED) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in directory.glob("*.json")}


def fetcher(responses: dict[str, dict]):
    def fetch(url: str) -> bytes:
        name = url.removeprefix(f"{PYPI}/pypi/").removesuffix("/json")
        if name not in responses:  # what PyPI answers for a project it does not have
            raise refresh_knowledge.NotOnPypi(f"PyPI has no project at {url} (404)")
        return json.dumps(responses[name]).encode()

    return fetch


def run(responses, capsys) -> tuple[int, list[str]]:
    argv = ["--pypi", PYPI, "--lines", str(RECORDED / "cxx")]
    code = refresh_knowledge.main(argv, fetch=fetcher(responses))
    return code, capsys.readouterr().out.splitlines()


def test_the_assets_agree_with_pypi_as_recorded(capsys):
    code, out = run(recorded(), capsys)
    # a new recipe's package: python tools/refresh_knowledge.py --record tests/fixtures/pypi
    assert code == 0, out
    assert out == [out[0]] and "agree with PyPI" in out[0]


def _wheel(version: str, py: str, machine: str = "x86_64") -> dict:
    return {
        "filename": f"torch-{version}-cp{py}-cp{py}-manylinux_2_28_{machine}.whl",
        "requires_python": ">=3.11",
        "upload_time": "2026-12-09T15:00:00",
        "yanked": False,
    }


def test_a_new_series_new_python_tags_and_a_new_extension_release_are_reported(capsys):
    responses = copy.deepcopy(recorded())
    torch = responses["torch"]["releases"]
    torch["2.16.0"] = [_wheel("2.16.0", py) for py in ("311", "312", "313", "314", "315")]
    torch["2.16.0rc1"] = [_wheel("2.16.0rc1", "316")]  # a pre-release is not a release
    # 2.14.2 appears with a cp315 wheel (and a free-threaded one, which does not count)
    torch["2.14.2"] = [_wheel("2.14.2", py) for py in ("310", "311", "312", "313", "314", "315")]
    torch["2.14.2"].append(_wheel("2.14.2", "314t"))
    for f in torch["2.14.2"]:
        f["requires_python"] = ">=3.10"
    responses["flash-attn"]["releases"]["2.8.4"] = [
        {
            "filename": "flash_attn-2.8.4.tar.gz",
            "upload_time": "2026-12-10T00:00:00",
            "yanked": False,
        }
    ]
    code, out = run(responses, capsys)
    assert code == 1
    new = next(line for line in out if line.startswith("torch 2.16:"))
    assert "2.16.0 (uploaded 2026-12-09) is on PyPI but not in assets/torch.toml" in new
    assert "'3.11', '3.12', '3.13', '3.14', '3.15'" in new and ">=3.11" in new
    assert "torch==2.16.0" in new  # how to read its pypi_cuda
    assert any(
        line.startswith(
            "torch 2.14: PyPI has Linux wheels of 2.14.2 for Python 3.10, "
            "3.11, 3.12, 3.13, 3.14, 3.15;"
        )
        for line in out
    )
    assert any(
        line.startswith("flash-attn: PyPI has 2.8.4; the recipe was checked against 2.8.3.post2")
        for line in out
    )
    assert not any("3.16" in line for line in out)


def test_a_series_gone_from_pypi_and_changed_requires_python(capsys):
    responses = copy.deepcopy(recorded())
    del responses["torch"]["releases"]["2.4.0"], responses["torch"]["releases"]["2.4.1"]
    for f in responses["torch"]["releases"]["2.15.0"]:
        f["requires_python"] = ">=3.12"
    code, out = run(responses, capsys)
    assert code == 1
    assert "torch 2.4: in assets/torch.toml but no release of it is on PyPI" in out
    assert any(line.startswith("torch 2.15: 2.15.0 requires Python >=3.12;") for line in out)


@pytest.fixture
def my_recipe(tmp_path, monkeypatch):
    """An operator's recipe for a package with no recorded answer (checked against 0.0.35)."""
    flash = (ASSETS_DIR / "extensions.toml").read_text().split("[causal-conv1d]")[0]
    mine = flash.split("\n[[")[0].replace("[flash-attn]", "[my-ext]")
    mine = mine.replace('package = "flash-attn"', 'package = "unrecorded-ext"')
    mine = mine.replace('checked = "2.8.3.post2"', 'checked = "0.0.35"')
    # read for CUDA 13 too (flash-attn's head names 11 and 12; its variant adds 13)
    mine = mine.replace('majors = ["11", "12"]', 'majors = ["11", "12", "13"]')
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "mine.toml").write_text(mine)
    monkeypatch.setenv("MLSETUP_EXTENSIONS_DIR", str(tmp_path / "recipes"))
    knowledge.cache_clear()
    yield
    knowledge.cache_clear()


def _file(name: str, **fields) -> dict:
    return {
        "filename": name,
        "requires_python": ">=3.9",
        "upload_time": "2026-11-20T00:00:00",
        "yanked": False,
        **fields,
    }


def test_a_package_without_a_recorded_answer_is_a_finding_and_record_writes_it(
    my_recipe, tmp_path, capsys
):
    code, out = run(recorded(), capsys)  # PyPI (as recorded) has no such project: a 404
    assert code == 1
    assert out == [
        f"my-ext: PyPI has no project at {PYPI}/pypi/unrecorded-ext/json (404): is the recipe's "
        "package = 'unrecorded-ext' right?"
    ]
    answers = tmp_path / "answers"
    shutil.copytree(RECORDED, answers)
    responses = recorded()
    responses["unrecorded-ext"] = {
        "info": {
            "name": "unrecorded-ext",
            "requires_python": ">=3.9",
            "version": "0.0.35",
            "summary": "not read",
        },
        "releases": {
            "0.0.35": [
                _file("unrecorded-ext-0.0.35.tar.gz", digests={"sha256": "0" * 64}),
                _file("unrecorded-ext-0.0.35-cp39-abi3-manylinux_2_28_x86_64.whl"),
                _file("unrecorded-ext-0.0.35-cp39-abi3-win_amd64.whl"),
            ]
        },
    }
    code = refresh_knowledge.main(
        ["--pypi", PYPI, "--record", str(answers), "--lines", str(RECORDED / "cxx")],
        fetch=fetcher(responses),
    )
    assert capsys.readouterr().out.splitlines()[0] == f"recorded {answers / 'unrecorded-ext.json'}"
    assert code == 0
    assert sorted(p.name for p in answers.iterdir()) == sorted(
        [*(p.name for p in RECORDED.iterdir()), "unrecorded-ext.json"]
    )
    mine = recorded(answers)["unrecorded-ext"]
    assert mine["info"] == {
        "name": "unrecorded-ext",
        "requires_python": ">=3.9",
        "version": "0.0.35",
    }
    assert [f["filename"] for f in mine["releases"]["0.0.35"]] == [
        "unrecorded-ext-0.0.35.tar.gz",
        "unrecorded-ext-0.0.35-cp39-abi3-manylinux_2_28_x86_64.whl",
    ]
    assert set(mine["releases"]["0.0.35"][0]) == set(refresh_knowledge.FILE_FIELDS)
    for p in RECORDED.rglob("*.json"):  # the recorded answers stay as they were
        assert (answers / p.relative_to(RECORDED)).read_bytes() == p.read_bytes()
    code, out = run(recorded(answers), capsys)  # the new answer replays: nothing to report
    assert code == 0, out


@pytest.mark.parametrize("answer", [None, b"<html>mirror</html>", b'{"info": {}}'])
def test_no_network_or_no_json_api_is_said_not_a_traceback(capsys, answer):
    def fetch(url: str) -> bytes:
        if answer is None:
            raise refresh_knowledge.Unreachable(f"{url}: [Errno 101] Network is unreachable")
        return answer

    code = refresh_knowledge.main(["--pypi", PYPI], fetch=fetch)
    out = capsys.readouterr().out
    assert code == refresh_knowledge.EXIT_UNREACHABLE
    assert out.startswith("refresh_knowledge: cannot read PyPI, nothing was checked:")


def test_the_tool_runs_as_a_script_without_a_network(tmp_path):
    # a proxy that refuses every connection: the real urllib path, offline
    env = {
        "PATH": "/usr/bin:/bin",
        "https_proxy": "http://127.0.0.1:9",
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "no_proxy": "",
        "NO_PROXY": "",
    }
    out = subprocess.run(
        [sys.executable, str(REPO / "tools" / "refresh_knowledge.py"), "--timeout", "5"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    assert out.returncode == 3, out.stdout + out.stderr
    assert "cannot read PyPI, nothing was checked" in out.stdout and not out.stderr


def test_the_cxx20_move_is_reported_from_the_recorded_lines_against_the_knowledge_before_it(
    capsys, monkeypatch
):
    """assets/ as they were before torch 2.14's ATen.h moved to C++20 (every series C++17, no
    recipe stating its standard; the tool said "assets/ agree with PyPI"): the recorded lines
    of the real files make each incompatibility a finding, with where it was read."""
    k = knowledge()
    before = dataclasses.replace(
        k,
        torch=dataclasses.replace(
            k.torch,
            releases=tuple(dataclasses.replace(r, cxx_standard=17) for r in k.torch.releases),
        ),
        extensions={n: dataclasses.replace(r, cxx_standard=None) for n, r in k.extensions.items()},
    )
    monkeypatch.setattr(refresh_knowledge, "knowledge", lambda: before)
    code, out = run(recorded(), capsys)
    assert code == 1
    header = "torch/include/ATen/ATen.h in https://pypi.org/packages/packages/"
    assert any(
        line.startswith("torch 2.14: 2.14.1's ATen.h requires C++20 (line 5 of " + header)
        and line.endswith(
            "/torch-2.14.1-cp312-cp312-manylinux_2_28_x86_64.whl); "
            "assets/torch.toml says cxx_standard = 17"
        )
        for line in out
    ), out
    assert any(
        line.startswith("torch 2.15: 2.15.0's ATen.h requires C++20 (line 9 of ") for line in out
    )
    assert not any(line.startswith(("torch 2.13:", "torch 2.4:")) for line in out)
    new = [line for line in out if line.startswith("new incompatibility: ")]
    # each recipe whose build is C++17 (from its setup.py) x torch 2.14 and 2.15: a recipe added
    # with a C++17 build adds two
    cxx17 = [n for n, r in k.extensions.items() if r.cxx_standard == 17]
    assert len(new) == 2 * len(cxx17), (cxx17, new)
    flash = next(
        line for line in new if "flash-attn 2.8.3.post2 cannot be built against torch 2.14" in line
    )
    assert (
        "(2.14.1): its setup.py passes -std=c++17 (line 201 of flash_attn-2.8.3.post2/setup.py in "
        in flash
    )
    assert "torch 2.14.1's ATen.h requires C++20 (line 5 of torch/include/ATen/ATen.h in " in flash
    assert any(
        line.startswith("mamba-ssm 2.3.2.post1 cannot", 21) and "torch 2.15 (2.15.0)" in line
        for line in new
    )
    assert any(
        line.startswith("causal-conv1d 1.7.0: its setup.py passes -std=c++17 (line 209 of ")
        and line.endswith("; assets/extensions.toml says cxx_standard = None")
        for line in out
    )


def test_a_recipe_whose_build_opts_into_cxx20_has_no_incompatibility(capsys, monkeypatch):
    k = knowledge()
    flash = dataclasses.replace(k.extensions["flash-attn"], compile_as_cxx=20)
    now = dataclasses.replace(k, extensions={**k.extensions, "flash-attn": flash})
    monkeypatch.setattr(refresh_knowledge, "knowledge", lambda: now)
    code, out = run(recorded(), capsys)
    assert code == 0, out


def test_record_writes_only_the_releases_the_findings_read(tmp_path, capsys):
    """--record trims each answer to the releases the tool looks at: torch's newest of each
    series it reports, a recipe's checked release and the newer ones. Replayed, the trimmed
    answers say what the whole ones say."""
    responses = copy.deepcopy(recorded())
    torch = responses["torch"]["releases"]
    torch["2.3.1"] = [_wheel("2.3.1", "312")]  # a series older than any torch.toml lists
    torch["2.14.0"] = [_wheel("2.14.0", "312")]  # an older patch of a series
    torch["2.16.0rc1"] = [_wheel("2.16.0rc1", "313")]  # a pre-release
    flash = responses["flash-attn"]["releases"]
    flash["2.6.3"] = [_file("flash_attn-2.6.3.tar.gz")]  # older than the recipe's checked
    empty = tmp_path / "record"
    (empty / "cxx").mkdir(parents=True)
    argv = ["--pypi", PYPI, "--record", str(empty), "--lines", str(RECORDED / "cxx")]
    code = refresh_knowledge.main(argv, fetch=fetcher(responses))
    out = capsys.readouterr().out
    assert code == 0 and all(f"recorded {empty / name}.json" in out for name in responses), out

    mine = recorded(empty)
    newest = refresh_knowledge.newest_of_each_series(responses["torch"])
    assert set(mine["torch"]["releases"]) == {str(v) for v, _ in newest.values()}
    assert not {"2.3.1", "2.14.0", "2.16.0rc1"} & set(mine["torch"]["releases"])
    checked = knowledge().extensions["flash-attn"].checked
    kept = set(mine["flash-attn"]["releases"])
    assert checked in kept and "2.6.3" not in kept
    assert all(refresh_knowledge.Version(v) >= refresh_knowledge.Version(checked) for v in kept)
    for name in ("flash-attn", "causal-conv1d", "mamba-ssm"):  # no longer than the fixtures
        lines = len((empty / f"{name}.json").read_text().splitlines())
        assert lines <= len((RECORDED / f"{name}.json").read_text().splitlines()), name
    assert run(mine, capsys) == run(responses, capsys)


def test_cuda_majors_of_each_series_are_checked_against_torch_toml_and_the_recipes(
    capsys, monkeypatch
):
    """The CUDA each series' wheel is (the Requires-Dist lines of its METADATA, recorded from
    PyPI in tests/fixtures/pypi/cxx/torch-*-metadata.json) against assets/ as they would be had
    CUDA 13 not been read yet: torch 2.15 said to be CUDA 13.0 without cu132, and flash-attn's
    recipe naming release wheels for CUDA 11 and 12 only (as its 2.8.3 setup.py does). Each
    is a finding, with the line and wheel it comes from."""
    k = knowledge()
    releases = tuple(
        dataclasses.replace(r, pypi_cuda="13.0", builds=("cu126", "cu130"))
        if r.series == "2.15"
        else r
        for r in k.torch.releases
    )
    flash = dataclasses.replace(
        k.extensions["flash-attn"], prebuilt_cuda_majors=("11", "12"), variants=()
    )
    before = dataclasses.replace(
        k,
        torch=dataclasses.replace(k.torch, releases=releases),
        extensions={**k.extensions, "flash-attn": flash},
    )
    monkeypatch.setattr(refresh_knowledge, "knowledge", lambda: before)
    code, out = run(recorded(), capsys)
    assert code == 1
    wheel = "/torch-2.15.0-cp312-cp312-manylinux_2_28_x86_64.whl)"
    where = "(line 99 of torch-2.15.0.dist-info/METADATA in https://pypi.org/packages/packages/"
    assert any(
        line.startswith(f"torch 2.15: 2.15.0's wheel on PyPI is CUDA 13.2 {where}")
        and line.endswith(f"{wheel}; assets/torch.toml says pypi_cuda = 13.0")
        for line in out
    ), out
    assert any(
        line.startswith(f"torch 2.15: 2.15.0's wheel on PyPI is the cu132 build {where}")
        and line.endswith("assets/torch.toml builds = ['cu126', 'cu130'] lacks it")
        for line in out
    )
    new = [line for line in out if line.startswith("new incompatibility: flash-attn")]
    # the five series whose wheel on PyPI is a CUDA 13 build: 2.11 to 2.15
    assert [line.split("torch ")[1].split(" (")[0] for line in new] == [
        "2.11", "2.12", "2.13", "2.14", "2.15"
    ]  # fmt: skip
    assert new[-1].startswith(
        "new incompatibility: flash-attn 2.8.3.post2 has not been read for CUDA 13: torch 2.15 "
        f"(2.15.0) on PyPI is a CUDA 13 build {where}"
    )
    assert new[-1].endswith(
        "its recipe names release wheels for CUDA 11, 12 only (prebuilt_cuda_majors): read "
        "its setup.py for CUDA 13 (the release wheel it would fetch, its nvcc conditions) and "
        "add a [[variant]]"
    )
    assert not any(
        line.startswith(("new incompatibility: causal-conv1d", "torch 2.14:")) for line in out
    )
