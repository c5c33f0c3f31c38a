"""assets/: data with sources, complete enough for the GPUs people run, and consistent."""

from __future__ import annotations

import ast
import subprocess
import sys

from packaging.version import Version

from steps.knowledge import ASSETS_DIR, knowledge
from tests.common import REPO

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
    assert k.min_cuda_for("12.0") == "12.8" and k.min_cuda_for("10.0") == "12.8"
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


def test_engine_never_imports_textual():
    """steps/ is the engine: importable, and importing all of it loads no Textual."""
    modules = sorted(p.stem for p in (REPO / "steps").glob("*.py") if p.stem != "__init__")
    code = (
        f"import sys\nfor m in {modules!r}: __import__('steps.' + m)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'app'))\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    for path in (REPO / "steps").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom | ast.Import):
                names = (
                    [node.module]
                    if isinstance(node, ast.ImportFrom)
                    else [a.name for a in node.names]
                )
                assert not any((n or "").split(".")[0] in ("textual", "app") for n in names), path
