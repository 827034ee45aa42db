"""The launch form: a job spec, field by field, validated before anything
starts. It opens on the spec file (torchdeck.yaml) where there is one, and
can save back to it."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widget import Widget
from textual.widgets import Button, Checkbox, Input, Select, Static

from torchdeck.backends.base import Plan
from torchdeck.backends.errors import SpecError
from torchdeck.backends.spec import JobSpec, SpecOption, load_spec, save_spec, spec_options, with_overrides
from torchdeck.backends.spec_options import Where

from ..messages import JobSubmitted, PlanMade
from .base import shown_path
from .form import Field, FormScreen, field_rows, reason_text
from .plan import PlanScreen


def form_options(fields: Where) -> list[SpecOption]:
    """The spec fields the form shows to a backend that reads ``fields`` (``Backend.fields``): every
    field with a label that means something there (``Option.where``), the job's name first, then
    what runs, then the rest in the spec's order. Nothing is listed here: a field with a label is
    on the form."""
    shown = [o for o in spec_options() if o.option.label and o.option.applies_to(fields)]
    first = {"name": 0, "entrypoint": 1, "metrics": 1}
    return sorted(shown, key=lambda o: first.get(o.path.split(".")[0], 2))


def _line_id(field: str) -> str:
    """A spec field's line in the form (its widget is ``#f-`` and this)."""
    return field.replace(".", "-").replace("_", "-")


def _dom_id(field: str) -> str:
    return "f-" + _line_id(field)


def _widget(opt: SpecOption) -> Widget:
    o, dom = opt.option, _dom_id(opt.path)
    if opt.widget == "bool":
        return Checkbox(o.example, id=dom)
    if opt.widget == "choice":
        blank = [(o.example or "default", "")] if opt.optional else []
        return Select(blank + [(c, c) for c in o.choices], allow_blank=False, id=dom)
    return Input(id=dom, restrict=r"[0-9]*" if opt.widget == "int" else None)


def _map_text(value: dict[str, str]) -> str:
    return " ".join(shlex.quote(f"{k}={v}") for k, v in value.items())


