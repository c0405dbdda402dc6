"""The readings part through the service, on a real disk store (issue 27 items 1 and 4):
a lexicon change re-keys exactly the texts (and segments, and template pieces) that
contain its term, everything else still hits; the change is counted as stale entries;
the lexicon file is written 0600 and read again at a restart; a bad file stops the start;
the preload lists what it made again because of a change."""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path
from typing import Any

import pytest
from conftest import tone_service

from lib.batch.preload import preload
from lib.errors import ForbiddenError, NotFoundError, UnauthorizedError
from lib.pipeline.service import TTSService
from lib.request.access import ANYONE, LOCAL
from lib.request.phrases import expand, load_phrases
from lib.request.types import TTSRequest
from lib.text.lexicon import LexiconError, LexiconFileError

SUMMARY = re.compile(r"^preload: (\d+) phrases, (\d+) generated, (\d+) already cached, (\d+) failed in [0-9.]+ s$")
PARAGRAPH = "各位旅客请注意。下一站是六安站。请带好随身物品。"


def disk_only(tmp_path: Path, **overrides: Any) -> TTSService:
    """A service whose hits come from the disk store (no memory tier)."""
    return tone_service(tmp_path, **{"cache.memory_bytes": 0, **overrides})


def speak(svc: TTSService, text: str, voice: str = "tone-low") -> Any:
    result = svc.synthesise(TTSRequest(text=text, voice=voice))
    svc.cache.flush()
    return result


def calls(svc: TTSService) -> int:
    return int(svc.engine.calls)  # type: ignore[attr-defined]


def test_a_lexicon_change_rekeys_only_the_texts_that_contain_its_term(tmp_path: Path) -> None:
    svc = disk_only(tmp_path)
    try:
        texts = ["下一站六安", "欢迎光临", "安全第一"]
        first = {t: speak(svc, t) for t in texts}
        paragraph = speak(svc, PARAGRAPH)
        assert paragraph.info["segments"] == 3
        made = calls(svc)
        svc.readings.add("六安", "lu4 an1", caller=LOCAL)

        assert speak(svc, "欢迎光临").cache == "HIT" and speak(svc, "安全第一").cache == "HIT"
        assert calls(svc) == made  # no engine call: the other texts kept their keys
        changed = speak(svc, "下一站六安")
        assert changed.cache == "MISS" and changed.key != first["下一站六安"].key and calls(svc) == made + 1
        again = speak(svc, PARAGRAPH)  # only the sentence with the term is made again
        assert again.cache == "MISS" and again.key != paragraph.key
        assert again.info["segments_reused"] == 2 and again.info["segments_synthesised"] == 1
        assert calls(svc) == made + 2

        svc.readings.remove("六安", caller=LOCAL)  # the old keys come back, and with them the old entries
        assert speak(svc, "下一站六安").cache == "HIT" and speak(svc, PARAGRAPH).cache == "HIT"
        assert calls(svc) == made + 2
    finally:
        svc.close()


def test_a_voice_scoped_entry_rekeys_that_voice_only(tmp_path: Path) -> None:
    svc = disk_only(tmp_path)
    try:
        low, high = speak(svc, "下一站六安", "tone-low"), speak(svc, "下一站六安", "tone-high")
        svc.readings.add("六安", "lu4 an1", "tone-high", caller=LOCAL)
        assert speak(svc, "下一站六安", "tone-low").key == low.key  # a HIT in the other voice
        assert speak(svc, "下一站六安", "tone-low").cache == "HIT"
        assert speak(svc, "下一站六安", "tone-high").key != high.key
        # An uploaded prompt has no voice name: only global entries apply to it.
        assert svc.resolve(TTSRequest(text="下一站六安", voice="tone-high")).fields.reading != svc.readings.key_part(
            "下一站六安", None
        )
    finally:
        svc.close()


