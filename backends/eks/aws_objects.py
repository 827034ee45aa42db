"""Where AWS's answers become typed reads: the one module on the cloud side that walks them by key.

boto3 answers with nested dicts whose fields may be absent (a cluster still creating has no OIDC
issuer, a file system no mount name yet, a repository no scanning configuration). ``Answer`` wraps one
object of such an answer once and reads a field by its path with the type the caller expects, the
field's default where it is absent or of another type; the rest of ``backends/eks`` never walks
``(x.get(..) or {}).get(..)``. The Kubernetes objects the cloud side reads (a node's allocatable GPUs,
a build pod's termination message, a claim's phase) come through here too: they reach this side as
the same plain JSON."""

from __future__ import annotations

from collections.abc import Mapping

_NOTHING: Mapping[str, object] = {}


class Answer:
    """One object of an AWS answer (or of a Kubernetes object), read by path with a declared type."""

    __slots__ = ("data",)

    def __init__(self, data: object) -> None:
        self.data: Mapping[str, object] = data if isinstance(data, Mapping) else _NOTHING

    def value(self, *path: str) -> object:
        """The value at ``path`` (keys, one per level), or None where a level is missing."""
        here: object = self.data
        for key in path:
            if not isinstance(here, Mapping):
                return None
            here = here.get(key)
        return here

    def text(self, *path: str, default: str = "") -> str:
        """The string at ``path``; ``default`` where it is absent or not a string."""
        found = self.value(*path)
        return found if isinstance(found, str) else default

    def number(self, *path: str, default: float = 0) -> float:
        """The number at ``path`` (not a bool); ``default`` where it is absent or not a number."""
        found = self.value(*path)
        return found if isinstance(found, (int, float)) and not isinstance(found, bool) else default

    def whole(self, *path: str, default: int = 0) -> int:
        """The whole number at ``path`` (not a bool); ``default`` where it is absent or not one."""
        found = self.value(*path)
        return found if isinstance(found, int) and not isinstance(found, bool) else default

    def flag(self, *path: str) -> bool:
        """Whether the value at ``path`` is true (as JSON's true, a non-empty string or list)."""
        return bool(self.value(*path))

    def texts(self, *path: str) -> list[str]:
        """The strings in the list at ``path`` (none where it is absent)."""
        found = self.value(*path)
        return [item for item in found if isinstance(item, str)] if isinstance(found, list) else []

    def child(self, *path: str) -> Answer:
        """The object at ``path`` as an ``Answer`` (an empty one where it is absent)."""
        return Answer(self.value(*path))

    def children(self, *path: str) -> list[Answer]:
        """The list of objects at ``path``, each an ``Answer`` (none where it is absent)."""
        found = self.value(*path)
        return [Answer(item) for item in found] if isinstance(found, list) else []

    def issues(self, *path: str) -> list[str]:
        """EKS's health issues at ``path`` (a nodegroup's or an add-on's ``health``), as "code: message"."""
        return [f"{i.value('code')}: {i.value('message')}" for i in self.children(*path, "issues")]
