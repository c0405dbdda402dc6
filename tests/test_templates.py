"""Slot templates: validation at load time, pieces, matching, composed answers, refine,
the preload's pieces and their marks; tone engine for the cache logic, builtin for real
speech."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import REPO, preload_main

from lib.batch.preload import preload
from lib.compose.assemble import to_float
from lib.compose.loudness import integrated_loudness
from lib.compose.templates import load_templates, parse_templates
from lib.config import load_config
from lib.engines.tone import ToneEngine
from lib.errors import ConfigError
from lib.pipeline.service import TTSService
from lib.request.access import LOCAL
from lib.request.phrases import PhraseFileError, load_phrases
from lib.request.types import TTSRequest

TICKET = {
    "template": "请{ticket}号顾客到{window}号窗口办理业务。",
    "voice": "low",
    "slots": {"ticket": {"pattern": "[A-Z][0-9]{3}", "read": "characters"},
              "window": {"values": ["1", "2", "3"], "read": "number"}},
}  # fmt: skip


def document(*templates: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"voices": {"low": "tone-low", "high": "tone-high"}, "templates": list(templates), **extra}


def write(tmp_path: Path, doc: dict[str, Any]) -> Path:
    path = tmp_path / "hot.json"
    path.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    return path


def make_service(tmp_path: Path, engine: Any, phrases: Path | None, **overrides: Any) -> TTSService:
    values = {
        "engine": "tone", "cache.dir": str(tmp_path / "cache"), "voices.prewarm": False,
        "readings.lexicon": str(tmp_path / "lexicon.json"), **overrides,
    }  # fmt: skip
    env = {"TTS_TEMPLATES_FILE": str(phrases) if phrases else "null"}
    return TTSService(load_config(env=env, overrides=values), engine)


@pytest.fixture
def engine() -> ToneEngine:
    return ToneEngine()


@pytest.fixture
def service(tmp_path: Path, engine: ToneEngine) -> Iterator[TTSService]:
    svc = make_service(tmp_path, engine, write(tmp_path, document(TICKET)))
    yield svc
    svc.close()


def preloaded(svc: TTSService) -> None:
    report = preload(svc, [], templates=svc.templates.templates(), caller=LOCAL)
    assert report.failed == 0, report.failures
    svc.cache.flush()


def call(svc: TTSService, ticket: str, window: str = "3", **fields: Any) -> Any:
    text = f"请{ticket}号顾客到{window}号窗口办理业务。"
    return svc.synthesise(TTSRequest(text=text, voice=fields.pop("voice", "tone-low"), **fields))


# --- validation -----------------------------------------------------------------------


def slots(**changed: Any) -> dict[str, Any]:
    return dict(TICKET, slots={**TICKET["slots"], **changed})


@pytest.mark.parametrize(
    ("template", "fragments"),
    [
        (dict(TICKET, template="请{ticket}号顾客到{counter}号窗口"), ['"template"', "unknown slot {counter}"]),
        (slots(window={"pattern": "[0-9]", "values": ["1", "12"]}), ["slots['window']", "'12' does not match"]),
        (slots(extra={"values": ["x"]}), ["slots['extra']", "not used"]),
        (slots(window={}), ["slots['window']", '"pattern"', '"values"']),
        (slots(window={"pattern": "[0-9"}), ["slots['window']", "not a regular expression"]),
        (slots(window={"pattern": "[0-9]*", "read": "characters"}), ["slots['window']", "matches empty text"]),
        (slots(ticket={"pattern": "[A-Z].{3}", "read": "characters"}),
         ["slots['ticket']", "cannot list the characters"]),
        (slots(window={"values": ["1", "A"], "read": "number"}), ["slots['window']", "'A' is not a number"]),
        (slots(window={"pattern": "[0-9]+", "read": "number"}), ["slots['window']", 'needs "values"']),
        (slots(window={"values": ["1"], "read": "spell"}), ["slots['window']", '"read"', "'spell'"]),
        (dict(TICKET, template="请{ticket}{window}号"), ['"template"', "touch"]),
        (dict(TICKET, template="请到窗口", slots={}), ['"template"', "has no {slot}"]),
        (dict(TICKET, slots={}), ['"slots"']),
        (dict(TICKET, template="请{ticket号"), ['"template"', "literal brace"]),
        (dict(TICKET, voice="nobody"), ['"voice"', "'nobody'"]),
        (dict(TICKET, seed=-1), ['"seed"']),
        (dict(TICKET, colour="red"), ["colour"]),
    ],
)  # fmt: skip
def test_template_errors_name_the_template_and_the_field(
    tmp_path: Path, template: dict[str, Any], fragments: list[str]
) -> None:
    with pytest.raises(PhraseFileError) as caught:
        parse_templates(document(template), base_dir=tmp_path)
    assert "templates[0]" in str(caught.value)
    for fragment in fragments:
        assert fragment in str(caught.value)


def test_an_invalid_template_file_stops_the_service_and_the_preload(tmp_path: Path) -> None:
    bad = write(tmp_path, document(dict(TICKET, template="请{nope}号")))
    with pytest.raises(ConfigError, match=r"templates\.file: .*templates\[0\].*unknown slot \{nope\}"):
        make_service(tmp_path, ToneEngine(), bad)
    code, _, err = preload_main("--phrases", str(bad), "--cache-dir", str(tmp_path / "c"), "--engine", "tone")
    assert code == 2 and "templates[0]" in err and "unknown slot {nope}" in err


def test_a_list_may_hold_templates_only_and_pieces_are_tens_not_the_product(tmp_path: Path) -> None:
    path = write(tmp_path, document(slots(window={"values": [str(n) for n in range(1, 11)], "read": "number"})))
    assert load_phrases(path) == []
    (template,) = load_templates(path)
    pieces = template.pieces()
    # 3 fixed parts, 26 letters, 10 digits, and 十 for window 10: A000-Z999 x 10 windows is 260,000 sentences.
    assert len(pieces) == 40 and {"请", "号顾客到", "号窗口办理业务。", "A", "Z", "零", "九", "十"} <= set(pieces)
    shipped = load_templates(REPO / "hot_phrases.json")
    assert len(shipped) == 2 and all(len(t.pieces()) < 50 for t in shipped)


# --- composing -------------------------------------------------------------------------


def test_after_the_preload_ticket_calls_need_no_engine(service: TTSService, engine: ToneEngine) -> None:
    preloaded(service)
    calls = engine.calls
    rng = random.Random(7)
    for _ in range(100):
        ticket = f"{rng.choice('ABCDEFGHIJKLMNOPQRSTUVWXYZ')}{rng.randrange(1000):03d}"
        result = call(service, ticket, rng.choice("123"))
        assert result.cache == "COMPOSED"
        assert result.info["segments"] == 8 and result.info["segments_synthesised"] == 0
    assert engine.calls == calls
    assert service.dashboard.snapshot(caller=LOCAL)["since_start"]["composed"] == 100
    assert 'tts_cache_requests_total{result="composed"} 100.0' in service.dashboard.metrics.exposition().decode()


UNREAD = {
    "template": "请{ticket}号顾客到{window}号窗口办理业务。",
    "voice": "low",
    "slots": {"ticket": {"pattern": "[A-Z][0-9]{3}", "read": "characters"},
              "window": {"values": [str(n) for n in range(1, 11)]}},
}  # fmt: skip
HOURS = {"template": "本店{hour}点开门。", "voice": "low", "slots": {"hour": {"values": ["2", "9", "10"]}}}
TRAINS = {"template": "请乘坐{train}次列车。", "voice": "low", "slots": {"train": {"values": ["G4512", "D12"]}}}


def test_every_listed_value_of_a_slot_without_read_composes_without_the_engine(
    tmp_path: Path, engine: ToneEngine
) -> None:
    """A slot without ``read`` (read as text): each listed value's piece is made as the
    sentence reads it, so the preload makes what a composed answer asks for."""
    svc = make_service(tmp_path, engine, write(tmp_path, document(UNREAD, HOURS, TRAINS)))
    try:
        preloaded(svc)
        calls = engine.calls
        texts = [f"请B107号顾客到{n}号窗口办理业务。" for n in range(1, 11)]
        texts += [f"本店{h}点开门。" for h in HOURS["slots"]["hour"]["values"]]
        texts += [f"请乘坐{t}次列车。" for t in TRAINS["slots"]["train"]["values"]]
        for text in texts:
            result = svc.synthesise(TTSRequest(text=text, voice="tone-low"))
            assert result.cache == "COMPOSED" and result.info["segments_synthesised"] == 0, text
        assert engine.calls == calls
        hours, trains = svc.templates.templates()[1:]
        # Read in the sentence: "2点" is 两点, a train number digit by digit with 幺.
        assert svc.templates.value_pieces(hours, "hour", "2") == ["两"]
        assert svc.templates.value_pieces(trains, "train", "G4512") == ["G 四五幺二"]
        assert "两" in svc.templates.pieces(hours) and "十" in svc.templates.pieces(svc.templates.templates()[0])
    finally:
        svc.close()


def test_the_dashboard_counts_the_pieces_the_preload_made(service: TTSService, engine: ToneEngine) -> None:
    report = preload(service, [], templates=service.templates.templates(), caller=LOCAL)
    assert report.generated == engine.calls > 0
    since = service.dashboard.snapshot(caller=LOCAL)["since_start"]
    assert since["preload_misses"] == report.generated  # what the dashboard calls "generated"
    assert since["misses"] == 0  # not counted as user traffic
    again = preload(service, [], templates=service.templates.templates(), caller=LOCAL)
    assert (
        again.generated == 0
        and service.dashboard.snapshot(caller=LOCAL)["since_start"]["preload_misses"] == report.generated
    )


def test_a_composed_answer_is_its_pieces_joined_levelled_and_not_stored(service: TTSService) -> None:
    preloaded(service)
    entries = service.cache.store.stats()["entries"]
    a = call(service, "A023")
    b = call(service, "A023")
    service.cache.flush()
    assert a.cache == b.cache == "COMPOSED" and a.wav == b.wav
    assert service.cache.store.stats()["entries"] == entries  # the sentence itself was not stored
    request = TTSRequest(text="请A023号顾客到3号窗口办理业务。", voice="tone-low")
    pieces = service.templates.match(service.resolve(request))
    assert pieces is not None
    assert [text for text, _ in pieces.pieces] == ["请", "A", "零", "二", "三", "号顾客到", "三", "号窗口办理业务。"]
    gaps = [gap for _, gap in pieces.pieces]
    assert gaps[1:4] == [0.06, 0.06, 0.06] and gaps[0] == 0.0  # spelled characters apart, the rest crossfaded
    assert integrated_loudness(to_float(a.audio.pcm), a.sample_rate) == pytest.approx(-16.0, abs=0.3)


def test_missing_pieces_are_made_once_and_marked(service: TTSService, engine: ToneEngine) -> None:
    first = call(service, "B101", "2")
    assert first.cache == "COMPOSED" and engine.calls == 7  # 请 B 一 零 号顾客到 二 号窗口办理业务。 (一 twice)
    service.cache.flush()
    second = call(service, "B110", "1")
    assert engine.calls == 7 and second.info["segments_synthesised"] == 0
    piece = service.templates.piece_request(service.templates.templates()[0], "号顾客到")
    assert piece is not None
    stored = service.cache.lookup(piece.key)
    assert stored is not None
    assert stored[0].meta["role"] == "piece" and stored[0].meta["template"] == service.templates.templates()[0].id


def test_the_preload_marks_a_piece_first_made_as_a_sentence(service: TTSService) -> None:
    template = service.templates.templates()[0]
    piece = service.templates.piece_request(template, "号顾客到")
    assert piece is not None
    service.synthesise(TTSRequest(text="号顾客到", voice="tone-low", store=True))  # a phrase of its own: a result
    service.preload_piece(template, "号顾客到")
    service.cache.flush()
    stored = service.cache.lookup(piece.key)
    assert stored is not None and stored[0].meta["role"] == "piece"


def test_only_the_templates_voice_and_settings_are_composed(service: TTSService, engine: ToneEngine) -> None:
    preloaded(service)
    calls = engine.calls
    assert call(service, "A023", voice="tone-high").cache == "MISS"
    assert call(service, "A023", seed=5).cache == "MISS"
    assert call(service, "A023", window="7").cache == "MISS"  # not a value of the slot
    assert engine.calls == calls + 3
    no_stop = service.synthesise(TTSRequest(text="请A024号顾客到1号窗口办理业务", voice="tone-low"))
    assert no_stop.cache == "COMPOSED"  # the final 。 may be left out


def test_refine_stores_the_whole_sentence_for_a_plain_hit_next(tmp_path: Path, engine: ToneEngine) -> None:
    svc = make_service(tmp_path, engine, write(tmp_path, document(dict(TICKET, refine=True))))
    try:
        preloaded(svc)
        calls = engine.calls
        composed = call(svc, "C777", "1")
        assert composed.cache == "COMPOSED"
        assert svc.settle(30)
        svc.cache.flush()
        assert engine.calls == calls + 1  # the whole sentence, once, in the background
        hit = call(svc, "C777", "1")
        assert hit.cache == "HIT" and hit.key == composed.key and hit.wav != composed.wav
        call(svc, "C778", "1", store=False)
        assert svc.settle(30) and engine.calls == calls + 1  # store=false is never refined
        assert 'tts_template_refines_total{result="done"} 1.0' in svc.dashboard.metrics.exposition().decode()
    finally:
        svc.close()


def test_a_preloaded_phrase_matching_a_template_is_stored_whole(
    service: TTSService, engine: ToneEngine, tmp_path: Path
) -> None:
    (tmp_path / "p").mkdir()
    phrases = load_phrases(write(tmp_path / "p", {"voices": {"low": "tone-low"}, "phrases": [
        {"text": "请A023号顾客到3号窗口办理业务。", "voice": "low"}]}))  # fmt: skip
    report = preload(service, phrases, caller=LOCAL)
    assert (report.generated, engine.calls) == (1, 1)
    assert call(service, "A023").cache == "HIT"


def test_the_ui_preload_registers_the_lists_templates_for_the_admin_only(tmp_path: Path, engine: ToneEngine) -> None:
    """An uploaded list's templates change every user's answers: the admin's upload
    enables them; anyone else's is preloaded as pieces and left off (with a note)."""
    from lib.request.access import AccessPolicy
    from lib.ui.handlers import Handlers

    svc = make_service(tmp_path, engine, None)
    svc.access = AccessPolicy(token="admin-secret")
    upload = str(write(tmp_path, document(TICKET)))
    try:
        assert call(svc, "A023").cache == "MISS"
        handlers = Handlers(svc, tmp_path / "none.json")
        quiet = {"progress": lambda *a, **k: None}
        anyone = handlers.run_preload(upload, False, "", None, **quiet)  # type: ignore[arg-type]
        assert "preloaded as pieces only, not enabled" in anyone and "template(s) active" not in anyone
        assert len(svc.templates) == 0 and call(svc, "A024").cache == "MISS"  # not composed for anyone
        admin = handlers.run_preload(upload, False, "admin-secret", None, **quiet)  # type: ignore[arg-type]
        assert "1 template(s) active" in admin
        assert len(svc.templates) == 1 and call(svc, "A025").cache == "COMPOSED"
    finally:
        svc.close()


