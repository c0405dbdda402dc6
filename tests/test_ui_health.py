"""The page's header and degraded banner read ``/healthz``'s report (lib/ui/health.py):
every reason the dashboard and the watchdog give has operators' words, in both languages."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import in_process

from lib.errors import EngineError
from lib.request.types import TTSRequest
from lib.ui.health import header_markdown, health_banner, reason_words


def test_a_failing_engine_is_a_banner_in_operators_words_and_gone_when_it_recovers(make_service: Any) -> None:
    from lib.api import create_app

    service = make_service()
    healthy = service.dashboard.health()
    assert healthy["base"] == "" and health_banner(healthy) == ""
    service.engine.fail = RuntimeError("out of memory")
    for i in range(3):
        with pytest.raises(EngineError):
            service.synthesise(TTSRequest(text=f"text {i}", voice="tone-low"))
    health = service.dashboard.health()
    banner = health_banner(health)
    assert "The voice engine is failing: cached announcements play as usual" in banner
    assert "语音引擎出错" in banner and "out of memory" in banner  # the technical reason under it
    with in_process(create_app(service)) as client:
        assert client.get("/healthz").json()["reasons"] == health["reasons"]  # the same report
    service.engine.fail = None
    service.synthesise(TTSRequest(text="text 4", voice="tone-low"))
    assert health_banner(service.dashboard.health()) == ""


@pytest.mark.parametrize(
    ("reason", "words"),
    [
        ("engine stuck: a synthesis has run 130 s", "The voice engine is not answering"),
        ("engine failing: the last 3 engine calls failed (x)", "The voice engine is failing"),
        ("engine degraded: slow", "The voice engine is degraded"),
        ("disk full: the audio store is held to 10 bytes of cache.size_limit 20", "The cache disk is full"),
        ("shared tier redis://x unreachable; serving from local tiers", "The shared cache (Redis) cannot be reached"),
        ("object store http://x unreachable; serving from the other tiers", "The object store cannot be reached"),
        ("results store: permission denied", "The results folder cannot be used"),
        ("audio store: database disk image is malformed", "The cache store cannot be used"),
        ("voices store: cannot be opened", "A store cannot be used"),
    ],
)
def test_every_reason_has_words_in_both_languages(reason: str, words: str) -> None:
    said = reason_words(reason)
    assert words in said and any("\u4e00" <= ch <= "\u9fff" for ch in said)


def test_the_header_names_the_base_that_speaks_now() -> None:
    health: Any = {"engine": "builtin", "base": "kokoro"}
    assert "Kokoro-82M" in header_markdown(health) and "espeak" not in header_markdown(health)
    health["base"] = "espeak"  # fell back after the page was built
    assert "espeak-ng" in header_markdown(health) and "Kokoro" not in header_markdown(health)
