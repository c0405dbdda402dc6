"""Object names under the tier's prefix, and the indexes kept beside the entries.

    <prefix>/a/<key>                     packed entry (lib.cache.entry.pack bytes);
                                         metadata ``expires`` (unix time) when it has a TTL
    <prefix>/t/<tag code>/<card>         tag index: one empty object per entry and tag
    <prefix>/x/<YYYYMMDDHH>/<card>       expiry index: one per entry with a TTL, by hour (UTC)
    <prefix>/l/<key>                     single-flight lease (lib.objects.leases)
    <prefix>/p/<key>.wav|.flac           playable copies for cache.objects_redirect
    <prefix>/e/<event>                   evictions for the other replicas (lib.objects.feed)

A *card* names one entry and everything indexed about it, ``<key>.<model tag code>.<voice
tag code>.<hour>`` (codes are URL-safe base64 of the tag, so they hold no dot or slash;
empty parts when there is no voice or no expiry). Whichever index lists an entry, its
card gives the names of all its objects, so evicting a model version lists that tag's
directory only (never the whole bucket) and deletes every object of each entry with no
extra read. The indexes are written before the entry, so an entry is never stored
unlisted; an index object whose entry is gone (deleted, swept) is harmless and goes
with the next eviction, sweep or clear that lists it.
"""

from __future__ import annotations

import base64
import binascii
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lib.cache.keys import KEY_RE
from lib.config.objects import ObjectsURL

__all__ = ["Card", "Layout", "hour_of", "tag_code"]

PLAYABLE = ("wav", "flac")


def tag_code(tag: str) -> str:
    """``tag`` as one safe path segment (URL-safe base64, no padding)."""
    return base64.urlsafe_b64encode(tag.encode("utf-8")).decode("ascii").rstrip("=")


def _tag(code: str) -> str:
    return base64.urlsafe_b64decode(code + "=" * (-len(code) % 4)).decode("utf-8") if code else ""


def hour_of(unix: float) -> str:
    """The expiry index's hour directory of a unix time (UTC)."""
    return time.strftime("%Y%m%d%H", time.gmtime(unix))


@dataclass(frozen=True)
class Card:
    """One entry as its indexes name it."""

    key: str
    tag: str
    """The model tag (``engine:model_version``)."""
    voice: str
    """The voice tag (``voice:<id>``), or ''."""
    hour: str
    """Expiry hour (``YYYYMMDDHH``, UTC), or '' when the entry never expires."""

    @classmethod
    def of(cls, key: str, head: Mapping[str, Any], expires: float | None) -> Card:
        """The card of an entry from its header (:func:`lib.cache.entry.read_header`)."""
        voice = head.get("voice")
        return cls(
            key, str(head.get("tag") or ""), f"voice:{voice}" if voice else "", hour_of(expires) if expires else ""
        )

    @classmethod
    def parse(cls, text: str) -> Card | None:
        """The card from an index object's last name segment; None if it is not one."""
        parts = text.split(".")
        if len(parts) != 4 or not KEY_RE.match(parts[0]) or (parts[3] and not parts[3].isdigit()):
            return None
        try:
            return cls(parts[0], _tag(parts[1]), _tag(parts[2]), parts[3])
        except (binascii.Error, UnicodeDecodeError, ValueError):
            return None

    def __str__(self) -> str:
        return ".".join((self.key, tag_code(self.tag), tag_code(self.voice), self.hour))

    @property
    def tags(self) -> list[str]:
        return [t for t in (self.tag, self.voice) if t]


class Layout:
    """Object names under one URL's prefix."""

    def __init__(self, url: ObjectsURL) -> None:
        self.url = url
        self.root = url.name("")  # "prefix/" or ""

    def entry(self, key: str) -> str:
        return self.url.name(f"a/{key}")

    def lease(self, key: str) -> str:
        return self.url.name(f"l/{key}")

    def playable(self, key: str, fmt: str) -> str:
        return self.url.name(f"p/{key}.{fmt}")

    def tag_dir(self, tag: str) -> str:
        return self.url.name(f"t/{tag_code(tag)}/")

    def expiry_dir(self) -> str:
        return self.url.name("x/")

    def events_dir(self) -> str:
        return self.url.name("e/")

    def index(self, card: Card) -> list[str]:
        """The index objects of ``card`` (written before its entry)."""
        names = [self.url.name(f"t/{tag_code(tag)}/{card}") for tag in card.tags]
        if card.hour:
            names.append(self.url.name(f"x/{card.hour}/{card}"))
        return names

    def objects(self, card: Card) -> list[str]:
        """Every object of ``card``'s entry: the entry, its playable copies, its index."""
        return [self.entry(card.key), *self.copies(card.key), *self.index(card)]

    def copies(self, key: str) -> list[str]:
        return [self.playable(key, fmt) for fmt in PLAYABLE]

    @staticmethod
    def card_of(name: str) -> Card | None:
        """The card an index object's name ends with."""
        return Card.parse(name.rsplit("/", 1)[-1])

    @staticmethod
    def hour_in(name: str) -> str:
        """The hour directory of an expiry index name (``.../x/<hour>/<card>``)."""
        parts = name.rsplit("/", 2)
        return parts[-2] if len(parts) == 3 else ""
