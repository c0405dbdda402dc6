"""The web UI driven through its Gradio API with ``gradio_client``, against the real app
(UI and HTTP API on one port) served by uvicorn on a free loopback port; tone engine,
cache under ``tmp_path``."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import REPO, serving
from gradio_client import Client, handle_file

import webui
from lib.config import load_config
from lib.errors import ValidationError
from lib.phrases import load_phrases
from lib.request import TTSRequest
from lib.service import TTSService
from lib.ui.views import hit_rate_frame


@pytest.fixture
def service(tmp_path: Path) -> Iterator[TTSService]:
    svc = TTSService(load_config(env={}, overrides={"cache.dir": str(tmp_path / "cache"), "engine": "tone"}))
    yield svc
    svc.close()


@pytest.fixture
def client(service: TTSService, free_port: int, tmp_path: Path) -> Iterator[Client]:
    phrases = tmp_path / "hot.json"
    phrases.write_text(
        json.dumps(
            {
                "voices": {"low": {"preset": "tone-low"}},
                "phrases": [{"text": "欢迎光临", "voice": "low", "seeds": [1, 2, 3]}],
            }
        ),
        encoding="utf-8",
    )
    with serving(webui.create_app(service, phrases_path=phrases), free_port) as url:
        yield Client(url, verbose=False, download_files=str(tmp_path / "downloads"))


def _synth(client: Client, **over: Any) -> tuple[str, str, str]:
    form: dict[str, Any] = {
        "mode": "preset", "prompt_audio": None, "voice": "tone-low", "prompt_text": "",
        "text": "请A023号顾客到3号窗口办理业务", "style": "", "seed": 0, "speed": 1.0, "fmt": "wav", "use_cache": True,
    }  # fmt: skip
    form.update(over)
    result: tuple[str, str, str] = client.predict(*form.values(), api_name="/synthesise")
    return result


def _md5(path: str) -> str:
    return hashlib.md5(Path(path).read_bytes()).hexdigest()


def test_prompt_upload_miss_then_hit_with_identical_audio(client: Client, testdata_dir: Path) -> None:
    prompt = handle_file(str(testdata_dir / "zh_female_prompt.wav"))
    form = {"mode": "zero_shot", "prompt_audio": prompt, "voice": None, "prompt_text": "希望你以后能够做的比我还好呦。"}
    first_audio, first_badge, first_details = _synth(client, **form)
    second_audio, second_badge, second_details = _synth(client, **form)
    assert 'data-cache="MISS"' in first_badge and ">MISS<" in first_badge
    assert 'data-cache="HIT"' in second_badge
    assert _md5(first_audio) == _md5(second_audio)
    key = first_details.split("`")[1]
    assert len(key) == 32 and key in second_details
    assert "ms" in second_details


def test_use_cache_off_is_bypass_and_formats_are_served(client: Client) -> None:
    _, badge, _ = _synth(client, use_cache=False)
    assert 'data-cache="BYPASS"' in badge
    audio, badge, _ = _synth(client, fmt="mp3", seed=7)
    assert audio.endswith(".mp3") and Path(audio).read_bytes()[:2] in (b"ID", b"\xff\xfb", b"\xff\xf3")
    assert 'data-cache="MISS"' in badge


def test_validation_error_stops_the_request_with_a_fix(client: Client, service: TTSService, testdata_dir: Path) -> None:
    prompt = handle_file(str(testdata_dir / "zh_female_prompt.wav"))
    with pytest.raises(Exception, match="zero_shot mode needs the transcript"):
        _synth(client, mode="zero_shot", voice=None, prompt_audio=prompt)
    with pytest.raises(Exception, match="clones a prompt voice; upload prompt audio"):
        _synth(client, mode="zero_shot", voice="tone-low")
    with pytest.raises(Exception, match="instruct mode needs a style instruction"):
        _synth(client, mode="instruct")
    with pytest.raises(Exception, match="pick a preset or saved voice"):
        _synth(client, voice=None)
    assert service.engine.calls == 0  # type: ignore[attr-defined]


def test_save_voice_then_synthesise_in_it_then_delete(client: Client, service: TTSService, testdata_dir: Path) -> None:
    prompt = handle_file(str(testdata_dir / "male_prompt.wav"))
    client.predict("desk", prompt, "", False, "", api_name="/save_voice")
    assert "desk" in [v["name"] for v in service.list_voices() if v["kind"] == "saved"]
    _, badge, _ = _synth(client, mode="cross_lingual", voice="desk", text="Customer A023, counter 3.")
    assert 'data-cache="MISS"' in badge
    client.predict("desk", "", api_name="/delete_voice")
    assert "desk" not in [v["name"] for v in service.list_voices()]
    with pytest.raises(Exception, match="no saved voice named"):
        client.predict("desk", "", api_name="/delete_voice")


def test_admin_actions_need_confirmation(client: Client, service: TTSService) -> None:
    _synth(client)
    service.flush()
    assert service.snapshot()["entries"] == 1
    with pytest.raises(Exception, match="I understand"):
        client.predict(False, "", "", api_name="/admin_clear")
    assert service.snapshot()["entries"] == 1
    message, confirmed = client.predict(True, "", "", api_name="/admin_clear")
    assert '"removed": 1' in message and confirmed is False
    assert service.snapshot()["entries"] == 0
    message, _ = client.predict(True, "", "", api_name="/admin_verify")
    assert '"corrupt_removed": 0' in message


def test_admin_token_is_required_when_configured(
    client: Client, service: TTSService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(service.config.server.admin_token_env, "s3cret")
    with pytest.raises(Exception, match="admin token"):
        client.predict(True, "wrong", "", api_name="/admin_sweep")
    message, _ = client.predict(True, "s3cret", "", api_name="/admin_sweep")
    assert "expired_removed" in message


def test_evict_model_version_removes_its_entries(client: Client, service: TTSService) -> None:
    _synth(client)
    _synth(client, seed=1)
    service.flush()
    message, _ = client.predict(True, "", service.tag, api_name="/admin_evict")
    assert '"removed": 2' in message
    _, badge, _ = _synth(client)
    assert 'data-cache="MISS"' in badge


def test_export_top_phrases_is_a_valid_phrase_file(client: Client, tmp_path: Path, testdata_dir: Path) -> None:
    for _ in range(3):
        _synth(client, text="欢迎光临")
    _synth(client, text="Mind the gap", voice="tone-high")
    _synth(client, text="seeded, with its punctuation kept exactly!", seed=9, speed=1.25)
    prompt = handle_file(str(testdata_dir / "male_prompt.wav"))
    _synth(client, mode="cross_lingual", voice=None, prompt_audio=prompt, text="in an uploaded voice")
    path, message = client.predict("", api_name="/export_phrases")
    document = json.loads(Path(path).read_text(encoding="utf-8"))
    assert document["phrases"][0] == {"text": "欢迎光临", "voice": "tone-low"}
    assert {"text": "seeded, with its punctuation kept exactly!", "voice": "tone-low", "seed": 9, "speed": 1.25} in (
        document["phrases"]
    )
    assert {p["text"] for p in document["phrases"]} == {
        "欢迎光临", "Mind the gap", "seeded, with its punctuation kept exactly!"
    }  # fmt: skip
    assert document["voices"] == {"tone-low": {"preset": "tone-low"}, "tone-high": {"preset": "tone-high"}}
    assert "'in an uploaded voice' was spoken in an uploaded recording that is not a saved voice" in message
    assert len(load_phrases(path)) == 3


def test_preload_tab_fills_the_cache(client: Client, service: TTSService) -> None:
    first = client.predict(None, False, "", api_name="/preload")
    second = client.predict(None, False, "", api_name="/preload")
    assert "preload: 3 phrases, 3 generated, 0 already cached, 0 failed" in first
    assert "preload: 3 phrases, 0 generated, 3 already cached, 0 failed" in second
    hit = service.synthesise(TTSRequest(text="欢迎光临", voice="tone-low", seed=2))
    assert hit.cache == "HIT"


def test_ui_and_api_share_one_port(client: Client) -> None:
    base = client.src.rstrip("/")
    page = httpx.get(base + "/", timeout=10)
    assert page.status_code == 200 and "gradio" in page.text.lower()
    health = httpx.get(base + "/healthz", timeout=10)
    assert health.status_code == 200 and health.json()["engine"] == "tone"
    assert httpx.get(base + "/metrics", timeout=10).status_code == 200


def test_build_request_maps_modes_to_voice_fields() -> None:
    args = dict(prompt_text="transcript", text="hi", style="calm", seed=3, speed=1.0, fmt="wav", use_cache=True)
    preset = webui.build_request("preset", "/tmp/p.wav", "tone-low", **args)  # type: ignore[arg-type]
    assert (preset.voice, preset.prompt_audio, preset.prompt_text, preset.mode) == ("tone-low", None, "", "preset")
    clone = webui.build_request("zero_shot", "/tmp/p.wav", "tone-low", **args)  # type: ignore[arg-type]
    assert (clone.voice, clone.prompt_audio, clone.prompt_text) == (None, "/tmp/p.wav", "transcript")
    cross = webui.build_request("cross_lingual", None, "saved", **args)  # type: ignore[arg-type]
    assert (cross.voice, cross.prompt_text, cross.style) == ("saved", "", "calm")
    with pytest.raises(ValidationError, match="seed"):
        webui.build_request("preset", None, "tone-low", **{**args, "seed": 1.5})  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="upload or record"):
        webui.build_request("instruct", None, None, **args)  # type: ignore[arg-type]


def test_hit_rate_frame_is_a_rolling_rate() -> None:
    samples = [(1.0, "miss", 0.1), (2.0, "hit", 0.001), (3.0, "bypass", 0.1), (4.0, "hit", 0.001)]
    frame = hit_rate_frame(samples, window=2)
    assert list(frame["hit_rate"]) == [0.0, 50.0, 100.0]


def test_importing_webui_has_no_side_effects(tmp_path: Path) -> None:
    code = "import sys, threading; sys.path.insert(0, sys.argv[1]); import webui; print(threading.active_count())"
    out = subprocess.run(
        [sys.executable, "-c", code, str(REPO)], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=True
    )
    assert list(tmp_path.iterdir()) == []  # no cache directory, no files
    assert out.stdout.strip() == "1"  # no server or worker threads


def test_admin_rule_is_the_access_policy() -> None:
    from lib.access import AccessPolicy, Action, check
    from lib.errors import ForbiddenError, UnauthorizedError

    def refusal(token: str, given: str, client: str) -> str | None:
        caller = AccessPolicy("TTS_ADMIN_TOKEN", token=token).caller(origin="ui", client_host=client, token=given)
        try:
            check(caller, Action.ADMIN)
        except (ForbiddenError, UnauthorizedError) as exc:
            return str(exc)
        return None

    assert refusal("", "", "127.0.0.1") is None
    assert refusal("", "", "::1") is None
    assert "another machine" in (refusal("", "", "192.0.2.7") or "")
    assert "another machine" in (refusal("", "", "") or "")
    assert refusal("s3cret", "s3cret", "192.0.2.7") is None
    assert "token is wrong" in (refusal("s3cret", "nope", "127.0.0.1") or "")
    assert "send the admin token" in (refusal("s3cret", "", "127.0.0.1") or "")


def test_preloaded_template_answers_composed_with_its_badge(client: Client, tmp_path: Path) -> None:
    templates = tmp_path / "templates.json"
    templates.write_text(json.dumps({
        "voices": {"low": "tone-low"},
        "templates": [{"template": "请{ticket}号顾客到{window}号窗口", "voice": "low",
                       "slots": {"ticket": {"pattern": "[A-C][0-9]{3}", "read": "characters"},
                                 "window": {"values": ["1", "2"], "read": "number"}}}],
    }, ensure_ascii=False), encoding="utf-8")  # fmt: skip
    report = client.predict(handle_file(str(templates)), False, "", api_name="/preload")
    # 请, 号顾客到, 号窗口, A-C and 零-九 (一 and 二 are the window numbers too): 16 pieces
    assert "preload: 16 phrases, 16 generated" in report and "1 template(s) active" in report
    _, badge, details = _synth(client, text="请B207号顾客到2号窗口")
    assert 'data-cache="COMPOSED"' in badge and "#1d4ed8" in badge
    assert '"segments_synthesised": 0' in details


def test_live_synthesis_plays_each_sentence_before_the_whole(client: Client, service: TTSService) -> None:
    if not webui.live_playback_available():
        if os.environ.get("CI"):
            pytest.fail("ffmpeg is missing; .ci/run installs it with apt-get install ffmpeg")
        pytest.skip("the live player needs ffmpeg (apt-get install ffmpeg); CI runs this test")
    form: dict[str, Any] = {
        "mode": "preset", "prompt_audio": None, "voice": "tone-low", "prompt_text": "",
        "text": "第一句话在这里。第二句话也在这里。第三句话还在这里。", "style": "", "seed": 0, "speed": 1.0,
        "fmt": "wav", "use_cache": True,
    }  # fmt: skip
    job = client.submit(*form.values(), api_name="/synthesise_live")
    updates = list(job)
    live = [u for u in updates if isinstance(u[0], str)]
    assert len(live) == 3 and all(u[1] == {"__type__": "update"} for u in live)  # the result player waits
    final = job.result()
    assert final[0] == {"__type__": "update"} and final[1].endswith(".wav") and 'data-cache="MISS"' in final[2]
    whole = service.synthesise(TTSRequest(text=form["text"], voice="tone-low"))
    assert whole.cache == "HIT" and _md5(final[1]) == hashlib.md5(whole.wav).hexdigest()
