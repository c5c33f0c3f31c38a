"""The Plan (`mlsetup.plan/1`): what will run, in order, and why. The step modules build it
from these models; `steps.planning.planner` puts their steps together."""

from __future__ import annotations

import json
import shlex
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from steps.formats.stepnames import registered_step_names

PLAN_SCHEMA: Final = "mlsetup.plan/1"


def _step_name_schema(schema: dict[str, Any]) -> None:
    # before the registry is loaded no name is known: a plain string then, never an empty enum
    # (which no name would pass)
    if names := registered_step_names():
        schema["enum"] = names


# A step's name: the planner stamps each step with its registry entry's name (docs/formats.md
# lists them); the schema's enum is the registry's order
StepName = Annotated[str, Field(json_schema_extra=_step_name_schema)]
# What an action is; the engine and the front ends decide by this, never by reading its id.
ActionKind = Literal[
    "package-index",  # apt-get update
    "packages",  # apt-get install
    "repo-setup",  # NVIDIA's apt repository keyring (its actions' target: "nvidia-repo")
    "config-file",  # a file installed into /etc
    "initramfs",
    "reboot",
    "resume-unit",  # the one-shot unit that resumes the run after a reboot
    "load-driver",
    "resolve",  # the stack resolved into one lock
    "create",  # the venv created
    "sync",  # the locked stack installed into the venv
    "activate",  # the venv's activate scripts set CUDA_HOME to torch's toolkit
    "smoke",  # the stack, or one extension, tried in the venv
    "prerequisites",  # an extension's build requirements
    "source",  # an extension's source downloaded
    "unpack",  # an extension's source unpacked into its build tree
    "build",  # an extension compiled into a wheel (under the memory governor)
    "install",  # an extension's wheel just built here installed
    "install-wheel",  # an extension's wheel built earlier (the cache, the wheelhouse) installed
    "source-hashes",  # the hashes of the extensions' sources, read from their index
    "stack-check",  # after the last extension: the stack is still the lock, each one imports
    # an action of a check-only step (steps.planning.registry): its exit code is the verdict
    "check",
    "service",  # a system daemon enabled and started (systemctl enable --now)
]


class Action(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    title: str
    argv: list[str] = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    user: str | None = None
    reboot_after: bool = False
    kind: ActionKind
    # what it is for: the extension's name, the toolkit's version, the torch build resolved
    # for; None when its step says it all
    target: str | None = None

    def command_line(self) -> str:
        """The action as a shell line a person could paste (`sudo -u` for a user's action)."""
        prefix = [f"{k}={v}" for k, v in self.env.items()]
        words = (
            (["sudo", "-u", self.user] if self.user else [])
            + (["env", *prefix] if prefix else [])
            + self.argv
        )
        return shlex.join(words)


class Outcome(BaseModel):
    """What a step's planner returns: satisfied, or the actions that satisfy it. It has no name:
    the planner names it after the step's registry entry (`named`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    status: Literal["pending", "satisfied"]
    reason: str
    actions: list[Action] = Field(default_factory=list)

    def named(self, name: str) -> Step:
        return Step(name=name, **dict(self))


class Step(BaseModel):
    """A named outcome, as the plan holds it (its name first, as the plan file shows it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: StepName
    status: Literal["pending", "satisfied"]
    reason: str
    actions: list[Action] = Field(default_factory=list)


class Plan(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    schema_: Literal["mlsetup.plan/1"] = Field(alias="schema", default=PLAN_SCHEMA)
    warnings: list[str] = Field(default_factory=list)
    steps: list[Step]
    # the resolved stack (steps.formats.lock.Lock.summary): torch, its build, every pinned package
    # and what decided torch; null when the plan comes from knowledge (resolution at apply)
    lock: dict | None = None

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json", by_alias=True), indent=2) + "\n"

    def step(self, name: str) -> Step:
        return next(s for s in self.steps if s.name == name)

    @property
    def actions(self) -> list[Action]:
        return [a for s in self.steps for a in s.actions]


def satisfied(reason: str) -> Outcome:
    return Outcome(status="satisfied", reason=reason)


def pending(reason: str, actions: list[Action]) -> Outcome:
    return Outcome(status="pending", reason=reason, actions=actions)
