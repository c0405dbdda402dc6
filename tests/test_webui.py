"""The web UI driven through its Gradio API with ``gradio_client``, against the real app
(UI and HTTP API on one port) served by uvicorn on a free loopback port; tone engine,
cache under ``tmp_path``. What the operator sees in a browser is in test_browser.py."""

from __future__ import annotations

import hashlib
import json
import os
import re
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
from lib.errors import EngineError, ValidationError
from lib.pipeline.service import TTSService
from lib.request.access import LOCAL
from lib.request.phrases import load_phrases
from lib.request.types import TTSRequest
from lib.ui.plots import hit_rate_plot, window_rate


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


_FORM: dict[str, Any] = {
    "mode": "preset", "prompt_audio": None, "voice": "tone-low", "prompt_text": "",
    "text": "请A023号顾客到3号窗口办理业务", "style": "", "seed": 0, "speed": 1.0, "fmt": "wav", "use_cache": True,
}  # fmt: skip


def _synth(client: Client, **over: Any) -> tuple[str, str, str]:
    """(audio path, badge HTML, details Markdown) of one request through the UI's API."""
    audio, badge, details, _notice = client.predict(*{**_FORM, **over}.values(), api_name="/synthesise")
    return audio, badge, details


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
    """Each refusal is the API's rule, in Chinese and English, naming the field by its
    label in the form; nothing reaches the engine (seed 1.5 and speed 5 are not rounded)."""
    prompt = handle_file(str(testdata_dir / "zh_female_prompt.wav"))
    cases: list[tuple[dict[str, Any], str, str]] = [
        ({"mode": "zero_shot", "voice": None, "prompt_audio": prompt}, "参考音频文本 Prompt transcript：零样本克隆需要",
         "needs the transcript of the prompt audio"),
        ({"mode": "zero_shot", "voice": "tone-low"}, "参考音频 Prompt audio：克隆模式需要参考音频",
         "upload prompt audio or pick a saved voice"),
        ({"mode": "instruct"}, "风格指令 Style：指令控制需要风格指令", "needs a style instruction"),
        ({"voice": None}, "音色 Voice：请从列表中选择", "pick a preset or saved voice"),
        ({"seed": 1.5}, "随机种子 Seed：须为 0 到 4294967295 的整数", "a whole number from 0 to 4294967295, got 1.5"),
        ({"seed": -1}, "随机种子 Seed：-1 超出范围", "use 0 to 4294967295"),
        ({"speed": 5}, "语速 Speed：5 超出范围，请填 0.25 到 4.0", "5 is out of range; use 0.25 to 4.0"),
        ({"text": ""}, "合成文本 Text to speak：为空", "type the words to speak"),
    ]  # fmt: skip
    for form, chinese, english in cases:
        with pytest.raises(Exception, match="failed validation") as refused:
            _synth(client, **form)
        shown = str(refused.value).split("\n- ", 1)[1].split(": ", 1)[1]  # after Gradio's "- <parameter>: "
        assert chinese in shown and english in shown, form
        assert not re.search(r"prompt_text|prompt_audio|zero_shot|cross_lingual", shown), shown
    assert service.engine.calls == 0  # type: ignore[attr-defined]


def test_engine_failure_is_a_bilingual_error_and_not_cached(client: Client, service: TTSService) -> None:
    service.engine.fail = EngineError("the engine fell over")  # type: ignore[attr-defined]
    with pytest.raises(Exception, match="合成失败，未缓存任何内容 — the engine fell over"):
        _synth(client, text="会失败的一句话")
    service.engine.fail = None  # type: ignore[attr-defined]
    _, badge, _ = _synth(client, text="会失败的一句话")
    assert 'data-cache="MISS"' in badge


