"""Numbers of any length and form are read, never a 500 (issue 31 item 6).

``lib/text/numbers.py`` read a Chinese cardinal in groups of 万 up to 万亿 and raised
IndexError past 16 digits, so a price, a percentage, a decimal, a fraction, a
temperature or a negative number of 17+ digits (``¥12345678901234567``) failed
``POST /api/reading`` and every synthesis with a 500. Now every numeric form is read:
past the largest unit a reading in words means something (16 digits in Mandarin, 15 in
English) a value is read digit by digit.

Generated forms (hypothesis, derandomised: the same texts on every run) compose a sign,
1-60 digits (leading zeros too), thousands separators, decimals, %, fractions, currency
symbols, ranges, units, full-width digits, letters, and Chinese or English words around
them, and go through the front end (``lib.text.read``), the real HTTP API
(``POST /api/reading`` on a live server) and the builtin engine on the espeak base.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import numpy as np
import pytest
from conftest import in_process, tone_service
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lib.api import create_app
from lib.config import BuiltinConfig
from lib.engines.builtin import BuiltinEngine
from lib.engines.plausible import SILENT_PEAK, bounds, units
from lib.text import read
from lib.text.normalise import normalise_text
from lib.text.numbers import EN_MAX_DIGITS, ZH_DIGITS, ZH_MAX_DIGITS, en_digits, en_int, zh_int
from lib.text.syllables import RULE_READINGS, unit_kind
from lib.text.tokens import KINDS, Reading

# -- the generated texts -------------------------------------------------------------------

_FULL_WIDTH = str.maketrans("0123456789", "０１２３４５６７８９")
ZH_CONTEXTS = ("{}", "共{}", "请支付{}。", "温度{}", "第{}名", "拨打{}", "编号{}", "请到{}号窗口", "增长了{}，请注意")
EN_CONTEXTS = ("{}", "The total is {} today.", "Pay {} now.", "Room {}", "Call {}", "It rose by {} in 2025.")
UNITS = ("kg", "km", "m", "°C", "℃", "元", "个", "人", "年", "th", "st")
RANGE_SEPARATORS = ("-", "~", "～", "–", " - ", "元-")


def digits(max_digits: int) -> st.SearchStrategy[str]:
    """1 to ``max_digits`` digits; the first may be 0 (leading zeros)."""
    return st.integers(1, max_digits).flatmap(lambda n: st.text("0123456789", min_size=n, max_size=n))


def grouped(run: str) -> str:
    """``run`` with a comma between every three digits from the right."""
    head = len(run) % 3 or 3
    return ",".join([run[:head], *(run[i : i + 3] for i in range(head, len(run), 3))])


@st.composite
def values(draw: st.DrawFn, max_digits: int) -> str:
    """A plain value: digits, maybe grouped, maybe with a fraction part."""
    whole = draw(digits(max_digits))
    if draw(st.booleans()):
        whole = grouped(whole)
    if draw(st.booleans()):
        whole += "." + draw(digits(30))
    return whole


@st.composite
def numeric_forms(draw: st.DrawFn, max_digits: int = 60) -> str:
    """One numeric form: a value with a sign, %, a currency, a unit, a fraction, a range,
    letters; sometimes in full-width digits."""
    value = values(max_digits)
    sign = draw(st.sampled_from(("", "", "-", "+")))
    kind = draw(st.sampled_from(("value", "percent", "currency", "unit", "fraction", "range", "letters")))
    if kind == "value":
        form = sign + draw(value)
    elif kind == "percent":
        form = sign + draw(value) + draw(st.sampled_from(("%", " %", "‰")))
    elif kind == "currency":
        form = draw(st.sampled_from("¥$€£")) + draw(st.sampled_from(("", "-", " "))) + draw(value)
    elif kind == "unit":
        form = sign + draw(value) + draw(st.sampled_from(UNITS))
    elif kind == "fraction":
        form = sign + draw(digits(max_digits)) + draw(st.sampled_from("/⁄")) + draw(digits(max_digits))
    elif kind == "range":
        form = sign + draw(value) + draw(st.sampled_from(RANGE_SEPARATORS)) + draw(value)
        form += draw(st.sampled_from(("", "%", "个", "kg")))
    else:
        letters = draw(st.sampled_from(("A", "CA", "abc", "G", "km")))
        run = draw(digits(max_digits))
        form = letters + run if draw(st.booleans()) else run + letters
    return form.translate(_FULL_WIDTH) if draw(st.integers(0, 4)) == 0 else form


@st.composite
def numeric_texts(draw: st.DrawFn, max_digits: int = 60) -> str:
    """A numeric form in a Chinese or an English sentence (or alone)."""
    context: str = draw(st.sampled_from(ZH_CONTEXTS + EN_CONTEXTS))
    form: str = draw(numeric_forms(max_digits))
    return context.format(form)


# -- what every reading must be ------------------------------------------------------------

#: What a unit of each kind of token must be to be said: a pinyin syllable, a letter, a word.
SPEAKABLE = {"zh": {"syllable"}, "letters": {"letter"}, "en": {"word"}}


def check_reading(text: str, reading: Reading) -> None:
    """Non-empty, and every unit speakable: syllables, letters and words, never a digit;
    a rule's Mandarin spoken text is one Han character per syllable (text-reading
    engines are given it)."""
    assert reading.reading, f"{text!r} has an empty reading"
    for token in reading.tokens:
        assert token.kind in KINDS, (text, token)
        if token.kind == "pause":
            continue
        for unit in token.units:
            assert unit_kind(unit) in SPEAKABLE[token.kind], f"{text!r}: unit {unit!r} of {token} is not speakable"
        if token.kind == "zh" and token.source == "rule":
            assert len(token.spoken) == len(token.units), f"{text!r}: {token} says other than it reads"
            assert all(ch in RULE_READINGS for ch in token.spoken), (text, token)
    assert not any(ch.isdecimal() for ch in reading.spoken), f"{text!r} is spoken with digits: {reading.spoken!r}"


# -- (a) the front end ---------------------------------------------------------------------


@settings(max_examples=400, derandomize=True, deadline=None)
@given(numeric_texts(), st.sampled_from((None, "zh", "en")))
@example("¥12345678901234567", None)
@example("-12345678901234567.5%", "zh")
@example("12345678901234567890/12345678901234567", None)
@example("$" + "9" * 4400 + ".99", "en")  # past Python's 4,300-digit int() limit
def test_every_numeric_form_is_read(text: str, language: str | None) -> None:
    check_reading(text, read(text, language=language))


@settings(max_examples=60, derandomize=True, deadline=None)
@given(st.text("0123456789", min_size=ZH_MAX_DIGITS, max_size=60).map(lambda d: str(1 + int(d[0]) % 9) + d))
def test_values_past_the_largest_unit_are_read_digit_by_digit(run: str) -> None:
    """17+ digits: a price, a percentage, a decimal, a negative number in Mandarin; and
    16+ digits of a value in English, one digit at a time (1 as yi1, not yao1)."""
    said = " ".join(RULE_READINGS[ZH_DIGITS[int(d)]] for d in run)
    assert read(f"¥{run}").reading == f"{said} yuan2"
    assert read(f"共-{run}.5%").reading == f"gong4 fu4 bai3 fen1 zhi1 {said} dian3 wu3"
    assert read(f"{run}/3").reading == f"san1 fen1 zhi1 {said}"
    assert read(f"Pay ${grouped(run)} now.").reading == f"pay {en_digits(run)} dollars now"
    assert read(f"It is -{run}.5 today", language="en").reading == f"it is minus {en_digits(run)} point five today"


TAIL = "liu4 qian1 qi1 bai3 ba1 shi2 jiu3 wan4 ling2 yi1 bai3 er4 shi2 san1 yuan2"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # The 亿 part of 13-16 digits read as a number of 亿 (was 一万亿二千三百四十五亿...).
        ("¥1234567890123", "yi1 wan4 er4 qian1 san1 bai3 si4 shi2 wu3 yi4 " + TAIL),
        ("¥2000000000000", "liang3 wan4 yi4 yuan2"),
        ("-2/3", "fu4 san1 fen1 zhi1 er4"),
        ("½", "er4 fen1 zhi1 yi1"),
        ("3-5个", "san1 dao4 wu3 ge4"),
        ("2~3天", "liang3 dao4 san1 tian1"),
        ("5%-10%", "bai3 fen1 zhi1 wu3 dao4 bai3 fen1 zhi1 shi2"),
        ("5元-10元", "wu3 yuan2 dao4 shi2 yuan2"),
        ("9:00-17:00", "jiu3 dian3 dao4 shi2 qi1 dian3"),
        ("100-200元", "yi1 bai3 dao4 liang3 bai3 yuan2"),
        ("2025-12", "er4 ling2 er4 wu3 nian2 shi2 er4 yue4"),
        ("1-2-3", "yi1 er4 san1"),
        ("1,2345人", "yi1 liang3 qian1 san1 bai3 si4 shi2 wu3 ren2"),
        ("3-5 days", "three to five days"),
        ("Room 101-105", "room one zero one to one zero five"),
        ("3/4 of it", "three quarters of it"),
        ("-1/2 cup", "minus one half cup"),
        ("Call 555-1234", "call five five five one two three four"),
        ("Wait 007", "wait zero zero seven"),
        ("It is .5 now", "it is point five now"),
        ("Pay $1.999 now", "pay one point nine nine nine dollars now"),
        ("The 12345678901234567th", "the " + en_digits("1234567890123456") + " seventh"),
    ],
)
def test_forms_that_were_misread(text: str, expected: str) -> None:
    assert read(text).reading == expected


def test_the_number_readers_at_their_limits() -> None:
    assert zh_int(10**ZH_MAX_DIGITS - 1).startswith("九千九百九十九万九千九百九十九亿")
    assert zh_int(10**ZH_MAX_DIGITS) == "一" + "零" * ZH_MAX_DIGITS
    assert zh_int(10**12 + 2 * 10**8) == "一万零二亿" and zh_int(1_0000_1000_0000) == "一万亿一千万"
    assert en_int(10**EN_MAX_DIGITS - 1).startswith("nine hundred and ninety-nine trillion")
    assert en_int(10**EN_MAX_DIGITS) == "one" + " zero" * EN_MAX_DIGITS


# -- (b) the HTTP API ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    service = tone_service(tmp_path_factory.mktemp("numbers"))
    try:
        with in_process(create_app(service)) as c:
            yield c
    finally:
        service.close()


@settings(max_examples=80, derandomize=True, deadline=None)
@given(numeric_texts(), st.sampled_from((None, "zh", "en")))
@example("共12345678901234567.5元", None)
def test_the_reading_endpoint_reads_every_numeric_form(client: httpx.Client, text: str, language: str | None) -> None:
    body = {"text": text} if language is None else {"text": text, "language": language}
    answer = client.post("/api/reading", json=body)
    assert answer.status_code == 200, f"{text!r}: {answer.status_code} {answer.text[:300]}"
    got = answer.json()
    assert {"reading", "spoken", "tokens"} <= set(got)
    assert all(set(t) == {"text", "reading", "source"} for t in got["tokens"])
    expected = read(text, language=language)
    check_reading(text, expected)
    assert (got["reading"], got["spoken"]) == (expected.reading, expected.spoken)


# -- (c) the engine ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def engine() -> Iterator[BuiltinEngine]:
    builtin = BuiltinEngine(BuiltinConfig(base="espeak"))
    yield builtin
    builtin.close()


def synthesise(engine: BuiltinEngine, text: str) -> tuple[Reading, float]:
    """The reading of ``text`` and the seconds of audio the engine made for it (finite,
    not empty, not silent). The engine is given the normalised text, as the service
    gives it (full-width digits folded)."""
    text = normalise_text(text)
    reading = read(text)
    voice = engine.preset_voice("zh-female" if reading.language == "zh" else "en-female")
    audio = engine.synthesise(text, voice, style="", seed=0, speed=1.0, mode="preset", reading=reading).audio
    assert audio.size > 0 and np.all(np.isfinite(audio)), text
    assert float(np.max(np.abs(audio))) > SILENT_PEAK, f"{text!r} is silent"
    return reading, audio.size / engine.sample_rate


@settings(max_examples=10, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(numeric_texts(max_digits=24))
@example("请支付¥12345678901234567。")
def test_the_engine_says_every_numeric_form(engine: BuiltinEngine, text: str) -> None:
    """Audio of a plausible length for the syllables read, and the text said twice takes
    about twice as long: the length follows what is read."""
    reading, seconds = synthesise(engine, text)
    low, high = bounds(units(reading.tokens), 1.0)
    assert low <= seconds <= high, f"{text!r}: {seconds:.2f} s for {units(reading.tokens)}"
    twice = f"{text}, {text}" if reading.language == "en" else f"{text}，{text}"
    reading2, seconds2 = synthesise(engine, twice)
    assert units(reading2.tokens).low >= 2 * units(reading.tokens).low
    assert 1.5 * seconds <= seconds2 <= 2.6 * seconds, f"{text!r}: {seconds:.2f} s, said twice {seconds2:.2f} s"
