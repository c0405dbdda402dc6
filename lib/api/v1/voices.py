"""OpenAI's custom-voice endpoints, mapped onto the voice library.

- ``GET /v1/audio/voices``: OpenAI's built-in names (with the voice each is spoken in,
  ``openai.voices``), the engine's presets and the saved voices, as ``audio.voice``
  objects in ``data``, and as ``voices: [{id, name}]`` (what Open WebUI reads).
- ``POST /v1/audio/voice_consents`` (multipart ``name``, ``language``, ``recording``):
  records a consent (:mod:`lib.voices.consents`); ``GET`` lists them (admin),
  ``GET``/``POST``/``DELETE /v1/audio/voice_consents/{id}`` read (anyone holding the id;
  who sent it and the fingerprint for the admin only), rename and delete one (admin).
- ``POST /v1/audio/voices`` (multipart ``name``, ``audio_sample``, ``consent``): saves
  the sample as a voice of the library under ``name`` (its id), with a copy of the
  consent record beside it; ``DELETE /v1/audio/voices/{id}`` deletes it (admin).

The access policy is the library's own (:mod:`lib.request.access`): anyone may record a consent
and save a voice under a new name; deleting, renaming and listing others' consents need
the admin (an OpenAI client sends its API key as the bearer token: give it the admin
token to act as the admin).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from anyio import to_thread
from fastapi import APIRouter, File, Form, Query, Request, UploadFile

from lib.config.voicemap import OPENAI_VOICES
from lib.core.reports import ConsentRecord, VoiceInfo
from lib.errors import NotFoundError, ValidationError
from lib.pipeline.service import TTSService
from lib.request.access import Action, Caller, allows, check

from ..admin import CallerDep
from ..uploads import read_upload

__all__ = ["voices_router"]

#: What an OpenAI consent object shows; the rest of the record is the admin's.
_PUBLIC = ("id", "name", "language", "created_at")


def _consent(record: Mapping[str, Any], caller: Caller) -> dict[str, Any]:
    shown = {k: record[k] for k in _PUBLIC if k in record}
    shown["object"] = "audio.voice_consent"
    if allows(caller, Action.READ_TEXTS):
        shown.update({k: record[k] for k in ("fingerprint", "seconds", "recorded_by") if k in record})
    return shown


def _named(name: str, kind: str, **extra: Any) -> dict[str, Any]:
    """A voice that was never uploaded (an OpenAI name, a preset): created at 0."""
    return {"id": name, "object": "audio.voice", "name": name, "type": kind, "created_at": 0, **extra}


def _voice(described: VoiceInfo) -> dict[str, Any]:
    voice = {
        "id": described["name"],
        "object": "audio.voice",
        "name": described["name"],
        "type": "audio_sample",
        "created_at": int(described.get("created", 0)),
    }
    if described.get("consent"):
        voice["consent"] = described["consent"]
    return voice


def voices_router(service: TTSService) -> APIRouter:
    router = APIRouter()
    limit = service.config.prompt.max_upload_bytes
    consents = service.voices.library.consents
    table = service.config.openai.table(service.engine.name)

    @router.get("/v1/audio/voices", tags=["openai"], summary="Voices: OpenAI's names, presets, saved voices")
    async def list_voices(caller: CallerDep) -> dict[str, Any]:
        found = await to_thread.run_sync(lambda: service.voices.list(caller=caller))
        data: list[dict[str, Any]] = [
            {
                "id": name,
                "object": "audio.voice",
                "name": name,
                "type": "builtin",
                "voice": table[name],
                "created_at": 0,
            }
            for name in OPENAI_VOICES
            if name in table
        ]
        for described in found:
            if described.get("kind") == "preset":
                name = described["name"]
                data.append({"id": name, "object": "audio.voice", "name": name, "type": "preset", "created_at": 0})
            else:
                data.append(_voice(described))
        return {"object": "list", "data": data, "voices": [{"id": v["id"], "name": v["name"]} for v in data]}

    @router.post("/v1/audio/voices", tags=["openai"], summary="Save a voice sample under a consent")
    async def create_voice(
        caller: CallerDep,
        name: Annotated[str, Form(description="The voice's name, and its id")],
        audio_sample: Annotated[UploadFile | None, File(description="The voice sample, 1-30 s of speech")] = None,
        consent: Annotated[str, Form(description="The consent id (POST /v1/audio/voice_consents)")] = "",
        type: Annotated[Literal["audio_sample", "prompt"], Form()] = "audio_sample",
    ) -> dict[str, Any]:
        if type != "audio_sample":
            raise ValidationError("type: voices from a text prompt are not made here; send an audio_sample")
        audio = await read_upload(audio_sample, "audio_sample", limit)
        if audio is None:
            raise ValidationError("audio_sample: upload a recording of the voice (1-30 s of speech)")
        if not consent.strip():
            raise ValidationError("consent: give the id of a consent recording (POST /v1/audio/voice_consents)")
        record = await to_thread.run_sync(consents.get, consent.strip())
        if record is None:
            raise ValidationError(f"consent: no consent recording {consent.strip()!r}; record one first")
        saved = await to_thread.run_sync(lambda: service.voices.save(name, audio, "", caller=caller, consent=record))
        return _voice(saved)

    @router.delete("/v1/audio/voices/{voice_id}", tags=["openai"], summary="Delete a saved voice (admin)")
    async def delete_voice(voice_id: str, caller: CallerDep) -> dict[str, Any]:
        await to_thread.run_sync(lambda: service.voices.delete(voice_id, caller=caller))
        return {"id": voice_id, "deleted": True, "object": "audio.voice.deleted"}

    @router.post("/v1/audio/voice_consents", tags=["openai"], summary="Record a consent to clone a voice")
    async def create_consent(
        request: Request,
        caller: CallerDep,
        name: Annotated[str, Form(description="A label: who consents")],
        language: Annotated[str, Form(description="BCP 47 tag of the consent phrase, e.g. en-US")],
        recording: Annotated[UploadFile | None, File(description="The consent recording")] = None,
    ) -> dict[str, Any]:
        check(caller, Action.SAVE_VOICE)
        audio = await read_upload(recording, "recording", limit)
        if audio is None:
            raise ValidationError("recording: upload the recording of the speaker reading the consent phrase")
        host = request.client.host if request.client else None

        def record() -> ConsentRecord:
            # Decoded and checked like a prompt (speech, 1-30 s); only its fingerprint is kept.
            prompt = service.voices.prompt(audio, field="recording", remember=False)
            who = {"address": host, "admin": caller.admin, "origin": caller.origin}
            return consents.create(
                name=name, language=language, fingerprint=prompt.fingerprint, seconds=prompt.seconds, recorded_by=who
            )

        return _consent(await to_thread.run_sync(record), caller)

    @router.get("/v1/audio/voice_consents", tags=["openai"], summary="Consent recordings (admin)")
    async def list_consents(
        caller: CallerDep,
        after: Annotated[str | None, Query()] = None,
        limit: Annotated[int, Query(ge=1, le=100)] = 20,
    ) -> dict[str, Any]:
        check(caller, Action.READ_TEXTS)
        records = await to_thread.run_sync(consents.list)
        if after:
            ids = [r.get("id") for r in records]
            records = records[ids.index(after) + 1 :] if after in ids else []
        page = records[:limit]
        data = [_consent(r, caller) for r in page]
        return {
            "object": "list",
            "data": data,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
            "has_more": len(records) > limit,
        }

    @router.get("/v1/audio/voice_consents/{consent_id}", tags=["openai"], summary="One consent recording")
    async def get_consent(consent_id: str, caller: CallerDep) -> dict[str, Any]:
        record = await to_thread.run_sync(consents.get, consent_id)
        return _consent(_found(record, consent_id), caller)

    @router.post("/v1/audio/voice_consents/{consent_id}", tags=["openai"], summary="Rename a consent (admin)")
    async def rename_consent(consent_id: str, caller: CallerDep, body: dict[str, Any]) -> dict[str, Any]:
        check(caller, Action.REPLACE_VOICE)
        name = body.get("name")
        if not isinstance(name, str):
            raise ValidationError("name: give the new label")
        renamed = await to_thread.run_sync(lambda: consents.rename(consent_id, name))
        return _consent(_found(renamed, consent_id), caller)

    @router.delete("/v1/audio/voice_consents/{consent_id}", tags=["openai"], summary="Delete a consent (admin)")
    async def delete_consent(consent_id: str, caller: CallerDep) -> dict[str, Any]:
        check(caller, Action.DELETE_VOICE)
        if not await to_thread.run_sync(consents.delete, consent_id):
            raise NotFoundError(f"no consent recording {consent_id!r}")
        return {"id": consent_id, "deleted": True, "object": "audio.voice_consent"}

    return router


def _found(record: ConsentRecord | None, consent_id: str) -> ConsentRecord:
    if record is None:
        raise NotFoundError(f"no consent recording {consent_id!r}")
    return record