def test_download_name_says_what_the_file_is(client: Client) -> None:
    audio, _, details = _synth(client, text="请A023号顾客到3号窗口办理业务。", seed=7, fmt="mp3")
    key = details.split("`")[1]
    assert Path(audio).name == f"tone-low_请A023号顾客到3号窗口办理业务_seed7_{key[:6]}.mp3"
    assert Path(audio).name in details


def test_save_voice_then_synthesise_in_it_then_delete(client: Client, service: TTSService, testdata_dir: Path) -> None:
    prompt = handle_file(str(testdata_dir / "male_prompt.wav"))
    *_, message = client.predict("desk", prompt, "", False, "", api_name="/save_voice")
    assert "已保存音色「desk」" in message and "Saved the voice 'desk'" in message
    assert "desk" in [v["name"] for v in service.voices.list(caller=LOCAL) if v["kind"] == "saved"]
    _, badge, _ = _synth(client, mode="cross_lingual", voice="desk", text="Customer A023, counter 3.")
    assert 'data-cache="MISS"' in badge
    client.predict("desk", "", api_name="/delete_voice")
    assert "desk" not in [v["name"] for v in service.voices.list(caller=LOCAL)]
    with pytest.raises(Exception, match="没有名为「desk」的已存音色 — no saved voice named 'desk'"):
        client.predict("desk", "", api_name="/delete_voice")


