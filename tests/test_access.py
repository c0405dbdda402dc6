"""Who may do what (lib/request/access.py), tried as a new user would with ``TTS_ADMIN_TOKEN`` set:
over the real HTTP API and through the real web UI (gradio_client), both served on a
loopback port by the real app; tone engine, cache under ``tmp_path``."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import soundfile as sf
from conftest import serving
from gradio_client import Client, handle_file

import webui
from lib.config import load_config
from lib.engines.tone import ToneEngine
from lib.errors import ConflictError, ForbiddenError, UnauthorizedError
from lib.pipeline.service import TTSService
from lib.request.access import LOCAL, AccessPolicy, Action, Caller, allows, check
from lib.request.types import TTSRequest

TOKEN = "access-test-token"


def wav(hz: float = 180.0, seconds: float = 2.0, rate: int = 16_000) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    samples = 0.3 * np.sin(2 * np.pi * hz * t) * (1 + 0.5 * np.sin(2 * np.pi * 4 * t))
    buf = io.BytesIO()
    sf.write(buf, samples.astype(np.float32), rate, format="WAV", subtype="PCM_16")
    return buf.getvalue()


@pytest.fixture
def service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TTSService]:
    monkeypatch.setenv("TTS_ADMIN_TOKEN", TOKEN)  # read by the policy at each check
    config = load_config(env={}, overrides={"engine": "tone", "cache.dir": str(tmp_path / "cache"),
                                            "voices.prewarm": False})  # fmt: skip
    svc = TTSService(config, ToneEngine())
    yield svc
    svc.close()


@pytest.fixture
def app_url(service: TTSService, free_port: int, tmp_path: Path) -> Iterator[str]:
    phrases = tmp_path / "hot.json"
    phrases.write_text(
        json.dumps({"voices": {"low": "tone-low"}, "phrases": [{"text": "欢迎光临", "voice": "low"}]}), encoding="utf-8"
    )
    with serving(webui.create_app(service, phrases_path=phrases), free_port) as url:
        yield url.rstrip("/")


@pytest.fixture
def http(app_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=app_url, timeout=30) as client:
        yield client


@pytest.fixture
def ui(app_url: str, tmp_path: Path) -> Client:
    return Client(app_url + "/", verbose=False, download_files=str(tmp_path / "downloads"))


def bearer(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def save(http: httpx.Client, name: str, audio: bytes, headers: dict[str, str] | None = None, **data: str) -> Any:
    return http.post(
        "/api/voices", data={"name": name, **data}, files={"prompt_audio": ("v.wav", audio, "audio/wav")},
        headers=headers or {},
    )  # fmt: skip


def fingerprint(service: TTSService, name: str) -> str:
    saved = service.voices.library.get(name)
    assert saved is not None
    return saved.prompt.fingerprint


# -- the rule itself --------------------------------------------------------------------------


def test_the_rule_opens_only_synthesis_new_voices_and_preload() -> None:
    anyone = AccessPolicy(token="t").caller(origin="http", client_host="203.0.113.9", token=None)
    admin = AccessPolicy(token="t").caller(origin="http", client_host="203.0.113.9", token="t")
    local_without_token = AccessPolicy(token=None).caller(origin="ui", client_host="127.0.0.1", token=None)
    remote_without_token = AccessPolicy(token=None).caller(origin="ui", client_host="203.0.113.9", token=None)
    for action in Action:
        expected = action in (Action.SYNTHESISE, Action.SAVE_VOICE, Action.PRELOAD)
        assert allows(anyone, action) is expected, action
        assert allows(remote_without_token, action) is expected, action
        assert allows(admin, action) and allows(local_without_token, action) and allows(LOCAL, action)
    with pytest.raises(UnauthorizedError, match="admin token"):
        check(anyone, Action.DELETE_VOICE)
    wrong = AccessPolicy(token="t").caller(origin="http", client_host="127.0.0.1", token="x")
    with pytest.raises(ForbiddenError, match="wrong"):
        check(wrong, Action.REPLACE_VOICE)
    with pytest.raises(ForbiddenError, match="TTS_ADMIN_TOKEN"):
        check(Caller(admin=False), Action.ADMIN)


def test_a_bare_token_without_bearer_is_refused_with_how_to_send_it(http: httpx.Client, service: TTSService) -> None:
    """The right token, sent as ``Authorization: <token>``, is not the admin: only
    ``Bearer <token>`` is compared, and the refusal says to add ``Bearer``."""
    for header in (TOKEN, f"Token {TOKEN}", f"Basic {TOKEN}"):
        refused = http.post("/api/cache/clear", headers={"Authorization": header})
        assert refused.status_code == 401, (header, refused.text)
        assert "Bearer <token>" in refused.json()["error"] and "add 'Bearer '" in refused.json()["error"]
        stats = http.get("/api/cache/stats", headers={"Authorization": header}).json()
        assert "top_requested" not in stats  # users' texts: not for a bare token either
    assert http.post("/api/cache/clear", headers=bearer()).status_code == 200
    assert http.post("/api/cache/clear", headers={"Authorization": f"bearer {TOKEN}"}).status_code == 200


# -- HTTP: a saved voice cannot be hijacked ------------------------------------------------------


def test_http_save_over_a_taken_name_is_409_and_replace_needs_the_token(
    http: httpx.Client, service: TTSService
) -> None:
    assert save(http, "counter", wav(180)).status_code == 201
    original = fingerprint(service, "counter")
    taken = save(http, "counter", wav(300))
    assert taken.status_code == 409 and "is taken" in taken.json()["error"]
    assert save(http, "counter", wav(300), replace="true").status_code == 401
    assert save(http, "counter", wav(300), bearer("wrong"), replace="true").status_code == 403
    assert save(http, "counter", wav(300), bearer(), replace="false").status_code == 409  # the admin too, unasked
    assert fingerprint(service, "counter") == original  # every refusal left the voice as it was
    replaced = save(http, "counter", wav(300), bearer(), replace="true")
    assert replaced.status_code == 201
    assert fingerprint(service, "counter") == replaced.json()["voice"]["fingerprint"] != original


def test_http_delete_needs_the_token(http: httpx.Client, service: TTSService) -> None:
    assert save(http, "lobby", wav()).status_code == 201
    assert http.delete("/api/voices/lobby").status_code == 401
    assert http.delete("/api/voices/lobby", headers=bearer("wrong")).status_code == 403
    assert service.voices.library.get("lobby") is not None
    assert http.delete("/api/voices/lobby", headers=bearer()).status_code == 200
    assert service.voices.library.get("lobby") is None


def test_public_statistics_show_no_texts_and_the_admins_do(http: httpx.Client) -> None:
    secret = "Patient Zhang Wei, room 12, please come to the pharmacy."
    for _ in range(2):
        assert http.post("/api/tts", data={"text": secret, "voice": "tone-low"}).status_code == 200
    public = http.get("/api/cache/stats")
    assert public.status_code == 200
    assert public.json()["hits"] == 1 and public.json()["misses"] == 1  # counts are public
    assert "Zhang" not in public.text and "top_requested" not in public.json()
    assert "Zhang" not in http.get("/api/cache/stats", headers=bearer("wrong")).text
    admin = http.get("/api/cache/stats", headers=bearer()).json()
    assert admin["top_requested"][0]["text"] == secret and admin["top_requested"][0]["count"] == 2


# -- the web UI asks for the token where an action needs it -------------------------------------


def test_ui_delete_without_the_token_is_refused(ui: Client, service: TTSService, testdata_dir: Path) -> None:
    prompt = handle_file(str(testdata_dir / "male_prompt.wav"))
    ui.predict("front desk", prompt, "", False, "", api_name="/save_voice")
    assert service.voices.library.get("front desk") is not None
    for token in ("", "wrong"):
        with pytest.raises(Exception, match="admin token"):
            ui.predict("front desk", token, api_name="/delete_voice")
        assert service.voices.library.get("front desk") is not None  # still there
    ui.predict("front desk", TOKEN, api_name="/delete_voice")
    assert service.voices.library.get("front desk") is None


def test_ui_save_over_a_taken_name_is_refused_unless_the_admin_replaces(
    ui: Client, service: TTSService, testdata_dir: Path
) -> None:
    ui.predict("desk", handle_file(str(testdata_dir / "male_prompt.wav")), "", False, "", api_name="/save_voice")
    original = fingerprint(service, "desk")
    other = handle_file(str(testdata_dir / "zh_female_prompt.wav"))
    with pytest.raises(Exception, match="is taken"):
        ui.predict("desk", other, "", False, "", api_name="/save_voice")
    with pytest.raises(Exception, match="admin token"):
        ui.predict("desk", other, "", True, "", api_name="/save_voice")
    assert fingerprint(service, "desk") == original
    ui.predict("desk", other, "", True, TOKEN, api_name="/save_voice")
    assert fingerprint(service, "desk") != original


def test_ui_preload_with_force_needs_the_admin(ui: Client, service: TTSService) -> None:
    first = ui.predict(None, False, "", api_name="/preload")  # anyone may preload
    assert "1 generated" in first
    key = service.resolve(TTSRequest(text="欢迎光临", voice="tone-low")).key
    service.cache.flush()
    assert service.cache.store.contains(key)
    calls = service.engine.calls  # type: ignore[attr-defined]
    for token in ("", "wrong"):
        with pytest.raises(Exception, match=r"admin token|wrong"):
            ui.predict(None, True, token, api_name="/preload")
    assert service.engine.calls == calls and service.cache.store.contains(key)  # type: ignore[attr-defined]
    forced = ui.predict(None, True, TOKEN, api_name="/preload")
    assert "1 generated" in forced and service.engine.calls == calls + 1  # type: ignore[attr-defined]


def test_ui_preload_enables_an_uploaded_lists_templates_for_the_admin_only(
    ui: Client, http: httpx.Client, service: TTSService, tmp_path: Path
) -> None:
    """The fault probe's capture: anyone uploaded ``"{x} front desk."`` (a characters
    slot) through ``/preload`` and every later miss in that voice was spelled letter by
    letter. Now a non-admin's templates are preloaded as pieces and not enabled."""
    upload = tmp_path / "capture.json"
    upload.write_text(json.dumps({
        "voices": {"low": "tone-low"},
        "templates": [{"template": "Please collect your {x} at the front desk.", "voice": "low",
                       "slots": {"x": {"pattern": "[a-z]{1,8}", "read": "characters"}}}],
    }), encoding="utf-8")  # fmt: skip
    configured = len(service.templates)  # those of templates.file
    anyone = ui.predict(handle_file(str(upload)), False, "", api_name="/preload")
    assert "preloaded as pieces only, not enabled" in anyone and len(service.templates) == configured
    other_user = http.post("/api/tts", data={"text": "Please collect your order at the front desk.",
                                             "voice": "tone-low"})  # fmt: skip
    assert other_user.status_code == 200 and other_user.headers["X-Cache"] == "MISS"
    admin = ui.predict(handle_file(str(upload)), False, TOKEN, api_name="/preload")
    assert "1 template(s) active" in admin and len(service.templates) == configured + 1
    composed = http.post("/api/tts", data={"text": "Please collect your parcel at the front desk.",
                                           "voice": "tone-low"})  # fmt: skip
    assert composed.headers["X-Cache"] == "COMPOSED"


