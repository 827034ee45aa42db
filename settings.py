"""torchdeck's settings: one validated object, read from the config file
(``$XDG_CONFIG_HOME/torchdeck/config.yaml``) and then the environment
(``TORCHDECK_*``), which wins. Tests set them through the environment."""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .backends.errors import SpecError


class SettingsError(Exception):
    """A bad setting: the message names it and where it came from."""


def _xdg(var: str, default: str, env: Mapping[str, str] = os.environ) -> Path:
    value = env.get(var)
    return Path(value) if value and Path(value).is_absolute() else Path.home() / default


def _ascii_default(env: Mapping[str, str] = os.environ) -> bool:
    """Fall back to plain ASCII where the terminal's locale is not UTF-8."""
    for var in ("LC_ALL", "LC_CTYPE", "LANG"):
        value = env.get(var)
        if value:
            return "utf-8" not in value.lower() and "utf8" not in value.lower()
    return False


@dataclass
class Settings:
    """Everything torchdeck reads before it starts."""

    backend: str = "local"
    """Where jobs run: local, kubernetes or eks (TORCHDECK_BACKEND)."""
    state_dir: Path = dataclasses.field(default_factory=lambda: _xdg("XDG_STATE_HOME", ".local/state") / "torchdeck")
    """Run folders and other state (TORCHDECK_STATE_DIR)."""
    spec_file: Path = Path("torchdeck.yaml")
    """The job spec the launch form and `torchdeck train` start from (TORCHDECK_SPEC)."""
    refresh_hz: float = 30.0
    """How often the monitor's frame comes round (TORCHDECK_REFRESH_HZ): it takes in the newest
    figures and draws what is due (the status lines, the rank table and the logs at most four times
    a second, the chart twice), and a key pressed is answered within a frame."""
    ascii: bool = dataclasses.field(default_factory=_ascii_default)
    """Draw with ASCII only, for terminals without Unicode fonts (TORCHDECK_ASCII=1)."""
    straggler_ratio: float = 0.75
    """A rank slower than this fraction of the median samples/s is flagged (TORCHDECK_STRAGGLER_RATIO)."""
    kubeconfig: Path | None = None
    """Kubeconfig for the kubernetes backend (TORCHDECK_KUBECONFIG; default: $KUBECONFIG or ~/.kube/config)."""
    kube_context: str | None = None
    """Kubeconfig context to use (TORCHDECK_KUBE_CONTEXT, --context; default: the current one)."""
    namespace: str | None = None
    """Namespace cluster commands look in (TORCHDECK_NAMESPACE; default: the context's, else every one)."""
    aws_poll_s: float = 15.0
    """Seconds between asking AWS how a cluster's create or delete stands (TORCHDECK_AWS_POLL_S, 0.01-300)."""
    local_price_per_hour: float | None = None
    """What this machine costs an hour, in USD, to price local runs (TORCHDECK_LOCAL_PRICE_PER_HOUR;
    unset: a local run's cost is unknown, and said so). A spec's node_price_per_hour wins."""
    node_price_per_hour: float | None = None
    """What a cluster node costs an hour where its instance type is not in torchdeck's price table
    (TORCHDECK_NODE_PRICE_PER_HOUR): a cluster outside AWS, say. A spec's node_price_per_hour wins."""

    @classmethod
    def load(cls, env: Mapping[str, str] | None = None, config_file: Path | None = None) -> Settings:
        env = os.environ if env is None else env
        config_file = config_file or _xdg("XDG_CONFIG_HOME", ".config", env) / "torchdeck" / "config.yaml"
        values: dict[str, Any] = {
            "state_dir": (_xdg("XDG_STATE_HOME", ".local/state", env) / "torchdeck", "XDG_STATE_HOME"),
            "ascii": (_ascii_default(env), "locale"),
        }
        if os.path.lexists(config_file):
            from .backends.files import load_yaml  # (YAML and the file gates: where there is a file)

            try:
                data = load_yaml(config_file) or {}
            except FileNotFoundError:
                raise SettingsError(f"{config_file}: a link to nothing; remove it or make it a file") from None
            except SpecError as exc:
                raise SettingsError(str(exc)) from None
            if not isinstance(data, dict):
                raise SettingsError(f"{config_file}: expected a mapping of settings")
            values.update({str(k): (v, str(config_file)) for k, v in data.items()})
        for field in dataclasses.fields(cls):
            var = "TORCHDECK_" + field.name.upper()
            if var in env:
                values[field.name] = (env[var], var)
        if "TORCHDECK_SPEC" in env:
            values["spec_file"] = (env["TORCHDECK_SPEC"], "TORCHDECK_SPEC")
        return cls.from_values(values)

    @classmethod
    def from_values(cls, values: Mapping[str, tuple[object, str]]) -> Settings:
        known = {f.name: f for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        for name, (value, source) in values.items():
            if name not in known:
                raise SettingsError(f"{source}: unknown setting {name!r} (known: {', '.join(known)})")
            kwargs[name] = cls._convert(name, value, source)
        return cls(**kwargs)

    def with_value(self, name: str, value: object, source: str) -> Settings:
        """A copy with one setting changed (a command-line option), checked like the others."""
        changed: dict[str, Any] = {name: self._convert(name, value, source)}  # checked by name in _convert
        return dataclasses.replace(self, **changed)

    @staticmethod
    def _convert(name: str, value: object, source: str) -> object:
        try:
            if name in ("state_dir", "spec_file", "kubeconfig"):
                return None if value in (None, "") and name == "kubeconfig" else Path(str(value)).expanduser()
            if name == "kube_context":
                return None if value in (None, "") else str(value)
            if name == "namespace":
                if value in (None, ""):
                    return None
                from .backends.names import LABEL_RE

                if not isinstance(value, str) or not LABEL_RE.match(value):
                    raise ValueError
                return value
            if name in ("refresh_hz", "straggler_ratio", "aws_poll_s"):
                number = float(value) if isinstance(value, (int, float, str)) else math.nan  # a list: refused below
                low, high = {"refresh_hz": (1.0, 60.0), "straggler_ratio": (0.05, 1.0), "aws_poll_s": (0.01, 300.0)}[
                    name
                ]
                if not low <= number <= high:
                    raise ValueError
                return number
            if name in ("local_price_per_hour", "node_price_per_hour"):
                from .backends.cost import money

                return None if value in (None, "") else money(value)
            if name == "ascii":
                if isinstance(value, bool):
                    return value
                text = str(value).strip().lower()
                if text not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                    raise ValueError
                return text in ("1", "true", "yes", "on")
            if name == "backend":
                if value not in ("local", "kubernetes", "eks"):
                    raise ValueError
                return value
        except (ValueError, TypeError):  # TypeError: a list or mapping where a number goes
            pass
        else:
            return value
        expected = {
            "refresh_hz": "a number from 1 to 60",
            "straggler_ratio": "a number from 0.05 to 1",
            "aws_poll_s": "a number of seconds from 0.01 to 300",
            "ascii": "1 or 0",
            "local_price_per_hour": "an amount in USD an hour, such as 0.40",
            "node_price_per_hour": "an amount in USD an hour, such as 0.40",
            "backend": "local, kubernetes or eks",
            "namespace": "a Kubernetes namespace (lower-case letters, digits and '-')",
        }.get(name, "a valid value")
        raise SettingsError(f"{source}: {name} must be {expected}, got {value!r:.80}")