def test_saving_over_a_name_is_refused_unless_the_admin_replaces(
    client: Client, service: TTSService, testdata_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = (handle_file(str(testdata_dir / f)) for f in ("male_prompt.wav", "zh_female_prompt.wav"))
    client.predict("desk", first, "", False, "", api_name="/save_voice")

    def fingerprint() -> str:
        return str(next(v["fingerprint"] for v in service.voices.list(caller=LOCAL) if v["name"] == "desk"))

    before = fingerprint()
    with pytest.raises(Exception, match="音色名称 Voice name：「desk」已被使用"):
        client.predict("desk", second, "", False, "", api_name="/save_voice")
    monkeypatch.setenv(service.config.server.admin_token_env, "s3cret")
    with pytest.raises(Exception, match="管理员令牌不正确"):
        client.predict("desk", second, "", True, "wrong", api_name="/save_voice")
    assert fingerprint() == before
    client.predict("desk", second, "希望你以后能够做的比我还好呦。", True, "s3cret", api_name="/save_voice")
    assert fingerprint() != before


def test_presets_cannot_be_deleted(client: Client, service: TTSService) -> None:
    with pytest.raises(Exception, match="预置音色不能删除 — voice 'tone-low' is a preset voice"):
        client.predict("tone-low", "", api_name="/delete_voice")
    assert "tone-low" in [v["name"] for v in service.voices.list(caller=LOCAL)]


def test_admin_actions_need_confirmation(client: Client, service: TTSService) -> None:
    _synth(client)
    service.cache.flush()
    assert service.dashboard.snapshot(caller=LOCAL)["entries"] == 1
    with pytest.raises(Exception, match="请先勾选「我已确认」"):
        client.predict(False, "", None, api_name="/admin_clear")
    assert service.dashboard.snapshot(caller=LOCAL)["entries"] == 1
    message, confirmed = client.predict(True, "", None, api_name="/admin_clear")
    assert "已清空缓存：删除 1 条" in message and "Cleared the cache: 1 entry removed" in message
    assert confirmed is False  # the box is unticked after every action
    assert service.dashboard.snapshot(caller=LOCAL)["entries"] == 0
    message, _ = client.predict(True, "", None, api_name="/admin_verify")
    assert "Checked 0 entries, removed 0 corrupt" in message and "{" not in message


def test_admin_token_is_required_when_configured(
    client: Client, service: TTSService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(service.config.server.admin_token_env, "s3cret")
    with pytest.raises(Exception, match="管理员令牌不正确 — the admin token is wrong"):
        client.predict(True, "wrong", None, api_name="/admin_sweep")
    message, _ = client.predict(True, "s3cret", None, api_name="/admin_sweep")
    assert "Removed 0 expired entries" in message


def test_evict_chooses_a_model_version_present_in_the_cache(client: Client, service: TTSService) -> None:
    _synth(client)
    _synth(client, seed=1)
    service.cache.flush()
    assert service.dashboard.tags() == [(service.tag, 2)]
    with pytest.raises(Exception, match="请从列表中选择要清除的模型版本"):
        client.predict(True, "", None, api_name="/admin_evict")  # nothing chosen: nothing evicted
    assert service.dashboard.snapshot(caller=LOCAL)["entries"] == 2
    message, _ = client.predict(True, "", service.tag, api_name="/admin_evict")
    assert f"Removed 2 entries of model version `{service.tag}`" in message
    assert service.dashboard.tags() == []
    _, badge, _ = _synth(client)
    assert 'data-cache="MISS"' in badge


@pytest.mark.slow
def test_export_top_phrases_is_a_valid_phrase_file(client: Client, tmp_path: Path, testdata_dir: Path) -> None:
    for _ in range(3):
        _synth(client, text="欢迎光临")
    _synth(client, text="Mind the gap", voice="tone-high")
    _synth(client, text="seeded, with its punctuation kept exactly!", seed=9, speed=1.25)
    _synth(client, text="下一站，人民广场。  请从左侧车门下车！", style="慢一点，开心")
    prompt = handle_file(str(testdata_dir / "male_prompt.wav"))
    _synth(client, mode="cross_lingual", voice=None, prompt_audio=prompt, text="in an uploaded voice")
    path, message = client.predict("", api_name="/export_phrases")
    document = json.loads(Path(path).read_text(encoding="utf-8"))
    assert document["phrases"][0] == {"text": "欢迎光临", "voice": "tone-low"}
    assert {"text": "seeded, with its punctuation kept exactly!", "voice": "tone-low", "seed": 9, "speed": 1.25} in (
        document["phrases"]
    )
    # The operator's text and style exactly as typed (not the key's folded "下一站,人民广场。 请…!").
    assert {"text": "下一站，人民广场。  请从左侧车门下车！", "voice": "tone-low", "style": "慢一点，开心"} in (
        document["phrases"]
    )
    assert {p["text"] for p in document["phrases"]} == {
        "欢迎光临", "Mind the gap", "seeded, with its punctuation kept exactly!",
        "下一站，人民广场。  请从左侧车门下车！",
    }  # fmt: skip
    assert document["voices"] == {"tone-low": {"preset": "tone-low"}, "tone-high": {"preset": "tone-high"}}
    assert "'in an uploaded voice' was spoken in an uploaded recording that is not a saved voice" in message
    assert "已导出 4 条短语 Exported 4 phrases" in message and "请先在「音色」页保存" in message
    assert len(load_phrases(path)) == 4


def test_preload_tab_fills_the_cache(client: Client, service: TTSService) -> None:
    first = client.predict(None, False, "", api_name="/preload")
    second = client.predict(None, False, "", api_name="/preload")
    assert "preload: 3 phrases, 3 generated, 0 already cached, 0 failed" in first
    assert "preload: 3 phrases, 0 generated, 3 already cached, 0 failed" in second
    hit = service.synthesise(TTSRequest(text="欢迎光临", voice="tone-low", seed=2))
    assert hit.cache == "HIT"


def test_a_bad_phrase_file_is_named_by_its_name_not_its_server_path(client: Client, tmp_path: Path) -> None:
    bad = tmp_path / "my phrases.json"
    bad.write_text('{"voices": {"a": "tone-low"}, "phrases": [{"text": "hi", "voice": "b"}]}', encoding="utf-8")
    with pytest.raises(Exception) as refused:
        client.predict(handle_file(str(bad)), False, "", api_name="/preload")
    message = str(refused.value)
    assert message.startswith("短语列表有误 — my phrases.json: phrases[0]"), message
    assert "/tmp" not in message and "gradio" not in message and str(tmp_path) not in message


def test_ui_and_api_share_one_port(client: Client) -> None:
    base = client.src.rstrip("/")
    page = httpx.get(base + "/", timeout=10)
    assert page.status_code == 200 and "gradio" in page.text.lower()
    health = httpx.get(base + "/healthz", timeout=10)
    assert health.status_code == 200 and health.json()["engine"] == "tone"
    assert httpx.get(base + "/metrics", timeout=10).status_code == 200


def test_every_api_error_is_json_even_where_the_ui_gets_the_path(client: Client) -> None:
    """With the UI mounted at ``/`` it gets every path the API has no route for: its
    routing 404s and 405s answer in the API's shape too, not FastAPI's ``{"detail"}``."""
    base = client.src.rstrip("/")
    for method, path, status in [
        ("GET", "/api/nope", 404), ("POST", "/api/voices/x/y", 404), ("GET", "/healthz/x", 404), ("GET", "/nope", 404),
        ("GET", "/gradio_api/nope", 404), ("PATCH", "/api/tts", 405), ("GET", "/api/tts", 405),
    ]:  # fmt: skip
        answer = httpx.request(method, base + path, timeout=10)
        assert answer.status_code == status, (method, path, answer.text)
        assert set(answer.json()) == {"error"} and path in answer.json()["error"], (method, path, answer.text)
    openai = httpx.get(base + "/v1/nope", timeout=10)
    assert openai.status_code == 404 and "no such endpoint" in openai.json()["error"]["message"]
    bad_json = httpx.post(
        base + "/api/cache/clear", content=b"{nope", headers={"content-type": "application/json"}, timeout=10
    )
    assert bad_json.status_code == 400 and bad_json.json() == {
        "error": "body: is not valid JSON; send a JSON object as documented (see /docs)"
    }
    assert httpx.get(base + "/", timeout=10).status_code == 200  # the UI itself is still served


def test_gradios_files_are_private_named_as_promised_and_removed_at_close(
    client: Client, service: TTSService, tmp_path: Path, testdata_dir: Path
) -> None:
    """Every copy Gradio makes (a result, the export, an uploaded list and prompt) is
    in a 0700 folder of the service, never in the shared ``$TMPDIR/gradio``; folders
    0700, files 0600, the download keeps its readable name; all removed at close."""
    marker = f"私密{os.getpid()}x{tmp_path.name[-6:]}"
    shared = Path(os.environ.get("TMPDIR", "/tmp")) / "gradio"
    audio, _, details = _synth(client, text=f"请{marker}到3号窗口")
    key = details.split("`")[1]
    assert Path(audio).name == f"tone-low_请{marker}到3号窗口_seed0_{key[:6]}.wav"  # the download name
    client.predict(handle_file(str(client_phrases(tmp_path))), False, "", api_name="/preload")
    client.predict("", api_name="/export_phrases")
    client.predict("desk", handle_file(str(testdata_dir / "male_prompt.wav")), "", False, "", api_name="/save_voice")
    folder, results = Path(os.environ.get("GRADIO_TEMP_DIR", shared)), service.files.directory
    assert folder.parent == results and folder.name == "gradio"
    entries = list(folder.rglob("*"))
    names = {p.name for p in entries}
    assert f"tone-low_请{marker}到3号窗口_seed0_{key[:6]}.wav" in names
    assert {"hot_phrases.json", "male_prompt.wav", "hot.json"} <= names
    for path in [results, folder, *entries]:
        mode = path.stat().st_mode & 0o777
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))
    assert shared == folder or not any(marker in p.name for p in shared.rglob("*"))  # nothing in the shared one
    service.close()
    assert not folder.exists() and not results.exists()


