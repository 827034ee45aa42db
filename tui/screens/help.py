"""The help screen: what each screen is for, and its keys, read from its own bindings (so the
help cannot leave one out)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

INTRO = """\
# torchdeck

Jobs keep running after the console closes; open it again, or run
`torchdeck monitor RUN`, to reattach. `ctrl+p` opens the command palette:
every screen's keys are there too, by name.
"""

SCREENS: list[tuple[str, str, str]] = [
    (
        "Runs",
        "home",
        "Every run, its state and cost (on a cluster every job you may see: `/` filters, `o` sorts, `a` "
        "imports another's); `space` marks runs to compare (`x`); below, what torchdeck made in the cloud.",
    ),
    (
        "Launch",
        "launch",
        "The job spec, field by field (it starts from `torchdeck.yaml` where there is one). A bad field "
        "says why under it, and nothing starts.",
    ),
    (
        "Monitor",
        "monitor",
        "Per-rank loss, the rank table (SLOW: below the straggler ratio of the median samples/s; "
        "SILENT: no line for several step times; ERROR), eval accuracy per epoch, node gauges, logs. "
        "The chart draws the flagged ranks first, then the lowest, until you choose (`c`, e.g. "
        "`0,8,16-21`).",
    ),
    (
        "Compare",
        "compare",
        "Marked runs side by side: their losses overlaid (one line a run, ranks averaged; `r` a line a rank, "
        "`v` validation losses) and a table of how each did (the best in green) and what differs in their specs.",
    ),
    (
        "Nodes and queues",
        "board",
        "Nodes (`m`): each node's CPU, memory and GPUs requested/allocatable (used now), its training jobs "
        "and why it is bad (NotReady, a termination notice, pressure, cordoned, the health gate's mark). "
        "Queues (`w`): each ClusterQueue's usage, and every waiting workload in order with Kueue's reason; "
        "yours marked. `enter` opens a row's job in the monitor.",
    ),
    ("Model test", "model_test", "The trained model on the CIFAR-10 test batch: accuracy per class."),
    (
        "EKS cluster",
        "cluster",
        "The eksctl plan, checked as typed; the region's instance types; the ClusterConfig and its cost "
        "per hour; preflight (credentials, zones, quotas) and create, with phase and events.",
    ),
    ("Storage", "storage", "EFS or FSx for Lustre for a cluster, and the model bucket, checked as typed."),
    (
        "Image",
        "image",
        "The Dockerfile, the ECR repository and how it is built here (docker where an engine answers, "
        "else Kaniko in the cluster); the pushed digest is pinned in the job spec.",
    ),
]
"""Each screen's name, module (under tui/screens) and what it is for; its keys come from its bindings."""

OUTRO = """\
Headless, the same from a shell: `torchdeck train`, `jobs`, `queues`, `nodes`, `status`, `logs RUN [--rank R] [-f]`,
`stop RUN`, `monitor RUN`, `test --run RUN`, `data prepare`, `render`,
`cluster init|types|plan|create|connect|status|delete`, `storage create|status|delete`,
`image build|push`, `model get`, `resources`, `cleanup`.
"""

KEY_NAMES = {"question_mark": "?", "escape": "esc", "slash": "/"}


def key_text(key: str) -> str:
    """A binding's keys as the help writes them (``n,escape``: ``n/esc``)."""
    return "/".join(KEY_NAMES.get(k, k) for k in key.split(","))


def bindings_of(cls: type) -> list[Binding]:
    """A screen class's own bindings, those of the torchdeck classes it is built on included
    (each key once; Textual's own, tab and copy, are Textual's to document)."""
    seen: dict[str, Binding] = {}
    for klass in reversed(cls.__mro__):
        if not klass.__module__.startswith("torchdeck."):
            continue
        for item in klass.__dict__.get("BINDINGS", []):
            if isinstance(item, Binding):
                seen[item.key] = item
    return list(seen.values())


def screen_bindings(module: str) -> list[Binding]:
    """The bindings of the screen in ``torchdeck.tui.screens.MODULE``."""
    import importlib
    import inspect

    from textual.screen import Screen

    mod = importlib.import_module(f"torchdeck.tui.screens.{module}")
    cls = next(
        c for _, c in inspect.getmembers(mod, inspect.isclass) if issubclass(c, Screen) and c.__module__ == mod.__name__
    )
    return bindings_of(cls)


def help_text() -> str:
    from ..app import TorchdeckApp

    lines = [INTRO]
    everywhere = ", ".join(
        [f"`{key_text(b.key)}` {b.description}" for b in TorchdeckApp.BINDINGS if isinstance(b, Binding)]
        + [f"`{TorchdeckApp.COMMAND_PALETTE_BINDING}` command palette"]
    )
    lines.append(f"**Everywhere**: {everywhere}.\n")
    for name, module, what in SCREENS:
        keys = ", ".join(f"`{key_text(b.key)}` {b.description}" for b in screen_bindings(module))
        lines.append(f"**{name}**: {what}\n\nKeys: {keys}.\n")
    lines.append(OUTRO)
    return "\n".join(lines)


class HelpScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 90%; max-width: 100; height: 90%; border: round $primary;
                                  background: $surface; padding: 0 1; }
    """
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Markdown(help_text())
