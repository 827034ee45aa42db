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

from torchdeck.backends.errors import SpecError
from torchdeck.backends.spec import MODELS, RECIPES, JobSpec, load_spec, save_spec, with_overrides

from ..messages import JobSubmitted
from .base import shown_path
from .form import Field, FormScreen, field_rows, reason_text

# spec field, kind, label, example (the placeholder), help (the line under the form while it has focus)
FIELDS: list[tuple[str, str, str, str, str]] = [
    ("name", "text", "Job name", "cifar10-ddp", "The run's name: lower-case letters, digits and '-'"),
    (
        "entrypoint.script",
        "text?",
        "Script",
        "train.py (empty: built-in trainer)",
        "Your script, in the code folder (empty: the built-in CIFAR-10 trainer)",
    ),
    ("entrypoint.module", "text?", "or module", "mypkg.train", "Or your module, run as python -m"),
    ("entrypoint.args", "args", "Arguments", "--epochs 3 --lr 0.1", "Its arguments, as on a command line"),
    ("entrypoint.code", "text", "Code folder", ".", "The code folder (shipped with the job to a cluster)"),
    (
        "metrics.pattern",
        "text?",
        "Metrics pattern",
        "empty: the common formats",
        "A regex with (?P<loss>...) for your script's lines (empty: the common text formats)",
    ),
    ("nproc_per_node", "int", "Ranks per node", "2", "Processes per node (one per GPU)"),
    ("trainer.epochs", "int?", "Epochs", "empty: the recipe's", "Epochs to train"),
    ("trainer.max_steps", "int?", "Max steps", "empty: no limit", "Stop after this many"),
    ("trainer.recipe", "recipe", "Recipe", "", "The built-in trainer's recipe"),
    ("trainer.model", "model", "Model", "", "The built-in trainer's model"),
    ("data_dir", "text", "Data folder", "./data", "The data folder (holds cifar-10-batches-py/)"),
    ("download", "bool", "Download data", "", "Download CIFAR-10 into the data folder if absent"),
    ("max_restarts", "int", "Max restarts", "0", "Restarts of a failed job before it fails"),
    ("device", "device", "Device", "", "auto: CUDA where there is a GPU, else the CPU"),
]
SELECTS = ("recipe", "model", "device")


def _line_id(field: str) -> str:
    """A spec field's line in the form (its widget is ``#f-`` and this)."""
    return field.replace(".", "-").replace("_", "-")


def _dom_id(field: str) -> str:
    return "f-" + _line_id(field)


class LaunchScreen(FormScreen[None]):
    CSS_PATH = "launch.tcss"
    FORM = [Field(_line_id(field), label, example, hint) for field, _, label, example, hint in FIELDS]
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
        widgets: dict[str, Widget] = {}
        for field, kind, *_ in FIELDS:
            dom, line = _dom_id(field), _line_id(field)
            if kind == "bool":
                widgets[line] = Checkbox("if absent", id=dom)
            elif kind == "recipe":
                widgets[line] = Select([(r, r) for r in RECIPES], allow_blank=False, id=dom)
            elif kind == "model":
                widgets[line] = Select([("the recipe's", "")] + [(m, m) for m in MODELS], allow_blank=False, id=dom)
            elif kind == "device":
                widgets[line] = Select([(d, d) for d in ("auto", "cpu", "cuda")], allow_blank=False, id=dom)
            else:
                widgets[line] = Input(id=dom, restrict=r"[0-9]*" if kind.startswith("int") else None)
        with VerticalScroll(id="form", classes="form"):
            yield from field_rows(self.FORM, widgets)
        yield Static(id="field-help")
        yield Static(id="form-error")
        with Horizontal(id="buttons"):
            yield Button("Launch ^l", id="launch", variant="success", compact=True)
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
            f"Launch a job on the {self.app.backend.name} backend - from {source}"
        )
        self.fill(self.base)
        self.query_one(f"#{_dom_id('name')}").focus()

    def fill(self, spec: JobSpec) -> None:
        data = spec.to_dict()
        for field, kind, *_ in FIELDS:
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
        for field, kind, *_ in FIELDS:
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
        """The spec the form describes, or None (with the bad field's reason under it) if it
        does not validate."""
        try:
            spec = with_overrides(self.base, self.form_values())
            spec.entrypoint.code = str(Path(spec.entrypoint.code).expanduser().resolve())
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
        if spec.data_dir and "://" not in spec.data_dir:
            spec.data_dir = str(Path(spec.data_dir).expanduser().resolve())
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
        else:
            self.app.pop_screen()

    def action_launch(self) -> None:
        spec = self.submitted_spec()
        if spec is not None:
            self.query_one("#launch", Button).disabled = True
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

    @work(thread=True, exclusive=True, group="submit", exit_on_error=False)
    def submit(self, spec: JobSpec) -> None:
        self.post_message(JobSubmitted(self.app.backend.submit(spec)))

    def worker_failed(self, group: str, text: str) -> None:
        self.query_one("#launch", Button).disabled = False
        self.form_error(text)

    def on_job_submitted(self, message: JobSubmitted) -> None:
        self.notify(f"launched {message.run_id}")
        self.app.pop_screen()
        self.app.open_monitor(message.run_id)
