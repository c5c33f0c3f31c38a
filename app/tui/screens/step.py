"""A step's screen (Driver, Toolkit, Venv, Extensions, and any step the registry adds): what is
there, the choices, what was refused and why, the exact commands. Its controller is the one
steps.planning.registry names. Rebuilt from the answers each time the screen is shown."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import Button, Input, Label, Select, Static

from app.tui.controllers.extensions import ExtensionsController
from app.tui.controllers.step import controller_for
from app.tui.releasecheck import ReleaseCheck
from app.tui.screens.base import Body, WizardScreen
from app.tui.screens.modals import QuestionScreen
from app.tui.widgets.fields import ChoiceField, MarkedLines, Section
from app.tui.widgets.keybar import KeyHint
from app.tui.widgets.plan import PlanView


class StepScreen(WizardScreen):
    RECOMPUTE = True
    BINDINGS = [  # noqa: RUF012
        Binding("enter", "next", "Continue"),
        Binding("a", "add", "Add extension"),
    ]

    def __init__(self, step: str) -> None:
        super().__init__(name=step)
        self.controller = controller_for(self.wizard.session, step)
        self.STEP = step
        self._add_refused: ReleaseCheck | None = None  # an added release the index lacks

    @property
    def adder(self) -> ExtensionsController | None:
        """The controller, when its screen adds and removes extensions."""
        c = self.controller
        return c if isinstance(c, ExtensionsController) else None

    def heading(self) -> str:
        c, g = self.controller, self.wizard.glyphs
        skipped = c.left_out()
        if skipped:  # not "satisfied": what was asked for is left out, and why is below
            state = f"{g['warn']} {', '.join(skipped)} left out: why is below"
        elif c.step().status == "satisfied":
            state = f"{g['satisfied']} already satisfied: Enter skips it"
        else:
            state = "to do"
        return f"{c.title}: {state}"

    def help_text(self) -> str:
        return self.controller.help()

    def body(self) -> ComposeResult:
        c = self.controller
        # one column at every width: a command's long words (the keyring URL) are never split
        # across two columns, and what is decided reads top to bottom
        with Body(id="body"):
            yield Section(
                "Already there", Static("\n".join(c.existing()), id="existing", markup=False)
            )
            yield Section(
                "Refused or warned",
                MarkedLines(self.wizard.glyphs["warn"], c.warnings(), id="step-warnings"),
                id="warnings-box",
                classes="warnings" if c.warnings() else "warnings -empty",
            )
            with Section("Choices", id="choices"):
                for spec in c.fields():
                    choice = ChoiceField(spec, c.value(spec), c.field_note(spec))
                    choice.back_to = c.back_to(spec)
                    yield choice
                if self.adder is not None:
                    yield from self._extension_controls(self.adder)
            yield Section(
                "Commands this step runs",
                PlanView([c.step()], self.wizard.glyphs, numbered=False, id="commands"),
            )
        with Horizontal(id="buttons"):
            yield Button("Continue", id="next", variant="primary")
            yield Button("Back", id="back")

    def _extension_controls(self, c: ExtensionsController) -> ComposeResult:
        for i, ext in enumerate(self.wizard.session.answers.extensions):
            yield RemoveButton(f"Remove {ext.name}", i, id=f"remove-{i}", classes="small")
        addable = c.addable()
        if addable:
            with Horizontal(id="add-row"):
                yield Label("Add extension", classes="field-label")
                # after the index refused an added release: that one again, with why
                refused, self._add_refused = self._add_refused, None
                name = refused.name if refused and refused.name in addable else addable[0]
                yield Select(
                    [(n, n) for n in addable],
                    value=name,
                    allow_blank=False,
                    compact=True,
                    id="add-name",
                )
                yield Input(
                    refused.version if refused else c.known_version(name),
                    placeholder="version",
                    compact=True,
                    id="add-version",
                )
                yield Button("Add", id="add", classes="small")
            why = refused.refusal if addable and refused else ""
            yield Static(why, id="add-error", classes="field-error", markup=False)

    async def stack_resolved(self) -> None:
        await self.refresh_plan()  # in place: a field being edited keeps its focus

    async def refresh_plan(self) -> None:
        c = self.controller
        await self.query_one("#commands", PlanView).show([c.step()])
        self.query_one("#existing", Static).update("\n".join(c.existing()))
        await self.query_one("#step-warnings", MarkedLines).show(c.warnings())
        self.query_one("#warnings-box").set_class(not c.warnings(), "-empty")
        self.query_one("#heading", Static).update(self._heading_text())
        for field in self.query(ChoiceField):
            field.note(c.field_note(field.spec))
            field.back_to = c.back_to(field.spec)

    async def release_refused(self) -> None:
        """The index's refusal of a release an edit named (the answers hold the version
        before), once, on the screen with its field: under the field, what is typed there
        kept; an added extension is taken out again and the Add row offers it with why."""
        checks = self.wizard.session.checks
        check = checks.unseen
        if check is None:
            return
        if check.added and self.adder is not None:
            checks.unseen, self._add_refused = None, check
            await self._recompute(keep_focus=False)
            return
        for field in self.query(ChoiceField):
            if field.spec.key == check.field:
                checks.unseen, field.back_to = None, None
                field.value = self.controller.value(field.spec)
                field.refuse(check.refusal, check.version)
                box = field.control_widget
                if box.value == field.value:  # drawn after it was set back: what was typed
                    box.value = check.version
                if self.app.screen is self:
                    box.focus()

    async def _recompute(self, keep_focus: bool = True) -> None:
        await super()._recompute(keep_focus)
        if self.app.screen is self:
            await self.release_refused()  # landed while this screen was not in front

    def on_mount(self) -> None:
        super().on_mount()
        self.set_interval(1, self._resolving)
        self.call_after_refresh(self.release_refused)

    def _resolving(self) -> None:
        """While uv resolves, the seconds it has taken, where the screen says so."""
        c = self.controller
        if c.SHOWS_RESOLUTION and self.wizard.session.resolving_since() and self.app.screen is self:
            for existing in self.query("#existing").results(Static):  # none mid-recompose
                existing.update("\n".join(c.existing()))

    @on(ChoiceField.Changed)
    async def _changed(self, event: ChoiceField.Changed) -> None:
        """The focus stays on (or comes back to) a refused field, so the next keys fix it;
        Enter on an accepted value moves on to the next field, or to Continue after the last
        one (never to a Remove or Add button, where the next Enter would change the answers)."""
        field = event.field
        accepted = self.enter_value(field, event.raw)
        if accepted and event.submitted and field.control_widget.has_focus:
            self.focus_after(field)
        await self.refresh_plan()

    def enter_value(self, field: ChoiceField, raw: str) -> bool:
        """Hand what was typed to the controller: accepted (True), or refused in place, with
        why, the focus on it."""
        why = self.controller.set(field.spec, raw)
        if why:
            field.refuse(why, raw)
            field.control_widget.focus()
            return False
        field.accept(self.controller.value(field.spec))
        field.back_to = self.controller.back_to(field.spec)
        return True

    def focus_after(self, field: ChoiceField) -> None:
        fields = list(self.query(ChoiceField))
        later = fields[fields.index(field) + 1 :]
        if later:
            later[0].focus_control()
        else:
            self.focus_default()

    def accept_typed(self) -> bool:
        """What is typed but not yet entered, entered now (before Continue, a save, a jump),
        so what is saved and planned is what is shown; False, the focus on the first refused
        field and its key named, while one is refused."""
        for field in self.query(ChoiceField):
            widget = field.control_widget
            if isinstance(widget, Input) and (widget.value != field.value or field.refused):
                self.enter_value(field, widget.value)
        bad = self.invalid
        if bad:
            self.notify(
                f"{bad[0].spec.key} is not valid yet: fix it, or Esc sets it back", severity="error"
            )
            bad[0].control_widget.focus()
            return False
        self.call_later(self.refresh_plan)
        return True

    @property
    def invalid(self) -> list[ChoiceField]:
        return [f for f in self.query(ChoiceField) if f.has_class("-invalid")]

    @on(Button.Pressed, "#next")
    def action_next(self) -> None:
        if self.accept_typed():
            self.wizard.nav.next_from(self.controller.name)

    @on(Button.Pressed, "#back")
    def _back(self) -> None:
        self.action_back()

    def screen_hints(self, typing: bool) -> list[KeyHint]:
        return [("a", "add")] if not typing and self.query("#add-version") else []

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "add":
            return self.adder is not None
        return super().check_action(action, parameters)

    def action_add(self) -> None:
        """`a`: straight to the version box (the name list, one Shift+Tab back, starts on the
        first extension mlsetup knows)."""
        if self.adder is not None and self.query("#add-version"):
            self.query_one("#add-version", Input).focus()

    @on(Select.Changed, "#add-name")
    def _add_name(self, event: Select.Changed) -> None:
        if event.value is not Select.NULL:
            self.query_one("#add-version", Input).value = ExtensionsController.known_version(
                str(event.value)
            )

    @on(Button.Pressed, "#add")
    @on(Input.Submitted, "#add-version")
    async def _add(self) -> None:
        assert self.adder is not None  # only the Extensions' screen has the Add row
        name = str(self.query_one("#add-name", Select).value)
        version = self.query_one("#add-version", Input).value
        why = self.adder.add(name, version)
        if why:
            self.query_one("#add-error", Static).update(why)
            return
        await self._recompute(keep_focus=False)

    @on(Button.Pressed, "RemoveButton")
    def _remove(self, event: Button.Pressed) -> None:
        """Asked first, Cancel focused: a reflex Enter keeps the extension."""
        button = event.button
        if not isinstance(button, RemoveButton) or self.adder is None:
            return
        ext = self.wizard.session.answers.extensions[button.index]

        async def answered(yes: bool | None) -> None:
            if yes and self.adder is not None:
                self.adder.remove(button.index)
                await self._recompute(keep_focus=False)

        self.app.push_screen(
            QuestionScreen(
                f"Remove {ext.name} {ext.version} from the extensions to build?", "Remove"
            ),
            answered,
        )


class RemoveButton(Button):
    """Remove the extension at `index` of the answers."""

    def __init__(self, label: str, index: int, **kwargs) -> None:
        super().__init__(label, **kwargs)
        self.index = index
