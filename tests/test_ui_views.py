"""What the web UI shows, without a browser: bilingual messages with the form's labels,
the mode-aware form, the dashboard's figures, tables and plots, admin sentences,
download names. Real service (tone engine) and real stores under ``tmp_path``."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from lib.batch.preload import preload
from lib.config import load_config
from lib.errors import (
    ConflictError,
    EngineError,
    ForbiddenError,
    NotAudioError,
    PromptAudioError,
    TTSError,
    UnauthorizedError,
    ValidationError,
)
from lib.pipeline.service import TTSService
from lib.request.access import LOCAL
from lib.request.messages import FIELD_LABELS, explain, explain_note, scrub_paths
from lib.request.phrases import PhraseFileError, expand, parse_phrases
from lib.request.types import TTSRequest
from lib.ui.convert import CONVERT_FIELDS, build_convert_request, convert_errors
from lib.ui.forms import FORM_FIELDS, MODE_FORMS, SynthesisForm, examples, form_errors, form_note, mode_choices
from lib.ui.handlers import Handlers
from lib.ui.plots import latency_plot
from lib.ui.views import (
    BADGE_COLOURS,
    admin_sentence,
    badge_html,
    download_name,
    made_html,
    stats_markdown,
    style_notice,
    tag_choices,
    top_table,
    versions_markdown,
)

CODE_NAMES = re.compile(r"\b(prompt_text|prompt_audio|zero_shot|cross_lingual)\b")
HAN = re.compile(r"[\u4e00-\u9fff]")


@pytest.fixture
def service(tmp_path: Path) -> Iterator[TTSService]:
    svc = TTSService(load_config(env={}, overrides={"cache.dir": str(tmp_path / "cache"), "engine": "tone"}))
    yield svc
    svc.close()


# -- messages -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "field", "chinese"),
    [
        (ValidationError("seed: must be a whole number from 0 to 4294967295, got 1.5"), "seed", "须为 0 到 4294967295"),
        (ValidationError("speed: 3 is out of range; use 0.5 to 2.0"), "speed", "3 超出范围，请填 0.5 到 2.0"),
        (ValidationError("text: is empty; type the words to speak"), "text", "为空"),
        (ValidationError("text: is 501 characters, over the limit of 500; shorten it"), "text", "超过上限 500 字"),
        (ValidationError("prompt_text: zero_shot mode needs the transcript of the prompt audio"), "prompt_text",
         "零样本克隆需要参考音频里说的话"),
        (ValidationError("mode: cross_lingual clones a prompt voice; upload prompt audio or pick a saved voice"),
         "prompt_audio", "克隆模式需要参考音频"),
        (ValidationError("style: instruct mode needs a style instruction, e.g. 'slow and calm'"), "style", "风格指令"),
        (PromptAudioError("prompt audio is 0.40 s long; record at least 1 s of clear speech"), "prompt_audio",
         "参考音频只有 0.40 秒，请至少录 1 秒"),
        (NotAudioError("prompt audio is not decodable audio; upload a WAV, FLAC, OGG or MP3 recording of speech"),
         "prompt_audio", "无法读取为音频"),
        (ConflictError("voice name 'desk' is taken: choose another name, or (admin) replace it"), "voice_name",
         "「desk」已被使用"),
        (ValidationError("voice 'zh-female' is a preset voice; presets cannot be deleted"), None, "预置音色不能删除"),
        (UnauthorizedError("only the admin may delete a saved voice: send the admin token (...)"), None,
         "请在页面顶部「管理员登录」中登录"),
        (ForbiddenError("the admin token is wrong; to clear, give the value of TTS_ADMIN_TOKEN"), None,
         "管理员令牌不正确"),
        (ValidationError("tag: give engine:model_version or voice:<fingerprint>"), "tag", "请从列表中选择"),
        (EngineError("espeak-ng worker process failed; see the log"), None, "合成失败，未缓存任何内容"),
        (PhraseFileError("list.json: phrases[2]: field 'voice': 'x' is not a voice"), None, "短语列表有误"),
    ],
)  # fmt: skip
def test_every_message_is_bilingual_and_names_the_field_by_its_label(
    error: TTSError, field: str | None, chinese: str
) -> None:
    message = explain(error)
    assert message.field == field
    assert chinese in message.text
    assert str(error)[-20:] in message.text  # the English, which says how to fix it, is kept
    if field is not None:
        assert message.text.startswith(FIELD_LABELS[field] + "：")
    assert not CODE_NAMES.search(message.text), message.text


def test_uploaded_paths_are_named_by_their_file_name() -> None:
    upload = "/tmp/gradio/3f9a0c1d2e4b5a6978877665544332211/hot phrases.json"
    inside = "/tmp/gradio/3f9a0c1d2e4b5a6978877665544332211/voices/a.wav"
    error = PhraseFileError(f'{upload}: phrases[0]: field "prompt_audio": file {inside} does not exist')
    text = explain(error, paths=[upload]).text
    assert "hot phrases.json: phrases[0]" in text and "file voices/a.wav does not exist" in text
    assert "/tmp" not in text and "gradio" not in text
    assert scrub_paths("file /var/tmp/gradio/0123456789abcdef0123/x.wav is bad") == "file x.wav is bad"


def test_export_skip_reasons_are_bilingual() -> None:
    note = "'hi' was spoken in an uploaded recording that is not a saved voice; save that recording"
    assert explain_note(note).startswith("用未保存的上传录音合成，无法导出") and note in explain_note(note)
    assert HAN.search(explain_note("something new"))


# -- the form -----------------------------------------------------------------------------


def test_modes_leave_room_for_more_and_follow_the_engine() -> None:
    assert [v for _, v in mode_choices({"zero_shot", "cross_lingual", "instruct", "preset"})] == [
        "preset", "zero_shot", "cross_lingual", "instruct"
    ]  # fmt: skip
    assert [v for _, v in mode_choices({"zero_shot", "instruct"})] == ["zero_shot", "instruct"]
    assert [v for _, v in mode_choices({"preset"}, converts=True)] == ["preset", "convert"]
    assert MODE_FORMS["convert"].source and not any(f.source for m, f in MODE_FORMS.items() if m != "convert")
    assert not MODE_FORMS["preset"].prompt_audio and MODE_FORMS["zero_shot"].transcript
    assert all("→" in form.steps and "Ctrl+Enter" in form.steps for form in MODE_FORMS.values())


def test_examples_are_phrases_of_the_shipped_list_asked_for_as_listed() -> None:
    """Every example is a request of hot_phrases.json with the same voice, mode, style and
    (the form's defaults) seed and speed: the same key, so the shipped preload makes it a
    hit. Five preset voices, Chinese first, and the list's instruct phrases."""
    from conftest import REPO

    from lib.request.phrases import load_phrases

    listed = expand(load_phrases(REPO / "hot_phrases.json"))
    presets = ["en-female", "en-male", "yue-female", "zh-female", "zh-male"]
    rows, labels = examples(presets, {"preset", "instruct"}, listed)
    assert [r[1] for r in rows[:5]] == ["zh-female", "zh-male", "en-female", "en-male", "yue-female"]
    assert [r[0] for r in rows].count("instruct") == 2 and len(labels) == len(rows) == 7
    as_listed = {
        (p.mode or "preset", p.voice, p.text, p.style) for p in listed if p.seed in (None, 0) and p.speed == 1.0
    }
    assert all(tuple(row) in as_listed for row in rows), [r for r in rows if tuple(r) not in as_listed]


def test_examples_without_a_list_are_preset_voices_chinese_first_with_an_instruct_one() -> None:
    presets = ["en-female", "en-male", "yue-female", "zh-female", "zh-male"]
    rows, labels = examples(presets, {"preset", "instruct"})
    assert [r[1] for r in rows[:5]] == ["zh-female", "zh-male", "en-female", "en-male", "yue-female"]
    assert rows[0][0] == "preset" and HAN.search(rows[0][2]) and not HAN.search(rows[2][2])
    assert ["instruct", "zh-female", "欢迎光临！", "开心"] in rows
    assert len(labels) == len(rows) and labels[0].startswith("zh-female · ")
    assert examples(presets, {"zero_shot"}) == ([], [])  # nothing to click without presets


def test_notes_say_which_values_a_mode_will_not_use() -> None:
    note = form_note("preset", "/tmp/p.wav", "zh-female", "a transcript", "开心", {"instruct"}, set())
    assert "已上传的参考音频在此模式下不使用" in note and "参考音频文本在此模式下不使用" in note
    assert "风格指令在此模式下不使用" in note and note.startswith("**操作步骤 Steps**")
    assert "将使用该音色保存时的文本" in form_note("zero_shot", None, "desk", "", "", set(), {"desk"})
    assert "ⓘ" not in form_note("instruct", None, "zh-female", "", "开心", {"instruct"}, set())


def test_form_errors_list_every_field_at_once_with_the_api_rules(service: TTSService) -> None:
    form = ("preset", None, "tone-low", "", "", "", 1.5, 5, "wav", True)
    errors = form_errors(service, SynthesisForm.of(form))
    assert set(errors) == {"seed", "speed", "text"}
    assert "随机种子 Seed：" in str(errors["seed"]) and "语速 Speed：" in str(errors["speed"])
    good = ("preset", None, "tone-low", "", "你好", "", 4, 1.25, "wav", True)
    assert form_errors(service, SynthesisForm.of(good)) == {}
    clone = SynthesisForm("zero_shot", None, "tone-low", "", "你好", "", 0, 1.0, "wav", True)
    assert set(form_errors(service, clone)) == {"prompt_audio"}
    verdicts = Handlers(service, Path("hot.json")).validate(*form, [])
    assert len(verdicts) == len(FORM_FIELDS) + 1
    assert [v["is_valid"] for v in verdicts][6:8] == [False, False] and verdicts[0]["is_valid"]
    assert service.engine.calls == 0  # type: ignore[attr-defined]


def test_a_click_resolves_its_form_once(
    service: TTSService, testdata_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # fmt: skip
    """The click's first step, its validator and its handler share one resolution (with
    cache off nothing is memoised: each resolution would decode the prompt again)."""
    resolved: list[object] = []
    decoded: list[object] = []
    resolve, decode = service.resolve, service.voices.decoder.decode
    monkeypatch.setattr(service, "resolve", lambda req: resolved.append(req) or resolve(req))
    monkeypatch.setattr(service.voices.decoder, "decode", lambda src, **kw: decoded.append(src) or decode(src, **kw))
    handlers, quiet = Handlers(service, Path("hot.json")), {"progress": lambda *a, **k: None}
    prompt = str(testdata_dir / "zh_female_prompt.wav")
    form = ("cross_lingual", prompt, None, "", "Resolved once a click.", "", 0, 1.0, "wav", False)
    assert handlers.clear_result(*form)[-1] == ""  # the first step: no problems
    assert all(v["is_valid"] for v in handlers.validate(*form, []))
    path, *_ = handlers.synthesise(*form, [], None, **quiet)  # type: ignore[arg-type]
    assert Path(path).is_file()
    assert (len(resolved), len(decoded)) == (1, 1)
    # An API client's call has no first step: the validator's resolution serves the handler.
    assert all(v["is_valid"] for v in handlers.validate(*form, []))
    handlers.synthesise(*form, [], None, **quiet)  # type: ignore[arg-type]
    assert (len(resolved), len(decoded)) == (2, 2)
    convert = (prompt, None, "tone-low", 0, 1.0, "wav", True)
    assert handlers.clear_convert(*convert)[-1] == ""
    assert all(v["is_valid"] for v in handlers.validate_convert(*convert, []))
    handlers.convert(*convert, [], None, **quiet)  # type: ignore[arg-type]
    assert len(resolved) == 3


def test_the_convert_form_names_the_source_and_the_target(service: TTSService, testdata_dir: Path) -> None:
    male = str(testdata_dir / "male_prompt.wav")
    errors = convert_errors(service, (None, None, "", 1.5, 1.0, "wav", True))
    assert set(errors) == {"seed", "source_audio"}
    assert str(errors["source_audio"]).startswith("源录音 Source recording：请上传或录制要变声的源录音 — ")
    assert set(convert_errors(service, (male, None, "", 0, 1.0, "wav", True))) == {"prompt_audio"}
    assert convert_errors(service, (male, None, "tone-low", 0, 1.0, "wav", True)) == {}
    verdicts = Handlers(service, Path("hot.json")).validate_convert(None, male, "tone-low", 0, 1.0, "wav", True, [])
    assert [v["is_valid"] for v in verdicts] == [False] + [True] * len(CONVERT_FIELDS)
    synth = form_errors(service, SynthesisForm("convert", None, "tone-low", "", "你好", "", 0, 1.0, "wav", True))
    assert str(synth["mode"]).startswith("模式 Mode：变声模式请使用「变声 Convert」按钮 — ")  # not a synthesis
    req = build_convert_request(male, male, "tone-low", 2, 1.5, "mp3", False)
    assert (req.prompt_audio, req.voice, req.seed, req.speed, req.use_cache) == (male, None, 2, 1.5, False)
    assert service.engine.calls == 0  # type: ignore[attr-defined]


def test_versions_line_marks_the_serving_version() -> None:
    rows = [
        {"tag": "tone:tone-2", "hot_ready": 3, "hot_total": 12, "entries": 40, "serving": True},
        {"tag": "tone:tone-1", "hot_ready": 12, "hot_total": 12, "entries": 1, "serving": False},
    ]
    text = versions_markdown(rows)
    assert "- `tone:tone-2` **（当前 serving）**: 就绪 ready 3/12 · 40 entries" in text
    assert "- `tone:tone-1`: 就绪 ready 12/12 · 1 entry" in text
    none = versions_markdown([{**rows[0], "hot_total": 0, "hot_ready": 0}])
    assert "no hot-phrase list (templates.file) · 40 entries" in none and "ready 0/0" not in none
    assert versions_markdown([]) == ""
    missing = [f"「phrase {i}」（tone-low）" for i in range(5)]
    named = versions_markdown([{**rows[0], "hot_missing": missing}, {**rows[1], "hot_missing": ["「x」（tone-low）"]}])
    assert "缺 missing: 「phrase 0」（tone-low）、" in named
    assert "「phrase 4」（tone-low） 等另 4 条 and 4 more" in named  # 12 - 3 ready - 5 named
    assert "生成缺少的 Make the missing ones" in named
    assert "「x」" not in named  # only the serving version's are named
    pieces = [f"模板片段 template piece「{n}」（tone-low）" for n in "一二"]
    both = versions_markdown([
        {**rows[0], "hot_missing": missing[:1], "hot_ready": 11, "pieces_ready": 38, "pieces_total": 40,
         "pieces_missing": pieces},
    ])  # fmt: skip
    assert "就绪 ready 11/12 · 模板片段 template pieces 38/40 · 40 entries" in both
    assert "缺 missing: 「phrase 0」（tone-low）、模板片段 template piece「一」（tone-low）、" in both
    assert "「二」（tone-low）." in both  # 1 + 2 missing, all three named


def test_make_missing_result_counts_and_names_failures() -> None:
    line = made_html({"made": 3, "cached": 9, "failed": 1}, ["「请到3号窗口」（nope） · `phrases[4]`: <why>"])
    assert "已生成 3 条，已缓存 9 条，失败 1 条。Made 3, 9 already cached, 1 failed." in line
    assert "<li>「请到3号窗口」（nope） · `phrases[4]`: &lt;why&gt;</li>" in line  # escaped
    assert "Nothing was missing: all 12 are cached" in made_html({"made": 0, "cached": 12, "failed": 0}, [])


def test_preload_failures_name_the_phrase_and_say_why_in_both_languages() -> None:
    from lib.batch.preload import PreloadReport
    from lib.ui.cache_handlers import failure_lines

    report = PreloadReport(total=3, failed=1)
    report.failures.append(("phrases[4]", "voice: unknown preset voice 'nope'; use one of tone-high, tone-low"))
    report.labels["phrases[4]"] = "「请到3号窗口」（nope）"
    (line,) = failure_lines(report)
    assert line.startswith("- 「请到3号窗口」（nope） · `phrases[4]`: ")
    assert "unknown preset voice 'nope'" in line and any("\u4e00" <= ch <= "\u9fff" for ch in line.split("`")[-1])


# -- results and the dashboard ----------------------------------------------------------------


def test_badge_and_download_name() -> None:
    assert badge_html("") == ""
    for cache, colour in BADGE_COLOURS.items():
        html = badge_html(cache)
        assert f'data-cache="{cache}"' in html and colour in html and HAN.search(html)
    assert download_name("zh-female", "请A023号顾客到3号窗口办理业务。", 3, "0123456789ab", "flac") == (
        "zh-female_请A023号顾客到3号窗口办理业务_seed3_012345.flac"
    )
    assert download_name("", "  ?? ", 0, "abcdef", "wav") == "upload_text_seed0_abcdef.wav"


def test_download_names_carry_the_style() -> None:
    """Three files of one text in three styles were named alike but for the key."""
    styles = ("", "loud", "慢一点，开心")
    names = [download_name("zh-female", "欢迎光临！", 0, "abcdef", "wav", style) for style in styles]
    assert names == [
        "zh-female_欢迎光临_seed0_abcdef.wav",
        "zh-female_欢迎光临_loud_seed0_abcdef.wav",
        "zh-female_欢迎光临_慢一点_开心_seed0_abcdef.wav",
    ]


def test_a_composed_answer_of_cached_pieces_only_is_a_hit() -> None:
    from lib.ui.views import shown_cache

    def result(cache: str, made: int) -> Any:
        info = {"template": "templates[0]", "segments": 8, "segments_reused": 8 - made, "segments_synthesised": made}
        return SimpleNamespace(cache=cache, info=info)

    assert shown_cache(result("COMPOSED", 0)) == "HIT"
    assert shown_cache(result("COMPOSED", 1)) == "COMPOSED"
    assert shown_cache(result("MISS", 0)) == "MISS"
    hit = badge_html("HIT", info=result("COMPOSED", 0).info)
    assert 'data-cache="HIT"' in hit and "由模板的 8 个缓存片段拼接" in hit and "8 cached pieces" in hit
    assert 'data-live="1"' in badge_html("MISS", live=True) and 'data-live="0"' in badge_html("MISS")


def test_the_badge_says_what_the_play_queue_takes_and_a_stored_result_is_served_by_its_url(
    service: TTSService, http: Any, tmp_path: Path
) -> None:
    """The play queue (lib.ui.queue) queues a result by the badge's data: its key, text and
    voice, and whether it is stored under its key. A stored one (MISS, then HIT) is served
    by ``/api/audio/<key>.wav``, the URL the queue keeps; a bypass is not (the queue takes
    the player's file)."""
    h = Handlers(service, tmp_path / "hot.json")
    page = SimpleNamespace(client=SimpleNamespace(host="127.0.0.1"), session_hash="queue")
    quiet = {"progress": lambda *a, **k: None}

    def badge_data(text: str, *, use_cache: bool = True) -> dict[str, str]:
        form = ["preset", None, "tone-low", "", text, "", "", 1.0, "mp3", use_cache, []]
        _, badge, *_ = h.synthesise(*form, page, **quiet)  # type: ignore[arg-type]
        return dict(re.findall(r'data-(\w+)="([^"]*)"', badge))

    for cache in ("MISS", "HIT"):
        data = badge_data("请到3号窗口 <b>")
        assert data["cache"] == cache and data["stored"] == "1", data
        assert data["text"] == "请到3号窗口 &lt;b&gt;" and data["voice"] == "tone-low"
        served = http.get(f"/api/audio/{data['key']}.wav")  # a wav, whatever the form's format
        assert served.status_code == 200 and served.headers["content-type"] == "audio/wav"
    bypass = badge_data("不缓存 Not cached", use_cache=False)
    assert bypass["cache"] == "BYPASS" and bypass["stored"] == "0"
    assert http.get(f"/api/audio/{bypass['key']}.wav").status_code == 404


def test_style_notice_lists_the_unknown_words() -> None:
    assert style_notice({"ignored_style_words": []}) == ""
    notice = style_notice({"ignored_style_words": ["grumpy", "紫色"]})
    assert "「grumpy」、「紫色」" in notice and "Unknown style words ignored" in notice


def test_top_phrases_are_grouped_by_text_and_voice_name() -> None:
    rows = [
        {"text": "欢迎光临", "voice": "zh-female", "seed": 0, "count": 5, "misses": 1},
        {"text": "欢迎光临", "voice": "zh-female", "seed": 1, "count": 2, "misses": 1},
        {"text": "欢迎光临", "voice": "desk", "count": 4, "misses": 1},
        {"text": "Mind the gap", "voice": "", "count": 9, "misses": 1},
    ]
    table = top_table(rows)
    assert table.values.tolist() == [
        [9, 1, "Mind the gap", "上传的录音 uploaded recording"],
        [7, 2, "欢迎光临", "zh-female"],
        [4, 1, "欢迎光临", "desk"],
    ]

    # the "most missed" table puts the most misses first, whatever the request count
    assert top_table(rows, by="misses").values.tolist()[0] == [7, 2, "欢迎光临", "zh-female"]


def test_the_cache_tab_lists_the_most_missed_by_misses(service: TTSService) -> None:
    for _ in range(5):  # 1 miss, 4 hits
        service.synthesise(TTSRequest(text="popular", voice="tone-low"))
    for seed in (1, 2):  # 2 misses
        service.synthesise(TTSRequest(text="rare", voice="tone-low", seed=seed))
    local = SimpleNamespace(client=SimpleNamespace(host="127.0.0.1"))  # from this machine: the admin
    *_, requested, missed = Handlers(service, Path("hot.json")).refresh_cache(request=local)  # type: ignore[arg-type]
    assert requested.values.tolist()[0][2] == "popular"
    assert missed.values.tolist()[0][:3] == [2, 2, "rare"]


def test_the_dashboard_counts_preload_apart_from_users(service: TTSService, tmp_path: Path) -> None:
    phrases = parse_phrases(
        {"voices": {"v": "tone-low"}, "phrases": [{"text": "欢迎光临", "voice": "v", "seeds": [1, 2]}]},
        base_dir=tmp_path,
    )
    preload(service, expand(phrases), caller=LOCAL)
    service.synthesise(TTSRequest(text="欢迎光临", voice="tone-low", seed=1))  # a user hit on a preloaded phrase
    snap = service.dashboard.snapshot(caller=LOCAL)
    text = stats_markdown(snap, ("最近 15 分钟 Last 15 min", 1.0, 1))
    assert "1 命中 hits, 0 未命中 misses (100.0 % hit rate)" in text
    assert "**预加载 Preload** (counted apart 单独统计): 2 生成 generated, 0 已缓存 already cached" in text
    preload(service, expand(phrases), caller=LOCAL)  # both cached now: counted as such (preload_hits)
    assert service.dashboard.snapshot(caller=LOCAL)["since_start"]["preload_hits"] == 2
    again = stats_markdown(service.dashboard.snapshot(caller=LOCAL))
    assert "2 生成 generated, 2 已缓存 already cached" in again
    assert "**命中率 Hit rate, 最近 15 分钟 Last 15 min**: 100.0 % (1 次用户请求 user lookups)" in text
    assert re.search(r"Engine time saved by hits\*\*: \d+\.\d s since start", text)


def test_evict_choices_are_the_tags_in_the_cache_with_counts(service: TTSService) -> None:
    for seed in (0, 1):
        service.synthesise(TTSRequest(text="欢迎光临", voice="tone-low", seed=seed))
    service.cache.flush()
    key = service.synthesise(TTSRequest(text="欢迎光临", voice="tone-low")).key
    blob = service.cache.store.get_blob(key)
    assert blob is not None
    service.cache.store.put_blob("f" * 32, blob, tag="tone:tone-0", ttl=None)  # as an older model left it
    assert service.dashboard.tags() == [(service.tag, 2), ("tone:tone-0", 1)]
    choices = tag_choices(service.dashboard.tags(), service.tag)
    assert choices[0] == (f"{service.tag} — 2 条 entries（当前 current model）", service.tag)
    assert choices[1] == ("tone:tone-0 — 1 条 entries", "tone:tone-0")


def test_admin_results_are_sentences() -> None:
    assert admin_sentence("clear", {"removed": 3, "shared_removed": 0}) == (
        "✔ 已清空缓存：删除 3 条。Cleared the cache: 3 entries removed."
    )
    assert "Removed 1 entry of model version `a:b`" in admin_sentence("evict", {"tag": "a:b", "removed": 1})
    nothing = admin_sentence("evict", {"tag": "a:c", "removed": 0})  # no entries of it: no tick, no "success"
    assert nothing.startswith("⚠") and "✔" not in nothing and "Nothing removed" in nothing and "`a:c`" in nothing
    done = {"checked": 4, "corrupt_removed": 1, "repairs": ["fixed size"], "available": True}
    verify = admin_sentence("verify", done)
    assert "Checked 4 entries, removed 1 corrupt" in verify and "fixed size" in verify
    assert "{" not in verify


def test_latency_is_on_a_log_axis_with_hit_and_miss_apart() -> None:
    now = 1_700_000_000.0
    samples = [(now - 5, "miss", 1.8), (now - 4, "hit", 0.0001), (now - 3, "bypass", 0.5), (now - 2000, "hit", 0.001)]
    plot = latency_plot(samples, 900, now)
    assert plot is not None and plot.type == "altair"
    spec: dict[str, Any] = json.loads(plot.plot)
    assert spec["encoding"]["y"]["scale"] == {"type": "log"}
    assert spec["encoding"]["x"]["type"] == "temporal" and spec["encoding"]["x"]["axis"]["labelOverlap"]
    layer = spec["layer"][0]["encoding"]
    assert layer["color"]["scale"]["range"][:2] == ["#15803d", "#b45309"]  # hit green, miss amber
    assert layer["shape"]["scale"]["range"][:2] == ["circle", "square"]  # told apart without colour too
    values = spec["data"]["values"]
    assert [v["t"] for v in values] == [round((now - 5) * 1000), round((now - 4) * 1000), round((now - 3) * 1000)]
    assert [round(v["ms"], 2) for v in values] == [1800.0, 0.1, 500.0]
    assert latency_plot(samples, 1, now) is None


def test_first_audio_on_the_dashboard_is_labelled_server_time() -> None:
    from lib.ui.views import segments_line

    line = segments_line({"streams": 2, "first_audio_ms": 300})
    assert "first audio ready on the server after 150 ms" in line and "server time" in line
    assert "first audio" not in segments_line({"streams": 0})


def test_the_figures_of_the_cache_tab_come_from_one_reading(service: TTSService, tmp_path: Path) -> None:
    """ "Entries 117" beside "ready 0/26 · 0 entries": the versions line was kept 30 s and
    read the store apart. Now both count one reading, after a clear and after a preload."""
    hot = tmp_path / "hot.json"
    phrases = [{"text": "欢迎", "voice": "v", "seeds": [1, 2, 3]}]
    hot.write_text(json.dumps({"voices": {"v": "tone-low"}, "phrases": phrases}))
    svc = TTSService(load_config(env={}, overrides={
        "cache.dir": str(tmp_path / "c2"), "engine": "tone", "templates.file": str(hot),
    }))  # fmt: skip
    try:
        h = Handlers(svc, hot)
        first = h.refresh_cache()[0]
        assert "**条目 Entries** 0 " in first and "就绪 ready 0/3 · 0 entries" in first
        preload(svc, expand(parse_phrases(json.loads(hot.read_text()), base_dir=tmp_path)), caller=LOCAL)
        svc.cache.flush()
        after = h.refresh_cache()[0]
        assert "**条目 Entries** 3 " in after and "就绪 ready 3/3 · 3 entries" in after
        svc.admin.clear(caller=LOCAL)
        cleared = h.refresh_cache()[0]
        assert "**条目 Entries** 0 " in cleared and "就绪 ready 0/3 · 0 entries" in cleared
    finally:
        svc.close()


def test_the_save_message_says_when_a_recording_is_outside_3_to_10_s(
    service: TTSService, testdata_dir: Path, tmp_path: Path
) -> None:
    import numpy as np
    import soundfile as sf

    audio, rate = sf.read(testdata_dir / "zh_female_prompt.wav", dtype="float32")
    long = tmp_path / "long.wav"
    sf.write(long, np.concatenate([audio] * 4)[: int(13.75 * rate)], rate)
    local = SimpleNamespace(client=SimpleNamespace(host="127.0.0.1"))
    h = Handlers(service, Path("hot.json"))
    done = h.save_voice("long-one", str(long), "", False, "", local)[-1]  # type: ignore[arg-type]
    assert "13.75 s" in done and "outside the 3–10 s" in done and "不在建议的 3–10 秒内" in done
    short = h.save_voice("short-one", str(testdata_dir / "zh_female_prompt.wav"), "", False, "", local)[-1]  # type: ignore[arg-type]
    assert "⚠" not in short


def test_a_delete_is_refused_before_any_question_and_the_deleted_voice_leaves_the_form(
    service: TTSService, testdata_dir: Path
) -> None:
    local = SimpleNamespace(client=SimpleNamespace(host="127.0.0.1"))
    h = Handlers(service, Path("hot.json"))
    for name, why in (("tone-low", "presets cannot be deleted"), ("nobody", "no saved voice named"), ("", "")):
        box, question, message = h.ask_delete(name)
        assert box == {"__type__": "update", "visible": False} and question == "" and "ui-error" in message
        assert why in message and "cannot be undone" not in message
    h.save_voice("desk", str(testdata_dir / "zh_female_prompt.wav"), "", False, "", local)  # type: ignore[arg-type]
    box, question, _ = h.ask_delete("desk")
    assert box["visible"] and "确定删除音色「desk」？" in question and "This cannot be undone." in question
    assert h.voice_kept("preset", "desk") == {"__type__": "update"}  # still there: kept
    h.delete_voice("desk", "", local)  # type: ignore[arg-type]
    assert h.voice_kept("preset", "desk") == {"__type__": "update", "value": "tone-high"}  # gone: the default
    assert h.voice_kept("zero_shot", "desk") == {"__type__": "update", "value": None}  # a clone mode: none
    assert h.voice_kept("preset", "tone-low") == {"__type__": "update"}  # another voice's delete keeps it


def test_examples_keep_to_the_named_presets_when_the_base_has_more_voices() -> None:
    """The Kokoro base adds a preset per voice (``kokoro-zf_xiaobei``...): the examples
    stay on the voices the shipped list speaks, and on the named presets without a list."""
    from conftest import REPO

    from lib.request.phrases import load_phrases

    presets = ["en-female", "en-male", "yue-female", "zh-female", "zh-male", "kokoro-zf_xiaobei", "kokoro-zm_yunxi"]
    rows, _ = examples(presets, {"preset"}, expand(load_phrases(REPO / "hot_phrases.json")))
    assert [r[1] for r in rows] == ["zh-female", "zh-male", "en-female", "en-male", "yue-female"]
    rows, _ = examples(presets, {"preset"})
    assert not any(r[1].startswith("kokoro-") for r in rows)


def test_the_header_names_the_base_voice_that_speaks() -> None:
    """The header said espeak-ng while Kokoro spoke (issue 34 item 8)."""
    from lib.ui.views import engine_title

    assert engine_title("builtin", "kokoro") == "内置引擎 Built-in engine (Kokoro-82M + voice matching, offline)"
    assert "espeak-ng" in engine_title("builtin", "espeak") and "Kokoro" not in engine_title("builtin", "espeak")
    assert engine_title("cosyvoice", "") == "CosyVoice"


def test_the_live_count_moves_only_while_live_and_its_end_leaves_a_whole_file_result_untouched(
    make_service: Any, tmp_path: Path
) -> None:
    """The timer's tick writes the count only once the result plays live; the end step
    stops the timer and writes the final count (live, succeeded), empties the line (live,
    failed), or leaves it as the press left it (never live: no update of the page under a
    result played from its file)."""
    h = Handlers(make_service(), tmp_path / "hot.json")
    request: Any = SimpleNamespace(session_hash="s")
    skip = {"__type__": "update"}

    h._made["s"] = (2, 6)  # being made, not live yet (what synthesise_live records)
    assert h.live_count(request) == skip
    h._live.add("s")  # the live player got its hold
    assert "已合成 Made 2/6 句 sentences" in h.live_count(request)
    h._made["s"] = (6, 6)
    timer, line = h.live_count_end(True)(request)
    assert "Made 6/6 句 sentences" in line and timer.active is False
    assert "s" not in h._made and "s" not in h._live  # nothing kept per session

    h._made["s"] = (3, 6)
    h._live.add("s")
    assert h.live_count_end(False)(request)[1] == ""  # failed part way: no count left over it

    h._made["s"] = (6, 6)  # made while waiting, played from its file
    timer, line = h.live_count_end(True)(request)
    assert line == skip and timer.active is False
