"""The runs screen's footer: its keys as one line of text.

Textual's ``Footer`` is a widget per key; making them took as long as the rest of the console's
first frame (about 100 ms of it on a 2-core host), and it shows its keys only after the bindings
first change (a focus, which on the runs screen comes with the table, after the first listing).
This line is one widget, drawn with the first frame and again whenever the screen's keys change;
it reads the same bindings the footer would (``Screen.active_bindings``), so the help screen,
the palette and this line never disagree. Its keys are pressed, not clicked (the palette's
entries are clicked)."""

from __future__ import annotations

from textual.content import Content
from textual.screen import Screen
from textual.widgets import Static


class KeyLine(Static):
    DEFAULT_CSS = """
    KeyLine {
        dock: bottom;
        height: 1;
        background: $footer-background;
        color: $footer-description-foreground;
    }
    """

    def __init__(self, palette: bool = True) -> None:
        super().__init__(id="keys")
        self.palette = palette

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self.bindings_changed)
        self.update(self.keys())

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def bindings_changed(self, screen: Screen) -> None:
        self.update(self.keys())

    def keys(self) -> Content:
        parts: list[Content] = []
        seen: set[str] = set()
        for _node, binding, enabled, _tooltip in self.screen.active_bindings.values():
            if not binding.show or binding.action in seen:
                continue
            seen.add(binding.action)
            key = self.app.get_key_display(binding)
            style = "$footer-key-foreground bold" if enabled else "dim"
            parts.append(Content.from_markup(f"[{style}]$key[/] $text", key=key, text=binding.description))
        line = Content(" ").join(parts)
        if self.palette:
            line = line + Content.from_markup("  [$footer-key-foreground bold]^p[/] palette")
        return line