def test_a_template_piece_gets_its_own_reading_part(tmp_path: Path) -> None:
    phrases = tmp_path / "hot.json"
    phrases.write_text(json.dumps(TEMPLATE_LIST, ensure_ascii=False), encoding="utf-8")
    svc = disk_only(tmp_path, **{"templates.file": str(phrases)})
    try:
        (template,) = svc.templates.templates()
        pieces = svc.templates.pieces(template)
        before = {p: svc.templates.piece_request(template, p) for p in pieces}
        svc.readings.add("六安", "lu4 an1", caller=LOCAL)
        for text, old in before.items():
            new = svc.templates.piece_request(template, text)
            assert old is not None and new is not None
            assert new.fields.reading == svc.readings.key_part(text, "tone-low")
            assert (new.key != old.key) == ("六安" in text), text
    finally:
        svc.close()


def test_the_answer_and_the_dashboard_count_the_entries_a_change_made_stale(tmp_path: Path) -> None:
    svc = disk_only(tmp_path)
    try:
        speak(svc, "下一站六安", "tone-low")
        speak(svc, "六安站到了", "tone-high")
        speak(svc, "欢迎光临", "tone-low")
        speak(svc, PARAGRAPH, "tone-low")  # three segments and the result: two mention 六安
        answer = svc.readings.add("六安", "lu4 an1", caller=LOCAL)
        assert answer["stale"] == 4 and answer["entry"] == {"term": "六安", "reading": "lu4 an1", "voice": None}
        snap = svc.dashboard.snapshot(caller=ANYONE)["lexicon"]
        assert snap["last_change"]["stale"] == 4 and snap["last_change"]["action"] == "added"
        assert snap["entries"] == 1 and snap["version"] == answer["lexicon_version"]

        speak(svc, "下一站六安", "tone-low")  # made again under the new key
        scoped = svc.readings.add("六安", "liu4 an1", "tone-high", caller=LOCAL)
        assert scoped["stale"] == 1  # only tone-high's entry: the scope is one voice
        # A change to the global entry no longer touches tone-high, which has its own.
        changed = svc.readings.add("六安", "lu4 an5", caller=LOCAL)
        assert changed["stale"] == 4  # tone-low's old and new 下一站六安, the paragraph's two
        gone = svc.readings.remove("六安", "tone-high", caller=LOCAL)
        assert gone["stale"] == 1 and gone["deleted"]["voice"] == "tone-high"
    finally:
        svc.close()


def test_without_stored_texts_the_stale_count_is_unknown(tmp_path: Path) -> None:
    svc = disk_only(tmp_path, **{"cache.store_text": False})
    try:
        speak(svc, "下一站六安")
        assert svc.readings.add("六安", "lu4 an1", caller=LOCAL)["stale"] is None
    finally:
        svc.close()


def test_only_the_admin_changes_the_lexicon_and_bad_entries_name_themselves(tmp_path: Path) -> None:
    svc = tone_service(tmp_path, admin_token="t", **{"readings.max_entries": 2})
    try:
        http = svc.access.caller(origin="http", client_host="10.0.0.1", token=None)
        with pytest.raises(UnauthorizedError, match="only the admin may change the pronunciation lexicon"):
            svc.readings.add("六安", "lu4 an1", caller=http)
        wrong = svc.access.caller(origin="http", client_host="10.0.0.1", token="x")
        with pytest.raises(ForbiddenError):
            svc.readings.remove("六安", caller=wrong)
        with pytest.raises(LexiconError, match=r"lexicon entry '六安': 'lu9' has tone 9"):
            svc.readings.add("六安", "lu9 an1", caller=LOCAL)
        svc.readings.add("六安", "lu4 an1", caller=LOCAL)
        svc.readings.add("台州", "tai1 zhou1", caller=LOCAL)
        with pytest.raises(LexiconError, match=r"lexicon entry '丽水': the lexicon is full \(2 entries"):
            svc.readings.add("丽水", "li2 shui3", caller=LOCAL)
        with pytest.raises(NotFoundError, match="lexicon entry '六安' for voice 'tone-low': there is no such entry"):
            svc.readings.remove("六安", "tone-low", caller=LOCAL)
        assert sorted(e["term"] for e in svc.readings.entries()) == sorted(["六安", "台州"])
    finally:
        svc.close()


