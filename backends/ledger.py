"""The ledger: every AWS and Kubernetes object torchdeck creates, in one
SQLite database on this machine (``$STATE/ledger.sqlite``), with its
account, region, tags, when it was made and when it was deleted, and what it
costs per hour while it exists.

``torchdeck cleanup`` reads it to plan the teardown; the home screen reads it
to show what exists and what it has cost so far. Rows are never removed:
a deleted object keeps its row with ``deleted_at`` set, so the cost so far
stays right and a cleanup that was interrupted knows where it stopped.

Writers are short transactions (one row each), so the CLI, the console and
a running create can share the file; SQLite's own locking serialises them."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator, Mapping
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from .errors import BackendError

FILE_NAME = "ledger.sqlite"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS resources (
    kind TEXT NOT NULL,
    ident TEXT NOT NULL,
    region TEXT NOT NULL DEFAULT '',
    account TEXT NOT NULL DEFAULT '',
    scope TEXT NOT NULL DEFAULT '',
    tags TEXT NOT NULL DEFAULT '{}',
    detail TEXT NOT NULL DEFAULT '{}',
    made INTEGER NOT NULL DEFAULT 1,
    cost_per_hour REAL NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    deleted_at REAL,
    PRIMARY KEY (kind, ident, region)
);
CREATE TABLE IF NOT EXISTS places (
    context TEXT PRIMARY KEY,
    scope TEXT NOT NULL,
    region TEXT NOT NULL DEFAULT '',
    account TEXT NOT NULL DEFAULT ''
);
"""


ResourceKindName = Literal[
    "k8s-object", "fsx-filesystem", "efs-mount-target", "efs-filesystem", "ec2-security-group", "ecr-repository",
    "s3-object", "s3-bucket", "cloudformation-stack", "eks-addon", "eks-nodegroup", "ec2-launch-template",
    "eks-cluster", "oidc-provider", "iam-role",
]  # fmt: skip
"""Every kind of thing torchdeck makes and records: a misspelt kind fails the type check
(``eks/teardown.py``'s RESOURCE_KINDS gives each its deleter and its place in a teardown)."""
RESOURCE_KIND_NAMES: tuple[ResourceKindName, ...] = get_args(ResourceKindName)


def resource_kind(text: str) -> ResourceKindName:
    """A kind read back from the ledger's file; BackendError for one this torchdeck does not know
    (a newer torchdeck wrote it)."""
    if text not in RESOURCE_KIND_NAMES:
        raise BackendError(f"the ledger holds a kind this torchdeck does not know: {text!r:.40}", "update torchdeck")
    return text


@dataclass
class Resource:
    """One row: something torchdeck made (or found and reused, ``made`` False)."""

    kind: ResourceKindName
    ident: str
    region: str = ""
    account: str = ""
    scope: str = ""
    """The cluster (or kube context) it belongs to."""
    tags: dict[str, str] = field(default_factory=dict)
    detail: dict[str, Any] = field(default_factory=dict)
    """What deleting it needs (an ARN, a kube context and API path, a bucket's region)."""
    made: bool = True
    cost_per_hour: float = 0.0
    created_at: float = 0.0
    deleted_at: float | None = None

    @property
    def live(self) -> bool:
        return self.deleted_at is None

    def cost_so_far(self, now: float | None = None) -> float:
        end = self.deleted_at or (time.time() if now is None else now)
        return self.cost_per_hour * max(0.0, end - self.created_at) / 3600.0

    def to_dict(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "ident": self.ident,
            "region": self.region,
            "account": self.account,
            "scope": self.scope,
            "tags": self.tags,
            "detail": self.detail,
            "made": self.made,
            "cost_per_hour": self.cost_per_hour,
            "created_at": self.created_at,
            "deleted_at": self.deleted_at,
        }


@dataclass(frozen=True)
class Place:
    """Where a kubeconfig context's objects belong in the ledger."""

    context: str
    scope: str
    region: str = ""
    account: str = ""


