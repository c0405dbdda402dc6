"""The pronunciation lexicon (issue 27): precedence and scope, validation of each
class of bad entry, the file (load errors name the line, atomic 0600 save), the
version, and the shipped lexicon's data."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from lib.text.frontend import FrontEnd
from lib.text.lexicon import Lexicon, LexiconError, LexiconFileError, shipped_entries, validate_entry
from lib.text.syllables import SYLLABLES


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("jieba")


def token_for(front: FrontEnd, text: str, term: str, voice: str | None = None) -> tuple[str, str]:
    token = next(t for t in front.read(text, voice=voice).tokens if t.text == term)
    return token.reading, token.source


def test_operator_entry_wins_over_shipped_and_model(cache: Path) -> None:
    lexicon = Lexicon()
    front = FrontEnd(lexicon, cache_dir=cache)
    assert token_for(front, "六安站到了", "六安") == ("lu4 an1", "shipped")
    lexicon.add("六安", "liu4 an1")
    assert token_for(front, "六安站到了", "六安") == ("liu4 an1", "lexicon")
    lexicon.add("银行", "yin2 xing2")
    assert token_for(front, "银行营业厅", "银行") == ("yin2 xing2", "lexicon")
    assert lexicon.remove("六安") and not lexicon.remove("六安")
    assert token_for(front, "六安站到了", "六安") == ("lu4 an1", "shipped")


def test_voice_scoped_entry_wins_for_its_voice_only(cache: Path) -> None:
    lexicon = Lexicon()
    front = FrontEnd(lexicon, cache_dir=cache)
    lexicon.add("长春", "chang2 chun1")
    lexicon.add("长春", "zhang3 chun1", voice="alice")
    assert token_for(front, "下一站长春", "长春", voice="alice") == ("zhang3 chun1", "lexicon")
    assert token_for(front, "下一站长春", "长春", voice="bob") == ("chang2 chun1", "lexicon")
    assert token_for(front, "下一站长春", "长春") == ("chang2 chun1", "lexicon")
    lexicon.remove("长春")
    assert token_for(front, "下一站长春", "长春", voice="bob") == ("chang2 chun1", "shipped")
    assert token_for(front, "下一站长春", "长春", voice="alice") == ("zhang3 chun1", "lexicon")


def test_longest_term_wins_and_terms_with_digits_apply_before_normalisation(cache: Path) -> None:
    lexicon = Lexicon()
    front = FrontEnd(lexicon, cache_dir=cache)
    lexicon.add("长沙", "chang2 sha1")
    lexicon.add("长沙南", "chang2 sha1 nan2")
    lexicon.add("T3航站楼", "T san1 hang2 zhan4 lou2")
    tokens = front.read("开往长沙南的列车").tokens
    assert [t.text for t in tokens if t.source == "lexicon"] == ["长沙南"]
    assert token_for(front, "请到T3航站楼", "T3航站楼") == ("T san1 hang2 zhan4 lou2", "lexicon")


@pytest.mark.parametrize(
    ("term", "reading", "voice", "message"),
    [
        ("六安", "lu4 xx1", None, "'xx' (in 'xx1') is not a pinyin syllable"),
        ("六安", "lu6 an1", None, "'lu6' has tone 6; a tone is 1-5"),
        ("六安", "lu0 an1", None, "tone 0"),
        ("六安", "lu4", None, "has 2 Han characters but the reading 'lu4' has 1 unit"),
        ("六安", "lu4 an1 zhan4", None, "has 2 Han characters"),
        ("六安", "lu an1", None, "'lu' has no tone number"),
        ("", "lu4", None, "the term is empty"),
        ("   ", "lu4", None, "the term is empty"),
        ("六安", "", None, "the reading is empty"),
        ("六安", None, None, "the reading is empty"),
        ("。。", "ju4", None, "no Han character, letter or digit"),
        ("六" * 33, "lu4", None, "longer than 32 characters"),
        ("A座", "zuo4", None, "too short"),
        ("六安", "lu4 an1", "bad voice!", "voice must be null or a voice name"),
    ],
)
def test_bad_entries_are_refused_naming_the_entry(term: str, reading: str, voice: str | None, message: str) -> None:
    with pytest.raises(LexiconError) as err:
        validate_entry(term, reading, voice)
    assert message in str(err.value)
    assert f"lexicon entry {term.strip()!r}" in str(err.value) or term.strip() == ""
    assert err.value.http_status == 422


def test_readings_are_canonicalised() -> None:
    assert validate_entry(" 六安 ", "lù ān").reading == "lu4 an1"
    assert validate_entry("绿", "lü4").reading == "lv4"
    assert validate_entry("ID卡", "I D ka3").reading == "I D ka3"
    assert validate_entry("Wi-Fi热点", "wifi re4 dian3").reading == "wifi re4 dian3"


def test_size_limit() -> None:
    lexicon = Lexicon(limit=2)
    lexicon.add("六安", "lu4 an1")
    lexicon.add("台州", "tai1 zhou1")
    lexicon.add("台州", "tai1 zhou1")  # replacing an entry is not growing
    with pytest.raises(LexiconError, match="the lexicon is full"):
        lexicon.add("丽水", "li2 shui3")
    with pytest.raises(LexiconFileError, match="limit is 1"):
        Lexicon.from_json(lexicon.to_json(), limit=1)


def test_version_follows_the_entries() -> None:
    a, b = Lexicon(), Lexicon()
    assert a.version == b.version
    a.add("六安", "lu4 an1")
    v1 = a.version
    assert v1 != b.version
    a.add("六安", "lu4 an1")
    assert a.version == v1  # the same entry again changes nothing
    a.add("六安", "liu4 an1")
    assert a.version != v1
    a.add("六安", "lu4 an1")
    assert a.version == v1
    a.add("六安", "lu4 an1", voice="alice")
    assert a.version != v1


def test_save_is_atomic_private_and_loads_back(tmp_path: Path) -> None:
    lexicon = Lexicon()
    lexicon.add("六安", "lu4 an1")
    lexicon.add("长春", "chang2 chun1", voice="alice")
    path = tmp_path / "lexicon.json"
    lexicon.save(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["lexicon.json"]  # no temporary file left
    loaded = Lexicon.load(path)
    assert loaded.snapshot() == lexicon.snapshot() and loaded.version == lexicon.version
    assert json.loads(path.read_text("utf-8"))[1] == {"term": "长春", "reading": "chang2 chun1", "voice": "alice"}
    assert len(Lexicon.load(tmp_path / "missing.json")) == 0


def test_a_bad_file_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "lexicon.json"
    path.write_text(
        '[\n{"term": "六安", "reading": "lu4 an1", "voice": null},\n{"term": "台州", "reading": "tai9 zhou1"}\n]\n',
        encoding="utf-8",
    )
    with pytest.raises(LexiconFileError, match=r"lexicon.json, line 3: lexicon entry '台州': 'tai9' has tone 9"):
        Lexicon.load(path)
    path.write_text('[\n{"term": "六安", "reading": "lu4 an1"},\n{"term": "台州" "reading"}\n]', encoding="utf-8")
    with pytest.raises(LexiconFileError, match="line 3: not valid JSON"):
        Lexicon.load(path)
    path.write_text('[\n{"term": "六安", "reading": "lu4 an1", "colour": "red"}\n]', encoding="utf-8")
    with pytest.raises(LexiconFileError, match="line 2: expected an entry like"):
        Lexicon.load(path)


def test_shipped_lexicon_is_valid_and_sourced() -> None:
    entries = shipped_entries()
    assert len(entries) >= 50
    assert all(e.note and e.voice is None for e in entries)
    assert len({e.term for e in entries}) == len(entries)


def test_syllable_table() -> None:
    assert len(SYLLABLES) > 400
    assert {"lv", "nve", "zhi", "er", "ng", "shei"} <= set(SYLLABLES)
    assert "xx" not in SYLLABLES and "ü" not in SYLLABLES
