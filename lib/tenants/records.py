"""A tenant's record: its name, its limits and the hash of its key (never the key)."""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import time
from dataclasses import asdict, dataclass, field

from lib.config.tenants import LIMIT_NAMES, TenantsConfig
from lib.errors import ValidationError

__all__ = ["ANONYMOUS", "KEY_PREFIX", "Limits", "TenantRecord", "check_name", "hash_key", "new_key"]

#: The usage row of every caller without a key (their limits are counted per address).
ANONYMOUS = "anonymous"
#: Names no key may take: the rows of callers who have none.
_RESERVED = frozenset({ANONYMOUS, "admin", "local"})
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
#: Every key starts so: a secret scanner (and a person) can tell what leaked.
KEY_PREFIX = "tts_"


@dataclass(frozen=True)
class Limits:
    """A caller's limits; None is no limit (see :mod:`lib.config.tenants`)."""

    synth_chars_per_hour: int | None = None
    requests_per_minute: int | None = None
    concurrent_misses: int | None = None

    @classmethod
    def anonymous(cls, config: TenantsConfig) -> Limits:
        return cls(*(getattr(config, "anonymous_" + name) for name in LIMIT_NAMES))

    @classmethod
    def for_key(cls, config: TenantsConfig, given: dict[str, object]) -> Limits:
        """A new key's limits: those ``given`` (``POST /api/keys``), the others from config."""
        values: dict[str, int | None] = {}
        for name in LIMIT_NAMES:
            value = given.get(name, getattr(config, name))
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 10**12
            ):
                raise ValidationError(f"{name}: must be a whole number from 0 to 10^12, or null for no limit")
            values[name] = value
        return cls(**values)

    def as_dict(self) -> dict[str, int | None]:
        return asdict(self)


@dataclass(frozen=True)
class TenantRecord:
    """A key as stored: ``key_hash`` is the SHA-256 of the key (hex)."""

    name: str
    key_hash: str
    limits: Limits
    created: float = field(default_factory=time.time)

    def to_json(self) -> str:
        return json.dumps(
            {"name": self.name, "key_hash": self.key_hash, "limits": self.limits.as_dict(), "created": self.created}
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> TenantRecord:
        data = json.loads(text)
        return cls(str(data["name"]), str(data["key_hash"]), Limits(**data["limits"]), float(data["created"]))


def check_name(name: object) -> str:
    """A tenant's name as given, checked: 1-64 of a-z 0-9 . _ -, not a reserved row."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ValidationError(
            "name: must be 1-64 characters of lower-case letters, digits, '.', '_' or '-', "
            "starting with a letter or digit (e.g. 'station-east')"
        )
    if name in _RESERVED:
        raise ValidationError(f"name: {name!r} is reserved (a usage row of its own); choose another name")
    return name


def new_key() -> str:
    """A new API key: 256 random bits."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    """What is stored of a key. A key has 256 random bits, so a plain SHA-256 cannot be
    searched (a slow hash only protects guessable passwords)."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
