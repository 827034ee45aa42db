"""All of torchdeck's I/O: the local (torchrun), kubernetes and eks backends.
Never imports textual; returns plain dataclasses and raises the project's own
errors."""

from __future__ import annotations


from typing import TYPE_CHECKING

from .errors import BackendError

if TYPE_CHECKING:
    from torchdeck.settings import Settings

    from .base import Backend

BACKENDS = ("local", "kubernetes", "eks")


def open_backend(name: str, settings: "Settings") -> "Backend":
    """The backend called ``name``; its module (and SDK) is imported only now."""
    if name == "local":
        from .local import LocalBackend
        return LocalBackend(settings.state_dir)
    if name == "kubernetes":
        from .kubernetes import KubernetesBackend
        return KubernetesBackend(settings.kubeconfig, settings.kube_context, settings.namespace)
    if name == "eks":
        raise BackendError(f"the {name} backend is not in this version of torchdeck yet",
                           "use --backend local (the default) to train on this machine")
    raise BackendError(f"unknown backend {name!r}", f"choose one of: {', '.join(BACKENDS)}")
