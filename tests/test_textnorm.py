"""Text normalisation: equivalences, idempotence, and the configurable extras."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from lib.textnorm import normalise_text


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