def test_ui_export_needs_the_admin(ui: Client) -> None:
    ui.predict("preset", None, "tone-low", "", "announce this", "", 0, 1.0, "wav", True, api_name="/synthesise")
    with pytest.raises(Exception, match="admin token"):
        ui.predict("", api_name="/export_phrases")
    path, _ = ui.predict(TOKEN, api_name="/export_phrases")
    exported = json.loads(Path(path).read_text(encoding="utf-8"))
    assert exported["phrases"] == [{"text": "announce this", "voice": "tone-low"}]


def test_service_refuses_a_taken_name_for_every_caller(service: TTSService) -> None:
    t = np.arange(32_000) / 16_000
    audio = (16_000, (0.3 * np.sin(2 * np.pi * 200 * t) * (1 + 0.5 * np.sin(2 * np.pi * 4 * t))).astype("float32"))
    service.voices.save("desk", audio, caller=LOCAL)
    with pytest.raises(ConflictError):
        service.voices.save("desk", audio, caller=LOCAL)  # LOCAL is the admin, but did not ask to replace
    anyone = service.access.caller(origin="ui", client_host="127.0.0.1", token=None)
    with pytest.raises(UnauthorizedError):
        service.voices.save("desk", audio, replace=True, caller=anyone)
    with pytest.raises(UnauthorizedError):
        service.voices.delete("desk", caller=anyone)


def test_voice_transcripts_are_for_the_admin(http: httpx.Client) -> None:
    transcript = "My name is Li Na and my number is 138 0000 0000."
    assert save(http, "li na", wav(), prompt_text=transcript).status_code == 201
    public = http.get("/api/voices")
    assert public.status_code == 200 and "138 0000" not in public.text
    listed = {v["name"]: v for v in public.json()["voices"]}
    assert listed["li na"]["has_prompt_text"] is True and "prompt_text" not in listed["li na"]
    admin = {v["name"]: v for v in http.get("/api/voices", headers=bearer()).json()["voices"]}
    assert admin["li na"]["prompt_text"] == transcript
