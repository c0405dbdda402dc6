"""The shipped hot_phrases.json on the builtin engine, after its preload (what
``./run.sh`` does before the UI starts): every one-click example and the first visit's
sample are hits, and every value a template lists is answered from preloaded pieces,
without one engine call (window 10 once cost an engine call on every ticket)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from conftest import REPO

from lib.batch.preload import preload
from lib.compose.templates import load_templates
from lib.config import load_config
from lib.pipeline.service import TTSService
from lib.request.access import LOCAL
from lib.request.phrases import expand, load_phrases
from lib.request.types import TTSRequest
from lib.ui.forms import build_request, default_voice, examples, sample_text

SHIPPED = REPO / "hot_phrases.json"


@pytest.fixture(scope="module")
def preloaded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TTSService]:
    cache = tmp_path_factory.mktemp("shipped")
    # The espeak base: what is checked (every example a hit after the preload) does not
    # depend on the base, and the Kokoro base takes minutes over the shipped list.
    overrides = {"cache.dir": str(cache), "engine": "builtin", "builtin.base": "espeak", "templates.file": str(SHIPPED)}
    service = TTSService(load_config(env={}, overrides=overrides))
    report = preload(service, expand(load_phrases(SHIPPED)), templates=load_templates(SHIPPED), caller=LOCAL)
    assert report.failed == 0, report.failures
    service.cache.flush()
    yield service
    service.close()


def _calls(service: TTSService) -> int:
    return int(service.dashboard.stats.counters()["engine_calls"])


def test_every_example_and_the_first_visit_are_hits_after_the_preload(preloaded: TTSService) -> None:
    engine = preloaded.engine
    rows, _ = examples(engine.presets(), engine.modes, expand(load_phrases(SHIPPED)))
    first = default_voice(engine.presets())
    rows.append(["preset", first, sample_text(first), ""])  # what a first visit plays
    calls = _calls(preloaded)
    for mode, voice, text, style in rows:  # as the form sends it: seed 0, speed 1, wav, cache on
        result = preloaded.synthesise(build_request(mode, None, voice, "", text, style, 0, 1.0, "wav", True))
        assert result.cache == "HIT", (mode, voice, text, style)
    assert _calls(preloaded) == calls and len(rows) == 8


@pytest.mark.parametrize("index", [0, 1])
def test_every_listed_value_of_a_template_is_answered_from_preloaded_pieces(preloaded: TTSService, index: int) -> None:
    template = load_templates(SHIPPED)[index]
    (slot,) = [s for s in template.slots.values() if s.values]
    tickets = ["A023", "Z999", "B107"]
    calls = _calls(preloaded)
    for value in slot.values:
        for ticket in tickets:
            text = re.sub(r"\{ticket\}", ticket, template.text).replace("{" + slot.name + "}", value)
            result = preloaded.synthesise(TTSRequest(text=text, voice=template.voice))
            assert result.cache in ("HIT", "COMPOSED"), text
            assert result.info.get("segments_synthesised", 0) == 0, f"{text}: a piece was not preloaded"
    assert _calls(preloaded) == calls, "an engine call after the preload"
    assert len(slot.values) == 10
