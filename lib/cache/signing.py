"""Entries that cannot be forged: an HMAC-SHA256 tag on every value the shared tiers hold
that decides what is served (``cache.secret``, shared by the replicas).

An entry's own CRC only finds damage: whoever can write Redis or the bucket can also
write a valid CRC, under any key. With a secret, each value written to Redis or the
object store carries a tag over what it is (``kind``: a result entry, a saved voice...),
the name it is stored under (the cache key, the voice's name) and its bytes; a value read
back without a valid tag is never served (a miss: it is made again and written over the
forged one), counted (``tts_shared_entries_rejected_total``) and logged once per cause,
not once per request.

Format: the value, then a 40-byte trailer (the tag, then :data:`_MAGIC`). A trailer, not a
prefix: readers of an entry's header alone (evictions by tag, the object store's index)
read signed and unsigned values alike.

Rotation: tags are written with ``cache.secret`` and checked against it and every
``cache.old_secrets``. Without a secret nothing is tagged and nothing is checked (a
trailer found is removed unread), as before the secret existed; with one, an untagged
value is refused, or a forger would simply leave the tag off.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import struct
from collections.abc import Callable, Sequence

from lib.config import CacheConfig
from lib.core.logtext import cut_text
from lib.core.ratelimit import LogLimiter

__all__ = ["MIN_SECRET_BYTES", "ForgedValueError", "Signer"]

_LOGGER = logging.getLogger(__name__)

MIN_SECRET_BYTES = 16
_MAGIC = b"TTSMAC01"
_TAG_SIZE = 32
_TRAILER = _TAG_SIZE + len(_MAGIC)
_NAME = struct.Struct("<I")
_LOG_EVERY = 3600.0  # a forged entry is reported once an hour per cause, with how many since


class ForgedValueError(ValueError):
    """A value from a shared tier has no valid tag (it is not served)."""


class Signer:
    """Tags values for the shared tiers and checks them. ``secret`` None: off (values are
    written untagged and read unchecked). ``on_reject`` is called with the tier (``shared``
    or ``objects``) of each value refused (the service counts them)."""

    def __init__(
        self, secret: str | None = None, old_secrets: Sequence[str] = (),
        on_reject: Callable[[str], None] = lambda tier: None,
    ) -> None:  # fmt: skip
        self._secret = secret.encode("utf-8") if secret else None
        self._keys = [self._secret, *(s.encode("utf-8") for s in old_secrets if s)] if self._secret else []
        self._on_reject = on_reject
        self._log = LogLimiter(_LOGGER, every=_LOG_EVERY)

    @classmethod
    def from_config(cls, cache: CacheConfig, on_reject: Callable[[str], None] = lambda tier: None) -> Signer:
        return cls(cache.secret, cache.old_secrets, on_reject)

    def __repr__(self) -> str:  # never the secret
        return f"Signer(enabled={self.enabled})"

    @property
    def enabled(self) -> bool:
        """Whether values are tagged and checked (``cache.secret`` is set)."""
        return self._secret is not None

    def tag(self, kind: str, name: str, value: bytes, key: bytes | None = None) -> bytes:
        """The tag of ``value`` stored as ``kind`` under ``name`` (with ``cache.secret``)."""
        secret = key if key is not None else self._secret
        if secret is None:
            raise ValueError("no cache.secret to tag with")
        raw = name.encode("utf-8")
        mac = hmac.new(secret, kind.encode("ascii") + b"\0" + _NAME.pack(len(raw)) + raw, hashlib.sha256)
        mac.update(value)
        return mac.digest()

    def valid(self, kind: str, name: str, value: bytes, tag: bytes) -> bool:
        """Whether ``tag`` is ``value``'s under the secret or an old one."""
        return any(hmac.compare_digest(self.tag(kind, name, value, key), tag) for key in self._keys)

    def sign(self, kind: str, name: str, value: bytes) -> bytes:
        """``value`` as it is written to a shared tier: with its trailer when a secret is set."""
        if not self.enabled:
            return value
        return value + self.tag(kind, name, value) + _MAGIC

    def open(self, kind: str, name: str, value: bytes) -> bytes:
        """``value`` without its trailer, once its tag is checked; raises
        :class:`ForgedValueError` (a secret is set and the tag is missing or wrong)."""
        tagged = len(value) >= _TRAILER and value.endswith(_MAGIC)
        body = value[:-_TRAILER] if tagged else value
        if not self.enabled:
            return body
        if not tagged:
            raise ForgedValueError("no tag")
        if not self.valid(kind, name, body, value[-_TRAILER : -len(_MAGIC)]):
            raise ForgedValueError("wrong tag")
        return body

    def check(self, tier: str, kind: str, name: str, value: bytes) -> bytes | None:
        """:meth:`open`, with a refusal reported (:meth:`reject`) and answered None."""
        try:
            return self.open(kind, name, value)
        except ForgedValueError as exc:
            self.reject(tier, kind, name, str(exc))
            return None

    def reject(self, tier: str, kind: str, name: str, reason: str) -> None:
        """Count a value refused and log it, once per tier and kind an hour (with how many
        were held back), not once per request."""
        self._on_reject(tier)
        self._log.log(
            logging.WARNING, f"forged:{tier}:{kind}",
            "%s tier: %s %s refused (%s under cache.secret): not served, made again and written over",
            tier, kind, name if kind != "voice" else cut_text(name), reason,  # a voice's name is user text
        )  # fmt: skip
