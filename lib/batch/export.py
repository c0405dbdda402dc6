"""Export of the most requested phrases as a ``hot_phrases.json`` document.

The statistics keep each phrase's whole text, the voice as the caller named it and its
settings, so a phrase is exported exactly as it was asked for; every exported phrase is
checked to resolve to the very key that was requested.

A phrase with an approved take (:mod:`lib.takes`) is exported once, with the approved
take's ``seed`` and ``take`` (the digest of its samples), so that a fresh deployment with
the same model rebuilds the same take and its preload reports one that differs; approved
phrases outside the top are added after it (when their voice has a name).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, NotRequired

from typing_extensions import TypedDict

from lib.core.logtext import cut_text
from lib.errors import TTSError
from lib.request.access import Action, Caller, check
from lib.request.phrases import PHRASE_MODES, SCHEMA_VERSION
from lib.request.types import TTSRequest
from lib.takes.records import Approval

if TYPE_CHECKING:
    from lib.pipeline.service import TTSService

__all__ = ["ExportedPhrase", "PhraseDocument", "PresetRef", "export_phrases"]


class ExportedPhrase(TypedDict):
    """One phrase of an exported phrase list: only the fields that differ from a
    request's defaults, and, for an approved phrase, its take."""

    text: str
    voice: str
    """The saved voice's name (the document's ``voices`` maps it to itself)."""
    style: NotRequired[str]
    seed: NotRequired[int]
    speed: NotRequired[float]
    mode: NotRequired[str]
    """Only when the phrase was asked for in a mode its voice and style do not imply."""
    take: NotRequired[str]
    """The approved take's digest (:func:`lib.takes.records.pcm_digest`)."""


class PresetRef(TypedDict):
    """A voice of the document: the saved voice (or preset) of that name."""

    preset: str


class PhraseDocument(TypedDict):
    """An exported ``hot_phrases.json`` (:mod:`lib.request.phrases` reads it)."""

    version: int
    voices: dict[str, PresetRef]
    phrases: list[ExportedPhrase]


class _RequestFields(TypedDict):
    """The :class:`TTSRequest` fields an approved phrase is requested again with."""

    text: str
    voice: str
    style: str
    speed: float
    seed: int


def export_phrases(service: TTSService, top: int = 50, *, caller: Caller) -> tuple[PhraseDocument, list[str]]:
    """The ``top`` most requested phrases as a phrase-list document, and a sentence for
    each phrase that could not be exported (why, in words)."""
    check(caller, Action.READ_TEXTS)
    saved = {v["fingerprint"]: v["name"] for v in service.voices.list(caller=caller) if v.get("fingerprint")}
    voices: dict[str, PresetRef] = {}
    phrases: list[ExportedPhrase] = []
    notes: list[str] = []
    approved: set[str] = set()  # phrases exported with their approved take
    for row in service.dashboard.snapshot(top, caller=caller).get("top_requested", []):
        text = str(row.get("text", ""))
        quoted = repr(cut_text(text))
        name = str(row.get("voice") or "") or saved.get(str(row.get("voice_id", "")), "")
        if not name:
            notes.append(
                f"{quoted} was spoken in an uploaded recording that is not a saved voice; "
                "save that recording in the Voices tab and use it by name to export it"
            )
            continue
        phrase: ExportedPhrase = {"text": text, "voice": name}
        if row.get("style", "") != "":
            phrase["style"] = row["style"]
        if row.get("seed", 0) != 0:
            phrase["seed"] = row["seed"]
        if row.get("speed", 1.0) != 1.0:
            phrase["speed"] = row["speed"]
        as_listed = TTSRequest(
            text=text, voice=name, style=phrase.get("style", ""), seed=int(phrase.get("seed", 0)),
            speed=float(phrase.get("speed", 1.0)),
        )  # fmt: skip
        try:
            matches = service.resolve(as_listed).key == row["key"]
            in_its_mode = service.resolve(replace(as_listed, mode=str(row.get("mode") or "") or None)).key
        except TTSError as exc:
            notes.append(f"{quoted} cannot be requested again as it was: {exc}")
            continue
        if not matches and in_its_mode == row["key"] and row.get("mode") in PHRASE_MODES:
            phrase["mode"] = row["mode"]  # asked for in a mode the voice and style do not imply (instruct)
        elif not matches:
            why = (
                f"was made in the {row.get('mode')} mode, which a phrase list cannot choose"
                if in_its_mode == row["key"]
                else f"was made with a voice or model that changed since (the voice {name!r} was saved again, "
                "or the engine was upgraded)"
            )
            notes.append(f"{quoted} {why}; it is not exported")
            continue
        approval = service.takes.book.get(service.resolve(as_listed).phrase)
        if approval is not None:
            if approval.phrase in approved:
                continue  # another seed of an approved phrase: the approved take stands for it
            approved.add(approval.phrase)
            phrase.update({"seed": approval.seed, "take": approval.digest})
        voices.setdefault(name, {"preset": name})
        phrases.append(phrase)
    for approval in service.takes.book.approvals():
        if approval.phrase not in approved and _exportable(approval, service, notes):
            voices.setdefault(approval.voice, {"preset": approval.voice})
            phrases.append(_approved_phrase(approval))
    return {"version": SCHEMA_VERSION, "voices": voices, "phrases": phrases}, notes


def _approved_phrase(approval: Approval) -> ExportedPhrase:
    phrase: ExportedPhrase = {"text": approval.text, "voice": approval.voice}
    if approval.style:
        phrase["style"] = approval.style
    if approval.speed != 1.0:
        phrase["speed"] = approval.speed
    phrase.update({"seed": approval.seed, "take": approval.digest})
    return phrase


def _exportable(approval: Approval, service: TTSService, notes: list[str]) -> bool:
    """Whether an approved phrase outside the top can be listed: a named voice, its
    text known, and requested as listed it is the same phrase."""
    quoted = repr(cut_text(approval.text))
    if not approval.voice or not approval.text:
        notes.append(f"the approved take {approval.key} has no voice name or no text on record; it is not exported")
        return False
    try:
        r = service.resolve(TTSRequest(**_request_fields(approval)))
    except TTSError as exc:
        notes.append(f"the approved phrase {quoted} cannot be requested again: {exc}")
        return False
    if r.phrase != approval.phrase:
        notes.append(f"the approved phrase {quoted} was made in a mode or voice a phrase list cannot give")
        return False
    return True


def _request_fields(approval: Approval) -> _RequestFields:
    return {
        "text": approval.text, "voice": approval.voice, "style": approval.style, "speed": approval.speed,
        "seed": approval.seed,
    }  # fmt: skip
