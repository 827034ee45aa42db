"""Typed fields from JSON that someone else wrote: a run's records, a cluster's answers, a job's
annotations. JSON has no types a program can rely on (``"pid": "x"``, ``"positionInLocalQueue":
"3rd"``, ``1e400``, ``[1]``), so a reader takes each field through here: a value of the declared type,
or the field is unknown (its default, or None). Never a traceback, and never a guess."""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

R = TypeVar("R")


def conforms(value: object, kind: object) -> bool:
    """Whether ``value`` (from JSON) is of ``kind``: int, float, str, bool, ``X | None``, ``list[X]``,
    ``dict[str, X]``, ``Any``. A bool is no number, a float no int, and no number is infinite."""
    if kind is str:  # the plain kinds first: a listing of thousands of runs asks this for every field
        return type(value) is str
    if kind is int:
        return type(value) is int
    if kind is float:
        return (type(value) is float or type(value) is int) and math.isfinite(value)
    if kind is bool:
        return type(value) is bool
    if kind is Any:
        return True
    if kind is type(None):
        return value is None
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        return any(conforms(value, k) for k in typing.get_args(kind))
    if origin is list:
        (item,) = typing.get_args(kind) or (Any,)
        return isinstance(value, list) and all(conforms(v, item) for v in value)
    if origin is dict:
        key, item = typing.get_args(kind) or (Any, Any)
        return isinstance(value, dict) and all(conforms(k, key) and conforms(v, item) for k, v in value.items())
    return False


@functools.cache
def _fields(cls: type) -> tuple[tuple[str, object, bool], ...]:
    """A dataclass's fields: (name, type, whether a number in it is kept as a float), resolved once
    (``get_type_hints`` evaluates every annotation: a listing of 2,000 runs called it 2,000 times)."""
    hints = typing.get_type_hints(cls)
    return tuple((f.name, hints[f.name], hints[f.name] in (float, float | None)) for f in dataclasses.fields(cls))


def typed(cls: type[R], data: Mapping[str, object], **given: object) -> R:
    """An instance of the dataclass ``cls`` from ``data``: each field that is there and of its declared
    type, else its default (``given`` fills fields that ``data`` does not decide)."""
    values: dict[str, object] = {}
    for name, kind, as_float in _fields(cls):  # type: ignore[arg-type]
        if name in given:
            values[name] = given[name]
        elif name in data and conforms(data[name], kind):
            value = data[name]
            values[name] = float(value) if as_float and isinstance(value, (int, float)) else value
    return cls(**values)


def count(value: object, limit: int = 1 << 31) -> int | None:
    """A count or position from JSON: a whole number from 0 below ``limit`` (``3`` or ``3.0``), else
    None (``"3rd"``, ``1e400``, ``[1]``, ``true``, ``-1``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        return None
    return int(value) if 0 <= value < limit else None


def number(value: object) -> float | None:
    """A finite number from JSON (not a bool, not a string), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        result = float(value)
    except OverflowError:  # an int past any float
        return None
    return result if math.isfinite(result) else None