def test_the_book_takes_templates_from_the_admin_only_and_at_most_max_templates(tmp_path: Path) -> None:
    from lib.compose.templates import MAX_TEMPLATES
    from lib.errors import UnauthorizedError
    from lib.request.access import Caller

    svc = make_service(tmp_path, ToneEngine(), None)
    try:
        many = [dict(TICKET, template=f"请{{ticket}}号顾客到{{window}}号窗口{i}。") for i in range(MAX_TEMPLATES + 1)]
        with pytest.raises(PhraseFileError, match=f"over the limit of {MAX_TEMPLATES}"):
            load_templates(write(tmp_path, document(*many)))
        templates = load_templates(write(tmp_path, document(*many[:MAX_TEMPLATES])))
        with pytest.raises(UnauthorizedError, match="enable a phrase list's templates"):
            svc.templates.add(templates[:1], caller=Caller(admin=False, token_configured=True))
        svc.templates.add(templates, caller=LOCAL)
        extra = load_templates(write(tmp_path, document(many[MAX_TEMPLATES])))
        with pytest.raises(PhraseFileError, match=f"would hold {MAX_TEMPLATES + 1} templates"):
            svc.templates.add(extra, caller=LOCAL)
        assert len(svc.templates) == MAX_TEMPLATES
    finally:
        svc.close()