class Ledger:
    """``$STATE/ledger.sqlite``: the one record of what torchdeck made."""

    def __init__(self, state_dir: str | os.PathLike, busy_timeout_s: float = 30.0):
        self.path = Path(state_dir) / FILE_NAME
        self.busy_timeout_s = busy_timeout_s
        """How long a call waits for another torchdeck that is writing the ledger."""

    @contextmanager
    def _open(self) -> Iterator[sqlite3.Connection]:
        """A connection for one call; any SQLite failure in it is one line saying what to do.
        A damaged ledger is never replaced: it may still be read by hand, and cleanup finds what
        torchdeck made by its tags without it."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fresh = not self.path.exists()
            with closing(sqlite3.connect(self.path, timeout=self.busy_timeout_s)) as conn:
                if fresh:
                    os.chmod(self.path, 0o600)
                conn.executescript(_SCHEMA)
                yield conn
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise BackendError(
                    f"{self.path}: another torchdeck has held the ledger for {self.busy_timeout_s:.0f} s",
                    "let it finish (a create or cleanup writes as it goes), then run this again",
                ) from None
            raise self._failure(exc) from None
        except sqlite3.DatabaseError as exc:  # "file is not a database", "malformed"
            raise BackendError(
                f"{self.path}: the ledger is damaged ({exc})",
                f"move it aside (mv {self.path} {self.path}.damaged), then run `torchdeck cleanup --dry-run`: "
                "it finds what torchdeck made by its tags",
            ) from None
        except (OSError, sqlite3.Error) as exc:
            raise self._failure(exc) from None

    def _failure(self, exc: BaseException) -> BackendError:
        return BackendError(
            f"{self.path}: cannot open the ledger: {exc}", "check the state folder's permissions (TORCHDECK_STATE_DIR)"
        )

    def add(
        self,
        kind: ResourceKindName,
        ident: str,
        *,
        region: str = "",
        account: str = "",
        scope: str = "",
        tags: dict[str, str] | None = None,
        detail: Mapping[str, object] | None = None,
        made: bool = True,
        cost_per_hour: float = 0.0,
    ) -> None:
        """Record an object as existing (again): a row that was marked deleted comes back to life; an
        existing live row keeps its creation time and whether torchdeck made it."""
        now = time.time()
        with self._open() as conn, conn:
            row = conn.execute(
                "SELECT made, created_at, deleted_at, detail FROM resources WHERE kind=? AND ident=? AND region=?",
                (kind, ident, region),
            ).fetchone()
            if row and row[2] is None:
                made, created = bool(row[0]) or made, row[1]
                detail = {**json.loads(row[3]), **(detail or {})}
            else:
                created = now
            conn.execute(
                "INSERT OR REPLACE INTO resources (kind, ident, region, account, scope, tags, detail, made, "
                "cost_per_hour, created_at, deleted_at) VALUES (?,?,?,?,?,?,?,?,?,?,NULL)",
                (
                    kind,
                    ident,
                    region,
                    account,
                    scope,
                    json.dumps(tags or {}, sort_keys=True),
                    json.dumps(detail or {}, sort_keys=True),
                    int(made),
                    float(cost_per_hour),
                    created,
                ),
            )

    def gone(self, kind: ResourceKindName, ident: str, region: str = "") -> None:
        """Mark an object deleted (or found already gone); a no-op for one never recorded."""
        with self._open() as conn, conn:
            conn.execute(
                "UPDATE resources SET deleted_at=? WHERE kind=? AND ident=? AND region=? AND deleted_at IS NULL",
                (time.time(), kind, ident, region),
            )

    def resources(
        self,
        live_only: bool = True,
        scope: str | None = None,
        kind: ResourceKindName | None = None,
        region: str | None = None,
    ) -> list[Resource]:
        """Rows, newest first (``eks.teardown.in_teardown_order`` sorts them for a teardown)."""
        if not self.path.exists():
            return []
        query, args = (
            "SELECT kind, ident, region, account, scope, tags, detail, made, cost_per_hour, "
            "created_at, deleted_at FROM resources WHERE 1=1",
            [],
        )
        if live_only:
            query += " AND deleted_at IS NULL"
        for column, value in (("scope", scope), ("kind", kind), ("region", region)):
            if value is not None:
                query += f" AND {column}=?"
                args.append(value)
        with self._open() as conn:
            rows = conn.execute(query, args).fetchall()
        found = [
            Resource(resource_kind(k), i, r, a, s, json.loads(t), json.loads(d), bool(m), c, ca, da)
            for k, i, r, a, s, t, d, m, c, ca, da in rows
        ]
        return sorted(found, key=lambda x: -x.created_at)

    def find(self, kind: ResourceKindName, ident: str, region: str = "") -> Resource | None:
        """The live row of one object, if torchdeck knows it."""
        return next((r for r in self.resources(kind=kind, region=region) if r.ident == ident), None)

    def set_place(self, context: str, scope: str, region: str = "", account: str = "") -> None:
        """What runs on a kubeconfig context belongs to ``scope`` (the EKS cluster torchdeck made)."""
        with self._open() as conn, conn:
            conn.execute(
                "INSERT OR REPLACE INTO places (context, scope, region, account) VALUES (?,?,?,?)",
                (context, scope, region, account),
            )

    def place(self, context: str) -> Place:
        """Where objects made on ``context`` belong: its cluster's scope, region and account where
        torchdeck made the cluster, else the context itself."""
        if context and self.path.exists():
            with self._open() as conn:
                row = conn.execute("SELECT scope, region, account FROM places WHERE context=?", (context,)).fetchone()
            if row:
                return Place(context, *row)
        return Place(context, context)

    def costs(self, now: float | None = None) -> tuple[float, float]:
        """(per hour of what exists now, so far of everything recorded)."""
        every = self.resources(live_only=False)
        return (sum(r.cost_per_hour for r in every if r.live), sum(r.cost_so_far(now) for r in every))