def client_phrases(tmp_path: Path) -> Path:
    return tmp_path / "hot.json"


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


def test_hit_rate_over_a_chosen_window_counts_user_lookups_only() -> None:
    now = 10_000.0
    samples = [(now - 3000, "miss", 1.0), (now - 100, "miss", 1.0), (now - 50, "bypass", 1.0),
               (now - 40, "hit", 0.001), (now - 30, "hit", 0.001), (now - 20, "error", 0.1)]  # fmt: skip
    assert window_rate(samples, 900, now) == (2 / 3, 3)
    assert window_rate(samples, 3600, now) == (0.5, 4)
    assert window_rate(samples, 10, now) == (0.0, 0)
    plot = hit_rate_plot(samples, 900, now, bins=30)  # 30 s slices
    assert plot is not None
    spec = json.loads(plot.plot)
    assert [(v["rate"], v["n"]) for v in spec["data"]["values"]] == [(0.0, 1), (100.0, 1), (100.0, 1)]
    assert spec["encoding"]["y"]["scale"]["domain"] == [0, 100]


@pytest.mark.slow
def test_importing_webui_has_no_side_effects(tmp_path: Path) -> None:
    code = "import sys, threading; sys.path.insert(0, sys.argv[1]); import webui; print(threading.active_count())"
    out = subprocess.run(
        [sys.executable, "-c", code, str(REPO)], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=True
    )
    assert list(tmp_path.iterdir()) == []  # no cache directory, no files
    assert out.stdout.strip() == "1"  # no server or worker threads


