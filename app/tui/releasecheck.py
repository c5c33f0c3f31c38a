"""An edit that names an extension release the index was not asked about (a version typed, an
extension added) is taken at once for everything checked locally, while a worker asks the index
(steps.stack.obtain.check_extension_releases: uv, seconds, or uv's network timeout where the
index hangs); if the index lacks the release, its refusal (`mlsetup plan`'s words) lands on the
field and the version is set back. Plain Python, no Textual: the session holds these."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from steps.core.errors import InputError
from steps.formats.answers import Answers
from steps.stack.obtain import releases_to_ask

Release = tuple[str, str]  # (extension name, version)


def releases(answers: Answers) -> set[Release]:
    return {(e.name, e.version) for e in answers.extensions}


@dataclass
class ReleaseCheck:
    """The index being asked about the releases of `answers` that it was not asked about."""

    answers: Answers  # the answers being checked (their stack key is the check's)
    field: str  # the version field the note and the refusal go under: "extensions[0].version"
    name: str  # the extension asked about, "flash-attn"
    version: str  # its release, as typed: "2.8.3"
    where: str  # the index, as the refusal names it
    # each asked release's extension, and its version before the edit (None: it was added):
    # what a refusal sets back
    restore: dict[str, str | None]
    refusal: str = ""  # the index's refusal, once it came

    @property
    def asked(self) -> str:
        return f"{self.name} {self.version}"

    @property
    def note(self) -> str:
        return f"checking {self.asked} on {self.where}\u2026"

    @property
    def added(self) -> bool:
        """The release asked about is an extension added (not a version changed)."""
        return any(v is None for v in self.restore.values())

    @property
    def back_to(self) -> str | None:
        """The field's value before the edit (Esc sets it back); None: the extension was
        added (Remove takes it out)."""
        return next(iter(self.restore.values()), None)

    def set_back(self, answers: Answers) -> Answers:
        """`answers` with the asked releases set back to the versions before the edit, an
        added extension taken out again (any other change kept)."""
        data = answers.model_dump(mode="json")
        kept = []
        for ext in data["extensions"]:
            if ext["name"] in self.restore:
                version = self.restore[ext["name"]]
                if version is None:
                    continue
                ext["version"] = version
            kept.append(ext)
        data["extensions"] = kept
        return Answers.model_validate(data)


@dataclass
class ReleaseChecks:
    """The checks in flight and the index's answers, by the stack key of the answers asked
    about (a newer edit changes the key: the older check's answer no longer lands)."""

    # releases not to ask about again: the answers' own before an edit, those the index had
    known: set[Release] = field(default_factory=set)
    refused: dict[str, InputError] = field(default_factory=dict)
    asking: dict[str, ReleaseCheck] = field(default_factory=dict)
    started: set[str] = field(default_factory=set)  # the keys whose worker runs
    # a refusal that landed, until the screen with its field shows it (Apply waits)
    unseen: ReleaseCheck | None = None

    def after_edit(
        self, before: tuple[Answers, str], after: tuple[Answers, str], where: Callable[[], str]
    ) -> None:
        """An edit from `before` to `after` (answers, stack key): the extension releases it
        names that the index was not asked about are asked about next (`asking`: the edit is
        taken for now); InputError at once when the index refused them before. `where`: the
        index they are asked of, as its refusal names it."""
        (was, was_key), (answers, key) = before, after
        if was_key not in self.asking:  # those were taken
            self.known |= releases(was)
        on_index = [(at, answers.extensions[at].name, v) for at, _, v in releases_to_ask(answers)]
        unknown = {(name, v) for _, name, v in on_index} - self.known
        if not unknown or key in self.asking:
            return
        if key in self.refused:
            raise self.refused[key]
        at, name, version = next(r for r in on_index if r[1:] in unknown)
        versions = {e.name: e.version for e in was.extensions}
        older = self.asking.get(was_key)  # an edit that superseded a check: its versions before
        restore = {
            n: older.restore[n] if older and n in older.restore else versions.get(n)
            for n, _ in unknown
        }
        self.asking[key] = ReleaseCheck(
            answers, f"extensions[{at}].version", name, version, where(), restore
        )

    def answered(self, key: str, check: ReleaseCheck, error: InputError | None) -> None:
        """The index's answer for the check of `key` (from the worker)."""
        if error is None:
            self.known |= releases(check.answers)
        else:
            self.refused[key] = error
        self.started.discard(key)
