"""Plain-text renderings of Facts and Plans for a terminal or a log."""

from __future__ import annotations

import shlex

from steps.facts import Facts
from steps.plan import Action, Plan
from steps.warnings import machine_warnings

GIB = 2**30


def _gib(n: int | None) -> str:
    return "unknown" if n is None else f"{n / GIB:.1f} GiB"


def facts_text(facts: Facts, notes: list[str] | None = None, warnings: bool = True) -> str:
    os_ = facts.os
    lines = [
        f"Machine     {os_.pretty or os_.id or 'unknown OS'} ({os_.arch}), kernel "
        f"{facts.kernel.release or 'unknown'}"
    ]
    if facts.gpus:
        for g in facts.gpus:
            cc = f"compute {g.compute_capability}" if g.compute_capability else "compute unknown"
            mem = f", {_gib(g.memory_bytes)}" if g.memory_bytes else ""
            name = g.name or f"unknown NVIDIA GPU {g.pci_device_id}"
            lines.append(f"GPU {g.index:<7} {name} ({cc}{mem}) at {g.pci_bus_id} [{g.source}]")
    else:
        lines.append("GPUs        none found")
    d = facts.driver
    if d:
        state = "loaded" if d.loaded else "installed, not loaded"
        lines.append(
            f"Driver      {d.version} ({d.modules or 'unknown'} modules, {state}), "
            f"CUDA up to {d.cuda_max or 'unknown'}"
        )
    else:
        lines.append("Driver      none loaded")
    tk = ", ".join(f"CUDA {t.version} ({t.path})" for t in facts.toolkits) or "none"
    lines.append(f"Toolkits    {tk}")
    py = ", ".join(f"{p.version} ({p.path})" for p in facts.pythons) or "none found"
    lines.append(f"Python      {py}")
    m = facts.memory
    swap = "no swap" if not m.swap_total_bytes else f"{_gib(m.swap_total_bytes)} swap"
    lines.append(
        f"CPU, RAM    {facts.cpu.logical or '?'} logical CPUs, {_gib(m.total_bytes)} RAM "
        f"({_gib(m.available_bytes)} available), {swap}"
    )
    disks = ", ".join(f"{p} {_gib(v)}" for p, v in facts.disk_free_bytes.items())
    lines.append(f"Disk free   {disks}")
    lines.append(f"Secure Boot {facts.secure_boot}")
    if facts.user:
        lines.append(f"User        {facts.user.name} ({facts.user.home})")
    shown = (machine_warnings(facts) if warnings else []) + (notes or [])
    if shown:
        lines.append("")
        lines += [f"warning: {w}" for w in shown]
    return "\n".join(lines) + "\n"


def command_text(action: Action) -> str:
    """The action as a shell line a person could paste (env first, `sudo -u` for user actions)."""
    prefix = [f"{k}={v}" for k, v in action.env.items()]
    words = (
        (["sudo", "-u", action.user] if action.user else [])
        + (["env", *prefix] if prefix else [])
        + action.argv
    )
    return shlex.join(words)


def plan_text(plan: Plan) -> str:
    lines = []
    if plan.warnings:
        lines += [f"warning: {w}" for w in plan.warnings] + [""]
    for n, step in enumerate(plan.steps, 1):
        mark = "✓" if step.status == "satisfied" else "→"
        lines.append(f"{n}. {step.name:<11}{mark} {step.status}: {step.reason}")
        for action in step.actions:
            reboot = "  (reboot after)" if action.reboot_after else ""
            lines.append(f"     [{action.id}] {action.title}{reboot}")
            lines.append(f"       $ {command_text(action)}")
    pending = sum(len(s.actions) for s in plan.steps)
    lines.append("")
    lines.append(
        f"{pending} action(s) to run." if pending else "Nothing to do: every step is satisfied."
    )
    return "\n".join(lines) + "\n"
