"""Approved takes in the cache itself: pinned through 10x the cache's capacity of other
entries, ``evict`` of their model version and a plain clear (real diskcache store, both
kinds of eviction policy), dropped only by a clear that asks; shared through a real
``redis-server`` with a second service."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import wait_until
from redis_server import RedisServer, require_redis_server

from lib.cache.entry import pack
from lib.cache.policy import APPROVED_PIN
from lib.config import load_config
from lib.engines.tone import ToneEngine
from lib.pipeline.service import TTSService
from lib.request.access import LOCAL
from lib.request.types import TTSRequest

TEXT = "Platform 9 is closed until further notice"
LIMIT = 1024 * 1024


def make(folder: Path, **overrides: Any) -> TTSService:
    values: dict[str, Any] = {"engine": "tone", "cache.dir": str(folder), "voices.prewarm": False, **overrides}
    return TTSService(load_config(env={}, overrides=values), ToneEngine())


def unseeded(svc: TTSService) -> TTSRequest:
    return TTSRequest(text=TEXT, voice="tone-low")


@pytest.mark.parametrize("policy", ["cost-aware", "least-recently-used"])
@pytest.mark.slow
def test_the_approved_take_outlives_ten_times_the_capacity_evict_and_clear(tmp_path: Path, policy: str) -> None:
    svc = make(
        tmp_path / "cache",
        **{"cache.size_limit": LIMIT, "cache.memory_bytes": 64 * 1024, "cache.eviction_policy": policy},
    )
    try:
        take = svc.synthesise(TTSRequest(text=TEXT, voice="tone-low", seed=4, ttl=60))
        svc.takes.approve(take.key, caller=LOCAL)
        approved_pcm = take.audio.pcm.tobytes()
        blob = svc.cache.store.get_blob(take.key)
        assert blob is not None
        # 10x the cache's capacity of other entries, each requested (hit) a few times
        written = 0
        i = 0
        while written < 10 * LIMIT:
            other = svc.synthesise(TTSRequest(text=f"Announcement number {i} for the other trains", voice="tone-high"))
            written += len(pack(other.audio))
            i += 1
        svc.cache.flush()
        assert svc.cache.store.stats()["bytes"] <= LIMIT  # the limit held: others were evicted
        if policy == "cost-aware":  # pinned: never a victim, so still in the store
            assert svc.cache.store.contains(take.key)
        answer = svc.synthesise(unseeded(svc))
        assert answer.take == "approved" and answer.key == take.key
        assert answer.audio.pcm.tobytes() == approved_pcm
        assert answer.audio.expires is None  # an approved take never expires (the take was asked with ttl=60)
        # evict its model version: kept, and said so
        report = svc.admin.evict(svc.tag, caller=LOCAL)
        assert report["removed"] >= 1 and report["approved_kept"] == 1
        assert svc.cache.store.contains(take.key)
        assert svc.synthesise(unseeded(svc)).audio.pcm.tobytes() == approved_pcm
        # a plain clear keeps it, and says how many it kept
        cleared = svc.admin.clear(caller=LOCAL)
        assert cleared["approved_kept"] == 1 and cleared["approved_dropped"] == 0
        assert svc.cache.store.contains(take.key)
        again = svc.synthesise(unseeded(svc))
        assert again.take == "approved" and again.audio.pcm.tobytes() == approved_pcm
        # only a clear that asks drops it (the approval is withdrawn with it)
        dropped = svc.admin.clear(caller=LOCAL, drop_approved=True)
        assert dropped["approved_dropped"] == 1 and dropped["approved_kept"] == 0
        after = svc.synthesise(unseeded(svc))
        assert after.take == "" and after.key != take.key
        assert svc.takes.listing() == []
    finally:
        svc.close()


def test_a_take_missing_from_the_store_is_put_back_from_its_copy(tmp_path: Path) -> None:
    svc = make(tmp_path / "cache")
    try:
        take = svc.synthesise(TTSRequest(text=TEXT, voice="tone-low", seed=2))
        svc.takes.approve(take.key, caller=LOCAL)
        svc.cache.store.delete(take.key)  # as an eviction by diskcache's own policy would
        svc.cache.drop_memory()
        answer = svc.synthesise(unseeded(svc))
        assert answer.take == "approved" and answer.audio.pcm.tobytes() == take.audio.pcm.tobytes()
        assert svc.cache.store.contains(take.key)
        assert svc.engine.calls == 1  # type: ignore[attr-defined]  # never made again
    finally:
        svc.close()


def test_approved_takes_are_a_hard_pin_counted_in_the_budget(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    svc = make(tmp_path / "cache", **{"cache.size_limit": LIMIT, "cache.pin_fraction": 0.0})
    try:
        take = svc.synthesise(TTSRequest(text=TEXT, voice="tone-low", seed=6))
        with caplog.at_level(logging.WARNING):
            svc.takes.approve(take.key, caller=LOCAL)
        assert any("over the pin budget" in r.getMessage() for r in caplog.records)
        keeper = svc.cache.store._keeper
        assert keeper is not None
        assert APPROVED_PIN in keeper.policy.pins() and keeper.policy.pinned(take.key)
        # past the budget other pinned lists compete, approved takes never do
        assert take.key not in keeper.policy.victims(10 * LIMIT)
    finally:
        svc.close()


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    with RedisServer(require_redis_server()) as running:
        yield running


def test_an_approval_is_shared_through_redis(tmp_path: Path, redis_server: RedisServer) -> None:
    client = redis_server.client()
    client.flushall()
    client.close()
    a = make(tmp_path / "a", **{"cache.shared_url": redis_server.url})
    b = make(tmp_path / "b", **{"cache.shared_url": redis_server.url})
    try:
        take = a.synthesise(TTSRequest(text=TEXT, voice="tone-low", seed=3))
        a.takes.approve(take.key, caller=LOCAL)
        assert wait_until(lambda: b.takes.book.get(take.audio.meta["phrase"]) is not None)
        answer = b.synthesise(unseeded(b))
        assert answer.take == "approved" and answer.key == take.key
        assert answer.audio.pcm.tobytes() == take.audio.pcm.tobytes()
        assert b.engine.calls == 0  # type: ignore[attr-defined]  # B never made it: Redis's copy
        # a clear of everything on A (and, through the eviction feed, on B) keeps it
        a.admin.clear(caller=LOCAL)
        assert wait_until(lambda: b.synthesise(unseeded(b)).take == "approved")
        # a replica that starts later adopts it; a withdrawal on B reaches A
        c = make(tmp_path / "c", **{"cache.shared_url": redis_server.url})
        try:
            assert c.synthesise(unseeded(c)).key == take.key
        finally:
            c.close()
        b.takes.withdraw(take.key, caller=LOCAL)
        assert wait_until(lambda: a.takes.book.get(take.audio.meta["phrase"]) is None)
        assert a.synthesise(unseeded(a)).take == ""
    finally:
        a.close()
        b.close()


def test_a_damaged_approvals_file_is_set_aside_and_requests_are_served(tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    svc = make(folder)
    take = svc.synthesise(TTSRequest(text=TEXT, voice="tone-low", seed=8))
    svc.takes.approve(take.key, caller=LOCAL)
    svc.close()
    (folder / "takes" / "approvals.json").write_bytes(b"{not json")
    again = make(folder)
    try:
        answer = again.synthesise(unseeded(again))  # served: seed 0's render, unapproved
        assert answer.take == "" and answer.key != take.key
        assert (folder / "takes" / "approvals.json.damaged").exists()
        again.takes.approve(take.key, caller=LOCAL)  # approving again writes a good file
        assert again.synthesise(unseeded(again)).take == "approved"
    finally:
        again.close()
    bad = {
        "approvals": [{**json.loads((folder / "takes" / "approvals.json").read_text())["approvals"][0], "seed": "x"}]
    }
    (folder / "takes" / "approvals.json").write_text(json.dumps(bad))
    last = make(folder)
    try:
        assert last.takes.listing() == [] and last.synthesise(unseeded(last)).take == ""
    finally:
        last.close()
