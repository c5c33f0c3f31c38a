"""Building an extension: its build tree, the compile under the memory governor, the wheel kept.

A build tree is made by root for the account that compiles; the compile runs with the governor
gating its jobs and is retried with fewer jobs if one still dies of memory; the wheel it made
is published to the machine's cache and the fleet's wheelhouse."""

from __future__ import annotations

import logging
import os
import secrets
import stat
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from steps.apply.applyrun import ApplyRun, Fault
from steps.apply.cxxguard import cxx_refusal, refuse
from steps.apply.diagnose import diagnose
from steps.building.buildtools import (
    check_root_only,
    forget_kept,
    keep_ninja_log,
    kept_name,
    lessons_log,
    ninja_path,
    tools_of,
)
from steps.building.governor import Governor
from steps.building.sourcetree import changed, manifest_path, record
from steps.building.wheels import BUILD_ROOT, publish, tree_name
from steps.core.accounts import Account, account_by_uid, lookup_account
from steps.core.paths import CACHE_DIR, RUNTIME_DIR
from steps.core.safefs import (
    Untrusted,
    check_trusted_tree,
    make_dir,
    open_trusted_dir,
    open_trusted_file,
    trusted_dir,
)
from steps.core.sizes import GiB
from steps.decide.choices import BuildTarget
from steps.formats.events import Notice
from steps.formats.plan import Action
from steps.planning.extensions import ARCHIVES, target_key
from steps.run.runner import Result
from steps.stack.venvstate import probe_venv

log = logging.getLogger("mlsetup.builds")

OOM_RETRIES = 2


