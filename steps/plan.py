"""The Plan (`mlsetup.plan/1`): what will run, in order, and why. The step modules build it
from these models; `steps.planner` puts their steps together."""

from __future__ import annotations

import json
import shlex
from typing import Annotated, Any, Final, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, GetJsonSchemaHandler
from pydantic_core import CoreSchema

PLAN_SCHEMA: Final = "mlsetup.plan/1"


def _known_step(name: str) -> str:
    from steps.registry import step_names  # the registry imports the step modules, and they this

    if name not in step_names():
        raise ValueError(f"{name!r} is no step; the steps are {', '.join(step_names())}")
    return name


class _StepNames:
    """The JSON schema of a step name: one of the registry's (docs/formats.md lists them)."""

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core: CoreSchema, handler: GetJsonSchemaHandler
    ) -> dict[str, Any]:
        from steps.registry import step_names

        return {"enum": list(step_names()), "type": "string"}


# A step's name, as steps.registry names them (its order is theirs)
StepName = Annotated[str, AfterValidator(_known_step), _StepNames]
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
    "check",  # an action of a check-only step (steps.registry): its exit code is the verdict
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


class Step(BaseModel):
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
    # the resolved stack (steps.stack.lock.Lock.summary): torch, its build, every pinned package and
    # what decided torch; null when the plan comes from knowledge (resolution at apply)
    lock: dict | None = None

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json", by_alias=True), indent=2) + "\n"

    def step(self, name: str) -> Step:
        return next(s for s in self.steps if s.name == name)

    @property
    def actions(self) -> list[Action]:
        return [a for s in self.steps for a in s.actions]


def satisfied(name: StepName, reason: str) -> Step:
    return Step(name=name, status="satisfied", reason=reason)


def pending(name: StepName, reason: str, actions: list[Action]) -> Step:
    return Step(name=name, status="pending", reason=reason, actions=actions)
