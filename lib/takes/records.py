"""Approval records: which take of a phrase is the approved one, and the phrase id.

A *phrase* is what an operator means by "this announcement": the fields of a request's
key **without the seed and without the model version** (nor the lexicon's reading part,
nor the assembly recipe: those are renderings of the phrase, like the model version, and
changing them must not lose the approval). Exactly, :func:`phrase_id` is the md5 hex of
the JSON list ``[PHRASE_SCHEMA, engine, voice, prompt_text, text, style, speed (3
decimals), mode]`` of :class:`lib.cache.keys.KeyFields`. Two requests that differ only
in their seed are two takes of one phrase.

An :class:`Approval` names the approved take's cache key and seed, the voice as the
operator named it, the text, the model version that made it, who approved it and when,
its duration and the digest of its samples (to tell a rebuilt take that differs).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, cast

from typing_extensions import TypedDict

from lib.cache.diskutil import ensure_private_dir
from lib.cache.keys import KEY_RE, KeyFields
from lib.core.atomicfile import write_private

__all__ = ["PHRASE_SCHEMA", "Approval", "ApprovalFile", "ApprovalJson", "pcm_digest", "phrase_id"]

_LOGGER = logging.getLogger(__name__)

PHRASE_SCHEMA = 1
"""Version of :func:`phrase_id`'s serialisation (changing it orphans every approval)."""


def phrase_id(f: KeyFields) -> str:
    """The phrase a key belongs to: its fields without seed, model version, reading and
    recipe (see the module)."""
    doc: list[object] = [PHRASE_SCHEMA, f.engine, f.voice, f.prompt_text, f.text, f.style, f"{f.speed:.3f}", f.mode]
    return hashlib.md5(json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8")).hexdigest()


def pcm_digest(pcm: bytes) -> str:
    """The identity of a take's audio: md5 of its 16-bit samples (not of a container)."""
    return hashlib.md5(pcm).hexdigest()


_NUMBERS: dict[str, type | tuple[type, ...]] = {
    "seed": int,
    "speed": (int, float),
    "at": (int, float),
    "duration": (int, float),
}
"""The record's fields that are numbers (the others are text)."""


class ApprovalJson(TypedDict):
    """An :class:`Approval` as JSON (:meth:`Approval.to_json`): its fields by name, as
    ``approvals.json`` and the shared tier keep it."""

    phrase: str
    key: str
    seed: int
    engine: str
    model_version: str
    tag: str
    voice: str
    voice_id: str
    text: str
    style: str
    speed: float
    who: str
    at: float
    duration: float
    digest: str


@dataclass(frozen=True)
class Approval:
    """One phrase's approved take."""

    phrase: str
    """:func:`phrase_id` of the take's fields."""
    key: str
    """The take's cache key (its audio is pinned and copied, :mod:`lib.takes.book`)."""
    seed: int
    engine: str
    model_version: str
    """The model version that made the take (``needs_review`` when it is not the serving one)."""
    tag: str
    """The take's entry tag (``engine:model_version``)."""
    voice: str
    """The voice as the operator named it ("" for an uploaded recording)."""
    voice_id: str
    """The key's voice field: a prompt fingerprint or ``preset:<name>``."""
    text: str
    style: str
    speed: float
    who: str
    at: float
    """Unix time of the approval."""
    duration: float
    digest: str
    """:func:`pcm_digest` of the take's samples."""

    def to_json(self) -> ApprovalJson:
        return cast(ApprovalJson, asdict(self))

    @classmethod
    def from_json(cls, doc: Any) -> Approval | None:
        """The record in ``doc``, or None when it is not one (written by hand, damaged)."""
        if not isinstance(doc, dict):
            return None
        try:
            values = {f.name: doc[f.name] for f in fields(cls)}
        except KeyError:
            return None
        for name, value in values.items():
            wanted: type | tuple[type, ...] = _NUMBERS.get(name, str)
            if isinstance(value, bool) or not isinstance(value, wanted):
                return None
        approval = cls(**values)
        if not (KEY_RE.match(str(approval.key)) and KEY_RE.match(str(approval.phrase))):
            return None
        return approval


class ApprovalFile:
    """The approvals of one cache directory: ``<cache.dir>/takes/approvals.json`` (0600,
    in a 0700 folder), rewritten whole and atomically on every change."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / "approvals.json"

    def load(self) -> dict[str, Approval]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            _LOGGER.warning("cannot read the approvals %s: %s; none are served until it can be read", self.path, exc)
            return {}
        try:
            docs = json.loads(raw.decode("utf-8")).get("approvals", [])
        except (ValueError, AttributeError, UnicodeDecodeError) as exc:
            _LOGGER.warning("the approvals file %s is damaged (%s); it is kept aside", self.path, exc)
            with contextlib.suppress(OSError):  # read-only: it stays, and the next change replaces it
                os.replace(self.path, self.path.with_suffix(".json.damaged"))
            return {}
        found = {}
        for doc in docs if isinstance(docs, list) else []:
            approval = Approval.from_json(doc)
            if approval is not None:
                found[approval.phrase] = approval
        return found

    def save(self, approvals: dict[str, Approval]) -> None:
        doc = {"version": PHRASE_SCHEMA, "approvals": [a.to_json() for a in approvals.values()]}
        data = json.dumps(doc, ensure_ascii=False, indent=1).encode("utf-8")
        ensure_private_dir(self.directory)
        write_private(self.path, data)