class ExtensionBuilds:
    def __init__(self, run: ApplyRun) -> None:
        self.run = run

    def _target(self, action: Action) -> BuildTarget:
        return next(t for t in self.run.choices.build_targets if t.answer.name == action.target)

    def _build_tree(self, target: BuildTarget) -> Path:
        return self.run.fs.path(BUILD_ROOT) / tree_name(target.answer.name, target.answer.version)

    # -- the trees ----------------------------------------------------------------------------

    def prepare_build_trees(self) -> None:
        """/var/cache/mlsetup/build/<name>-<version>/, owned by the account that compiles.

        Made through descriptors (steps.core.safefs): each tree is one name created in root's own
        build directory and handed over by its descriptor, so no name, and nothing the
        account planted, can make root create or chown a directory elsewhere. A tree that
        another account compiled in, or whose unpacked files changed since the unpack
        (steps.building.sourcetree), is set aside first: nothing in it is run again."""
        choices = self.run.choices
        owner = lookup_account(self.run.fs, choices.owner.run_as) if choices.owner.run_as else None
        try:
            os.close(self._traversable(CACHE_DIR))
            build_fd = self._traversable(BUILD_ROOT)
            try:
                for target in choices.build_targets:
                    self._check_source(target, owner)
                    name = tree_name(target.answer.name, target.answer.version)
                    self._set_aside_if_not_reusable(build_fd, name, owner)
                    os.close(
                        make_dir(
                            build_fd,
                            name,
                            0o700,
                            uid=owner.uid if owner else -1,
                            gid=owner.gid if owner else -1,
                        )
                    )
            finally:
                os.close(build_fd)
        except OSError as exc:
            self.run.fail(Fault("extensions", f"refused to prepare the build tree: {exc}"))
        log.info(
            "build trees ready for %s, owned by %s",
            [t.answer.name for t in choices.build_targets],
            choices.owner.run_as or "root",
        )

    def _check_source(self, target: BuildTarget, owner: Account | None) -> None:
        """An operator's source named by its recipe (a directory built where it is, or an
        archive) is code the build runs: it, everything in it and every directory above it
        must be root's or the compiling account's, writable by no one else. A source from the
        index is downloaded into the tree by the compiling account itself."""
        requirement = target.recipe.requirement_for(target.answer.version)
        if not requirement.startswith("/"):
            return
        owners = {os.geteuid(), owner.uid if owner else os.geteuid()}
        path = Path(requirement)
        try:
            if requirement.endswith(ARCHIVES):
                dir_fd = open_trusted_dir(path.parent, owners)
                try:
                    os.close(open_trusted_file(path.name, dir_fd, owners, path))
                finally:
                    os.close(dir_fd)
            else:
                os.close(open_trusted_dir(path, owners))
                check_trusted_tree(path, owners)
        except Untrusted as exc:
            builder = owner.name if owner else "root"
            whose = f"{builder}'s or root's" if owner else "root's"
            self.run.fail(
                Fault(
                    "extensions",
                    f"refused to build {target.answer.name} as {builder} from {path}: "
                    f"{exc.filename} {exc.strerror}, and a build runs what its source says; "
                    f"make it {whose} alone ({exc.fix}), or build it as its owner (venv.user)",
                )
            )
        except OSError:
            return  # missing or unreadable: the build itself says so, in its log

    def _set_aside_if_not_reusable(self, build_fd: int, name: str, owner: Account | None) -> None:
        """Move the tree `name` out of the way (renamed in root's build directory, never
        entered) unless it is a directory of the account that compiles now whose unpacked
        files are as recorded."""
        uid = owner.uid if owner else os.geteuid()
        manifest = manifest_path(self.run.fs.path(BUILD_ROOT), name)
        try:
            st = os.stat(name, dir_fd=build_fd, follow_symlinks=False)
        except FileNotFoundError:
            manifest.unlink(missing_ok=True)  # a record of a tree that is gone
            return
        builder = owner.name if owner else "root"
        if not stat.S_ISDIR(st.st_mode):
            why: str | None = "is not a directory"
        elif st.st_uid != uid:
            was = account_by_uid(self.run.fs, st.st_uid)
            whose = f"uid {st.st_uid} ({was.name if was else 'no account'})"
            why = f"belongs to {whose}, not to {builder}"
        else:
            why = changed(build_fd, name, manifest)
        if why is None:
            return
        aside = f"{name}.set-aside-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
        os.rename(name, aside, src_dir_fd=build_fd, dst_dir_fd=build_fd)
        manifest.unlink(missing_ok=True)
        forgotten = forget_kept(build_fd, name)  # its builds' lessons go with it
        log.info("build tree %s %s: set aside as %s; forgot %s", name, why, aside, forgotten)
        self.run.emit(
            Notice(
                text=f"the build tree {BUILD_ROOT}/{name} {why}: nothing in it runs again; set "
                f"it aside as {BUILD_ROOT}/{aside} and unpacking the source afresh for {builder}"
            )
        )

    def record_unpack(self, action: Action) -> None:
        """After the unpack: root's record of what it put in the tree, unless the tree's source
        was already there (checked against its record when the step started)."""
        target = self._target(action)
        name = tree_name(target.answer.name, target.answer.version)
        manifest = manifest_path(self.run.fs.path(BUILD_ROOT), name)
        if manifest.exists():
            return
        build_fd = self._traversable(BUILD_ROOT)
        try:
            record(build_fd, name, manifest)
        finally:
            os.close(build_fd)
        log.info("%s: recorded the unpacked source of %s in %s", action.id, name, manifest)

    def _traversable(self, directory: str) -> int:
        """One of root's own directories, made or checked as only root's and opened; anyone may
        pass through it (each build tree below is private to its owner)."""
        fd = trusted_dir(self.run.fs.path(directory), {os.geteuid()})
        os.fchmod(fd, 0o755)
        return fd

    # -- the compile --------------------------------------------------------------------------

    def compile(self, action: Action, log_path: Path, started: Callable[[int], None]) -> Result:
        """Run a build under the memory governor; if a job still dies of memory, retry with
        half the jobs it reached (the build tree keeps every object already compiled, and the
        file beside it what the governor learned of this build's jobs)."""
        build = self.run.req.answers.build
        ceiling = build.max_jobs if isinstance(build.max_jobs, int) else None
        target = self._target(action)
        refused = cxx_refusal(self.run, action, target)
        if refused:
            return refuse(action, log_path, refused)
        tools = self._without_untrusted_tools(action, target)
        try:
            return self._attempts(action, log_path, started, ceiling, tools)
        finally:
            tree = tree_name(target.answer.name, target.answer.version)
            kept = keep_ninja_log(self.run.fs, tree, self._builder(action))
            log.info("%s: %s", action.id, kept)

    def _attempts(
        self,
        action: Action,
        log_path: Path,
        started: Callable[[int], None],
        ceiling: int | None,
        tools: dict[str, str],
    ) -> Result:
        for attempt in range(1, OOM_RETRIES + 2):
            log.info("%s: attempt %d, job ceiling %s", action.id, attempt, ceiling or "auto")
            governor = self._governor(action, ceiling)
            result = self._governed(action, log_path, started, governor, tools)
            diagnosis = diagnose(result.tail, result.exit_code, str(log_path))
            # SIGKILLed by mlsetup (held up, past its limit) reads as 137 too: not memory
            oom = diagnosis is not None and diagnosis.id == "out-of-memory" and not result.ended
            if result.exit_code == 0 or not oom or attempt > OOM_RETRIES:
                return result
            peak = governor.summary().peak_jobs
            ceiling = max(1, peak // 2)
            log.info(
                "%s: out of memory with %d jobs: retrying with at most %d", action.id, peak, ceiling
            )
            self.run.emit(
                Notice(
                    text=f"{action.id}: a compile job ran out of memory with "
                    f"{peak} jobs; retrying with at most {ceiling} "
                    "(objects already compiled are kept)"
                )
            )
        raise AssertionError("unreachable")

    def _without_untrusted_tools(self, action: Action, target: BuildTarget) -> dict[str, str]:
        """{} when no account but root can change mlsetup's nvcc and ninja; else the variables
        that build without them (all the archs setup.py lists, ninja's own order), said why."""
        try:
            for tool in tools_of(target.recipe):
                check_root_only(tool)
        except OSError as exc:
            why = f"{action.id}: compiling without mlsetup's nvcc and ninja: {exc}"
            log.info("%s", why)
            self.run.emit(Notice(text=why))
            return {
                "PYTORCH_NVCC": f"{target.cuda_home}/bin/nvcc",
                "PATH": action.env["PATH"].replace(ninja_path(target.recipe), "", 1),
                **({"CXX": "c++"} if target.recipe.compile_as_cxx else {}),
            }
        return {}

    def _builder(self, action: Action) -> int:
        """The uid the compile runs as."""
        owner = lookup_account(self.run.fs, action.user) if action.user else None
        return owner.uid if owner else os.geteuid()

    def _governor(self, action: Action, ceiling: int | None) -> Governor:
        target = self._target(action)
        tree = self._build_tree(target)
        build = self.run.req.answers.build
        governor = Governor(
            self.run.emit,
            ceiling=ceiling,
            budget_bytes=build.limit_bytes(),
            reserve_bytes=build.reserve_bytes(psutil.virtual_memory().total),
            peak_job_bytes=int(target.recipe.job_peak_gib * GiB),
            # beside the tree, in root's directory: the tree belongs to the account that
            # compiles, and root must not read what that account may have swapped in; one file
            # for each compiling account, so that what one's jobs showed never sizes another's
            lessons_file=tree.with_name(
                kept_name(tree.name, self._builder(action), "governor.json")
            ),
            jobserver_dir=self.run.fs.path(RUNTIME_DIR),
            action=action.id,
            stopped_file=self.run.stopped_jobs,
        )
        owner = lookup_account(self.run.fs, action.user) if action.user else None
        if owner:  # the compile runs as the venv's owner: its ninja must open the FIFO
            governor.share_with(owner.uid, owner.gid)
        return governor

    def _governed(
        self,
        action: Action,
        log_path: Path,
        started: Callable[[int], None],
        governor: Governor,
        tools: dict[str, str],
    ) -> Result:
        def govern(pid: int) -> None:
            started(pid)
            governor.attach(pid)

        target = self._target(action)
        kept = {}
        if target.recipe.longest_first:  # the times its own last build took, for its ninja
            name, version = target.answer.name, target.answer.version
            kept["MLSETUP_OBJECT_LESSONS"] = lessons_log(name, version, self._builder(action))
        with governor:
            return self.run.runner.run(
                action,
                log_path,
                extra_env={**governor.env(), **kept, **tools},
                on_line=governor.feed_line,
                on_start=govern,
                end_leftovers=True,  # the step ends with its main process (docs/design.md, "Trust")
            )

    # -- the wheel ----------------------------------------------------------------------------

    def publish(self, action: Action) -> None:
        """Keep the wheel just built in the machine's cache and the fleet's wheelhouse."""
        target = self._target(action)
        venv = probe_venv(self.run.fs, self.run.choices.venv_path)
        key = target_key(target, venv, action.user or "root")  # who compiled it
        if key is None:
            log.info("%s: no wheel key for the venv as it is: nothing published", action.id)
            return
        copies, refused = publish(
            self.run.fs,
            tree_name(target.answer.name, target.answer.version),
            key,
            target.recipe.package,
            target.answer.version,
            self.run.req.answers.build.wheelhouse,
            self.run.choices.owner.run_as,
        )
        for why in refused:
            self.run.emit(Notice(text=why))
        self.run.outcome.wheels.update({str(path): sha for path, sha in copies.items()})
        log.info(
            "%s: wheel kept at %s; refused %d", action.id, [str(c) for c in copies], len(refused)
        )
        if copies:
            self.run.emit(
                Notice(
                    text=f"kept the {target.answer.name} wheel for reuse: "
                    + ", ".join(str(c.parent) for c in copies)
                )
            )
