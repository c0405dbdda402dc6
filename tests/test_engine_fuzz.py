"""Hostile texts through the REAL builtin engine (espeak-ng 1.52), each under a deadline.

Issue 26: ``"a. " * 333`` made espeak-ng abort ("stack smashing detected") and hung every
later synthesis. Every text here must be spoken or refused as a client error (4xx); an
engine crash (5xx) or a call that misses its deadline fails the test and names the text.

- The regression cases (``tests/data/espeak_hostile.json``: every text that ever hung the
  service or crashed espeak-ng) go to the engine as they are (no normalisation, no
  segments: the engine must survive them by itself), in both the automatic and the
  forced ``en-us`` language, and through the whole service over HTTP.
- A fuzz (hypothesis, derandomised: the same texts on every run) generates more: long
  chains of short units of letters of several scripts, digits and punctuation, and
  mixtures of them with ordinary text.

A text a run reports belongs in the data file (``text``, or ``unit`` and ``repeat``).
Bounded for CI: about 100 engine calls of at most 1,000 characters.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lib.api import create_app
from lib.config import BuiltinConfig, load_config
from lib.config.watchdog import WatchdogConfig
from lib.core.metrics import Metrics
from lib.engines.builtin import BuiltinEngine
from lib.engines.builtin.lang import speakable
from lib.engines.watchdog import Watchdog
from lib.engines.watched import WatchedEngine
from lib.errors import EngineError, TTSError, ValidationError
from lib.pipeline.service import TTSService
from tests.api_server import LiveServer

DATA = Path(__file__).parent / "data" / "espeak_hostile.json"
#: Per-request deadline: hundreds of times what a healthy call of 1,000 characters takes.
DEADLINE = WatchdogConfig(timeout=20.0, per_char=0.02, per_audio_second=0.0, probe_interval=0)


def hostile_cases() -> list[tuple[str, str]]:
    """(label, text) of every regression case."""
    cases = json.loads(DATA.read_text(encoding="utf-8"))["cases"]
    return [(case.get("label") or f"{case['unit']!r}x{case['repeat']}",
             case["text"] if "text" in case else case["unit"] * case["repeat"]) for case in cases]  # fmt: skip


CASES = hostile_cases()


@pytest.fixture(scope="module", params=["auto", "en-us"])
def engine(request: pytest.FixtureRequest) -> Iterator[WatchedEngine]:
    # The espeak base: these are texts that crash espeak-ng's synthesis. The Kokoro base
    # gives espeak-ng only runs of English words without punctuation and single letters
    # (kokoro/phonemes.py: _english_items) for their IPA, which no chain can form.
    builtin = BuiltinEngine(BuiltinConfig(language=request.param, base="espeak"))
    watchdog = Watchdog(builtin, DEADLINE, Metrics(dict))
    yield WatchedEngine(builtin, watchdog)
    watchdog.close()
    builtin.close()


def speak(engine: WatchedEngine, text: str, voice: str = "en-female") -> str:
    """``spoken``, or ``refused`` for a client error; fails the test on anything else."""
    try:
        synth = engine.synthesise(text, engine.preset_voice(voice), style="", seed=0, speed=1.0, mode="preset")
    except ValidationError:
        return "refused"
    except (EngineError, TTSError) as exc:
        pytest.fail(
            f"the builtin engine failed ({type(exc).__name__}: {exc}) on text {text[:200]!r} "
            f"({len(text)} characters): add it to {DATA.name}"
        )
    assert synth.audio.size > 0
    return "spoken"


def test_the_data_file_holds_the_issues_text() -> None:
    assert any(text == "a. " * 333 for _, text in CASES)


@pytest.mark.parametrize(("label", "text"), CASES, ids=[label for label, _ in CASES])
def test_every_text_that_ever_crashed_espeak_is_spoken_or_refused(engine: WatchedEngine, label: str, text: str) -> None:
    # Refused (400): a text with nothing the engine reads in the automatic language (",ⅷ.",
    # "ж._": no Latin or Han letter, no digit); everything else is spoken.
    assert speak(engine, text) == ("spoken" if speakable(text) else "refused")


# Units of hostile chains: any one to four characters of letters of several scripts,
# digits, punctuation and white space; and, as often, a letter beside a punctuation mark
# (what crashed espeak-ng: a fuzz that finds its known crashes may find the next ones).
_LETTERS = [*"abzAZ", "ж", "Ω", "é", "ß", "好", "ⅷ"]
_MARKS = [*".._,:;-'/!?()\"@#$ \n\t", "\u200b", "。", "，"]
_ALPHABET = [*_LETTERS, *_MARKS, *"019", "①", "😀"]
_spelled = st.builds(lambda a, b, flip: b + a if flip else a + b, st.sampled_from(_LETTERS),
                     st.one_of(st.just("."), st.sampled_from(_MARKS)), st.booleans())  # fmt: skip
_units = st.one_of(st.text(alphabet=st.sampled_from(_ALPHABET), min_size=1, max_size=4), _spelled)
_chains = st.builds(lambda unit, n: (unit * n)[:1000], _units, st.integers(min_value=20, max_value=350))
_plain = st.sampled_from(["Please wait. ", "请稍等。", "Room 3, floor 2. ", "U.S.A. ", "Mr. J. R. Smith "])
_mixed = st.lists(st.one_of(_chains, _plain), min_size=1, max_size=4).map(lambda parts: "".join(parts)[:1000])


@settings(max_examples=50, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])  # fmt: skip
@given(text=_mixed)
def test_generated_hostile_texts_never_crash_or_hang_the_engine(engine: WatchedEngine, text: str) -> None:
    speak(engine, text)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, TTSService]]:
    cache = tmp_path_factory.mktemp("hostile") / "cache"
    config = load_config(env={}, overrides={
        "engine": "builtin", "builtin.base": "espeak", "cache.dir": str(cache), "voices.prewarm": False,
        "templates.file": None,
        "watchdog.timeout": DEADLINE.timeout, "watchdog.per_char": DEADLINE.per_char, "watchdog.probe_interval": 0,
    })  # fmt: skip
    service = TTSService(config)
    with LiveServer(create_app(service)) as live:
        yield live, service
    service.close()


def test_the_regression_cases_through_the_service(server: tuple[LiveServer, Any]) -> None:
    live, service = server
    failed = []
    with httpx.Client(base_url=live.url, timeout=120) as http:
        for label, text in CASES:
            r = http.post("/api/tts", data={"text": text, "voice": "en-female", "cache": "false"})
            if r.status_code >= 500:
                failed.append(f"{label}: {r.status_code} {r.text[:200]}")
    assert not failed, f"add these to {DATA.name} and fix them: {failed}"
    health = service.dashboard.health()["engine_state"]
    assert health["state"] == "ok" and health["timeouts"] == 0
