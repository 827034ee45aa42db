"""A spot node's price an hour now, from EC2's spot price history (the region's current price
for an instance type in a zone): what the eks backend prices a spot node at (``backends/cost.py``)."""

from __future__ import annotations

import time

from ..errors import BackendError
from .session import AwsSession

SPOT_TTL_S = 600.0
"""Spot prices change every few minutes at most: each is asked once in this long."""


class SpotPrices:
    """``(instance type, zone) -> price an hour``, None where EC2 does not say (or cannot be asked)."""

    def __init__(self, region: str, profile: str | None = None):
        self.region, self.profile = region, profile
        self._session: AwsSession | None = None
        self._seen: dict[tuple[str, str], tuple[float, float | None]] = {}

    def __getstate__(self) -> dict:
        """A copy for another process asks again with its own clients."""
        return {"region": self.region, "profile": self.profile, "_session": None, "_seen": {}}

    def __call__(self, instance_type: str, zone: str) -> float | None:
        seen = self._seen.get((instance_type, zone))
        if seen is not None and time.monotonic() - seen[0] < SPOT_TTL_S:
            return seen[1]
        if self._session is None:
            self._session = AwsSession(self.region, self.profile)
        params: dict = {"InstanceTypes": [instance_type], "ProductDescriptions": ["Linux/UNIX"]}
        if zone:
            params["Filters"] = [{"Name": "availability-zone", "Values": [zone]}]
        try:
            history = self._session.call("ec2", "describe_spot_price_history", **params).get("SpotPriceHistory") or []
            newest = max(history, key=lambda p: str(p.get("Timestamp") or ""), default=None)
            price = float(newest["SpotPrice"]) if newest else None
        except (BackendError, KeyError, ValueError):
            price = None
        self._seen[(instance_type, zone)] = (time.monotonic(), price)
        return price
