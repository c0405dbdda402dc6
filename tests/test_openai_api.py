"""The rest of OpenAI's speech API through the real ``openai`` client against a real
server: voice names (``openai.voices``) and voice objects, ``speed`` 0.25-4.0,
``instructions`` up to 4,096 characters, ``/v1/models``, and custom voices made under a
consent (``/v1/audio/voice_consents``, ``/v1/audio/voices``) in the voice library, under
its access policy."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest
import soundfile as sf

from lib.api import create_app
from lib.audio.pcm import PromptDecoder
from lib.config.voicemap import OPENAI_VOICES
from lib.pipeline.service import TTSService
from lib.request.types import TTSRequest
from tests.api_server import LiveServer
from tests.conftest import tone_service

TOKEN = "admin-t0ken"


def recording(seconds: float = 2.0, hz: float = 180.0) -> bytes:
    t = np.arange(int(seconds * 22_050)) / 22_050
    samples = 0.3 * np.sin(2 * np.pi * hz * t) * (1 + 0.5 * np.sin(2 * np.pi * 4 * t))
    buf = io.BytesIO()
    sf.write(buf, samples.astype(np.float32), 22_050, format="WAV", subtype="PCM_16")
    return buf.getvalue()


@pytest.fixture
def service(make_service: Any) -> TTSService:
    service: TTSService = make_service(admin_token=TOKEN, **{"openai.voices": {"Onyx": "tone-high"}})
    return service


@pytest.fixture
def client(http: httpx.Client, service: TTSService) -> openai.OpenAI:
    # An unknown key is 401 (lib.api.tenants): an OpenAI client that is not the admin sends a tenant's key.
    _, key = service.tenants.create("openai-client", {})
    return openai.OpenAI(base_url="http://127.0.0.1/v1", api_key=key, http_client=http)


@pytest.fixture
def admin(http: httpx.Client) -> openai.OpenAI:
    return openai.OpenAI(base_url="http://127.0.0.1/v1", api_key=TOKEN, http_client=http)


def key_of(client: openai.OpenAI, **fields: Any) -> str:
    fields = {"model": "tts-1", "input": "the same words", "response_format": "wav", **fields}
    return str(client.audio.speech.with_raw_response.create(**fields).headers["x-cache-key"])


# -- voices ---------------------------------------------------------------------------------


def test_every_openai_voice_name_is_spoken_in_its_mapped_voice(client: openai.OpenAI, service: TTSService) -> None:
    low = service.resolve(TTSRequest(text="the same words", voice="tone-low")).key
    high = service.resolve(TTSRequest(text="the same words", voice="tone-high")).key
    female = {"coral", "marin", "nova", "sage", "shimmer"}
    for name in OPENAI_VOICES:
        expected = high if name in female or name == "onyx" else low  # onyx: the configured table
        assert key_of(client, voice=name) == expected, name
    assert key_of(client, voice="Nova") == high  # as clients capitalise it
    assert key_of(client, voice={"id": "tone-low"}) == low  # a voice object names this server's voice
    assert key_of(client, voice="tone-high") == high


def test_a_name_mapped_to_a_missing_voice_says_which_setting_to_fix(tmp_path: Path) -> None:
    svc = tone_service(tmp_path, **{"openai.voices": {"alloy": "front desk"}})
    try:
        with LiveServer(create_app(svc)) as live:
            client = openai.OpenAI(base_url=f"{live.url}/v1", api_key="x")
            with pytest.raises(openai.BadRequestError) as err:
                key_of(client, voice="alloy")
            assert "openai.voices.alloy" in err.value.message and "front desk" in err.value.message
            with pytest.raises(openai.BadRequestError):
                key_of(client, voice="nobody-at-all")
    finally:
        svc.close()


# -- speed and instructions ----------------------------------------------------------------


def test_speed_from_a_quarter_to_four(client: openai.OpenAI, http: httpx.Client) -> None:
    lengths = {}
    for speed in (0.25, 1.0, 4.0):
        reply = client.audio.speech.with_raw_response.create(
            model="tts-1", voice="alloy", input="speed check", response_format="wav", speed=speed
        )
        lengths[speed] = float(reply.headers["x-audio-duration"])
    tail = 0.2  # segments.tail: silence after the words, the same at any speed
    assert (lengths[0.25] - tail) / (lengths[1.0] - tail) == pytest.approx(4.0, rel=0.01)
    assert (lengths[1.0] - tail) / (lengths[4.0] - tail) == pytest.approx(4.0, rel=0.01)
    for bad in (0.2, 4.5):
        with pytest.raises(openai.BadRequestError) as err:
            client.audio.speech.create(model="tts-1", voice="alloy", input="too far", speed=bad)
        assert "speed" in err.value.message
    for speed, status in (("0.25", 200), ("4.0", 200), ("0.24", 400), ("4.01", 400)):
        reply = http.post("/api/tts", data={"text": "form speed", "voice": "tone-low", "speed": speed})
        assert reply.status_code == status, (speed, reply.text)


def test_instructions_up_to_4096_characters(client: openai.OpenAI) -> None:
    long = "calm " * 1000  # 4096 characters end in a letter: nothing for normalisation to strip
    assert len(long[:4096]) == 4096 and long[4095] != " "
    ok = client.audio.speech.with_raw_response.create(
        model="gpt-4o-mini-tts", voice="alloy", input="styled", instructions=long[:4096]
    )
    assert ok.status_code == 200
    assert ok.headers["x-cache-key"] != key_of(client, voice="alloy", input="styled")  # the style is in the key
    with pytest.raises(openai.BadRequestError) as err:
        client.audio.speech.create(model="gpt-4o-mini-tts", voice="alloy", input="styled", instructions=long[:4097])
    assert "4096" in err.value.message


# -- models -----------------------------------------------------------------------------------


def test_models_lists_the_serving_model_and_its_version(client: openai.OpenAI, service: TTSService) -> None:
    models = client.models.list()
    assert [m.id for m in models.data] == ["tone"] and models.object == "list"
    model = models.data[0]
    assert model.object == "model" and model.owned_by == "voice-tts" and isinstance(model.created, int)
    extra = model.model_extra or {}
    assert extra["version"] == "tone-1" and extra["tag"] == service.tag
    assert client.models.retrieve("tone").id == "tone"
    assert client.models.retrieve("tone:tone-1").id == "tone"
    with pytest.raises(openai.NotFoundError) as err:
        client.models.retrieve("tts-1-hd")
    assert isinstance(err.value.body, dict) and err.value.body["code"] == "model_not_found"


# -- custom voices and consents ---------------------------------------------------------------


def test_a_voice_made_under_a_consent(client: openai.OpenAI, admin: openai.OpenAI, service: TTSService) -> None:
    consent_audio, sample = recording(hz=170.0), recording(seconds=3.0)
    consent = client.audio.voice_consents.create(
        name="Ann Example", language="en-US", recording=("consent.wav", consent_audio, "audio/wav")
    )
    assert consent.id.startswith("cons_") and consent.object == "audio.voice_consent" and consent.language == "en-US"
    voice = client.audio.voices.create(name="ann", audio_sample=("sample.wav", sample, "audio/wav"), consent=consent.id)
    assert (voice.id, voice.name, voice.object, voice.type) == ("ann", "ann", "audio.voice", "audio_sample")
    # The consent record is kept beside the voice: who, when, the recording's fingerprint.
    saved = service.voices.library.get("ann")
    assert saved is not None and saved.consent is not None
    assert saved.consent["id"] == consent.id and saved.consent["created_at"] == consent.created_at
    assert saved.consent["fingerprint"] == PromptDecoder().decode(consent_audio).fingerprint
    assert saved.consent["recorded_by"]["address"] == "127.0.0.1" and saved.consent["recorded_by"]["admin"] is False
    # The voice speaks like its sample uploaded as a prompt: same key.
    by_object = key_of(client, voice={"id": "ann"})
    assert by_object == service.resolve(TTSRequest(text="the same words", prompt_audio=sample)).key
    listed = client.get("/audio/voices", cast_to=dict)
    mine = [v for v in listed["data"] if v["id"] == "ann"]
    assert mine and mine[0]["consent"] == consent.id and {"id": "ann", "name": "ann"} in listed["voices"]
    assert {"id": "alloy", "name": "alloy"} in listed["voices"]


def test_voices_and_consents_follow_the_access_policy(
    client: openai.OpenAI, admin: openai.OpenAI, service: TTSService
) -> None:
    consent = client.audio.voice_consents.create(
        name="Bo", language="zh-CN", recording=("c.wav", recording(), "audio/wav")
    )
    public = client.audio.voice_consents.retrieve(consent.id)
    assert public.id == consent.id and "fingerprint" not in (public.model_extra or {})
    assert "fingerprint" in (admin.audio.voice_consents.retrieve(consent.id).model_extra or {})
    with pytest.raises(openai.PermissionDeniedError):
        client.audio.voice_consents.list()
    assert [c.id for c in admin.audio.voice_consents.list()] == [consent.id]
    with pytest.raises(openai.BadRequestError) as err:
        client.audio.voices.create(name="bo", audio_sample=("s.wav", recording(), "audio/wav"), consent="cons_nope")
    assert "consent" in err.value.message and service.voices.library.get("bo") is None
    client.audio.voices.create(name="bo", audio_sample=("s.wav", recording(), "audio/wav"), consent=consent.id)
    with pytest.raises(openai.ConflictError) as taken:  # a taken name: only the admin replaces (on /api/voices)
        client.audio.voices.create(name="bo", audio_sample=("s.wav", recording(), "audio/wav"), consent=consent.id)
    assert taken.value.type == "invalid_request_error"  # the caller's to fix, not a server error
    with pytest.raises(openai.ConflictError) as reserved:  # /v1 speaks "nova" in a preset: not savable
        client.audio.voices.create(name="Nova", audio_sample=("s.wav", recording(), "audio/wav"), consent=consent.id)
    assert "OpenAI voice name" in reserved.value.message
    with pytest.raises(openai.PermissionDeniedError):
        client.audio.voices.delete("bo")
    assert admin.audio.voices.delete("bo").deleted is True and service.voices.library.get("bo") is None
    with pytest.raises(openai.NotFoundError):
        admin.audio.voices.delete("bo")
    with pytest.raises(openai.PermissionDeniedError):
        client.audio.voice_consents.delete(consent.id)
    assert admin.audio.voice_consents.delete(consent.id).deleted is True
    with pytest.raises(openai.NotFoundError):
        client.audio.voice_consents.retrieve(consent.id)


def test_consent_refuses_what_is_not_a_recording_of_speech(client: openai.OpenAI) -> None:
    with pytest.raises(openai.UnprocessableEntityError):
        client.audio.voice_consents.create(name="C", language="en", recording=("c.wav", recording(0.3), "audio/wav"))
    with pytest.raises(openai.BadRequestError) as err:
        client.audio.voice_consents.create(name="C", language="not a tag!", recording=("c.wav", recording(), "x"))
    assert "language" in err.value.message
    with pytest.raises(openai.BadRequestError):
        client.audio.voices.create(name="p", prompt="a warm voice", type="prompt")
