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
from textual.widgets import Button, Checkbox, Input, Label, Select, Static

from torchdeck.backends.errors import SpecError
from torchdeck.backends.spec import MODELS, RECIPES, JobSpec, load_spec, save_spec, with_overrides

from ..messages import JobSubmitted
from .base import DeckScreen

# form field id -> (spec field, label, kind)
FIELDS: list[tuple[str, str, str]] = [
    ("name", "Job name", "text"),
    ("entrypoint.script", "Your script, in the code folder (empty: the built-in CIFAR-10 trainer)", "text?"),
    ("entrypoint.module", "or your module (python -m)", "text?"),
    ("entrypoint.args", "Its arguments (as on a command line)", "args"),
    ("entrypoint.code", "Code folder (shipped with the job to a cluster)", "text"),
    ("metrics.pattern", "Metrics pattern, a regex with (?P<loss>...) (empty: the common text formats)", "text?"),
    ("nproc_per_node", "Ranks (processes per node)", "int"),
    ("trainer.epochs", "Epochs (empty: the recipe's)", "int?"),
    ("trainer.max_steps", "Max steps (empty: no limit)", "int?"),
    ("trainer.recipe", "Recipe", "recipe"),
    ("trainer.model", "Model", "model"),
    ("data_dir", "Data folder (holds cifar-10-batches-py/)", "text"),
    ("download", "Download CIFAR-10 there if absent", "bool"),
    ("max_restarts", "Max restarts", "int"),
    ("device", "Device", "device"),
]
SELECTS = ("recipe", "model", "device")


def _dom_id(field: str) -> str:
    return "f-" + field.replace(".", "-").replace("_", "-")


class LaunchScreen(DeckScreen[None]):
    CSS_PATH = "launch.tcss"
    BINDINGS = [
        Binding("ctrl+l", "launch", "Launch", priority=True),
        Binding("ctrl+s", "save", "Save spec", priority=True),
        Binding("escape", "app.pop_screen", "Back"),
        Binding("question_mark", "app.help", "Help", show=False),
    ]

    def __init__(self, spec_file: Path):
        super().__init__()
        self.spec_file = spec_file
        self.base = JobSpec()
        self.loaded_from: str = ""

    def compose(self) -> ComposeResult:
        yield Static(id="launch-title")
        with VerticalScroll(id="form"):
            for field, label, kind in FIELDS:
                yield Label(label)
                dom = _dom_id(field)
                if kind == "bool":
                    yield Checkbox(id=dom)
                elif kind == "recipe":
                    yield Select([(r, r) for r in RECIPES], allow_blank=False, id=dom)
                elif kind == "model":
                    yield Select([("the recipe's", "")] + [(m, m) for m in MODELS], allow_blank=False, id=dom)
                elif kind == "device":
                    yield Select([(d, d) for d in ("auto", "cpu", "cuda")], allow_blank=False, id=dom)
                else:
                    yield Input(id=dom, restrict=r"[0-9]*" if kind.startswith("int") else None)
        yield Static(id="form-error")
        with Horizontal(id="buttons"):
            yield Button("Launch (ctrl+l)", id="launch", variant="success")
            yield Button("Save spec (ctrl+s)", id="save")
            yield Button("Back (esc)", id="back")
        yield self.app.footer()

    def on_mount(self) -> None:
        try:
            if self.spec_file.exists():
                self.base = load_spec(self.spec_file)
                self.loaded_from = str(self.spec_file)
        except SpecError as exc:
            self.show_error(f"{exc} - the form starts from the defaults; saving overwrites the file")
        source = self.loaded_from or "defaults (no spec file yet)"
        self.query_one("#launch-title", Static).update(
            f"Launch a job on the {self.app.backend.name} backend - from {source}"
        )
        self.fill(self.base)
        self.query_one(f"#{_dom_id('name')}").focus()

    def fill(self, spec: JobSpec) -> None:
        data = spec.to_dict()
        for field, _, kind in FIELDS:
            value: Any = data
            for part in field.split("."):
                value = value[part]
            dom = f"#{_dom_id(field)}"
            if kind == "bool":
                self.query_one(dom, Checkbox).value = bool(value)
            elif kind in SELECTS:
                self.query_one(dom, Select).value = value or ""
            elif kind == "args":
                self.query_one(dom, Input).value = shlex.join(value)
            else:
                self.query_one(dom, Input).value = "" if value is None else str(value)

    def form_values(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for field, _, kind in FIELDS:
            dom = f"#{_dom_id(field)}"
            if kind == "bool":
                out[field] = self.query_one(dom, Checkbox).value
            elif kind in SELECTS:  # none may be blank
                choice = str(self.query_one(dom, Select).value)
                out[field] = (choice or None) if kind == "model" else choice
            elif kind == "args":
                text = self.query_one(dom, Input).value
                try:
                    out[field] = shlex.split(text)
                except ValueError as exc:
                    raise SpecError(field, f"cannot be read as arguments: {exc}", "close the quote") from None
            elif kind == "text?":
                out[field] = self.query_one(dom, Input).value.strip() or None
            else:
                text = self.query_one(dom, Input).value.strip()
                out[field] = (
                    text if not kind.startswith("int") else int(text) if text else None if kind == "int?" else ""
                )
        return out

    def build_spec(self) -> JobSpec | None:
        """The spec the form describes, or None (with the bad field named
        and focused) if it does not validate."""
        try:
            spec = with_overrides(self.base, self.form_values())
            spec.entrypoint.code = str(Path(spec.entrypoint.code).expanduser().resolve())
        except SpecError as exc:
            self.show_error(str(exc).replace("command line: ", ""))
            field = exc.field if any(exc.field == f for f, _, _ in FIELDS) else None
            if field:
                self.query_one(f"#{_dom_id(field)}").focus()
            return None
        self.show_error("")
        if spec.data_dir and "://" not in spec.data_dir:
            spec.data_dir = str(Path(spec.data_dir).expanduser().resolve())
        return spec

    def show_error(self, text: str) -> None:
        self.query_one("#form-error", Static).update(text)
        self.query_one("#form-error").set_class(bool(text), "-shown")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "launch":
            self.action_launch()
        elif event.button.id == "save":
            self.action_save()
        else:
            self.app.pop_screen()

    def action_launch(self) -> None:
        spec = self.build_spec()
        if spec is not None:
            self.query_one("#launch", Button).disabled = True
            self.submit(spec)

    def action_save(self) -> None:
        spec = self.build_spec()
        if spec is None:
            return
        try:
            save_spec(spec, self.spec_file)
        except OSError as exc:
            self.show_error(f"cannot write {self.spec_file}: {exc.strerror}")
            return
        self.notify(f"saved {self.spec_file}")

    @work(thread=True, exclusive=True, group="submit", exit_on_error=False)
    def submit(self, spec: JobSpec) -> None:
        self.post_message(JobSubmitted(self.app.backend.submit(spec)))

    def worker_failed(self, group: str, text: str) -> None:
        self.query_one("#launch", Button).disabled = False
        self.show_error(text)

    def on_job_submitted(self, message: JobSubmitted) -> None:
        self.notify(f"launched {message.run_id}")
        self.app.pop_screen()
        self.app.open_monitor(message.run_id)
