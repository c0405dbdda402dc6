"""HTTP caching that matches the entry (lib/api/speech.py, lib/api/http.py): an entry with
a TTL is ``private, max-age=<what it has left>``, only an entry without one is
``immutable``, a result that was not stored is ``no-store``; and the TTL is honoured:
once it has passed, the entry is gone from every tier and is made again."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import in_process, tone_service

from lib.api import create_app
from lib.api.http import IMMUTABLE, NO_STORE, cache_control
from lib.pipeline.service import TTSService


def make(tmp_path: Path, **overrides: Any) -> TTSService:
    service: TTSService = tone_service(tmp_path, admin_token="t", **overrides)
    return service


@pytest.fixture
def service(make_service: Any) -> TTSService:
    service: TTSService = make_service(admin_token="t")
    return service


def tts(http: httpx.Client, text: str, **fields: Any) -> httpx.Response:
    data = {"text": text, "voice": "tone-low", **{k: str(v).lower() for k, v in fields.items()}}
    r = http.post("/api/tts", data=data)
    assert r.status_code == 200, r.text
    return r


def max_age(response: httpx.Response) -> int:
    control = response.headers["cache-control"]
    match = re.fullmatch(r"private, max-age=(\d+)", control)
    assert match is not None, control
    return int(match.group(1))


def test_the_header_follows_the_entrys_life() -> None:
    assert cache_control(None) == IMMUTABLE == "public, max-age=31536000, immutable"
    assert cache_control(99.9) == "private, max-age=99"  # rounded down: never longer than it lives
    assert cache_control(0.4) == "private, max-age=0"


def test_an_entry_without_ttl_is_immutable(http: httpx.Client) -> None:
    made = tts(http, "kept until evicted")
    assert made.headers["cache-control"] == IMMUTABLE
    assert tts(http, "kept until evicted").headers["cache-control"] == IMMUTABLE  # the hit too
    key = made.headers["x-cache-key"]
    for fmt in ("wav", "mp3"):
        audio = http.get(f"/api/audio/{key}.{fmt}")
        assert audio.status_code == 200 and audio.headers["cache-control"] == IMMUTABLE
    again = http.get(f"/api/audio/{key}.wav", headers={"If-None-Match": made.headers["etag"]})
    assert again.status_code == 304 and again.headers["cache-control"] == IMMUTABLE


def test_an_entry_with_a_ttl_is_private_for_what_it_has_left(http: httpx.Client) -> None:
    made = tts(http, "lives a hundred seconds", ttl=100)
    assert "immutable" not in made.headers["cache-control"] and "public" not in made.headers["cache-control"]
    assert 90 <= max_age(made) <= 100
    key = made.headers["x-cache-key"]
    hit = tts(http, "lives a hundred seconds", ttl=100)
    assert hit.headers["x-cache"] == "HIT" and max_age(hit) <= max_age(made)
    for fmt in ("wav", "flac"):
        audio = http.get(f"/api/audio/{key}.{fmt}")
        assert audio.status_code == 200 and 90 <= max_age(audio) <= 100
    ranged = http.get(f"/api/audio/{key}.wav", headers={"Range": "bytes=0-99"})
    assert ranged.status_code == 206 and 90 <= max_age(ranged) <= 100
    cached = http.get(f"/api/audio/{key}.wav", headers={"If-None-Match": made.headers["etag"]})
    assert cached.status_code == 304 and 90 <= max_age(cached) <= 100


def test_the_configured_default_ttl_counts_too(tmp_path: Path) -> None:
    svc = make(tmp_path, **{"cache.ttl": 3600.0})
    try:
        with in_process(create_app(svc)) as http:
            made = tts(http, "an hour by default")
            assert 3500 <= max_age(made) <= 3600
            key = made.headers["x-cache-key"]
            svc.cache.flush()
            svc.cache.drop_memory()  # served from disk: the TTL comes with the entry
            assert 3500 <= max_age(http.get(f"/api/audio/{key}.wav")) <= 3600
    finally:
        svc.close()


def test_results_that_were_not_stored_are_no_store(http: httpx.Client) -> None:
    assert tts(http, "personal", store=False).headers["cache-control"] == NO_STORE
    assert tts(http, "personal", cache=False).headers["cache-control"] == NO_STORE
    speech = http.post("/v1/audio/speech", json={"input": "for an OpenAI client", "voice": "tone-low"})
    assert speech.status_code == 200 and speech.headers["cache-control"] == IMMUTABLE


def test_the_ttl_is_honoured_after_it_is_sent(http: httpx.Client, service: TTSService) -> None:
    made = tts(http, "gone in a second", ttl=1)
    key = made.headers["x-cache-key"]
    assert max_age(made) <= 1
    service.cache.flush()
    assert service.cache.store.get(key) is not None  # on disk, for now
    time.sleep(1.3)  # let it expire (the test asserts what happens after, not how fast)
    assert http.get(f"/api/audio/{key}.wav").status_code == 404
    assert http.get(f"/api/audio/{key}.wav", headers={"If-None-Match": made.headers["etag"]}).status_code == 404
    assert service.cache.memory_entry(key) is None and service.cache.store.get(key) is None  # absent from every tier
    calls = service.engine.calls  # type: ignore[attr-defined]
    again = tts(http, "gone in a second", ttl=60)
    assert again.headers["x-cache"] == "MISS" and service.engine.calls == calls + 1  # type: ignore[attr-defined]
    assert 50 <= max_age(again) <= 60
