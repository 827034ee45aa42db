"""One form style for every screen that asks for values (the launch form, the cluster wizard,
storage, image): a field a line, its short label and then an input or a select drawn without a
border on a shaded band, with an example value in every empty input; the focused field's label
lit and its longer help on the line under the form; and what is wrong with a field under it,
once the field was typed into or left, or a submit was tried (a newcomer's first sight is the
form, not a column of errors)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, TypeVar

from textual import events
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.dom import DOMNode
from textual.widget import Widget
from textual.widgets import Input, Label, Select, Static

from torchdeck.backends.errors import SpecError

from .base import DeckScreen

ResultT = TypeVar("ResultT")


@dataclass(frozen=True)
class Field:
    """One line of a form: ``#f-ID`` is its widget, ``#e-ID`` the line for its error."""

    id: str
    label: str
    """Short: it fits the label column (19 cells, ``.field-label`` in app.tcss)."""
    example: str = ""
    """The placeholder of an empty input: an example value, or what empty means."""
    help: str = ""
    """The line under the form while the field has focus."""


def reason_text(exc: SpecError) -> str:
    """A field's error as its line says it: the reason and the hint (the field goes without saying)."""
    return exc.reason + (f" (hint: {exc.hint})" if exc.hint else "")


def field_rows(fields: list[Field], widgets: Mapping[str, Widget] | None = None) -> ComposeResult:
    """The form's lines: a label and a widget each (an Input unless ``widgets`` gives another),
    then the field's error line (hidden while empty)."""
    widgets = widgets or {}
    for field in fields:
        widget = widgets.get(field.id) or Input(id=f"f-{field.id}")
        if isinstance(widget, Input):
            widget.placeholder = widget.placeholder or field.example
        if isinstance(widget, Input | Select):
            widget.compact = True
        with Horizontal(classes="field", id=f"row-{field.id}"):
            yield Label(field.label, classes="field-label")
            yield widget
        yield Static(id=f"e-{field.id}", classes="field-error")


class FormScreen(DeckScreen[ResultT]):
    """A screen with a form (``FORM``; its lines from ``field_rows``, a ``#field-help`` line under
    them and a ``#form-error`` line). ``show_errors`` puts each field's error under it, shown once the field is
    touched or ``tried`` is set (a submit)."""

    FORM: ClassVar[list[Field]] = []

    def __init__(self) -> None:
        super().__init__()
        self.fields: list[Field] = list(self.FORM)
        """The form's lines: ``FORM``, or what a screen makes of its own (the launch form's per backend)."""
        self.touched: set[str] = set()
        self.tried = False
        """A submit was tried: every field's error shows."""
        self.errors: dict[str, str] = {}

    def on_mount(self) -> None:
        if self.app.settings.ascii:  # a select's arrows, in ASCII
            for arrow, text in ((".down-arrow", "v"), (".up-arrow", "^")):
                for widget in self.query(f"SelectCurrent {arrow}").results(Static):
                    widget.update(text)

    def form_ids(self) -> set[str]:
        return {f.id for f in self.fields}

    def _field_of(self, node: DOMNode | None) -> str | None:
        ident = (node.id or "") if node is not None else ""
        if ident.startswith("f-") and ident[2:] in self.form_ids():
            return ident[2:]
        return None

    def show_errors(self, errors: Mapping[str, str]) -> None:
        """These errors (field id -> text; every other field is right), each under its field
        if it has been touched or a submit was tried."""
        self.errors = dict(errors)
        for field in self.fields:
            text = self.errors.get(field.id, "") if (self.tried or field.id in self.touched) else ""
            line = self.query_one(f"#e-{field.id}", Static)
            line.update(text)
            line.set_class(bool(text), "-shown")

    def form_error(self, text: str) -> None:
        """The line under the form (``#form-error``) for what no field owns: a file that cannot be
        read or written, the backend's refusal."""
        self.query_one("#form-error", Static).update(text)
        self.query_one("#form-error").set_class(bool(text), "-shown")

    def try_submit(self) -> None:
        """A submit was tried: every error shows from now on."""
        self.tried = True
        self.show_errors(self.errors)

    def touch(self, field: str) -> None:
        if field not in self.touched:
            self.touched.add(field)
            self.show_errors(self.errors)

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        field = self._field_of(event.widget)
        if field is None and event.widget.parent is not None:  # a Select's own parts
            field = self._field_of(event.widget.parent)
        line = next((f.help or f.label for f in self.fields if f.id == field), "")
        self.query_one("#field-help", Static).update(line)

    def on_descendant_blur(self, event: events.DescendantBlur) -> None:
        field = self._field_of(event.widget)
        if field is not None:
            self.touch(field)

    def typed(self, widget: Widget) -> None:
        """A field's value changed: touched if the user changed it (it has focus), not the form."""
        field = self._field_of(widget)
        if field is not None and widget.has_focus:
            self.touch(field)
