"""The styles a Line API widget draws its rows with, worked out once until they change.

``Widget.rich_style`` walks every ancestor's CSS on each call; a widget drawing a row at a time
asked for it on every row of every frame (on the cluster monitor, a third of the log view's
drawing time). Textual calls ``notify_style_update`` on a widget whose styles may have changed
(a theme, a pseudo-class, an ancestor's rules), and that forgets them."""

from __future__ import annotations

from rich.style import Style


class LineStyles:
    """A mixin, before the widget class: ``line_style()`` is ``rich_style`` (with a component
    class's style added), kept until the styles change. (A plain class: as a Widget subclass
    ahead of ScrollView it would bring Widget's default CSS in ahead of ScrollView's.)"""

    _line_styles: dict[str, Style] | None = None

    def line_style(self, component: str = "") -> Style:
        styles = self._line_styles
        if styles is None:
            styles = self._line_styles = {}
        style = styles.get(component)
        if style is None:
            style = self.rich_style  # type: ignore[attr-defined]
            if component:
                style = style + self.get_component_rich_style(component)  # type: ignore[attr-defined]
            styles[component] = style
        return style

    def notify_style_update(self) -> None:
        self._line_styles = None
        super().notify_style_update()  # type: ignore[misc]
