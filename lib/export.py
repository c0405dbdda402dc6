"""Export of the most requested phrases as a ``hot_phrases.json`` document."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lib.access import LOCAL, Action, Caller, check
from lib.errors import TTSError
from lib.phrases import SCHEMA_VERSION
from lib.request import TTSRequest
from lib.textnorm import cut_text

if TYPE_CHECKING:
    from lib.service import TTSService

__all__ = ["export_phrases"]


def export_phrases(service: TTSService, top: int = 50, caller: Caller = LOCAL) -> tuple[dict[str, Any], list[str]]:
    """The most requested phrases as a ``hot_phrases.json`` document, and notes on
    the rows that could not be exported (an unsaved uploaded prompt, or settings other
    than the defaults, which the statistics do not keep). Each exported phrase is
    checked: it resolves to exactly the key that was requested."""
    saved = {v["fingerprint"]: v["name"] for v in service.list_voices() if v.get("fingerprint")}
    voices: dict[str, dict[str, str]] = {}
    phrases: list[dict[str, Any]] = []
    notes: list[str] = []
    check(caller, Action.READ_TEXTS)
    for row in service.snapshot(top, caller=caller)["top_requested"]:
        text, voice_id, key = str(row.get("text", "")), str(row.get("voice", "")), str(row["key"])
        name = voice_id[len("preset:") :] if voice_id.startswith("preset:") else saved.get(voice_id)
        if not text or name is None:
            notes.append(f"{key}: its voice is an uploaded prompt that is not saved; save the voice first")
            continue
        try:
            matches = service.resolve(TTSRequest(text=text, voice=name)).key == key
        except TTSError as exc:
            notes.append(f"{key}: {exc}")
            continue
        if not matches:
            notes.append(f"{key} ({cut_text(text)!r}): made with a seed, style or speed other than the defaults")
            continue
        voices.setdefault(name, {"preset": name})
        phrases.append({"text": text, "voice": name})
    return {"version": SCHEMA_VERSION, "voices": voices, "phrases": phrases}, notes