def _read_map(path: str, text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in shlex.split(text):
        key, sep, value = item.partition("=")
        if not sep:
            raise SpecError(path, f"{item!r:.40} is not KEY=VALUE", "e.g. eks.amazonaws.com/nodegroup=gpu")
        out[key] = value
    return out


class LaunchScreen(FormScreen[None]):
    CSS_PATH = "launch.tcss"
    BINDINGS = [
        Binding("ctrl+l", "launch", "Launch", priority=True),
        Binding("ctrl+r", "preview", "Review the plan", priority=True),
        Binding("ctrl+s", "save", "Save spec", priority=True),
        Binding("escape", "app.pop_screen", "Back"),
        Binding("question_mark", "app.help", "Help", show=False),
    ]

    def __init__(self, spec_file: Path):
        super().__init__()
        self.spec_file = spec_file
        self.base = JobSpec()
        self.loaded_from: str = ""
        self.options: list[SpecOption] = []

    def compose(self) -> ComposeResult:
        self.options = form_options(self.app.backend_fields)
        self.fields = [Field(_line_id(o.path), o.option.label, o.option.example, o.option.help) for o in self.options]
        yield Static(id="launch-title")
        widgets = {_line_id(o.path): _widget(o) for o in self.options}
        with VerticalScroll(id="form", classes="form"):
            yield from field_rows(self.fields, widgets)
        yield Static(id="field-help")
        yield Static(id="form-error")
        with Horizontal(id="buttons"):
            yield Button("Launch ^l", id="launch", variant="success", compact=True)
            yield Button("Plan ^r", id="preview", compact=True)
            yield Button("Save spec ^s", id="save", compact=True)
            yield Button("Back esc", id="back", compact=True)
        yield self.app.footer()

    def on_mount(self) -> None:
        try:
            if self.spec_file.exists():
                self.base = load_spec(self.spec_file)
                self.loaded_from = shown_path(self.spec_file)
        except SpecError as exc:
            self.form_error(f"{exc} - the form starts from the defaults; saving overwrites the file")
        source = self.loaded_from or "defaults (no spec file yet)"
        self.query_one("#launch-title", Static).update(
            f"Launch a job on the {self.app.backend_name} backend - from {source}"
        )
        self.fill(self.base)
        self.query_one(f"#{_dom_id('name')}").focus()

    def fill(self, spec: JobSpec) -> None:
        data = spec.to_dict()
        for opt in self.options:
            value: Any = data
            for part in opt.path.split("."):
                value = value[part]
            dom = f"#{_dom_id(opt.path)}"
            if opt.widget == "bool":
                self.query_one(dom, Checkbox).value = bool(value)
            elif opt.widget == "choice":
                self.query_one(dom, Select).value = value or ""
            elif opt.widget == "args":
                self.query_one(dom, Input).value = shlex.join(value)
            elif opt.widget == "map":
                self.query_one(dom, Input).value = _map_text(value)
            else:
                self.query_one(dom, Input).value = "" if value is None else str(value)

    def form_values(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for opt in self.options:
            dom, path = f"#{_dom_id(opt.path)}", opt.path
            if opt.widget == "bool":
                out[path] = self.query_one(dom, Checkbox).value
                continue
            if opt.widget == "choice":  # none may be blank; an optional one's first entry is ""
                out[path] = str(self.query_one(dom, Select).value) or None
                continue
            text = self.query_one(dom, Input).value.strip()
            try:
                if opt.widget == "args":
                    out[path] = shlex.split(text)
                elif opt.widget == "map":
                    out[path] = _read_map(path, text)
                elif not text:
                    out[path] = None if opt.optional else ""
                else:
                    out[path] = int(text) if opt.widget == "int" else text
            except ValueError as exc:
                raise SpecError(path, f"cannot be read: {exc}", "close the quote") from None
            if opt.option.local_path and isinstance(out[path], str) and out[path] and "://" not in out[path]:
                out[path] = str(Path(out[path]).expanduser().resolve())
        return out

    def build_spec(self) -> JobSpec | None:
        """The spec the form describes, or None (with the bad field's reason under it) if it
        does not validate."""
        try:
            spec = with_overrides(self.base, self.form_values())
        except SpecError as exc:
            line = _line_id(exc.field)
            if line in self.form_ids():
                self.show_errors({line: reason_text(exc)})
                self.form_error("")
            else:
                self.show_errors({})
                self.form_error(str(exc).replace("command line: ", ""))
            return None
        self.show_errors({})
        self.form_error("")
        return spec

    def submitted_spec(self) -> JobSpec | None:
        """``build_spec`` for launch and save: every error shows, and the first bad field has focus."""
        self.try_submit()
        spec = self.build_spec()
        if spec is None and self.errors:
            self.query_one(f"#f-{next(iter(self.errors))}").focus()
        return spec

    def on_input_changed(self, event: Input.Changed) -> None:
        self.typed(event.input)
        if self.is_mounted and self.touched:
            self.build_spec()

    def on_select_changed(self, event: Select.Changed) -> None:
        self.typed(event.select)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "launch":
            self.action_launch()
        elif event.button.id == "save":
            self.action_save()
        elif event.button.id == "preview":
            self.action_preview()
        else:
            self.app.pop_screen()

    def action_launch(self) -> None:
        spec = self.submitted_spec()
        if spec is not None:
            self.query_one("#launch", Button).disabled = True
            if spec.cluster.health_gate:
                self.form_error("the health gate runs first: a few minutes...")
            self.submit(spec)

    def action_save(self) -> None:
        spec = self.submitted_spec()
        if spec is None:
            return
        try:
            save_spec(spec, self.spec_file)
        except OSError as exc:
            self.form_error(f"cannot write {self.spec_file}: {exc.strerror}")
            return
        self.notify(f"saved {self.spec_file}")

    def action_preview(self) -> None:
        spec = self.submitted_spec()
        if spec is not None:
            self.form_error("planning...")
            self.make_plan(spec)

    @work(thread=True, exclusive=True, group="submit", exit_on_error=False)
    def make_plan(self, spec: JobSpec) -> None:
        """The plan a launch would apply (the cluster's preflight included): shown, then launched as is."""
        self.post_message(PlanMade(self.app.backend.plan(spec)))

    def on_plan_made(self, message: PlanMade) -> None:
        self.form_error("")
        plan = message.plan

        def answered(launch: bool | None) -> None:
            if launch:
                self.query_one("#launch", Button).disabled = True
                self.submit(plan)

        self.app.push_screen(PlanScreen(plan), answered)

    @work(thread=True, exclusive=True, group="submit", exit_on_error=False)
    def submit(self, spec: JobSpec | Plan) -> None:
        """Launch a spec (planned now) or the plan the preview showed, exactly."""

        def said(line: str) -> None:  # the plan's steps (the health gate first) say what they wait for
            self.app.call_from_thread(self.form_error, line)

        self.post_message(JobSubmitted(self.app.backend.submit(spec, progress=said)))

    def worker_failed(self, group: str, text: str) -> None:
        self.query_one("#launch", Button).disabled = False
        self.form_error(text)

    def on_job_submitted(self, message: JobSubmitted) -> None:
        self.notify(f"launched {message.run_id}")
        self.app.pop_screen()
        self.app.open_monitor(message.run_id)
