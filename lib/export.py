"""Export of the most requested phrases as a ``hot_phrases.json`` document.

The statistics keep each phrase's whole text, the voice as the caller named it and its
settings, so a phrase is exported exactly as it was asked for; every exported phrase is
checked to resolve to the very key that was requested.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from lib.access import Action, Caller, check
from lib.errors import TTSError
from lib.phrases import PHRASE_MODES, SCHEMA_VERSION
from lib.request import TTSRequest
from lib.textnorm import cut_text

if TYPE_CHECKING:
    from lib.service import TTSService

__all__ = ["export_phrases"]


def export_phrases(service: TTSService, top: int = 50, *, caller: Caller) -> tuple[dict[str, Any], list[str]]:
    """The ``top`` most requested phrases as a phrase-list document, and a sentence for
    each phrase that could not be exported (why, in words)."""
    check(caller, Action.READ_TEXTS)
    saved = {v["fingerprint"]: v["name"] for v in service.voices.list(caller=caller) if v.get("fingerprint")}
    voices: dict[str, dict[str, str]] = {}
    phrases: list[dict[str, Any]] = []
    notes: list[str] = []
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
        phrase: dict[str, Any] = {"text": text, "voice": name}
        for field, default in (("style", ""), ("seed", 0), ("speed", 1.0)):
            if row.get(field, default) != default:
                phrase[field] = row[field]
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
        voices.setdefault(name, {"preset": name})
        phrases.append(phrase)
    return {"version": SCHEMA_VERSION, "voices": voices, "phrases": phrases}, notes