def test_admin_rule_is_the_access_policy() -> None:
    from lib.errors import ForbiddenError, UnauthorizedError
    from lib.request.access import AccessPolicy, Action, check

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


def test_preloaded_template_answers_hit_of_its_pieces_and_composed_when_one_is_made(
    client: Client, service: TTSService, tmp_path: Path
) -> None:
    """An answer composed from cached pieces only is a HIT (of its pieces) in the UI,
    the first time and every time after; one that needed a piece made is COMPOSED."""
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
    calls = service.engine.calls
    for _ in range(2):  # served again: a hit again
        _, badge, details = _synth(client, text="请B207号顾客到2号窗口")
        assert 'data-cache="HIT"' in badge and "#15803d" in badge and "由模板的 8 个缓存片段拼接" in badge
        assert "0 合成 synthesised)" in details  # every piece was in the cache
    assert service.engine.calls == calls
    template = next(t for t in service.templates.templates() if t.voice == "tone-low")
    service.admin.forget(service.templates.piece_request(template, "七").key, caller=LOCAL)  # one piece gone
    _, badge, details = _synth(client, text="请B207号顾客到2号窗口")
    assert 'data-cache="COMPOSED"' in badge and "#1d4ed8" in badge and "由模板的缓存片段拼接" in badge
    assert "1 合成 synthesised)" in details and service.engine.calls == calls + 1
    _, badge, _ = _synth(client, text="请B207号顾客到2号窗口")
    assert 'data-cache="HIT"' in badge  # the piece made is cached: all pieces again


