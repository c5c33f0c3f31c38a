"""Engine events for screens that need a run in a given state (fed to the app by hand, as
the governor and the engine would send them)."""

from __future__ import annotations

from steps.formats import events as ev
from steps.planning import registry

GIB = 2**30
T0 = 1_700_000_000.0


def plan_event() -> ev.PlanMade:
    steps: list[dict] = [
        {"name": name, "status": "satisfied", "reason": f"{name} ok", "actions": []}
        for name in registry.step_names()[: registry.step_names().index("extensions")]
    ]
    steps += [
        {
            "name": "extensions",
            "status": "pending",
            "reason": "build flash-attn",
            "actions": [
                {
                    "id": "extensions.flash-attn.prerequisites",
                    "title": "Install build requirements",
                },
                {"id": "extensions.flash-attn.build", "title": "Compile flash-attn 2.8.3"},
                {"id": "extensions.flash-attn.smoke", "title": "Try flash-attn in the venv"},
            ],
        },
    ]
    return ev.PlanMade(plan={"schema": "mlsetup.plan/1", "warnings": [], "steps": steps}, t=T0)


def build_running() -> list[ev.Event]:
    """A flash-attn build half way, the governor having throttled once."""
    out: list[ev.Event] = [
        ev.RunStarted(
            run_id="20250101-000000-1", pid=1, dry_run=False, resumed=False, ticket=None, t=T0
        ),
        plan_event(),
    ]
    for step in registry.step_names()[: registry.step_names().index("extensions")]:
        out.append(ev.StepSatisfied(step=step, reason="already there", t=T0))
    out += [
        ev.StepStarted(step="extensions", reason="build flash-attn", actions=[], t=T0),
        ev.ActionStarted(
            step="extensions",
            action="extensions.flash-attn.prerequisites",
            title="Install build requirements",
            command="uv pip install packaging wheel ninja psutil",
            log="/var/log/mlsetup/20250101-000000-1/extensions.flash-attn.prerequisites.log",
            t=T0 + 1,
        ),
        ev.ActionFinished(
            step="extensions",
            action="extensions.flash-attn.prerequisites",
            status="done",
            exit_code=0,
            elapsed=3.0,
            t=T0 + 4,
        ),
        ev.ActionStarted(
            step="extensions",
            action="extensions.flash-attn.build",
            title="Compile flash-attn 2.8.3",
            command="env MAX_JOBS=governed FLASH_ATTN_CUDA_ARCHS=120 "
            "uv pip install --no-build-isolation flash-attn==2.8.3",
            log="/var/log/mlsetup/20250101-000000-1/extensions.flash-attn.build.log",
            t=T0 + 5,
        ),
    ]
    total = 128 * GIB
    for i in range(60):
        used = int(total * (0.35 + 0.57 * min(i, 40) / 40 - (0.2 if i > 45 else 0)))
        out.append(
            ev.MemorySample(
                used_bytes=used,
                total_bytes=total,
                available_bytes=total - used,
                swap_used_bytes=0,
                psi_some_avg10=0.0,
                jobs_running=12 if i < 45 else 8,
                jobs_allowed=12 if i < 45 else 8,
                jobs_frozen=0 if i < 45 else 1,
                build_bytes=used // 2,  # the build holds half of what is in use
                budget_bytes=total // 2,  # build.memory_limit = "64GiB"
                t=T0 + 5 + i,
            )
        )
        if i == 45:
            out.append(
                ev.Throttle(
                    jobs_from=12, jobs_to=8, reason="available below the guard band", t=T0 + 50
                )
            )
    out += [
        ev.BuildProgress(action="extensions.flash-attn.build", done=6, total=73, t=T0 + 10),
        ev.BuildProgress(action="extensions.flash-attn.build", done=30, total=73, t=T0 + 64),
    ]
    return out


def build_output(n: int = 40) -> list[str]:
    return [
        f"[{i}/73] /usr/local/cuda-13.0/bin/nvcc -c csrc/flash_fwd_hdim{64 + i}_sm120.cu"
        for i in range(n)
    ]


def build_started() -> list[ev.Event]:
    """The run up to the build's start, before its output (the steps before it as the registry
    orders them: a count of events went wrong when a step was added)."""
    events = build_running()
    started = next(
        i
        for i, e in enumerate(events)
        if isinstance(e, ev.ActionStarted) and e.action == "extensions.flash-attn.build"
    )
    return events[: started + 1]


def build_failed() -> list[ev.Event]:
    out = build_started()
    out += [
        ev.ActionFinished(
            step="extensions",
            action="extensions.flash-attn.build",
            status="failed",
            exit_code=1,
            elapsed=301.0,
            t=T0 + 306,
        ),
        ev.Failed(
            step="extensions",
            action="extensions.flash-attn.build",
            exit_code=1,
            log="/var/log/mlsetup/20250101-000000-1/extensions.flash-attn.build.log",
            what="extensions.flash-attn.build failed (exit 1)",
            why="The compiler was killed: the machine ran out of memory.",
            next="Lower build.max_jobs or raise build.memory_reserve, "
            "then: sudo mlsetup apply --resume",
            t=T0 + 306,
        ),
        ev.Finished(
            code=1,
            result="failed",
            summary="extensions.flash-attn.build failed (exit 1)",
            t=T0 + 306,
        ),
    ]
    return out


def reboot_paused() -> list[ev.Event]:
    return [
        ev.RunStarted(
            run_id="20250101-000000-1", pid=1, dry_run=False, resumed=False, ticket=None, t=T0
        ),
        ev.ActionStarted(
            step="driver",
            action="driver.install",
            title="Install NVIDIA driver 580 (open kernel modules)",
            command="apt-get install -y nvidia-open",
            log="/var/log/mlsetup/x/driver.install.log",
            t=T0 + 1,
        ),
        ev.ActionFinished(
            step="driver",
            action="driver.install",
            status="done",
            exit_code=0,
            elapsed=80.0,
            t=T0 + 81,
        ),
        ev.RebootNeeded(
            action="driver.install",
            policy="ask",
            next="reboot (sudo reboot), then run: sudo mlsetup apply --resume",
            t=T0 + 81,
        ),
        ev.Finished(
            code=10,
            result="reboot",
            summary="paused: reboot to load the NVIDIA driver, then resume",
            t=T0 + 81,
        ),
    ]