@pytest.mark.parametrize(
    ("template", "slot", "says"),
    [
        ("{x}.", {"pattern": "[A-Za-z ]+", "read": "characters"}, "has no fixed words"),
        ("Please {x}.", {"pattern": "[A-Za-z ]+", "read": "characters"}, "matches values of any length"),
        ("Please {x}.", {"pattern": "(a+)+b", "read": "characters"}, "matches values of any length"),
        ("Please {x}.", {"pattern": "[A-Z]{40}", "read": "characters"}, "up to 40 characters long"),
        ("Please {x}.", {"pattern": "(a)\\1", "read": "characters"}, "back-references"),
        ("Please {x}.", {"pattern": "(?=a)a", "read": "characters"}, "look-arounds"),
    ],
    ids=["no-fixed-words", "open-class", "nested-plus", "too-long", "backreference", "lookahead"],
)
def test_broad_or_unsafe_slot_patterns_are_refused_at_load(
    tmp_path: Path, template: str, slot: dict[str, Any], says: str
) -> None:
    """The capture of the fault probe ("{x}." with [A-Za-z ]+ spelled every English
    sentence in its voice letter by letter) and patterns RE2 cannot match in linear time."""
    doc = document({"template": template, "voice": "low", "slots": {"x": slot}})
    with pytest.raises(PhraseFileError, match=re.escape(says)):
        load_templates(write(tmp_path, doc))


