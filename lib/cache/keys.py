"""Cache keys: md5 hex of a canonical, versioned serialisation of every field that
changes the audio.

The key rules are pinned by exact expected values in tests/test_keys.py: changing
anything here changes every key in every deployed cache, so it must be deliberate
(bump :data:`KEY_SCHEMA_VERSION`).

Schema 2 (issue 27) added ``reading``: what the text front end adds to the text (its
version and the digest of the lexicon entries whose terms occur in the text, see
:meth:`lib.text.frontend.FrontEnd.key_part`), so a lexicon change re-keys exactly the
texts it affects. Every key of schema 1 changed with it: a deployed cache is filled
again by the preload (``preload_cache.py``) after the upgrade.

Two kinds of entry share the schema. Raw engine output (a short text, a sentence
segment, a template piece) has ``finish == ""``; a *finished* result (assembled from
segments, with a loudness target and a tail) has the assembly recipe
(:attr:`lib.compose.assemble.Finish.recipe`), so the two never share a key, and the raw
entry of a short text is found by its segment key.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

__all__ = ["KEY_RE", "KEY_SCHEMA_VERSION", "KeyFields", "cache_key", "model_tag", "voice_id"]

KEY_SCHEMA_VERSION = 2

#: A valid key: 32 lower-case hex digits. Checked before a key touches any store.
KEY_RE = re.compile(r"^[0-9a-f]{32}$")


@dataclass(frozen=True)
class KeyFields:
    """Everything a cache key is made of. All text fields are already normalised, and
    fields the chosen mode does not use are already blank: the key is computed from
    exactly what the engine receives."""

    engine: str
    model_version: str
    voice: str
    """Prompt fingerprint (md5 of canonical PCM), or ``preset:<name>``."""
    prompt_text: str
    text: str
    style: str
    seed: int
    speed: float
    mode: str
    finish: str = ""
    """The assembly recipe of a finished result; "" for raw engine output."""
    reading: str = ""
    """What the text front end adds to ``text`` (``<front end version>:<lexicon
    digest>``, :meth:`lib.text.frontend.FrontEnd.key_part`); "" when there is no text
    to read (a conversion)."""

    def canonical(self) -> bytes:
        """The exact bytes that are hashed. Speed is fixed to 3 decimals so that 1,
        1.0 and 1.0000001 are one request."""
        doc: list[object] = [
            KEY_SCHEMA_VERSION,
            self.engine,
            self.model_version,
            self.voice,
            self.prompt_text,
            self.text,
            self.style,
            int(self.seed),
            f"{self.speed:.3f}",
            self.mode,
            self.reading,
            self.finish,
        ]
        return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8")

    @property
    def key(self) -> str:
        """This request's cache key (:func:`cache_key`)."""
        return cache_key(self)


def cache_key(fields: KeyFields) -> str:
    """md5 hex of :meth:`KeyFields.canonical`."""
    return hashlib.md5(fields.canonical()).hexdigest()


def voice_id(fingerprint: str | None, preset: str | None) -> str:
    """The ``voice`` key field: the prompt's fingerprint, or ``preset:<name>``."""
    if fingerprint is not None:
        return fingerprint
    if preset is None:
        raise ValueError("a voice is a prompt fingerprint or a preset name")
    return f"preset:{preset}"


def model_tag(engine: str, model_version: str) -> str:
    """The tag every entry carries: evicting it drops one model version's entries."""
    return f"{engine}:{model_version}"
