"""assets/: data with sources, complete enough for the GPUs people run, and consistent."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

from steps.core.assetdir import ASSETS_DIR
from steps.core.errors import InputError
from steps.known import tables
from steps.known.knowledge import knowledge
from tests.common import MACHINES, REPO, run_cli

REQUIRED_GPUS = [
    "A100",
    "A10",
    "L4",
    "L40S",
    "H100",
    "H200",
    "GH200",
    "B200",
    "RTX 4090",
    "RTX 5090",
    "RTX PRO 6000 Blackwell",
    "RTX 6000 Ada",
    "A6000",
    "V100",
    "P100",
    "T4",
    # issue 11: from the open-gpu-kernel-modules README device table
    "B300",
    "GB300",
    "GB10",
    "H800",
    "H20",
    "A800",
    "L20",
    "L2",
    "A16",
    "RTX A5000",
    "RTX A4000",
    "RTX 5000 Ada",
    "RTX 4000 Ada",
    "RTX PRO 5000 Blackwell",
    "RTX PRO 4500 Blackwell",
    "RTX PRO 4000 Blackwell",
    "RTX 5090 D",
    "RTX 5080",
    "RTX 5070 Ti",
    "RTX 5070",
]


def test_every_asset_table_names_its_source():
    for path in ASSETS_DIR.glob("*.toml"):
        if path.name == "answers.example.toml":
            continue
        text = path.read_text()
        assert "Source" in text or "source:" in text.lower() or "Measured" in text, path.name


def test_device_table_covers_the_common_gpus():
    names = [m.name for m in knowledge().gpus.values()]
    for wanted in REQUIRED_GPUS:
        assert any(wanted in n for n in names), wanted
    for dev_id, model in knowledge().gpus.items():
        assert dev_id == dev_id.lower() and len(dev_id) == 6
        assert model.compute_capability in knowledge().cuda.min_cuda_for_compute_capability


def test_cuda_tables_are_consistent():
    k = knowledge().cuda
    assert k.major_min_driver["13"].startswith("580")
    assert k.release("12.8").min_driver.startswith("570")
    assert k.min_cuda_for_compute_capability["12.0"] == "12.8"
    assert k.min_cuda_for_compute_capability["10.0"] == "12.8"
    assert k.newest_supported_by_driver("580.159.04") == "13.0"
    assert k.newest_supported_by_driver("590.48.01") == "13.1"
    assert k.driver_runs("580.159.04", "13.0", "13.2")  # minor-version compatibility
    assert not k.driver_runs("575.51.03", "12.9", "13.0")
    for build in knowledge().torch.builds.values():
        assert build.cuda is not None
        assert Version(build.min_compute_capability) <= Version(build.max_compute_capability)
    for release in knowledge().torch.releases:
        assert set(release.builds) <= set(knowledge().torch.builds)


def test_flash_attn_recipe():
    fa = knowledge().extensions["flash-attn"]
    assert fa.arch_variable == "FLASH_ATTN_CUDA_ARCHS"
    assert set(fa.arch_map.values()) == {"80", "90", "100", "120"}
    assert fa.arch_value(["8.9", "8.6"]) == "80"
    assert fa.arch_value(["12.0", "9.0"]) == "90;120"
    assert fa.arch_value(["7.5"]) is None
    assert fa.min_compute_capability == "8.0"
    assert fa.threads_variable == "NVCC_THREADS" and fa.threads == 4
    assert fa.for_build("2.8.3", "13.0").prebuilt_cuda_majors == ("11", "12")
    assert fa.for_build("2.8.3.post1", "13.0").prebuilt_cuda_majors == ("11", "12", "13")


def test_torch_releases_as_pypi_has_them():
    releases = {r.series: r for r in knowledge().torch.releases}
    assert next(iter(releases)) == "2.15"  # newest first: what "auto" takes
    assert releases["2.15"].builds == ("cu130", "cu132")
    assert releases["2.15"].pythons == ("3.11", "3.12", "3.13", "3.14", "3.15")
    assert releases["2.15"].requires_python == ">=3.11"
    assert "3.15" not in releases["2.14"].pythons and "3.15" not in releases["2.13"].pythons
    assert "3.13" in releases["2.5"].pythons
    pypi_cuda = {s: r.pypi_cuda for s, r in releases.items()}
    assert pypi_cuda == {
        "2.15": "13.2",
        "2.14": "13.0",
        "2.13": "13.0",
        "2.12": "13.0",
        "2.11": "13.0",
        "2.10": "12.8",
        "2.9": "12.8",
        "2.8": "12.8",
        "2.7": "12.6",
        "2.6": "12.4",
        "2.5": "12.4",
        "2.4": "12.1",
    }
    cu130 = knowledge().torch.build("cu130")
    assert cu130.runs_on("7.5") and not cu130.runs_on("7.5", "aarch64")
    assert cu130.runs_on("8.6", "aarch64") and cu130.runs_on("8.0", "aarch64")


def test_driver_facts_of_december_2026():
    k = knowledge()
    assert k.cuda.release("13.3").min_driver == "610.43.02"
    assert k.cuda.newest_supported_by_branch(615) == "13.5"
    assert k.cuda.newest_supported_by_branch(580) == "13.0"
    assert k.driver.last_branch_for("7.0") == 580 and k.driver.last_branch_for("6.0") == 580
    assert k.driver.last_branch_for("7.5") is None
    assert k.driver.requires_open_modules("9.0", "0x2342")  # GH200
    assert not k.driver.requires_open_modules("9.0", "0x2335")  # H200
    assert k.driver.requires_open_modules("12.0", None)
    assert k.driver.mok_key_for("debian") == "/var/lib/dkms/mok.pub"
    assert k.driver.mok_key_for("ubuntu") == "/var/lib/shim-signed/mok/MOK.der"
    assert k.repo.url_for("ubuntu", "26.04", "x86_64").endswith("/ubuntu2604/x86_64/")
    assert k.repo.url_for("ubuntu", "26.04", "aarch64") is None
    assert k.repo.url_for("debian", "13", "aarch64").endswith("/debian13/sbsa/")
    assert k.gpus["0x3182"].compute_capability == "10.3"
    assert k.gpus["0x2e12"].compute_capability == "12.1"


def test_hard_coded_nvcc_threads_and_version_dependent_arch_lists():
    ext = knowledge().extensions
    for name in ("causal-conv1d", "mamba-ssm"):
        recipe = ext[name]
        assert recipe.threads_variable == "" and recipe.threads == 4, name
    mamba = ext["mamba-ssm"]
    new_nvcc12 = mamba.for_build("2.3.2", "12.8")
    assert "7.0" not in new_nvcc12.arch_map and "11.0" not in new_nvcc12.arch_map
    assert new_nvcc12.arch_map["10.3"] == "100" and new_nvcc12.arch_map["12.1"] == "120"
    new_nvcc13 = mamba.for_build("2.3.2.post1", "13.0")
    assert {new_nvcc13.arch_map[cc] for cc in ("10.3", "11.0", "12.1")} == {"103", "110", "121"}
    assert mamba.for_build("2.3.1", "12.6").arch_map["7.0"] == "70"
    assert "7.0" not in mamba.for_build("2.3.1", "13.0").arch_map  # only while nvcc <= 12.9
    assert mamba.for_build("2.2.4", "12.6").prebuilt_cuda_majors == ("11", "12")
    assert ext["causal-conv1d"].for_build("1.7.0", "13.0").arch_map["11.0"] == "110"


# The recipe boundary: files an operator (or anyone who can write there) drops into the recipe
# directory are validated before use; every problem is exit 2 naming the file and the key.

GOOD = (ASSETS_DIR / "extensions.toml").read_text().split("[causal-conv1d]")[0]


def _plan_with_recipes(tmp_path: Path, files: dict[str, str | None]) -> subprocess.CompletedProcess:
    recipes = tmp_path / "recipes"
    recipes.mkdir(exist_ok=True)
    for name, text in files.items():
        if text is not None:
            (recipes / name).write_text(text)
    return run_cli(
        "plan",
        "--facts",
        str(MACHINES / "h200-ubuntu2404.json"),
        env={"MLSETUP_EXTENSIONS_DIR": str(recipes)},
    )


BAD_RECIPES = {
    "typo": ("threds = 4", "flash-attn.threds", "unknown key"),
    "wrong-type": ('threads = "four"', "flash-attn.threads", "integer"),
    "bool-threads": ("threads = true", "flash-attn.threads", "integer"),
    "bool-size": ("peak_job_gib = true", "flash-attn.peak_job_gib", "number"),
    "flag-in-requires": (
        'build_requires = ["--index-url=http://evil"]',
        "flash-attn.build_requires",
        "requirement",
    ),
    "url-in-requires": (
        'build_requires = ["x @ http://evil/x.whl"]',
        "flash-attn.build_requires",
        "no URL",
    ),
    "reserved-variable": (
        'arch_variable = "LD_PRELOAD"',
        "flash-attn.arch_variable",
        "environment variable",
    ),
    "bad-arch-value": (
        'arch_map = { "9.0" = "90; rm -rf /" }',
        "flash-attn.arch_map",
        "text matching",
    ),
    "bad-requirement": ('requirement = "-e /tmp/x"', "flash-attn.requirement", "allowed"),
    # the build would set env[""] = "TRUE"
    "no-force-switch": ('force_build_variable = ""', "flash-attn.force_build_variable", 'not ""'),
    "force-value-flag": (
        'force_build_value = "1 --x"',
        "flash-attn.force_build_value",
        "text matching",
    ),
    "measured-typo": (
        'measured_build = { minutes = 3.0, jobs = 4, peak = 1.0, source = "x" }',
        "flash-attn.measured_build.peak",
        "unknown key",
    ),
    "bad-variant": (
        '[[flash-attn.variant]]\nversions = "not a spec"',
        "flash-attn.variant[1].versions",
        "PEP 440",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_RECIPES))
def test_a_bad_recipe_is_exit_2_naming_the_file_and_the_key(tmp_path, case):
    line, key, allowed = BAD_RECIPES[case]
    if line.startswith("[["):
        text = GOOD + "\n" + line + "\n"
    else:  # the line replaces the field of the same name (a new key is added)
        field = line.split(" = ")[0]
        kept = "\n".join(ln for ln in GOOD.splitlines() if not ln.startswith(field + " "))
        text = kept.replace('package = "flash-attn"', 'package = "flash-attn"\n' + line, 1)
    run = _plan_with_recipes(tmp_path, {"mine.toml": text})
    assert run.returncode == 2, run.stdout + run.stderr
    assert str(tmp_path / "recipes" / "mine.toml") in run.stderr
    assert key in run.stderr and allowed in run.stderr, run.stderr
    assert "Traceback" not in run.stderr


def test_recipe_files_that_are_not_text_or_not_regular_are_refused(tmp_path):
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    cases = {
        "binary.toml": lambda p: p.write_bytes(b"\xff\xfe\x00garbage"),
        "huge.toml": lambda p: p.write_bytes(b"# " + b"x" * (2 << 20)),
        "fifo.toml": lambda p: os.mkfifo(p),
        "dir.toml": lambda p: p.mkdir(),
        "link.toml": lambda p: p.symlink_to(ASSETS_DIR / "extensions.toml"),
        "notoml.toml": lambda p: p.write_text("[flash-attn\n"),
        "deep.toml": lambda p: p.write_bytes(b"a = " + b"[" * 100_000),
    }
    for name, make in cases.items():
        for old in recipes.iterdir():
            old.rmdir() if old.is_dir() and not old.is_symlink() else old.unlink()
        make(recipes / name)
        run = _plan_with_recipes(tmp_path, {})
        assert run.returncode == 2, (name, run.stdout, run.stderr)
        assert str(recipes / name) in run.stderr and "Traceback" not in run.stderr, name


def test_an_operator_recipe_is_used_and_a_missing_named_directory_is_an_error(tmp_path):
    mine = GOOD.replace("[flash-attn]", "[my-attn]").split("\n[[")[0]
    answers = tmp_path / "a.toml"
    answers.write_text('version = 1\n[[extensions]]\nname = "my-attn"\nversion = "2.8.3"\n')
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "mine.toml").write_text(mine)
    run = run_cli(
        "plan",
        "--facts",
        str(MACHINES / "h200-ubuntu2404.json"),
        "--answers",
        str(answers),
        env={"MLSETUP_EXTENSIONS_DIR": str(recipes)},
    )
    assert run.returncode == 0, run.stderr
    assert "FLASH_ATTN_CUDA_ARCHS=90" in run.stdout
    run = run_cli(
        "plan",
        "--facts",
        str(MACHINES / "h200-ubuntu2404.json"),
        env={"MLSETUP_EXTENSIONS_DIR": str(tmp_path / "missing")},
    )
    assert run.returncode == 2 and "MLSETUP_EXTENSIONS_DIR" in run.stderr
    assert "an existing directory" in run.stderr


def test_a_recipe_names_its_own_force_switch_and_value(tmp_path):
    # xformers' setup.py compiles its CUDA code only with FORCE_CUDA=1 (not "TRUE")
    mine = GOOD.replace("[flash-attn]", "[my-attn]").split("\n[[")[0]
    mine = mine.replace('"FLASH_ATTENTION_FORCE_BUILD"', '"FORCE_CUDA"\nforce_build_value = "1"')
    answers = tmp_path / "a.toml"
    answers.write_text('version = 1\n[[extensions]]\nname = "my-attn"\nversion = "2.8.3"\n')
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "mine.toml").write_text(mine)
    run = run_cli(
        "plan",
        "--facts",
        str(MACHINES / "h200-ubuntu2404.json"),  # CUDA 13: no cu13 wheel listed, so forced
        "--answers",
        str(answers),
        env={"MLSETUP_EXTENSIONS_DIR": str(tmp_path / "recipes")},
    )
    assert run.returncode == 0, run.stderr
    assert "FORCE_CUDA=1" in run.stdout and "=TRUE" not in run.stdout, run.stdout


def test_engine_never_imports_textual():
    """steps/ is the engine: importable, and importing all of it loads no Textual."""
    sources = sorted(p for p in (REPO / "steps").rglob("*.py") if "__pycache__" not in p.parts)
    modules = [".".join(p.relative_to(REPO).with_suffix("").parts) for p in sources]
    code = (
        f"import sys\nfor m in {modules!r}: __import__(m)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'app'))\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    for path in sources:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom | ast.Import):
                names = (
                    [node.module]
                    if isinstance(node, ast.ImportFrom)
                    else [a.name for a in node.names]
                )
                assert not any((n or "").split(".")[0] in ("textual", "app") for n in names), path


@pytest.mark.parametrize(
    ("name", "change", "named"),
    [
        ("torch.toml", lambda t: t["release"][0].update(builds=["cu999"]), "'cu999' has no"),
        ("torch.toml", lambda t: t["release"][1].update(pythons="3.12"), "release[1].pythons"),
        ("cuda.toml", lambda t: t["release"][2].pop("min_driver"), "release[2].min_driver"),
        ("cuda.toml", lambda t: t.update(install_mib=True), "install_mib = true"),
        ("gpus.toml", lambda t: t["device"].update({"0x2330": ["H", "9"]}), '0x2330[1] = "9"'),
        ("driver.toml", lambda t: t.update(recomended_branch=580), "recomended_branch: unknown"),
        ("nvidia_repo.toml", lambda t: t["driver_package"].pop("pin"), "driver_package.pin"),
        ("pythons.toml", lambda t: t["python"][0].update(version="3"), 'python[0].version = "3"'),
        ("daemons.toml", lambda t: t["daemon"]["nvlsm"].pop("source"), "daemon.nvlsm.source"),
        (
            "daemons.toml",
            lambda t: t["daemon"]["nvidia-imex"].update(driver_versioned="yes"),
            'daemon.nvidia-imex.driver_versioned = "yes"',
        ),
    ],
)
def test_a_malformed_knowledge_table_is_refused_naming_the_key(name, change, named):
    model = {
        "torch.toml": tables.TorchTable,
        "cuda.toml": tables.CudaTable,
        "gpus.toml": tables.GpusTable,
        "driver.toml": tables.DriverTable,
        "nvidia_repo.toml": tables.NvidiaRepoTable,
        "pythons.toml": tables.PythonsTable,
        "daemons.toml": tables.DaemonsTable,
    }[name]
    table = tables.tomllib.loads((ASSETS_DIR / name).read_text())
    tables.parse_table(table, model, f"assets/{name}")  # as shipped: valid
    change(table)
    with pytest.raises(InputError) as exc:
        tables.parse_table(table, model, f"assets/{name}")
    assert str(exc.value).startswith(f"assets/{name}: ") and named in str(exc.value), exc.value


def test_the_code_cites_the_design_in_the_repository_by_sections_it_has():
    design = (REPO / "docs" / "design.md").read_text()
    sections = {line[3:].strip() for line in design.splitlines() if line.startswith("## ")}
    outside = "DESIGN" + ".md"  # the shared design notes' name (not in the repository)
    cited = []
    for path in REPO.glob("**/*"):
        parts = path.relative_to(REPO).parts
        if parts[0].startswith(".") or "__pycache__" in parts or path.name == "CHANGELOG.md":
            continue  # the changelog tells history, the notes outside included
        if parts[0] in {"build", "dist"} or parts[0].endswith(".egg-info"):
            continue  # what a local `pip install .` or `python -m build` left: copies
        if not path.is_file() or path.suffix not in {".py", ".toml", ".md", ".sh"}:
            continue
        text = path.read_text(errors="replace")
        assert outside not in text, f"{path}: cites a {outside} outside the repository"
        for section in re.findall(r'docs/design\.md,\s+"([^"]+)"', text):
            cited.append(section)
            assert section in sections, f"{path}: docs/design.md has no section {section!r}"
    assert "Trust" in cited