def test_the_file_is_written_0600_and_read_again_at_a_restart(tmp_path: Path) -> None:
    svc = disk_only(tmp_path)
    path = tmp_path / "lexicon.json"
    try:
        svc.readings.add("六安", "lù ān", caller=LOCAL)  # tone marks are stored as numbers
        svc.readings.add("长春", "chang2 chun1", "tone-high", caller=LOCAL)
        key = speak(svc, "下一站六安").key
    finally:
        svc.close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text(encoding="utf-8")) == [
        {"term": "六安", "reading": "lu4 an1", "voice": None},
        {"term": "长春", "reading": "chang2 chun1", "voice": "tone-high"},
    ]
    again = disk_only(tmp_path)
    try:
        assert again.readings.entries() == [
            {"term": "六安", "reading": "lu4 an1", "voice": None},
            {"term": "长春", "reading": "chang2 chun1", "voice": "tone-high"},
        ]
        result = speak(again, "下一站六安")
        assert result.key == key and result.cache == "HIT"
    finally:
        again.close()


def test_a_bad_lexicon_file_stops_the_start_naming_its_line(tmp_path: Path) -> None:
    (tmp_path / "lexicon.json").write_text(
        '[\n{"term": "六安", "reading": "lu4 an1", "voice": null},\n{"term": "台州", "reading": "tai9 zhou1"}\n]\n',
        encoding="utf-8",
    )
    with pytest.raises(LexiconFileError, match=r"lexicon\.json, line 3: lexicon entry '台州': 'tai9' has tone 9"):
        tone_service(tmp_path)


def test_a_missing_file_is_an_empty_lexicon_and_a_hand_edit_is_a_change(tmp_path: Path) -> None:
    svc = disk_only(tmp_path)
    try:
        assert svc.readings.entries() == [] and not (tmp_path / "lexicon.json").exists()
        speak(svc, "下一站六安")
    finally:
        svc.close()
    # Edited while the service was stopped: found at the start, counted in the background.
    (tmp_path / "lexicon.json").write_text('[{"term": "六安", "reading": "lu4 an1", "voice": null}]', encoding="utf-8")
    again = disk_only(tmp_path)
    try:
        again.readings._counting.shutdown(wait=True)  # type: ignore[union-attr]
        last = again.dashboard.snapshot(caller=LOCAL)["lexicon"]["last_change"]
        assert last["term"] == "六安" and last["origin"] == "start" and last["stale"] == 1
    finally:
        again.close()


TEMPLATE_LIST = {
    "version": 1,
    "voices": {"low": "tone-low"},
    "phrases": [
        {"text": "下一站六安", "voice": "low"},
        {"text": "欢迎光临", "voice": "low"},
    ],
    "templates": [
        {
            "template": "请{ticket}号旅客到六安站{window}号口",
            "voice": "low",
            "slots": {"ticket": {"pattern": "[A-Z][0-9]", "read": "characters"},
                      "window": {"values": ["1", "2"], "read": "number"}},
        }
    ],
}  # fmt: skip


def test_the_preload_lists_what_it_made_again_after_a_lexicon_change(tmp_path: Path) -> None:
    phrases = tmp_path / "hot.json"
    phrases.write_text(json.dumps(TEMPLATE_LIST, ensure_ascii=False), encoding="utf-8")
    svc = disk_only(tmp_path, **{"templates.file": str(phrases)})
    try:
        requests = expand(load_phrases(phrases))
        templates = svc.templates.templates()
        first = preload(svc, requests, templates=templates, caller=LOCAL)
        assert first.failed == 0 and first.relexicon == []
        svc.readings.add("六安", "lu4 an1", caller=LOCAL)
        # A phrase never cached before is new, not re-rendered.
        newcomer = TTSRequest(text="六安站到了", voice="tone-low")
        svc.synthesise(newcomer)
        report = preload(svc, requests, templates=templates, caller=LOCAL)
        affected = [p for p in svc.templates.pieces(templates[0]) if "六安" in p]
        assert affected  # the template has a piece with the term
        assert report.generated == 1 + len(affected) and report.failed == 0
        assert sorted(report.relexicon) == sorted(["phrases[0]", *(f"templates[0] piece {p!r}" for p in affected)])
        assert SUMMARY.match(report.summary())
        assert report.relexicon_lines()[0].startswith("preload: re-rendered after a lexicon change: ")
        third = preload(svc, requests, templates=templates, caller=LOCAL)
        assert third.generated == 0 and third.relexicon == []
    finally:
        svc.close()


