"""Reusable widgets of the console; each keeps its own DEFAULT_CSS."""
