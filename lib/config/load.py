"""Typed configuration objects from plain data: a mapping (YAML), environment
variables and dotted overrides, into frozen dataclasses, with every error naming its
key. Generic: it knows dataclasses, not the app's sections (those are in lib/config/app.py).
"""

from __future__ import annotations

import collections.abc
import dataclasses
import re
import types
from collections.abc import Mapping
from typing import Any, Union, get_args, get_origin, get_type_hints

from lib.errors import ConfigError

__all__ = ["assign", "build", "env_values", "parse_size", "require"]

_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "kib": 1024, "ki": 1024,
    "m": 1000**2, "mb": 1000**2, "mib": 1024**2, "mi": 1024**2,
    "g": 1000**3, "gb": 1000**3, "gib": 1024**3, "gi": 1024**3,
    "t": 1000**4, "tb": 1000**4, "tib": 1024**4, "ti": 1024**4,
}  # fmt: skip


def require(*rules: tuple[bool, str]) -> None:
    """The one way a section checks its keys (in its ``__post_init__``): raise
    :class:`ConfigError` with the message of the first rule that does not hold. Each
    message names its key and says what to give."""
    for ok, message in rules:
        if not ok:
            raise ConfigError(message)


def parse_size(value: str | int, key: str = "size") -> int:
    """``"2GiB"`` -> 2147483648. Plain integers are bytes."""
    if isinstance(value, bool):
        raise ConfigError(f"{key}: expected a size such as 2GiB or 500MB, got {value!r}")
    if isinstance(value, int):
        return value
    match = _SIZE_RE.match(str(value))
    unit = (match.group(2) or "").lower() if match else ""
    if not match or unit not in _SIZE_UNITS:
        raise ConfigError(f"{key}: expected a size such as 2GiB or 500MB, got {value!r}")
    return int(float(match.group(1)) * _SIZE_UNITS[unit])


def env_values(root: type[Any], env: Mapping[str, str], prefix: str) -> dict[str, str]:
    """Map ``TTS_CACHE_DIR`` -> ``cache.dir`` for every known key present in ``env``."""
    found: dict[str, str] = {}
    hints = get_type_hints(root)
    for top in dataclasses.fields(root):
        sub = hints[top.name]
        if dataclasses.is_dataclass(sub):
            for f in dataclasses.fields(sub):
                name = f"{prefix}{top.name}_{f.name}".upper()
                if name in env:
                    found[f"{top.name}.{f.name}"] = env[name]
        else:
            name = f"{prefix}{top.name}".upper()
            if name in env:
                found[top.name] = env[name]
    return found


def assign(data: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = data
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{part}: expected a mapping of keys")
        node = child
    node[parts[-1]] = value


def build(cls: type[Any], data: Any, prefix: str, size_fields: frozenset[str]) -> Any:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix.rstrip('.') or 'config'}: expected a mapping of keys, got {data!r}")
    hints = get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    for key in data:
        if key not in known:
            where = f"{prefix}{key}"
            raise ConfigError(f"{where}: unknown key; known keys here: {', '.join(sorted(known))}")
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        key = f"{prefix}{f.name}"
        hint = hints[f.name]
        if dataclasses.is_dataclass(hint):
            kwargs[f.name] = build(hint, data[f.name], key + ".", size_fields)  # type: ignore[arg-type]
        elif f.metadata.get("secret"):
            try:
                kwargs[f.name] = _coerce(hint, data[f.name], key, size_fields)
            except ConfigError:  # the message would show the value
                raise ConfigError(f"{key}: expected text (the value given is not shown)") from None
        else:
            kwargs[f.name] = _coerce(hint, data[f.name], key, size_fields)
    return cls(**kwargs)


def _coerce(hint: Any, value: Any, key: str, size_fields: frozenset[str]) -> Any:
    optional = False
    if get_origin(hint) in (Union, types.UnionType):
        args = [a for a in get_args(hint) if a is not type(None)]
        optional = len(args) < len(get_args(hint))
        hint = args[0]
    if value is None:
        if optional:
            return None
        raise ConfigError(f"{key}: a value is required")
    leaf = key.rsplit(".", 1)[-1]
    if hint is int and leaf in size_fields:
        return parse_size(value, key)
    if hint is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
            return value.lower() in ("true", "yes", "1")
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected a whole number, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise ConfigError(f"{key}: expected text, got {value!r}")
        return str(value)
    if get_origin(hint) is tuple and get_args(hint) == (str, ...):
        # A list of texts: a YAML list, or one text of comma-separated items (from the environment).
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, (list, tuple)):
            raise ConfigError(f"{key}: expected a list of texts, got {value!r}")
        return tuple(t for t in (_coerce(str, v, key, size_fields).strip() for v in items) if t)
    if get_origin(hint) in (dict, collections.abc.Mapping) and get_args(hint) == (str, str):
        # A table of names to names (e.g. openai.voices): each key and value is text.
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping of names, got {value!r}")
        return {_coerce(str, k, f"{key}.{k}", size_fields): _coerce(str, v, f"{key}.{k}", size_fields)
                for k, v in value.items()}  # fmt: skip
    raise ConfigError(f"{key}: unsupported type")  # pragma: no cover - programming error