@pytest.mark.slow
def test_a_fast_result_plays_whole_and_a_long_slow_miss_plays_live(client: Client, service: TTSService) -> None:
    """The button's event (``/synthesise_live``): a miss that is whole within a second
    never opens the live player (its file plays); a long miss made slower than that,
    but faster than it plays, is streamed in half-second slices, the live player shown
    once the first 4 s are in its stream, and its badge says it was heard live (the file
    is not played again)."""
    if not webui.live_playback_available():
        if os.environ.get("CI"):
            pytest.fail("ffmpeg is missing; .ci/run installs it with apt-get install ffmpeg")
        pytest.skip("the live player needs ffmpeg (apt-get install ffmpeg); CI runs this test")
    quick = list(client.submit(*{**_FORM, "text": "第一句话。第二句话。"}.values(), api_name="/synthesise_live"))
    assert len(quick) == 1 and 'data-cache="MISS"' in quick[0][2] and 'data-live="0"' in quick[0][2]
    service.engine.delay, service.engine.seconds_per_char = 0.4, 0.15  # 2.4 s of sound per 0.4 s
    text = "".join(f"第{i}句话在这里慢慢地合成出来。" for i in range(1, 7))
    job = client.submit(*{**_FORM, "text": text}.values(), api_name="/synthesise_live")
    *streamed, final = updates = list(job)
    at = next(i for i, u in enumerate(updates) if u[0] == {"__type__": "update", "visible": True})
    hold, shown, rest = streamed[:at], streamed[at], streamed[at + 1 :]
    assert 'data-live="1"' in shown[2]
    # The hold (4 s in half-second slices) is in the hidden player's stream before it shows.
    assert len(hold) == 2 * 4 and len(rest) >= 1
    # While it plays, nothing but its slices (no update re-renders the page under the player).
    assert all(isinstance(u[0], str) and u[1] == {"__type__": "update"} for u in hold + rest)
    # The details say it plays as it is made; its count is a line of its own, which a timer
    # fills while it plays (tests/test_browser_playback.py): not an output of this event.
    assert "边合成边播放 Generating: playing while it is made" in shown[3] and "句 sentences" not in shown[3]
    assert final[0] == {"__type__": "update"} and 'data-cache="MISS"' in final[2] and 'data-live="1"' in final[2]
    whole = service.synthesise(TTSRequest(text=text, voice="tone-low"))
    assert whole.cache == "HIT" and _md5(final[1]) == hashlib.md5(whole.wav).hexdigest()


