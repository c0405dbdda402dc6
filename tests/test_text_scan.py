"""The term scan for the cache key (issue 27): the key part changes exactly for the
texts that contain a changed term (in the voice it applies to), and the front end's
version follows its shipped data."""

from __future__ import annotations

import shutil
from pathlib import Path

from lib.text.frontend import FrontEnd
from lib.text.lexicon import Lexicon, validate_entry
from lib.text.scan import REVISION, TermIndex, data_hash, frontend_version

TEXTS = ["六安站到了。", "开往台州的列车。", "急救电话120。", "六安和台州", "Gate C7 is now closed."]


def key_parts(front: FrontEnd, voice: str | None = None) -> list[str]:
    return [front.key_part(t, voice) for t in TEXTS]


def test_a_change_rekeys_only_texts_containing_the_term() -> None:
    lexicon = Lexicon()
    front = FrontEnd(lexicon)
    before = key_parts(front)
    lexicon.add("六安", "lu4 an1")
    after = key_parts(front)
    changed = [t for t, a, b in zip(TEXTS, before, after, strict=True) if a != b]
    assert changed == ["六安站到了。", "六安和台州"]
    lexicon.add("台州", "tai1 zhou1")
    again = key_parts(front)
    assert [t for t, a, b in zip(TEXTS, after, again, strict=True) if a != b] == ["开往台州的列车。", "六安和台州"]
    lexicon.remove("台州")
    assert key_parts(front) == after  # removing the entry brings the keys back
    lexicon.remove("六安")
    assert key_parts(front) == before


def test_a_voice_scoped_change_rekeys_only_that_voice() -> None:
    lexicon = Lexicon()
    front = FrontEnd(lexicon)
    alice, bob = key_parts(front, "alice"), key_parts(front, "bob")
    lexicon.add("六安", "liu4 an1", voice="alice")
    assert key_parts(front, "bob") == bob
    now = key_parts(front, "alice")
    assert [t for t, a, b in zip(TEXTS, alice, now, strict=True) if a != b] == ["六安站到了。", "六安和台州"]
    # A global entry with the same reading as the scoped one gives the same key (same words said).
    lexicon.add("六安", "liu4 an1")
    assert key_parts(front, "bob")[0] == key_parts(front, "alice")[0]


def test_key_part_is_the_readings_version_and_holds_the_front_end_version() -> None:
    lexicon = Lexicon()
    lexicon.add("六安", "lu4 an1")
    front = FrontEnd(lexicon)
    part = front.key_part("六安站到了。")
    assert part.startswith(frontend_version() + ":") and not part.endswith(":-")
    assert front.key_part("急救电话120。").endswith(":-")
    assert front.read("六安站到了。").version == part
    assert frontend_version().startswith(f"text{REVISION}-")


def test_scan_finds_every_occurrence_and_matches_leftmost_longest() -> None:
    index = TermIndex([validate_entry("长沙", "chang2 sha1"), validate_entry("长沙南", "chang2 sha1 nan2")])
    assert [e.term for e in index.found("长沙南站和长沙站")] == ["长沙", "长沙南"]
    assert [(s, e, x.term) for s, e, x in index.matches("长沙南站和长沙站")] == [(0, 3, "长沙南"), (5, 7, "长沙")]
    assert TermIndex([]).digest("anything") == "-"


def test_version_hash_follows_the_shipped_data(tmp_path: Path) -> None:
    data = Path(__file__).resolve().parents[1] / "lib" / "text" / "data"
    copy = tmp_path / "data"
    shutil.copytree(data, copy)
    assert data_hash(copy) == data_hash(data)
    with (copy / "shipped_lexicon.tsv").open("a", encoding="utf-8") as f:
        f.write("新词\txin1 ci2\ttest\n")
    assert data_hash(copy) != data_hash(data)
