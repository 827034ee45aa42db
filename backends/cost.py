"""What a run cost: node-hours times the price of what it ran on, the one place that prices a run
for every backend, and the one reader of an amount of money a user hands in (a budget, a price).

A run holds a node from the moment its pod is bound there (waiting on an image or a rendezvous
counts: the node is paid for) until its pod ends; locally it holds this machine from submit to
exit. Each backend says what it held (``NodeUse``); ``price_run`` prices it:

1. the spec's ``node_price_per_hour`` (a negotiated price, a machine torchdeck cannot know);
2. the node's instance type in the price table torchdeck ships (on-demand), or for a spot node
   the region's current spot price from EC2 (the eks backend), else on-demand with a note;
3. the settings' fallback (``local_price_per_hour`` here, ``node_price_per_hour`` on a cluster).

Where none applies, the cost is unknown and says why: never $0."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

CURRENCY = "USD"
"""The currency of every price torchdeck keeps (AWS's price list), and so of costs and budgets."""


def money(value: object, *, positive: bool = False) -> float:
    """An amount as a person writes it: ``12.5``, ``"12.50"``, ``"$12.50"``, ``"12.50 USD"``.
    ValueError (with the reason) for anything else: a negative, not finite or not a number."""
    number = math.nan
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        with contextlib.suppress(OverflowError):  # an int past any float (a job's JSON annotation has no cap)
            number = float(value)
    elif isinstance(value, str):
        text = value.strip()
        text = text[1:] if text.startswith("$") else text
        text = text[: -len(CURRENCY)].rstrip() if text.upper().endswith(CURRENCY) else text
        with contextlib.suppress(ValueError):
            number = float(text.replace(",", ""))
    if not math.isfinite(number):
        raise ValueError(f"must be an amount in {CURRENCY} such as 12.50, got {value!r:.40}")
    if number < 0 or (positive and number == 0):
        raise ValueError(f"must be {'more than' if positive else 'at least'} 0 {CURRENCY}, got {value!r:.40}")
    return number


def dollars(amount: float) -> str:
    """$0.0042, $0.017, $0.42, $12.50, $1,234.00: cents, and below a dollar two figures at least, so
    that a small run's cost is not $0.00, nor $0.02 of a $0.02 budget when it has spent 83% of it."""
    if 0 < amount < 1:
        text = f"{amount:.{max(2, 1 - math.floor(math.log10(amount)))}f}"
        whole, _, cents = text.partition(".")
        return f"${whole}.{cents[:2]}{cents[2:].rstrip('0')}"  # $0.01, not $0.010
    return f"${amount:,.2f}"


def node_time(hours: float) -> str:
    """Node-hours as a person reads them: ``2.50 node-h``, or ``11.3 node-min`` for a short run
    (which would read ``0.00 node-h``)."""
    return f"{hours:.2f} node-h" if hours >= 0.1 else f"{hours * 60:.1f} node-min"


def budget_stop_words(budget: float, spent: float) -> str:
    """Why a run was stopped at its budget, the same on every backend."""
    return f"stopped at its budget: {dollars(spent)} of {dollars(budget)} spent"


@dataclass
class NodeUse:
    """One node (or this machine) a run held, for how long, and how much of it."""

    node: str
    started_at: float
    ended_at: float | None = None
    """None: held still."""
    instance_type: str = ""
    capacity: str = ""
    """on-demand, spot, or "" where the node does not say."""
    zone: str = ""
    share: float = 1.0
    """The part of the node the run's pod asked for (its GPUs of the node's, else its CPU of the
    node's allocatable); 1.0 where it asked for nothing or runs alone (this machine)."""

    def hours(self, now: float) -> float:
        end = now if self.ended_at is None else self.ended_at
        return max(0.0, end - self.started_at) / 3600.0 * self.share


@dataclass
class CostLine:
    """Nodes of one kind at one price: ``2 x g5.xlarge (spot)``, 0.5 node-hours at $0.40/h."""

    what: str
    node_hours: float
    per_hour: float | None
    source: str
    """Where the price came from (the price table, EC2's spot price, the spec) or why it is unknown."""

    @property
    def amount(self) -> float | None:
        return None if self.per_hour is None else self.node_hours * self.per_hour


@dataclass
class RunCost:
    """A run's cost so far (its total once it has ended), line by line."""

    lines: list[CostLine] = field(default_factory=list)
    budget: float | None = None
    currency: str = CURRENCY
    running: bool = False
    """Still holding nodes: the figure grows."""

    @property
    def amount(self) -> float | None:
        """The total, or None where any line's price is unknown (a part is not the cost)."""
        if not self.lines or any(line.per_hour is None for line in self.lines):
            return None
        return sum(line.amount or 0.0 for line in self.lines)

    @property
    def unknown(self) -> str:
        """Why the cost is unknown ("" where it is known)."""
        if not self.lines:
            return "no node has held it yet" if self.running else "nothing says what it ran on"
        return "; ".join(line.source for line in self.lines if line.per_hour is None)

    @property
    def share(self) -> float | None:
        """The part of the budget spent (1.0 and over: reached)."""
        amount = self.amount
        return None if amount is None or not self.budget else amount / self.budget

    def cell(self) -> str:
        """The cost in a table's cell: ``$0.42``, ``$0.42 (84%)`` with a budget, ``?`` unknown."""
        amount = self.amount
        if amount is None:
            return "?"
        share = self.share
        return dollars(amount) + ("" if share is None else f" ({share:.0%})")

    def words(self) -> str:
        """One line: what it cost, of which budget, on what; or why it is not known."""
        amount = self.amount
        if amount is None:
            return f"unknown: {self.unknown}"  # after "cost: " wherever it is shown
        held = ", ".join(
            f"{line.what} {node_time(line.node_hours)} at {dollars(line.per_hour or 0)}/h" for line in self.lines
        )
        text = f"{dollars(amount)}{' so far' if self.running else ''} ({held})"
        if self.budget:
            text += f"; {self.share or 0:.0%} of the {dollars(self.budget)} budget"
        return text

    def priced(self, per_hour: float, source: str) -> RunCost:
        """A copy with the lines no price was known for priced at ``per_hour`` (a price set since)."""
        lines = [
            line if line.per_hour is not None else CostLine(line.what, line.node_hours, per_hour, source)
            for line in self.lines
        ]
        return RunCost(lines, self.budget, self.currency, self.running)

    def to_dict(self) -> dict[str, object]:
        return {
            "amount": self.amount,
            "currency": self.currency,
            "budget": self.budget,
            "share": self.share,
            "running": self.running,
            "unknown": self.unknown if self.amount is None else "",
            "lines": [
                {"what": x.what, "node_hours": x.node_hours, "per_hour": x.per_hour, "source": x.source}
                for x in self.lines
            ],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunCost:
        """A cost as ``to_dict`` wrote it (a run's kept status); ValueError, KeyError or TypeError
        where it is not one."""
        lines = [
            CostLine(
                str(x["what"]),
                float(x["node_hours"]),
                None if x["per_hour"] is None else float(x["per_hour"]),
                str(x["source"]),
            )
            for x in data["lines"]
        ]
        budget = data.get("budget")
        return cls(
            lines,
            None if budget is None else float(budget),
            str(data.get("currency") or CURRENCY),
            bool(data.get("running")),
        )


SpotPrice = Callable[[str, str], "float | None"]
"""(instance type, zone) -> the spot price an hour there now, None where it cannot be read."""


@dataclass
class PriceBook:
    """Where prices come from for one run (see the module's docstring for the order)."""

    override: float | None = None
    """The spec's ``node_price_per_hour``."""
    fallback: float | None = None
    """The settings' price for a node nothing else prices."""
    fallback_name: str = "node_price_per_hour"
    """The setting ``fallback`` came from (or would), for the words of an unknown price."""
    table: dict[str, float] | None = None
    """Instance type -> on-demand price an hour (None: torchdeck's shipped table)."""
    spot: SpotPrice | None = None

    def price(self, use: NodeUse) -> tuple[float | None, str]:
        """The price an hour of ``use``'s node, and where it came from (or why there is none)."""
        if self.override is not None:
            return self.override, "the spec's node_price_per_hour"
        table = self.table if self.table is not None else shipped_prices()
        if use.instance_type and use.instance_type in table:
            if use.capacity == "spot":
                spot = self.spot(use.instance_type, use.zone) if self.spot is not None else None
                if spot is not None:
                    return spot, f"EC2 spot price in {use.zone or 'the region'}"
                return table[use.instance_type], "spot counted at the on-demand price (no spot price read)"
            return table[use.instance_type], "on-demand price table"
        if self.fallback is not None:
            return self.fallback, f"the {self.fallback_name} setting"
        if use.instance_type:
            return None, (
                f"{use.instance_type} is not in torchdeck's price table: set node_price_per_hour "
                "in the spec or the settings"
            )
        return None, (
            f"no price for {use.node}: set node_price_per_hour in the spec, or {self.fallback_name} in the settings"
        )


def shipped_prices() -> dict[str, float]:
    """The on-demand prices an hour of the instance catalogue torchdeck ships."""
    from .eks.plan import shipped_catalogue

    return {name: t.price for name, t in shipped_catalogue().items() if t.price is not None}


def price_run(
    uses: list[NodeUse], book: PriceBook, budget: float | None = None, now: float | None = None, running: bool = False
) -> RunCost:
    """The run's cost: its uses grouped by what they ran on and at which price."""
    now = time.time() if now is None else now
    groups: dict[tuple[str, str, float | None, str], list[NodeUse]] = {}
    for use in uses:
        per_hour, source = book.price(use)
        kind = use.instance_type or use.node
        groups.setdefault((kind, use.capacity, per_hour, source), []).append(use)
    lines = []
    for (kind, capacity, per_hour, source), group in groups.items():
        nodes = len({u.node for u in group})
        what = f"{nodes} x {kind}" + (f" ({capacity})" if capacity else "")
        lines.append(CostLine(what, sum(u.hours(now) for u in group), per_hour, source))
    return RunCost(lines, budget, running=running)