@pytest.mark.slow
def test_a_live_announcement_that_fails_part_way_says_so_and_offers_no_partial_result(
    client: Client, service: TTSService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The live player played the first sentences, then the engine failed: the last
    update empties and hides the live player (its part is no result to replay or
    download), leaves no result file, and the badge says FAILED, not "stored"; while it
    played, the badge said it was being made, not that it was stored. Nothing is cached."""
    if not webui.live_playback_available():
        if os.environ.get("CI"):
            pytest.fail("ffmpeg is missing; .ci/run installs it with apt-get install ffmpeg")
        pytest.skip("the live player needs ffmpeg (apt-get install ffmpeg); CI runs this test")
    from lib.engines.tone import ToneEngine

    made = ToneEngine.synthesise

    def fails_at_the_fifth(self: ToneEngine, text: str, *args: Any, **kwargs: Any) -> Any:
        if "第5句" in text:
            raise EngineError("the engine stopped")
        return made(self, text, *args, **kwargs)

    monkeypatch.setattr(ToneEngine, "synthesise", fails_at_the_fifth)
    service.engine.delay, service.engine.seconds_per_char = 0.4, 0.15
    text = "".join(f"第{i}句话在这里慢慢地合成出来。" for i in range(1, 7))
    job = client.submit(*{**_FORM, "text": text}.values(), api_name="/synthesise_live")
    with pytest.raises(Exception):  # noqa: B017 - gradio_client's error type for a handler's gr.Error
        job.result()
    updates = job.outputs()
    shown = next(u for u in updates if u[0] == {"__type__": "update", "visible": True})
    assert "边合成边播放" in shown[2] and "playing while it is made" in shown[2] and "stored when" in shown[2]
    assert not any("synthesised now and stored" in str(u[2]) for u in updates)
    last = updates[-1]
    assert last[0] == {"__type__": "update", "value": None, "visible": False} and last[1] is None
    assert 'data-cache="FAILED"' in last[2] and "nothing was stored" in last[2] and "#b91c1c" in last[2]
    assert service.cache.lookup(service.resolve(TTSRequest(text=text, voice="tone-low")).key) is None


def test_the_served_page_says_it_is_chinese_before_any_script_runs(client: Client) -> None:
    page = httpx.get(client.src, timeout=30)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    tag = re.search(r"<html[^>]*>", page.text)
    assert tag is not None and 'lang="zh-CN"' in tag.group(0) and 'lang="en"' not in tag.group(0)
    assert int(page.headers["content-length"]) == len(page.content)
    api = httpx.get(client.src.rstrip("/") + "/healthz", timeout=30)  # other answers untouched
    assert api.headers["content-type"].startswith("application/json")


def test_a_press_keeps_its_result_whichever_of_it_and_the_mode_switch_before_it_arrives_first(
    service: TTSService, tmp_path: Path
) -> None:
    """The browser sends a mode switch and the press right after it as two calls: in
    either order the press belongs to the new form; a press before a switch does not."""
    from types import SimpleNamespace

    from lib.ui.base import HandlerBase

    h = HandlerBase(service, tmp_path / "phrases.json")
    session: Any = SimpleNamespace(session_hash="s")
    h.switch_form("instruct", session)  # in order: switch, then press
    h.pressed("instruct", session)
    assert h.press_generation(session) == h.form_generation(session) == 1
    h.pressed("preset", session)  # out of order: the press made in preset arrives first
    h.switch_form("preset", session)
    assert h.press_generation(session) == h.form_generation(session) == 2
    h.switch_form("instruct", session)  # a press before a real switch is discarded
    assert h.press_generation(session) == 2 != h.form_generation(session)
    other: Any = SimpleNamespace(session_hash="t")
    assert h.press_generation(other) == h.form_generation(other) == 0  # sessions apart


def missing_list_overrides(tmp_path: Path) -> dict[str, str]:
    """A tone service's overrides whose hot list has one phrase and one template of two
    slot values (4 pieces), none of them cached yet."""
    phrases = tmp_path / "hot.json"
    phrases.write_text(json.dumps({
        "voices": {"low": "tone-low"}, "phrases": [{"text": "欢迎光临", "voice": "low"}],
        "templates": [
            {"template": "请到{window}号窗口。", "voice": "low", "slots": {"window": {"values": ["2", "10"]}}},
        ],
    }, ensure_ascii=False), encoding="utf-8")  # fmt: skip
    return {"cache.dir": str(tmp_path / "cache"), "engine": "tone", "templates.file": str(phrases)}


def test_make_the_missing_ones_is_the_admins_and_makes_what_the_cache_tab_names(
    tmp_path: Path, free_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Cache tab names the missing hot phrases and template pieces; *Make the
    missing ones* (the page's admin sign-in) makes them, after which all are ready."""
    from lib.ui.views import versions_markdown

    overrides = missing_list_overrides(tmp_path)
    svc = TTSService(load_config(env={}, overrides=overrides))
    monkeypatch.setenv(svc.config.server.admin_token_env, "s3cret")

    def line() -> str:
        return versions_markdown(svc.dashboard.snapshot(caller=LOCAL)["model_versions"])

    try:
        assert "就绪 ready 0/1 · 模板片段 template pieces 0/4" in line()  # 请到, 二, 十, 号窗口。
        assert "缺 missing: 「欢迎光临」（tone-low）、模板片段 template piece「请到」（tone-low）" in line()
        with serving(webui.create_app(svc, phrases_path=Path(overrides["templates.file"])), free_port) as url:
            client = Client(url, verbose=False, download_files=str(tmp_path / "downloads"))
            with pytest.raises(Exception, match="管理员令牌不正确 — the admin token is wrong"):
                client.predict("wrong", api_name="/make_missing")
            assert "ready 0/1" in line()  # refused: nothing made
            made = client.predict("s3cret", api_name="/make_missing")
            assert "已生成 5 条，已缓存 0 条，失败 0 条。Made 5, 0 already cached, 0 failed." in made
            assert "就绪 ready 1/1 · 模板片段 template pieces 4/4" in line() and "缺 missing" not in line()
            again = client.predict("s3cret", api_name="/make_missing")
            assert "Nothing was missing: all 5 are cached" in again
    finally:
        svc.close()
