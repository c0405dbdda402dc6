"""Key rules are pinned: a change here changes every key in every deployed cache.

Schema 2 (issue 27) added the reading part (the text front end's version and the digest
of the lexicon entries found in the text): every pinned key below changed with it, on
purpose."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from lib.cache.keys import KEY_RE, KeyFields, cache_key, model_tag

BASE = KeyFields(
    engine="builtin",
    model_version="builtin-1",
    voice="preset:zh-female",
    prompt_text="",
    text="欢迎光临",
    style="",
    seed=0,
    speed=1.0,
    mode="preset",
    reading="text1-0123456789ab:-",
)


def test_pinned_keys() -> None:
    assert cache_key(BASE) == "4b549162bff3be35e3bce349c73a9bd0"


def test_pinned_key_of_a_cloned_english_request() -> None:
    fields = dataclasses.replace(
        BASE,
        engine="cosyvoice",
        model_version="cosyvoice2-0123abcd",
        voice="78b70483377efa76f930adc8cfdca13c",
        prompt_text="希望你以后能够做的比我还好呦。",
        text="Please proceed to counter 3.",
        style="slow",
        seed=42,
        speed=1.25,
        mode="zero_shot",
        reading="text1-0123456789ab:-",
    )
    assert cache_key(fields) == "8172263da322127f06d8499b3c63f25f"


def test_canonical_form_is_stable_json() -> None:
    assert BASE.canonical() == (
        '[2,"builtin","builtin-1","preset:zh-female","","欢迎光临","",0,"1.000","preset","text1-0123456789ab:-",""]'.encode()
    )


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("engine", "cosyvoice"),
        ("model_version", "builtin-2"),
        ("voice", "preset:zh-male"),
        ("prompt_text", "你好"),
        ("text", "欢迎光临!"),
        ("style", "slow"),
        ("seed", 1),
        ("speed", 1.1),
        ("mode", "instruct"),
        ("reading", "text1-0123456789ab:5d41402abc4b2a76"),
        ("finish", '{"lufs":-16.0}'),
    ],
)
def test_every_field_changes_the_key(name: str, value: object) -> None:
    changed = dataclasses.replace(BASE, **{name: value})
    assert cache_key(changed) != cache_key(BASE)


def test_speed_is_keyed_to_three_decimals() -> None:
    assert cache_key(dataclasses.replace(BASE, speed=1.0000001)) == cache_key(BASE)


def test_key_shape_and_tag() -> None:
    assert KEY_RE.match(cache_key(BASE))
    assert model_tag("builtin", "builtin-1") == "builtin:builtin-1"


def test_pinned_key_of_a_finished_result() -> None:
    """A finished result (segments joined, loudness, tail) has the assembly recipe as the
    last element; raw engine output (a segment, a piece) has "" there."""
    from lib.compose.assemble import Finish

    recipe = Finish().recipe
    assert recipe == '{"lufs":-16.0,"max":80,"pause":[0.3,0.15],"tail":0.2,"v":[1,1],"xf":0.01}'
    finished = dataclasses.replace(BASE, finish=recipe)
    assert finished.canonical().startswith(BASE.canonical()[:-3] + b'"{')
    assert cache_key(finished) == "88ac54e63caa21f823fa6e511f412805"
    assert cache_key(dataclasses.replace(BASE, finish="")) == cache_key(BASE)


def test_the_reading_part_is_what_the_front_end_says(tmp_path: Path) -> None:
    """The service keys a text with :meth:`FrontEnd.key_part` of that text in the voice
    the caller named: a lexicon entry whose term occurs in the text changes it."""
    from conftest import tone_service

    from lib.request.access import LOCAL
    from lib.request.types import TTSRequest

    svc = tone_service(tmp_path)
    try:
        r = svc.resolve(TTSRequest(text="下一站六安", voice="tone-low"))
        assert r.fields.reading == svc.readings.front_end.key_part("下一站六安", "tone-low")
        assert r.fields.reading.startswith(svc.readings.front_end.version + ":")
        svc.readings.add("六安", "lu4 an1", caller=LOCAL)
        again = svc.resolve(TTSRequest(text="下一站六安", voice="tone-low"))
        assert again.fields.reading != r.fields.reading and again.key != r.key
    finally:
        svc.close()
