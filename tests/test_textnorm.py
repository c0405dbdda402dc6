"""Text normalisation: equivalences, idempotence, and the configurable extras."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from lib.text.normalise import normalise_text


def test_equivalent_spellings_normalise_alike() -> None:
    plain = normalise_text("欢迎光临 Welcome")
    for variant in (
        "  欢迎光临 Welcome  ",
        "欢迎光临\u3000Welcome",
        "欢迎光临\u00a0\u00a0Welcome",
        "欢迎\u200b光临 Wel\u200dcome\ufeff",
        "欢迎光临\t\n Welcome",
        "欢迎光临 Ｗｅｌｃｏｍｅ",  # full-width Latin folds under NFKC
    ):
        assert normalise_text(variant) == plain


def test_different_words_stay_different() -> None:
    assert normalise_text("3号窗口") != normalise_text("4号窗口")
    assert normalise_text("Hello") != normalise_text("hello")


def test_punctuation_folding_is_opt_in() -> None:
    assert normalise_text("你好，世界。") == "你好,世界。"  # NFKC folds the comma only
    assert normalise_text("你好，世界。", fold_punctuation=True) == "你好,世界."


def test_casefold_is_opt_in() -> None:
    assert normalise_text("Hello WORLD", casefold=True) == "hello world"


@given(st.text(), st.booleans(), st.booleans())
def test_idempotent(text: str, fold: bool, casefold: bool) -> None:
    once = normalise_text(text, fold_punctuation=fold, casefold=casefold)
    assert normalise_text(once, fold_punctuation=fold, casefold=casefold) == once


@given(st.text())
def test_no_edge_or_double_space(text: str) -> None:
    out = normalise_text(text)
    assert out == out.strip()
    assert "  " not in out
    assert not any(ch in out for ch in "\u200b\u200c\u200d\u2060\ufeff")


BIDI = [*"\u202a\u202b\u202c\u202d\u202e", *"\u2066\u2067\u2068\u2069", "\u200e", "\u200f", "\u061c"]


def test_bidi_controls_are_dropped() -> None:
    for control in BIDI:
        assert normalise_text(f"{control}Hello {control}world{control}") == "Hello world", repr(control)
    # Only those: Arabic letters and the other format characters a script needs stay.
    assert normalise_text("مرحبا\u200dبك") == "مرحبابك"  # ZWJ was dropped before too
    assert normalise_text("\u0627\u0644") == "\u0627\u0644"


def test_text_behind_a_right_to_left_override_is_spoken_by_the_builtin_engine(tmp_path: Path) -> None:
    """The speakability check sees the text without its display controls: "\u202eHello
    world" is "Hello world", the same key and the same audio. (The check is the engine's, not
    its base's: the espeak base, which needs no model load.)"""
    from lib.config import load_config
    from lib.pipeline.service import TTSService
    from lib.request.types import TTSRequest

    service = TTSService(load_config(env={}, overrides={"cache.dir": str(tmp_path), "voices.prewarm": False,
                                                           "builtin.base": "espeak"}))  # fmt: skip
    try:
        voice = service.engine.presets()[0]
        hidden = service.synthesise(TTSRequest(text="\u202eHello world\u202c", voice=voice))
        plain = service.synthesise(TTSRequest(text="Hello world", voice=voice))
    finally:
        service.close()
    assert hidden.cache == "MISS" and plain.cache == "HIT" and hidden.key == plain.key
    assert hidden.audio.pcm.size > 0
