"""The model test of one run: the trained model evaluated on the CIFAR-10
test batch where the run ran (a process here, the model-test Job on a
cluster), shown as accuracy per class."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Static

from torchdeck.backends.base import TestResult
from torchdeck.backends.capabilities import CifarTasks

from ..glyphs import bar
from ..messages import ModelTested, TestProgressed
from .base import DeckScreen, shown_path


class ModelTestScreen(DeckScreen[None]):
    CSS_PATH = "model_test.tcss"
    BINDINGS = [Binding("escape", "app.pop_screen", "Runs"), Binding("r", "retest", "Test again")]

    def __init__(self, run_id: str):
        super().__init__()
        self.run_id = run_id
        self.result: TestResult | None = None

    def compose(self) -> ComposeResult:
        yield Static(id="test-title")
        yield Static(id="test-body")
        yield self.app.footer()

    def on_mount(self) -> None:
        self.query_one("#test-title", Static).update(
            Text.assemble(("model test ", "bold"), (self.run_id, "bold reverse"))
        )
        self.action_retest()

    def action_retest(self) -> None:
        self.query_one("#test-body", Static).update(Text("testing the saved model...", style="dim"))
        self.run_test_job()

    @work(thread=True, exclusive=True, group="model-test", exit_on_error=False)
    def run_test_job(self) -> None:
        tasks = self.app.backend.require(CifarTasks)
        spec, model_file = tasks.model_file_of(self.run_id)

        def progressed(line: str) -> None:
            self.post_message(TestProgressed(line))

        result = tasks.test_model(spec, model_file, progress=progressed)
        self.post_message(ModelTested(self.run_id, result))

    def on_test_progressed(self, message: TestProgressed) -> None:
        self.query_one("#test-body", Static).update(Text(message.line, style="dim"))

    def on_model_tested(self, message: ModelTested) -> None:
        self.result = result = message.result
        g = self.app.glyphs
        table = Table(box=None, pad_edge=False, show_edge=False)
        table.add_column("class")
        table.add_column("accuracy", justify="right")
        table.add_column("", no_wrap=True)
        table.add_column("images", justify="right")
        for name, row in result["per_class"].items():
            table.add_row(
                name,
                f"{row['accuracy'] * 100:.1f}%",
                Text(bar(row["accuracy"], 20, g), style="green"),
                str(row.get("images", "")),
            )
        head = Text.assemble(
            (f"accuracy {result['accuracy'] * 100:.1f}%", "bold"),
            f" on {result['images']} test images  ",
            (shown_path(result.get("model_file", "")), "dim"),
        )
        body = self.query_one("#test-body", Static)
        grid = Table.grid()
        grid.add_row(head)
        grid.add_row("")
        grid.add_row(table)
        body.update(grid)

    def worker_failed(self, group: str, text: str) -> None:
        super().worker_failed(group, text)
        self.query_one("#test-body", Static).update(Text(text, style="bold red"))
