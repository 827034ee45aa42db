"""The config files the cluster's programs read, written from data: containerd's TOML, the YAML of
the kubelet, kube-proxy, controllers and kubeconfig, CoreDNS's Corefile. Every value is quoted by the
writer (a JSON string is a valid TOML basic string and a valid YAML double-quoted scalar), so no value
can change a file's shape."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

Data = object
"""A value the writers take: a str, int, float, bool or None, or a mapping or list of them (checked as
they are written)."""

BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
PLAIN_YAML_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]*$")


def _scalar(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    raise TypeError(f"no scalar: {value!r}")


def _toml_key(key: str) -> str:
    return key if BARE_KEY.match(key) else json.dumps(key)


def _toml_value(value: Data) -> str:
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    return _scalar(value)


def toml_text(table: Mapping[str, Data]) -> str:
    """TOML for a nested table: each table's values, then its subtables under their full dotted names."""
    lines: list[str] = []

    def emit(path: list[str], body: Mapping[str, Data]) -> None:
        values = {k: v for k, v in body.items() if not isinstance(v, Mapping)}
        tables = {k: v for k, v in body.items() if isinstance(v, Mapping)}
        if path and (values or not tables):
            lines.append("[" + ".".join(_toml_key(part) for part in path) + "]")
        lines.extend(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in values.items())
        for key, sub in tables.items():
            emit([*path, key], sub)

    emit([], table)
    return "\n".join(lines) + "\n"


def _yaml_key(key: str) -> str:
    return key if PLAIN_YAML_KEY.match(key) else json.dumps(key)


def _yaml_lines(value: Data) -> list[str]:
    if isinstance(value, Mapping):
        if not value:
            return ["{}"]
        lines: list[str] = []
        for key, item in value.items():
            inner = _yaml_lines(item)
            if isinstance(item, Mapping | list | tuple) and item:
                lines.append(f"{_yaml_key(key)}:")
                lines.extend("  " + line for line in inner)
            else:
                lines.append(f"{_yaml_key(key)}: {inner[0]}")
        return lines
    if isinstance(value, list | tuple):
        if not value:
            return ["[]"]
        lines = []
        for item in value:
            inner = _yaml_lines(item)
            lines.append("- " + inner[0])
            lines.extend("  " + line for line in inner[1:])
        return lines
    return [_scalar(value)]


def yaml_text(*documents: Data) -> str:
    """Block-style YAML, one document per argument, every string double-quoted."""
    return "---\n".join("\n".join(_yaml_lines(document)) + "\n" for document in documents)


CoreBlock = tuple[str, Sequence["str | CoreBlock"]]


def corefile_text(*blocks: CoreBlock) -> str:
    """A Corefile: each block a header (`.:53`, a plugin and its arguments) and its lines or blocks."""
    lines: list[str] = []

    def emit(block: CoreBlock, indent: str) -> None:
        header, body = block
        lines.append(f"{indent}{header} {{")
        for entry in body:
            if isinstance(entry, str):
                lines.append(f"{indent}    {entry}")
            else:
                emit(entry, indent + "    ")
        lines.append(f"{indent}}}")

    for block in blocks:
        emit(block, "")
    return "\n".join(lines) + "\n"


def write_file(path: Path, text: str, mode: int = 0o644) -> Path:
    """TEXT at PATH, written whole (a rename): a program never reads half a file."""
    partial = path.with_name(path.name + ".new")
    partial.write_text(text)
    partial.chmod(mode)
    partial.replace(path)
    return path
