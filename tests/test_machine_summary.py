"""app/machine_summary.py: the one wording of a machine's facts, in both of its forms (the
probe's record, the wizard's Machine screen), on recorded machines."""

from __future__ import annotations

from app.console import facts_text
from app.machine_summary import machine_rows
from steps.formats.facts import load_facts
from tests.common import MACHINES


def test_the_probe_prints_every_gpu_with_where_it_is_and_the_pythons_found():
    facts = load_facts(MACHINES / "fresh-h100x8-ubuntu2204.json")
    text = facts_text(facts, warnings=False)
    lines = text.splitlines()
    assert lines[0] == "Machine     Ubuntu 22.04.5 LTS (x86_64), kernel 5.15.0-126-generic"
    assert lines[1] == "GPU 0       NVIDIA H100 80GB HBM3 (compute 9.0) at 0000:18:00.0 [pci]"
    assert sum(line.startswith("GPU ") for line in lines) == 8
    assert "Python      3.10.12 (/usr/bin/python3.10)" in lines
    assert "CPU, RAM    224 logical CPUs, 2016.0 GiB RAM (2002.3 GiB available), no swap" in lines
    assert lines[-1] == "User        ops (/home/ops)"


def test_the_wizard_counts_identical_gpus_on_one_row():
    facts = load_facts(MACHINES / "fresh-h100x8-ubuntu2204.json")
    rows = dict(machine_rows(facts, times="x"))
    assert rows["GPUs"] == "8 x NVIDIA H100 80GB HBM3 (compute 9.0)"
    assert rows["Driver"] == "none loaded" and rows["Toolkits"] == "none"
    assert rows["CPU, RAM"] == "224 cores, 2016.0 GiB RAM (2002.3 GiB free), no swap"
    assert "Python" not in rows


def test_unknown_facts_are_said_so_in_each_form():
    facts = load_facts(MACHINES / "h200-ubuntu2404.json")
    assert facts.driver is not None
    blank = facts.model_copy(
        update={
            "gpus": [
                g.model_copy(update={"name": None, "compute_capability": None}) for g in facts.gpus
            ],
            "driver": facts.driver.model_copy(update={"modules": None}),
        }
    )
    compact = dict(machine_rows(blank))
    assert compact["GPUs"].endswith(
        f"unknown NVIDIA GPU {facts.gpus[0].pci_device_id} (compute ?, 140.4 GiB)"
    )
    assert compact["Driver"].startswith("580.159.04 (? modules")
    detailed = dict(machine_rows(blank, detailed=True))
    assert "(compute unknown, 140.4 GiB)" in detailed["GPU 0"]
    assert detailed["Driver"].startswith("580.159.04 (unknown modules")
