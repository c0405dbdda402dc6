"""Key rules are pinned: a change here changes every key in every deployed cache."""

from __future__ import annotations

import dataclasses

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
)


def test_pinned_keys() -> None:
    assert cache_key(BASE) == "69d7cc298ccdbbfd9814b7eaeb39f188"


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
    )
    assert cache_key(fields) == "5ced6f4fa4919a9709249783ad083bd1"


def test_canonical_form_is_stable_json() -> None:
    assert BASE.canonical() == (
        '[1,"builtin","builtin-1","preset:zh-female","","欢迎光临","",0,"1.000","preset"]'.encode()
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
    """A finished result (segments joined, loudness, tail) adds the assembly recipe as an
    eleventh element; raw engine output keeps the ten-element form above, so entries
    made before segments existed are reused as segments."""
    from lib.compose.assemble import Finish

    recipe = Finish().recipe
    assert recipe == '{"lufs":-16.0,"max":80,"pause":[0.3,0.15],"tail":0.2,"v":[1,1],"xf":0.01}'
    finished = dataclasses.replace(BASE, finish=recipe)
    assert finished.canonical().startswith(BASE.canonical()[:-1] + b",")
    assert cache_key(finished) == "ae85a70074dd1f120ec4f43d0fab47db"
    assert cache_key(dataclasses.replace(BASE, finish="")) == cache_key(BASE)
