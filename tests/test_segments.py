"""The pure parts of long-text handling: sentence splitting, joining, loudness and the
readings of template slots."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lib.audio.pcm import float_to_int16
from lib.compose.assemble import Finish, Joiner, PieceFinisher, pieces_of, to_float, trim
from lib.compose.loudness import PEAK_CEILING_DB, integrated_loudness, k_weighting, limit, normalise
from lib.compose.readings import number, read
from lib.compose.segments import split

RATE = 22_050


def texts(text: str, max_chars: int = 80) -> list[str]:
    return [s.text for s in split(text, max_chars)]


# --- splitting ---------------------------------------------------------------------------


def test_chinese_and_english_sentence_ends() -> None:
    assert texts("欢迎光临！请出示会员码。谢谢？") == ["欢迎光临！", "请出示会员码。", "谢谢？"]
    assert texts("Welcome! Please wait. Thank you?") == ["Welcome!", "Please wait.", "Thank you?"]
    assert texts("请A023号顾客到3号窗口办理业务。") == ["请A023号顾客到3号窗口办理业务。"]


def test_quotes_stay_with_their_sentence() -> None:
    assert texts("他说：“请稍等。”然后走了。") == ["他说：“请稍等。”", "然后走了。"]
    assert texts('He said "Wait here." Then he left.') == ['He said "Wait here."', "Then he left."]


def test_numbers_abbreviations_and_initials_do_not_end_sentences() -> None:
    assert texts("The fare is 3.5 yuan. Dr. Smith, e.g. J. Doe, works at the U.S. office. Done.") == [
        "The fare is 3.5 yuan.", "Dr. Smith, e.g. J. Doe, works at the U.S. office.", "Done.",
    ]  # fmt: skip
    assert texts("Go to counter No. 5 now. I said no. Visit example.com today.") == [
        "Go to counter No. 5 now.", "I said no.", "Visit example.com today.",
    ]  # fmt: skip
    assert texts("Wait... Really?! Yes.") == ["Wait...", "Really?!", "Yes."]


def test_long_sentences_are_cut_at_commas_then_spaces_then_the_limit() -> None:
    clause = "这是一个比较长的分句，"
    cut = split(clause * 5 + "结束。", 25)
    assert all(len(s.text) <= 25 for s in cut)
    assert [s.pause for s in cut][:-1] == ["clause"] * (len(cut) - 1) and cut[-1].pause == "sentence"
    assert "".join(s.text for s in cut) == clause * 5 + "结束。"
    words = split("one two three four five six seven eight nine ten", 20)
    assert [s.text for s in words] == ["one two three four", "five six seven eight", "nine ten"]
    hard = split("字" * 30, 12)
    assert [len(s.text) for s in hard] == [12, 12, 6] and hard[0].pause == "none"


def test_tiny_pieces_join_their_neighbour() -> None:
    assert texts("请稍等。好。") == ["请稍等。好。"]
    assert texts("好。请稍等。") == ["好。请稍等。"]
    assert texts("Fine. ”") == ["Fine. ”"]


def test_a_run_of_tiny_pieces_is_never_one_segment_longer_than_max_chars() -> None:
    # Issue 26: "a. " * 333 was one 999-character segment, which crashed espeak-ng.
    segments = texts("a. " * 333, 80)
    assert len(segments) > 10 and max(len(s) for s in segments) <= 80
    assert " ".join(segments) == ("a. " * 333).strip()  # nothing lost, nothing rewritten
    first_tiny = texts("好。" + "请稍等一下。" * 20, 12)
    assert max(len(s) for s in first_tiny) <= 12


_PIECES = st.sampled_from(
    ["a.", "b. ", "好。", "?", "!", " ", "…", "”", "Hi.", "no. 5", "e.g.", "，", "word ", "3.5", "A"]
)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(st.lists(_PIECES, max_size=300).map("".join), st.integers(min_value=10, max_value=200))
def test_no_segment_is_ever_longer_than_max_chars(text: str, max_chars: int) -> None:
    segments = split(" ".join(text.split()), max_chars)
    assert all(len(s.text) <= max_chars for s in segments), [len(s.text) for s in segments]


def test_segments_are_stretches_of_the_text() -> None:
    text = "第一句。Second one here! 第三句，很长很长很长很长很长。“引号里的句子。”最后 one."
    segments = split(text, 12)
    position = 0
    for s in segments:
        position = text.index(s.text, position) + len(s.text)
    assert position == len(text)


# --- joining -----------------------------------------------------------------------------


def tone(seconds: float, hz: float = 220.0, amplitude: float = 0.3, lead: float = 0.1) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    x = amplitude * np.sin(2 * np.pi * hz * t)
    pad = np.zeros(int(lead * RATE))
    return np.concatenate([pad, x, pad]).astype(np.float32)


def test_trim_keeps_a_short_margin() -> None:
    x = tone(0.5, lead=0.3)
    out = trim(x, RATE)
    assert abs(out.size / RATE - (0.5 + 0.02 + 0.04)) < 0.002


def test_joiner_streams_exactly_the_whole() -> None:
    units = [tone(0.3, 200), tone(0.2, 300), tone(0.4, 250)]
    gaps = [0.3, 0.0, 0.0]

    def run() -> list[np.ndarray]:
        joiner = Joiner(RATE, 0.01)
        out = [joiner.push(u, g) for u, g in zip(units, gaps, strict=True)]
        return [*out, joiner.close(0.2)]

    chunks = run()
    whole = np.concatenate(run())
    assert np.array_equal(np.concatenate(chunks), whole)
    fade = round(0.01 * RATE)
    # the pause, the crossfade (one fade shared by two units) and the tail
    expected = sum(u.size for u in units) + round(0.3 * RATE) - fade + round(0.2 * RATE)
    assert whole.size == expected
    assert np.all(whole[-round(0.2 * RATE) :] == 0)
    assert whole[0] == 0.0 and abs(whole[units[0].size - 1]) < 1e-3  # faded in and out
    # int16 chunk by chunk is int16 of the whole (what is streamed is what is stored)
    assert np.array_equal(np.concatenate([float_to_int16(c) for c in chunks]), float_to_int16(whole))


def test_a_unit_fed_in_parts_joins_to_the_samples_of_the_whole() -> None:
    """Joiner.begin/feed/finish (a unit streamed in pieces) gives what push gives the whole."""
    units = [tone(0.3, 200), tone(0.5, 300), tone(0.4, 250)]
    gaps = [0.3, 0.0, 0.0]
    whole = Joiner(RATE, 0.01)
    expected = np.concatenate([*(whole.push(u, g) for u, g in zip(units, gaps, strict=True)), whole.close(0.2)])
    parted = Joiner(RATE, 0.01)
    out = []
    for u, g in zip(units, gaps, strict=True):
        parted.begin()
        out += [parted.feed(p) for p in np.array_split(u, 3)]
        out.append(parted.finish(g))
    out.append(parted.close(0.2))
    assert np.array_equal(np.concatenate(out), expected)


def test_a_unit_made_in_pieces_is_finished_the_same_streamed_or_stored() -> None:
    """PieceFinisher piece by piece (streamed) and Finish.unit of the stored whole with its
    piece sizes (a replay, or a request made without streaming) give the same samples; the
    quiet between pieces is kept, the unit's edges trimmed, the level brought to the target."""
    finish = Finish()
    pieces = [tone(0.6, 200, lead=0.1), tone(0.5, 300, lead=0.05), tone(0.7, 250, lead=0.05)]
    pcm = [float_to_int16(p * 0.1) for p in pieces]
    finisher = PieceFinisher(finish, RATE)
    streamed = np.concatenate([*(finisher.add(p) for p in pcm), finisher.end()])
    stored = np.concatenate(pcm)
    meta = {"info": {"pieces": [p.size for p in pcm]}}
    assert np.array_equal(finish.unit(stored, RATE, meta), streamed)
    # Without its pieces it is one unit, trimmed and levelled as a whole (as before).
    assert not np.array_equal(finish.unit(stored, RATE, {}), streamed)
    assert pieces_of({"info": {"pieces": [1, 2]}}, 4) == []  # sizes that do not add up: not used
    lead = np.flatnonzero(np.abs(streamed) > 1e-3)[0] / RATE
    assert lead <= 0.021  # the first piece's lead trimmed to 20 ms
    inner = (pieces[1].size + pieces[0].size) / RATE
    assert streamed.size / RATE > inner  # the pauses between pieces kept
    loudness = integrated_loudness(streamed, RATE)
    assert abs(loudness - finish.loudness) < 1.5  # levelled to the target by the first piece


