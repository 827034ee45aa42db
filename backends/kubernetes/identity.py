"""What torchdeck made on a cluster, as it recorded it at submit: a run is its record, not a label.

On a shared cluster anyone who may create a Job may give it ``torchdeck.dev/run=ID`` and a spec
annotation, and run ids are guessable; so a label is only a search hint. At submit the backend
records the run's cluster (the API server's URL and the context), namespace, kind, object name and
the uid the API server gave it, and the code folder it was packed from, in the state folder beside
the kept spec (``made/CLUSTER/RUN.json``, CLUSTER a digest of the API server's URL). ``status``, ``logs``, ``stop``, ``triage``, ``check``, the monitor
and ``resume`` resolve a run from that record and take a live object only where its uid is the
recorded one. A run found without a record (made from another machine, or before records) is
``FOUND_BY_LABEL``: shown, never stopped or resumed without the user saying so.

Without a state folder (a backend opened in code) the records live in memory for the backend's
life. (Identity is a record, not a label: STYLE 27.)"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import BackendError, SpecError
from ..files import load_json, write_atomically
from ..names import check_namespace, check_object_name, check_run_id
from ..spec import KINDS, JobKindName
from .objects import ObjectMeta

RECORD_BYTES = 64 << 10
FOUND_BY_LABEL = "found by its label only: torchdeck has no record of making it here"


@dataclass(frozen=True)
class MadeRun:
    """One run torchdeck made on a cluster, as recorded when the API server answered its create."""

    run_id: str
    server: str
    """The API server's URL: a record names one cluster (contexts may share a name across files)."""
    context: str
    namespace: str
    kind: JobKindName
    name: str
    """The job object's name (the run id)."""
    uid: str
    """What the API server gave the object: a decoy of the same name elsewhere, or the same name
    deleted and made again by someone else, has another."""
    code_dir: str | None = None
    """The folder the user's code was packed from (None: the built-in trainer)."""
    submitted_at: float = 0.0

    def where(self) -> str:
        return f"{self.namespace}/{self.kind} {self.name}"


class NotOurs(BackendError):
    """A live object where torchdeck's record points whose uid is not the recorded one."""


def _text(value: object, name: str, cap: int) -> str:
    if not isinstance(value, str) or len(value) > cap:
        raise ValueError(f"{name} must be a string of at most {cap} characters")
    return value


def read_record(data: object, source: str) -> MadeRun:
    """A record as written by ``RunRecords.add``; SpecError where any field is not what it must be."""
    if not isinstance(data, dict):
        raise SpecError("", "not a run record: a JSON object belongs here", "", source)
    try:
        kind = _text(data.get("kind"), "kind", 32)
        if kind not in KINDS:
            raise ValueError(f"kind {kind!r} is not one torchdeck makes")
        code_dir = data.get("code_dir")
        return MadeRun(
            run_id=check_run_id(data.get("run_id")),
            server=_text(data.get("server"), "server", 2048),
            context=_text(data.get("context", ""), "context", 253),
            namespace=check_namespace(data.get("namespace")),
            kind=kind,  # checked against KINDS above
            name=check_object_name(data.get("name"), "name"),
            uid=_text(data.get("uid"), "uid", 64),
            code_dir=_text(code_dir, "code_dir", 4096) if code_dir is not None else None,
            submitted_at=_when(data.get("submitted_at", 0.0)),
        )
    except (ValueError, TypeError, SpecError) as exc:
        raise SpecError("", f"not a run record: {exc}", "", source) from None


def _when(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1e11:
        raise ValueError("submitted_at must be a time in seconds")
    return float(value)


class RunRecords:
    """The records of what this state folder's user made (``folder``: ``STATE/made``), one folder a
    cluster (a digest of its API server's URL: the same run id on two clusters is two runs), or,
    without a state folder, of what this backend made in this process."""

    def __init__(self, folder: Path | None):
        self.folder = folder
        self._memory: dict[tuple[str, str], MadeRun] = {}

    def _place(self, server: str) -> Path | None:
        if self.folder is None:
            return None
        return self.folder / hashlib.sha256(server.encode()).hexdigest()[:16]

    def add(self, made: MadeRun) -> None:
        self._memory[(made.server, made.run_id)] = made
        place = self._place(made.server)
        if place is None:
            return
        place.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomically(place / f"{check_run_id(made.run_id)}.json", json.dumps(asdict(made), indent=1))

    def ended_path(self, server: str, run_id: str) -> Path | None:
        """Where the last status of a run whose job torchdeck deleted (``stop``) is kept: beside its
        record, which it needs (None without a state folder)."""
        place = self._place(server)
        return None if place is None else place / "ended" / f"{check_run_id(run_id)}.json"

    def get(self, server: str, run_id: str) -> MadeRun | None:
        """The record of ``run_id`` on the cluster at ``server``; None where there is none (or it is
        not a record: a file that does not read as one is no record)."""
        if (server, run_id) in self._memory:
            return self._memory[(server, run_id)]
        place = self._place(server)
        if place is None:
            return None
        try:
            path = place / f"{check_run_id(run_id)}.json"
            made = read_record(load_json(path, max_bytes=RECORD_BYTES), str(path))
        except (OSError, SpecError):
            return None
        if made.run_id != run_id or made.server != server:
            return None  # a record copied under another run's name, or another cluster's, is not this one
        self._memory[(server, run_id)] = made
        return made

    def on(self, server: str) -> dict[str, MadeRun]:
        """The records of runs made on the cluster at ``server``, by run id."""
        ids = {run_id for (where, run_id) in self._memory if where == server}
        place = self._place(server)
        if place is not None and place.is_dir():
            ids |= {p.stem for p in place.glob("*.json")}
        out: dict[str, MadeRun] = {}
        for run_id in sorted(ids):
            made = self.get(server, run_id)
            if made is not None:
                out[run_id] = made
        return out


def made_now(
    run_id: str,
    server: str,
    context: str,
    namespace: str,
    kind: JobKindName,
    obj: Mapping[str, object],
    code_dir: str | None,
) -> MadeRun:
    """The record of a job the API server just created (``obj``: its answer, which carries the uid)."""
    meta = ObjectMeta.from_api(obj if isinstance(obj, Mapping) else {})
    return MadeRun(
        run_id=run_id,
        server=server,
        context=context,
        namespace=namespace,
        kind=kind,
        name=meta.name or run_id,
        uid=meta.uid,
        code_dir=code_dir,
        submitted_at=time.time(),
    )
