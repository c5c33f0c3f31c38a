"""Wizard step 4: CUDA extensions (flash-attn and friends) built against the venv's torch."""

from __future__ import annotations

from steps.answers import Answers
from steps.choices import BuildTarget, Choices
from steps.facts import Facts
from steps.plan import Action, Step, pending, satisfied
from steps.venvstate import VenvState

SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def build_env(target: BuildTarget, choices: Choices) -> dict[str, str]:
    recipe = target.recipe
    env = {
        "CUDA_HOME": target.cuda_home,
        # nvcc from the toolkit that matches torch's CUDA, then the venv's ninja.
        "PATH": f"{target.cuda_home}/bin:{choices.venv_path}/bin:{SYSTEM_PATH}",
        "MAX_JOBS": str(target.max_jobs),
        recipe.threads_variable: str(recipe.threads),
    }
    if recipe.arch_variable:
        env[recipe.arch_variable] = recipe.arch_value(target.compute_capabilities) or ""
    if target.answer.source == "build":
        env[recipe.force_build_variable] = "TRUE"
    return env


def plan(facts: Facts, answers: Answers, choices: Choices, venv: VenvState | None) -> Step:
    if not answers.extensions:
        return satisfied("extensions", "no extensions requested")
    actions: list[Action] = []
    done: list[str] = []
    py, user = choices.venv_python, choices.owner.run_as
    for target in choices.build_targets:
        recipe, answer = target.recipe, target.answer
        if venv and venv.version_of(recipe.package) == answer.version:
            done.append(f"{recipe.package} {answer.version}")
            continue
        actions += [
            Action(
                id=f"extensions.{answer.name}.prerequisites",
                title=f"Install {answer.name}'s build requirements",
                argv=["uv", "pip", "install", "--python", py, *recipe.build_requires],
                user=user,
            ),
            Action(
                id=f"extensions.{answer.name}.build",
                title=f"Build and install {answer.name} {answer.version} for compute capability "
                f"{', '.join(target.compute_capabilities)}",
                argv=[
                    "uv",
                    "pip",
                    "install",
                    "--python",
                    py,
                    "--no-build-isolation",
                    recipe.requirement_for(answer.version),
                ],
                env=build_env(target, choices),
                user=user,
            ),
        ]
    if not actions:
        if done:
            return satisfied("extensions", f"already installed: {', '.join(done)}")
        return satisfied("extensions", "nothing to build: see the warnings")
    names = [a.id.split(".")[1] for a in actions if a.id.endswith(".build")]
    return pending(
        "extensions",
        f"build {', '.join(names)} against the venv's torch (CUDA {choices.cuda})",
        actions,
    )