def test_the_http_hit_paths_memo_follows_the_lexicon(tmp_path: Path) -> None:
    """``memory_hit`` (the HTTP hit path) remembers preset-voice resolutions: after an
    edit it must not answer the old key's audio for a text the edit re-keyed."""
    svc = tone_service(tmp_path)
    try:
        request = TTSRequest(text="下一站六安", voice="tone-low")
        made = speak(svc, "下一站六安")
        hit = svc.memory_hit(request)
        assert hit is not None and hit.key == made.key
        svc.readings.add("六安", "lu4 an1", caller=LOCAL)
        assert svc.memory_hit(request) is None  # a new key, not in memory: the request path makes it
        other = TTSRequest(text="欢迎光临", voice="tone-low")
        speak(svc, "欢迎光临")
        assert svc.memory_hit(other) is not None
    finally:
        svc.close()


def test_the_readings_section_checks_its_keys(tmp_path: Path) -> None:
    from lib.config import load_config
    from lib.errors import ConfigError

    with pytest.raises(ConfigError, match=r"readings\.max_entries: must be 1 to 100000, got 0"):
        load_config(env={}, overrides={"readings.max_entries": 0})
    with pytest.raises(ConfigError, match=r"readings\.lexicon: give a file name"):
        load_config(env={}, overrides={"readings.lexicon": " "})
    config = load_config(env={"TTS_READINGS_LEXICON": str(tmp_path / "mine.json"), "TTS_READINGS_MAX_ENTRIES": "7"})
    assert config.readings.lexicon == str(tmp_path / "mine.json") and config.readings.max_entries == 7
    assert load_config(env={}).readings.lexicon == "lexicon.json"  # beside hot_phrases.json


def test_preload_cache_py_says_what_a_hand_edit_of_the_lexicon_made_it_render_again(tmp_path: Path) -> None:
    """The script, twice, with the lexicon file edited in between (the service was stopped:
    the change is found at the start). Run in ``tmp_path``: the lexicon is lexicon.json in
    the working directory (readings.lexicon's default)."""
    from conftest import preload_main

    phrases = tmp_path / "hot.json"
    phrases.write_text(json.dumps({k: v for k, v in TEMPLATE_LIST.items() if k != "templates"}, ensure_ascii=False),
                       encoding="utf-8")  # fmt: skip
    args = ("--phrases", str(phrases), "--engine", "tone", "--cache-dir", str(tmp_path / "cache"))
    code, out, err = preload_main(*args, cwd=tmp_path)
    assert code == 0, err
    assert out.strip().splitlines() == ["preload: 2 phrases, 2 generated, 0 already cached, 0 failed in "
                                        + out.split(" failed in ")[1].strip()]  # fmt: skip
    (tmp_path / "lexicon.json").write_text('[{"term": "六安", "reading": "lu4 an1", "voice": null}]', encoding="utf-8")
    code, out, err = preload_main(*args, cwd=tmp_path)
    assert code == 0, err
    lines = out.strip().splitlines()
    assert len(lines) == 1 and SUMMARY.match(lines[0]) and lines[0].startswith("preload: 2 phrases, 1 generated, 1 ")
    assert "preload: re-rendered after a lexicon change: phrases[0]" in err.splitlines()
    assert "phrases[1]" not in err


def test_a_composed_answer_finds_each_piece_under_its_own_reading_part(tmp_path: Path) -> None:
    """After an entry for a term in one piece, and the preload, a templated request is
    composed from cached pieces only: each piece is keyed with its own text's part, not
    the whole sentence's."""
    phrases = tmp_path / "hot.json"
    phrases.write_text(json.dumps(TEMPLATE_LIST, ensure_ascii=False), encoding="utf-8")
    svc = disk_only(tmp_path, **{"templates.file": str(phrases)})
    try:
        svc.readings.add("六安", "lu4 an1", caller=LOCAL)
        report = preload(svc, [], templates=svc.templates.templates(), caller=LOCAL)
        assert report.failed == 0
        svc.cache.flush()
        made = calls(svc)
        result = svc.synthesise(TTSRequest(text="请A1号旅客到六安站2号口", voice="tone-low"))
        assert result.cache == "COMPOSED" and result.info["segments_synthesised"] == 0
        assert calls(svc) == made
    finally:
        svc.close()