def test_recipe_names_every_setting_and_identity_is_no_tail_no_loudness() -> None:
    base = Finish()
    changed = [Finish(max_chars=60), Finish(pause_sentence=0.5), Finish(pause_clause=0.2),
               Finish(crossfade=0.02), Finish(tail=0.3), Finish(loudness=-20.0), Finish(loudness=None)]  # fmt: skip
    assert len({base.recipe, *(f.recipe for f in changed)}) == len(changed) + 1
    assert Finish(char_gap=0.2).recipe == base.recipe  # composed answers are never stored
    assert not base.identity and Finish(tail=0, loudness=None).identity


def test_to_float_round_trips_int16() -> None:
    pcm = np.arange(-32767, 32768, 7, dtype=np.int16)
    assert np.array_equal(float_to_int16(to_float(pcm)), pcm)


# --- loudness ----------------------------------------------------------------------------


def test_k_weighting_at_48k_is_the_recommendations_filter() -> None:
    (b1, a1), (b2, a2) = k_weighting(48_000)
    assert np.array_equal(b2, [1.0, -2.0, 1.0])
    assert np.allclose(b1, [1.53512485958697, -2.69169618940638, 1.19839281085285], atol=1e-9)
    assert np.allclose(a1, [1.0, -1.69065929318241, 0.73248077421585], atol=1e-9)
    assert np.allclose(a2, [1.0, -1.99004745483398, 0.99007225036621], atol=1e-9)