def test_nested_repeats_are_matched_in_linear_time() -> None:
    """``(a+)+b`` against 40 ``a``s: Python's re backtracks for hours; RE2 answers at once
    (no time is asserted: a backtracking matcher would hang here until pytest-timeout)."""
    from lib.compose.patterns import compile_pattern

    assert compile_pattern("(a+)+b").fullmatch("a" * 40) is None
    assert compile_pattern("(a+)+b").fullmatch("a" * 40 + "b") is not None


@pytest.mark.slow
def test_a_miss_against_a_backtracking_template_cannot_stall_the_process(tmp_path: Path) -> None:
    """A pattern within the length bound that backtracks in Python's re (``(?:a|a|a|a){1,30}``:
    4^n ways to split n letters; ``(?:a|a){1,30}`` already takes 2 minutes on 30): a
    request of 32 ``a``s that does not match is answered as a plain miss. Run in a child
    process whose time limit only detects a hang (years with a backtracking matcher)."""
    doc = document({"template": "call {x} now", "voice": "low",
                    "slots": {"x": {"pattern": "(?:a|a|a|a){1,30}", "read": "characters"}}})  # fmt: skip
    phrases = write(tmp_path, doc)
    code = f"""
import sys
sys.path.insert(0, {str(REPO)!r})
from lib.config import load_config
from lib.engines.tone import ToneEngine
from lib.request.types import TTSRequest
from lib.pipeline.service import TTSService
config = load_config(env={{"TTS_TEMPLATES_FILE": {str(phrases)!r}}},
                     overrides={{"engine": "tone", "cache.dir": {str(tmp_path / "cache")!r}, "voices.prewarm": False}})
svc = TTSService(config, ToneEngine())
assert len(svc.templates) == 1
print(svc.synthesise(TTSRequest(text="call " + "a" * 32 + "b now", voice="tone-low")).cache)
print(svc.synthesise(TTSRequest(text="call aaa now", voice="tone-low")).cache)
svc.close()
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=90, check=True)
    assert done.stdout.split() == ["MISS", "COMPOSED"], done.stderr


def test_builtin_ticket_call_is_real_speech_from_pieces(tmp_path: Path) -> None:
    from lib.config import BuiltinConfig
    from lib.engines.builtin import BuiltinEngine

    svc = TTSService(
        load_config(env={"TTS_TEMPLATES_FILE": str(REPO / "hot_phrases.json")},
                    overrides={"cache.dir": str(tmp_path / "cache"), "voices.prewarm": False}),
        BuiltinEngine(BuiltinConfig(base="espeak")),
    )  # fmt: skip
    try:
        report = preload(svc, [], templates=svc.templates.templates(), caller=LOCAL)
        assert report.failed == 0 and report.generated == report.total == 79
        calls = svc.dashboard.snapshot(caller=LOCAL)["since_start"]["engine_calls"]
        result = svc.synthesise(TTSRequest(text="请K508号顾客到7号窗口办理业务。", voice="zh-male"))
        english = svc.synthesise(TTSRequest(text="Customer number K508, please go to counter 7.", voice="en-male"))
        assert result.cache == english.cache == "COMPOSED"
        assert svc.dashboard.snapshot(caller=LOCAL)["since_start"]["engine_calls"] == calls
        whole = svc.synthesise(TTSRequest(text="请K508号顾客到7号窗口办理业务。", voice="zh-male", use_cache=False))
        assert 0.7 < result.duration / whole.duration < 1.4  # about as long as the sentence said in one go
        for r in (result, english):
            x = to_float(r.audio.pcm)
            assert integrated_loudness(x, r.sample_rate) == pytest.approx(-16.0, abs=0.5)
            assert float(np.abs(x).max()) < 0.9  # peaks limited under -1 dBFS
    finally:
        svc.close()


def test_templates_follow_the_text_normalisation(tmp_path: Path, engine: ToneEngine) -> None:
    path = write(tmp_path, document(TICKET))
    svc = make_service(tmp_path, engine, path, **{"text.casefold": True, "text.fold_punctuation": True})
    try:
        preloaded(svc)
        calls = engine.calls
        result = call(svc, "K508")  # arrives as "请k508号顾客到3号窗口办理业务." after folding
        assert result.cache == "COMPOSED" and engine.calls == calls
    finally:
        svc.close()


def test_a_composed_answer_ends_with_the_configured_tail_of_silence(tmp_path: Path, engine: ToneEngine) -> None:
    """The tail is added after levelling (a mutation that dropped it survived before)."""
    svc = make_service(tmp_path, engine, write(tmp_path, document(TICKET)), **{"segments.tail": 0.5})
    try:
        preloaded(svc)
        result = call(svc, "A023")
        assert result.cache == "COMPOSED"
        pcm = result.audio.pcm
        tail = int(0.5 * result.sample_rate)
        assert not np.any(pcm[-tail:]), "the last 0.5 s must be silence"
        assert np.any(pcm[-tail - result.sample_rate // 10 : -tail]), "speech must reach the tail"
    finally:
        svc.close()
