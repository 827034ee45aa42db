"""Issue 53's counts of the house (``scripts/house`` prints them): fewer than 80 product functions
with ``Any`` in their signature, no ``(x.get(...) or {})`` chain outside the modules at the
cluster's and the cloud's edge, no function over 100 lines (declarative tables named, with why),
and no front end that asks a backend what it is."""

from __future__ import annotations

from house import EDGE, LONG, REPO, count


def test_the_house_keeps_its_shape() -> None:
    house = count()
    assert len(house.with_any) < 80, f"{len(house.with_any)} functions with Any: scripts/house --verbose"
    assert house.chains == [], "read the cluster's answers through the typed views of the edge modules"
    assert house.long == [], f"functions over {LONG} lines"
    assert house.probes == [], "ask for a capability by type: backend.capability(X) or backend.require(X)"


def test_the_edge_modules_are_there() -> None:
    assert [path for path in EDGE if not (REPO / path).is_file()] == []