def test_a_full_scale_997_hz_sine_reads_minus_3_01_lufs() -> None:
    t = np.arange(48_000 * 5) / 48_000
    sine = np.sin(2 * np.pi * 997 * t)
    assert integrated_loudness(sine, 48_000) == pytest.approx(-3.01, abs=0.01)
    assert integrated_loudness(0.1 * sine, 48_000) == pytest.approx(-23.01, abs=0.01)
    assert integrated_loudness(np.zeros(48_000), 48_000) == -math.inf


def test_gating_ignores_silence_and_quiet_parts() -> None:
    speech = tone(10.0, 400, 0.3, lead=0)
    alone = integrated_loudness(speech, RATE)
    padded = np.concatenate([speech, np.zeros(RATE * 20, dtype=np.float32)])  # the absolute gate
    assert integrated_loudness(padded, RATE) == pytest.approx(alone, abs=0.1)
    with_quiet = np.concatenate([speech, tone(10.0, 400, 0.3 * 10 ** (-30 / 20), lead=0)])  # the relative gate
    assert integrated_loudness(with_quiet, RATE) == pytest.approx(alone, abs=0.1)
    assert 10 * math.log10(2) > alone - integrated_loudness(np.concatenate([speech, 0.5 * speech]), RATE) > 1


def test_normalise_reaches_the_target_and_never_passes_the_ceiling() -> None:
    rng = np.random.default_rng(3)
    quiet = (0.02 * rng.standard_normal(RATE * 3)).astype(np.float32)
    assert integrated_loudness(normalise(quiet, RATE, -16.0), RATE) == pytest.approx(-16.0, abs=0.1)
    peaky = quiet.copy()
    peaky[RATE :: RATE // 2] = 0.3  # isolated peaks that a plain gain would clip
    out = normalise(peaky, RATE, -16.0)
    assert float(np.abs(out).max()) <= 10 ** (PEAK_CEILING_DB / 20) + 1e-6
    assert integrated_loudness(out, RATE) == pytest.approx(-16.0, abs=0.3)
    calm = tone(1.0, amplitude=0.1)
    assert limit(calm, RATE) is calm  # nothing above the ceiling: untouched


# --- readings ----------------------------------------------------------------------------


def test_codes_are_read_character_by_character() -> None:
    assert read("A023", "characters", "zh") == ["A", "零", "二", "三"]
    assert read("A023", "characters", "en") == ["A", "zero", "two", "three"]


@pytest.mark.parametrize(
    ("value", "zh", "en"),
    [
        ("3", "三", "three"), ("10", "十", "ten"), ("12", "十二", "twelve"), ("20", "二十", "twenty"),
        ("101", "一百零一", "one hundred and one"), ("1010", "一千零一十", "one thousand and ten"),
        ("10001", "一万零一", "ten thousand and one"), ("3.5", "三点五", "three point five"),
    ],
)  # fmt: skip
def test_numbers_are_read_as_numbers(value: str, zh: str, en: str) -> None:
    assert number(value, "zh") == zh and number(value, "en") == en
    assert read(value, "text", "zh") == [value]
