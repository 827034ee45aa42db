"""How a long AWS step reports: ``Progress`` events (phase, elapsed time,
what happened), the last of which may carry a typed result, a ``Clock`` for
the elapsed time, and the waits every step uses, each with a deadline and a
message that says what to do when it passes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from ..errors import BackendError
from .aws_objects import Answer

HEARTBEAT_S = 60.0
"""A long wait says it is still waiting this often."""


# -- typed results ------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterReady:
    """A create ended: the cluster answers on this kubeconfig context."""

    name: str
    context: str
    kubeconfig: str


@dataclass(frozen=True)
class FileSystemReady:
    """An EFS or FSx file system is available (FSx: with its DNS and mount names)."""

    file_system_id: str
    dns_name: str = ""
    mount_name: str = ""


@dataclass(frozen=True)
class StorageReady:
    """A storage create ended; ``spec_settings`` is what a job spec needs to use it."""

    cluster: str
    spec_settings: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ImageRef:
    """An image in ECR: the repository's URI with the tag built and the digest pushed ('' when not pushed)."""

    uri: str
    tag: str
    digest: str = ""
    code_dir: str = ""
    """Where the user's code is in it (an image built with --code), else ''."""

    @property
    def reference(self) -> str:
        """What a job spec pins: ``URI@DIGEST`` once pushed, ``URI:TAG`` before."""
        return f"{self.uri}@{self.digest}" if self.digest else f"{self.uri}:{self.tag}"


@dataclass(frozen=True)
class TeardownDone:
    """A teardown ended: this many resources of its plan are deleted."""

    deleted: int


StepResult = ClusterReady | FileSystemReady | StorageReady | ImageRef | TeardownDone


ProgressKind = Literal["step", "event", "output", "wait", "done"]


@dataclass
class Progress:
    """One line of a create or delete: ``kind`` is step (torchdeck did or found something), event (a
    CloudFormation stack event), output (a line from eksctl, docker or Kaniko), wait (still waiting)
    or done; ``result`` is what the step made, on the event that ends it."""

    phase: str
    message: str
    elapsed: float
    kind: ProgressKind = "step"
    result: StepResult | None = None


class Clock:
    """Seconds since a step started (its events' ``elapsed``)."""

    def __init__(self) -> None:
        self.start = time.monotonic()

    def __call__(self) -> float:
        return time.monotonic() - self.start


# -- waits -------------------------------------------------------------------------------


async def wait_for_status(
    what: str,
    describe: Callable[[], Awaitable[Mapping[str, object]]],
    key: str,
    clock: Clock,
    phase: str,
    poll_s: float,
    timeout_s: float,
    done: str = "ACTIVE",
    failed: tuple[str, ...] = ("FAILED", "CREATE_FAILED", "DEGRADED"),
) -> AsyncIterator[Progress]:
    """Poll an EKS describe call until the thing's ``status`` is ``done``; a failed status is an error
    with AWS's reason (its health issues)."""
    started = said = time.monotonic()
    last = ""
    while True:
        item = Answer((await describe()).get(key))
        status = item.text("status")
        if status == done:
            return
        if status in failed:
            issues = "; ".join(item.issues("health"))
            raise BackendError(
                f"{what} is {status}" + (f": {issues}" if issues else ""),
                "see the EKS console for it; fix the cause, delete it, and run create again",
            )
        if time.monotonic() - started > timeout_s:
            raise BackendError(
                f"{what} is still {status} after {timeout_s / 60:.0f} minutes",
                "run create again later: it picks up where it stopped",
            )
        if status != last or time.monotonic() - said >= HEARTBEAT_S:
            yield Progress(phase, f"{what} is {status}", clock(), "wait")
            last, said = status, time.monotonic()
        await asyncio.sleep(poll_s)


async def wait_until(
    what: str,
    probe: Callable[[], object],
    clock: Clock,
    phase: str,
    poll_s: float,
    timeout_s: float,
    ready: tuple[str, ...],
    failed: tuple[str, ...] = (),
) -> AsyncIterator[Progress]:
    """Poll ``probe()`` (a state word, called on a thread) until it is one of ``ready``; a failed state
    or the deadline ends the wait with an error that says what to do."""
    started, last = time.monotonic(), None
    while True:
        state = await asyncio.to_thread(probe)
        if state in ready:
            return
        if state in failed:
            raise BackendError(f"{what} is {state}", "see it in the AWS console; fix the cause and run again")
        if time.monotonic() - started > timeout_s:
            raise BackendError(
                f"{what} is still {state} after {timeout_s:.0f} s",
                "run the same command again later: it picks up where it stopped",
            )
        if state != last:
            yield Progress(phase, f"{what} is {state}", clock(), "wait")
            last = state
        await asyncio.sleep(poll_s)


async def wait_gone(what: str, gone: Callable[[], bool], poll_s: float, timeout_s: float) -> AsyncIterator[None]:
    """Poll ``gone()`` (on a thread) until it is True; yields once per poll that found it still there,
    so a caller can say it waits. The deadline ends it with "run it again: it resumes"."""
    started = time.monotonic()
    while not await asyncio.to_thread(gone):
        if time.monotonic() - started > timeout_s:
            raise BackendError(
                f"{what} is still being deleted after {timeout_s / 60:.0f} minutes",
                "run the same command again later: it resumes",
            )
        yield None
        await asyncio.sleep(poll_s)
