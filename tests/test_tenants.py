"""Tenants (issue 35, items 1, 2 and 4): API keys made by the admin, limits with 429 and
OpenAI's rate headers, a synthesis budget that never refuses a hit, takes priced before
any engine call, anonymous callers per address, usage by tenant; shared through a real
Redis across two services."""

from __future__ import annotations

import logging
import stat
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import in_process, tone_service
from redis_server import RedisServer, require_redis_server

from lib.api import create_app
from lib.config import load_config
from lib.engines.tone import ToneEngine
from lib.shared.tier import SharedTier
from lib.tenants.local import LocalTenants

ADMIN_TOKEN = "admin-token-for-tests"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def make_key(client: Any, name: str, **limits: Any) -> str:
    r = client.post("/api/keys", json={"name": name, **limits}, headers=ADMIN)
    assert r.status_code == 201, r.text
    key: str = r.json()["key"]
    return key


def tts(client: Any, text: str, headers: dict[str, str] | None = None, **fields: Any) -> Any:
    return client.post("/api/tts", data={"text": text, "voice": "tone-low", **fields}, headers=headers or {})


@pytest.fixture
def engine() -> ToneEngine:
    return ToneEngine()


@pytest.fixture
def service(make_service: Any, engine: ToneEngine) -> Any:
    return make_service(admin_token=ADMIN_TOKEN, engine=engine)


@pytest.fixture
def client(service: Any) -> Iterator[Any]:
    with in_process(create_app(service)) as c:
        yield c


def usage_of(client: Any, name: str) -> dict[str, Any]:
    rows = {row["name"]: row for row in client.get("/api/usage", headers=ADMIN).json()["tenants"]}
    return rows[name]


def test_a_key_is_made_by_the_admin_shown_once_and_stored_only_as_a_hash(
    client: Any, service: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    assert client.post("/api/keys", json={"name": "shop"}).status_code == 401  # no token
    assert client.post("/api/keys", json={"name": "shop"}, headers=bearer("wrong")).status_code == 403
    r = client.post("/api/keys", json={"name": "shop", "requests_per_minute": 50}, headers=ADMIN)
    assert r.status_code == 201, r.text
    body = r.json()
    key = body["key"]
    assert key.startswith("tts_") and len(key) > 40
    assert body["requests_per_minute"] == 50
    assert body["synth_chars_per_hour"] == service.config.tenants.synth_chars_per_hour  # the default
    # Never again: not in the listing, not on disk, not in the log.
    listing = client.get("/api/keys", headers=ADMIN)
    assert listing.status_code == 200
    assert [k["name"] for k in listing.json()["keys"]] == ["shop"]
    assert key not in listing.text and "key_hash" not in listing.text
    folder = Path(service.config.cache.dir) / "tenants"
    stored = (folder / "keys.json").read_text()
    assert key not in stored and "shop" in stored
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "keys.json").stat().st_mode) == 0o600
    assert key not in caplog.text
    # The key works; a tenant's key is not the admin's.
    assert tts(client, "Hello there.", bearer(key)).status_code == 200
    assert client.get("/api/keys", headers=bearer(key)).status_code == 403
    assert client.post("/api/keys", json={"name": "other"}, headers=bearer(key)).status_code == 403
    # A name is taken once; bad names and limits are 400 with the field named.
    assert client.post("/api/keys", json={"name": "shop"}, headers=ADMIN).status_code == 409
    for bad, field in (({"name": "Shop Floor"}, "name"), ({"name": "anonymous"}, "name"),
                       ({"name": "x", "concurrent_misses": -1}, "concurrent_misses"),
                       ({"name": "x", "rpm": 3}, "rpm")):  # fmt: skip
        refused = client.post("/api/keys", json=bad, headers=ADMIN)
        assert refused.status_code == 400 and refused.json()["error"].startswith(field), refused.text


def test_an_unknown_key_is_401_never_anonymous(client: Any, engine: ToneEngine) -> None:
    r = tts(client, "Hello there.", bearer("tts_not-a-key"))
    assert r.status_code == 401 and "not known" in r.json()["error"]
    v1 = client.post("/v1/audio/speech", json={"model": "tts-1", "input": "Hello.", "voice": "alloy"},
                     headers=bearer("tts_not-a-key"))  # fmt: skip
    assert v1.status_code == 401 and v1.json()["error"]["code"] == "invalid_api_key"
    bare = client.post("/api/tts", data={"text": "Hello.", "voice": "tone-low"}, headers={"Authorization": "abc"})
    assert bare.status_code == 401 and "Bearer" in bare.json()["error"]
    assert engine.calls == 0


def test_a_revoked_key_is_refused_and_usage_is_each_tenants_own(client: Any) -> None:
    shop = make_key(client, "shop")
    station = make_key(client, "station")
    assert tts(client, "Mind the gap.", bearer(shop)).headers["X-Cache"] == "MISS"
    assert tts(client, "Mind the gap.", bearer(shop)).headers["X-Cache"] == "HIT"
    assert tts(client, "Mind the gap.", bearer(station)).headers["X-Cache"] == "HIT"
    assert tts(client, "Anonymous hello.").status_code == 200  # anonymous, from the loopback
    own = client.get("/api/usage", headers=bearer(shop)).json()["tenants"]
    assert [row["name"] for row in own] == ["shop"]
    row = own[0]
    assert (row["requests"], row["hits"], row["misses"], row["synth_chars"]) == (2, 1, 1, len("Mind the gap."))
    assert row["engine_seconds"] > 0 and row["audio_seconds"] > 0
    assert row["engine_seconds_saved"] == pytest.approx(row["engine_seconds"], rel=0.01)  # its one hit saved one make
    every = {r["name"]: r for r in client.get("/api/usage", headers=ADMIN).json()["tenants"]}
    assert set(every) == {"shop", "station", "anonymous"}
    assert every["station"]["hits"] == 1 and every["station"]["synth_chars"] == 0
    assert every["anonymous"]["misses"] == 1
    assert client.get("/api/usage").status_code == 401
    assert client.delete("/api/keys/shop", headers=bearer(station)).status_code == 403
    assert client.delete("/api/keys/shop", headers=ADMIN).status_code == 200
    assert client.delete("/api/keys/shop", headers=ADMIN).status_code == 404
    assert tts(client, "Mind the gap.", bearer(shop)).status_code == 401
    assert tts(client, "Mind the gap.", bearer(station)).status_code == 200
    metrics = client.get("/metrics").text
    assert 'tts_tenant_requests_total{cache="hit",tenant="station"}' in metrics
    assert 'tts_tenant_synth_chars_total{tenant="shop"} 13.0' in metrics


def test_over_requests_per_minute_is_429_with_retry_after_and_openais_headers(client: Any) -> None:
    key = make_key(client, "kiosk", requests_per_minute=2)
    first = tts(client, "One.", bearer(key))
    assert first.status_code == 200
    assert first.headers["x-ratelimit-limit-requests"] == "2"
    assert first.headers["x-ratelimit-remaining-requests"] == "1"
    assert first.headers["x-ratelimit-reset-requests"].endswith("s")
    assert tts(client, "One.", bearer(key)).headers["x-ratelimit-remaining-requests"] == "0"
    over = tts(client, "One.", bearer(key))  # a hit, but the request rate counts every request
    assert over.status_code == 429
    assert "requests_per_minute" in over.json()["error"]
    assert 1 <= int(over.headers["Retry-After"]) <= 60
    assert over.headers["x-ratelimit-remaining-requests"] == "0"
    v1 = client.post("/v1/audio/speech", json={"model": "tts-1", "input": "One.", "voice": "alloy"},
                     headers=bearer(key))  # fmt: skip
    assert v1.status_code == 429 and v1.json()["error"]["code"] == "rate_limit_exceeded"
    assert "Retry-After" in v1.headers
    assert tts(client, "One.", ADMIN).status_code == 200  # the admin has no limits


def test_the_synthesis_budget_never_refuses_a_hit(client: Any, engine: ToneEngine) -> None:
    key = make_key(client, "cafe", synth_chars_per_hour=30)
    assert tts(client, "Your coffee is ready.", bearer(key)).headers["X-Cache"] == "MISS"  # 21 characters
    calls = engine.calls
    refused = tts(client, "Your tea is ready now.", bearer(key))  # 22 more: over 30
    assert refused.status_code == 429, refused.text
    assert "synth_chars_per_hour" in refused.json()["error"] and "Retry-After" in refused.headers
    assert engine.calls == calls  # priced before any engine work
    assert tts(client, "Your coffee is ready.", bearer(key)).headers["X-Cache"] == "HIT"  # what is cached stays
    stream = tts(client, "Your tea is ready now.", bearer(key), stream="true")
    assert stream.status_code == 429 and engine.calls == calls
    assert usage_of(client, "cafe")["synth_chars"] == len("Your coffee is ready.")


def test_takes_are_priced_whole_before_any_engine_call(client: Any, engine: ToneEngine) -> None:
    key = make_key(client, "studio", synth_chars_per_hour=100)
    text = "Platform four for the express."  # 30 characters: 3 takes are 90, 4 are 120
    refused = client.post("/api/takes", data={"text": text, "voice": "tone-low", "n": 4}, headers=bearer(key))
    assert refused.status_code == 429 and "synth_chars_per_hour" in refused.json()["error"]
    assert engine.calls == 0
    made = client.post("/api/takes", data={"text": text, "voice": "tone-low", "n": 3}, headers=bearer(key))
    assert made.status_code == 200 and engine.calls == 3
    row = usage_of(client, "studio")
    assert row["synth_chars"] == 90  # charged once for the three, not again per take


def test_anonymous_callers_with_a_zero_budget_get_hits_only(make_service: Any) -> None:
    engine = ToneEngine()
    service = make_service(admin_token=ADMIN_TOKEN, engine=engine, **{"tenants.anonymous_synth_chars_per_hour": 0})
    with in_process(create_app(service)) as client:
        assert tts(client, "Welcome to the store.", ADMIN).headers["X-Cache"] == "MISS"
        hit = tts(client, "Welcome to the store.")
        assert hit.status_code == 200 and hit.headers["X-Cache"] == "HIT"
        miss = tts(client, "A new phrase nobody made.")
        assert miss.status_code == 429 and "cached audio" in miss.json()["error"]
        assert engine.calls == 1
        assert usage_of(client, "anonymous")["hits"] == 1


def test_the_anonymous_limit_is_read_from_the_environment() -> None:
    env = {"TTS_TENANTS_ANONYMOUS_SYNTH_CHARS_PER_HOUR": "0", "TTS_TENANTS_REQUESTS_PER_MINUTE": "null"}
    config = load_config(env=env)
    assert config.tenants.anonymous_synth_chars_per_hour == 0 and config.tenants.requests_per_minute is None
    shipped = load_config("config.yaml", env={})
    assert shipped.tenants == load_config(env={}).tenants  # config.yaml states the defaults


def test_concurrent_misses_are_limited_and_hits_served_meanwhile(client: Any, engine: ToneEngine) -> None:
    key = make_key(client, "desk", concurrent_misses=1)
    assert tts(client, "Cached before.", bearer(key)).status_code == 200
    gate, entered = threading.Event(), threading.Event()
    original = engine.synthesise

    def held(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        gate.wait(30)
        return original(*args, **kwargs)

    engine.synthesise = held  # type: ignore[method-assign]
    answers: list[Any] = []
    first = threading.Thread(target=lambda: answers.append(tts(client, "A slow new phrase.", bearer(key))))
    first.start()
    try:
        assert entered.wait(30)
        second = tts(client, "Another new phrase.", bearer(key))
        assert second.status_code == 429 and "concurrent_misses" in second.json()["error"]
        assert tts(client, "Cached before.", bearer(key)).headers["X-Cache"] == "HIT"
    finally:
        gate.set()
        first.join(30)
    assert answers[0].status_code == 200
    assert tts(client, "Another new phrase.", bearer(key)).status_code == 200  # the slot was given back


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    with RedisServer(require_redis_server()) as running:
        yield running


def test_a_limit_is_a_bucket_given_back_evenly_with_no_burst_at_a_minutes_edge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """requests_per_minute=2 with a clock: the two requests of 00:59 leave nothing at
    01:00 (a fixed window would give two more), one comes back after 30 s."""
    clock = [1_800_000_059.0]
    monkeypatch.setattr("lib.tenants.local.time.time", lambda: clock[0])
    local = LocalTenants(tmp_path / "tenants")
    assert local.charge("k:rpm", 60, 1, 2) == (True, 30.0, 0.0)
    assert local.charge("k:rpm", 60, 1, 2) == (True, 60.0, 0.0)
    clock[0] += 1.0  # the next minute
    charged, level, wait = local.charge("k:rpm", 60, 1, 2)
    assert not charged and level == pytest.approx(59.0) and wait == pytest.approx(29.0)
    clock[0] += 29.0
    assert local.charge("k:rpm", 60, 1, 2)[0]
    assert not local.charge("k:rpm", 60, 1, 2)[0]
    clock[0] += 3600.0
    assert local.charge("k:chars", 3600, 3000, 3000)[0]  # a whole budget at once is allowed
    assert not local.charge("k:chars", 3600, 1, 3000)[0]


def test_the_shared_bucket_counts_on_redis_alike(redis_server: RedisServer) -> None:
    tier = SharedTier(redis_server.url, namespace=f"gcra{uuid.uuid4().hex[:6]}:", publish_every=0)
    try:
        assert tier.tenants_charge("k:rpm", 60, 1, 2) == (True, pytest.approx(30.0, abs=0.5), 0.0)
        assert tier.tenants_charge("k:rpm", 60, 1, 2)[0]
        charged, level, wait = tier.tenants_charge("k:rpm", 60, 1, 2)  # type: ignore[misc]
        assert not charged and 59.0 < level <= 60.0 and 29.0 < wait <= 30.0
        assert tier.tenants_charge("k:short", 1, 1, 2)[0] and tier.tenants_charge("k:short", 1, 1, 2)[0]
        assert not tier.tenants_charge("k:short", 1, 1, 2)[0]
        time.sleep(0.6)  # half a bucket of a second is given back: one more fits
        assert tier.tenants_charge("k:short", 1, 1, 2)[0]
    finally:
        tier.close()


def test_keys_and_limits_hold_across_two_replicas_on_redis(tmp_path: Path, redis_server: RedisServer) -> None:
    redis_server.client().flushall()
    shared = {"cache.shared_url": redis_server.url}
    a = tone_service(tmp_path / "a", admin_token=ADMIN_TOKEN, **shared)
    b = tone_service(tmp_path / "b", admin_token=ADMIN_TOKEN, **shared)
    try:
        with in_process(create_app(a)) as on_a, in_process(create_app(b)) as on_b:
            key = make_key(on_a, "chain", requests_per_minute=3)
            assert tts(on_b, "Shared hello.", bearer(key)).status_code == 200  # made on A, works on B
            assert tts(on_a, "Shared hello.", bearer(key)).status_code == 200
            assert tts(on_b, "Shared hello.", bearer(key)).headers["x-ratelimit-remaining-requests"] == "0"
            assert tts(on_a, "Shared hello.", bearer(key)).status_code == 429  # both replicas' requests count
            assert [k["name"] for k in on_b.get("/api/keys", headers=ADMIN).json()["keys"]] == ["chain"]
            assert usage_of(on_b, "chain")["requests"] == 3
            assert on_a.delete("/api/keys/chain", headers=ADMIN).status_code == 200
            assert tts(on_b, "Shared hello.", bearer(key)).status_code == 401  # revoked on every replica
            stored = b"".join(v for k in redis_server.client().keys(b"tts:tenants*")
                              for v in ([redis_server.client().dump(k) or b""]))  # fmt: skip
            assert key.encode() not in stored
    finally:
        a.close()
        b.close()


def test_with_a_cache_secret_a_key_forged_in_redis_is_refused(tmp_path: Path, redis_server: RedisServer) -> None:
    from lib.tenants.records import Limits, TenantRecord, hash_key

    redis_server.client().flushall()
    svc = tone_service(tmp_path, admin_token=ADMIN_TOKEN, **{"cache.shared_url": redis_server.url,
                       "cache.secret": "s" * 32})  # fmt: skip
    try:
        with in_process(create_app(svc)) as client:
            real = make_key(client, "real")
            assert tts(client, "Signed hello.", bearer(real)).status_code == 200
            raw = redis_server.client()
            # Whoever can write Redis adds a key of their own, without limits...
            forged_key = "tts_forged-key-of-a-redis-writer"
            record = TenantRecord("intruder", hash_key(forged_key), Limits())
            raw.hset("tts:tenants", "intruder", record.to_json())
            raw.hset("tts:tenants:hash", hash_key(forged_key), "intruder")
            assert tts(client, "Signed hello.", bearer(forged_key)).status_code == 401
            # ...or points their key's hash at a real tenant's (signed) record.
            raw.hset("tts:tenants:hash", hash_key("tts_another-forged-key"), "real")
            assert tts(client, "Signed hello.", bearer("tts_another-forged-key")).status_code == 401
            assert [k["name"] for k in client.get("/api/keys", headers=ADMIN).json()["keys"]] == ["real"]
            assert tts(client, "Signed hello.", bearer(real)).status_code == 200
    finally:
        svc.close()


def test_config_yaml_documents_the_tenants_section() -> None:
    text = Path("config.yaml").read_text()
    section = text.split("\ntenants:", 1)[1]
    for name in ("anonymous_synth_chars_per_hour", "anonymous_requests_per_minute", "anonymous_concurrent_misses",
                 "synth_chars_per_hour", "requests_per_minute", "concurrent_misses"):  # fmt: skip
        assert f"\n  {name}:" in section, name


def test_the_cache_tab_shows_the_usage_table_to_the_admin_only(client: Any, service: Any) -> None:
    from types import SimpleNamespace

    from lib.ui.handlers import Handlers

    key = make_key(client, "platform-9")
    assert tts(client, "Doors closing.", bearer(key)).status_code == 200
    remote = SimpleNamespace(client=SimpleNamespace(host="10.0.0.5"))
    handlers = Handlers(service, Path("hot.json"))
    admin_text = handlers.refresh_cache(token=ADMIN_TOKEN, request=remote)[0]  # type: ignore[arg-type]
    assert "Usage by tenant" in admin_text
    row = next(line for line in admin_text.splitlines() if line.startswith("| platform-9 |"))
    assert row.split("|")[2:6] == [" 1 ", " 0 ", " 1 ", f" {len('Doors closing.')} "]  # requests, hits, misses, chars
    assert "anonymous" in admin_text
    other = handlers.refresh_cache(token=None, request=remote)[0]  # type: ignore[arg-type]
    assert "Usage by tenant" not in other and "platform-9" not in other


def test_an_unusable_cache_directory_never_stops_the_service_and_a_key_is_503(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    svc = tone_service(tmp_path, admin_token=ADMIN_TOKEN, **{"cache.dir": str(blocker / "cache")})
    try:
        with in_process(create_app(svc)) as client:
            assert tts(client, "Still served.").status_code == 200  # anonymous: counted in memory
            refused = client.post("/api/keys", json={"name": "shop"}, headers=ADMIN)
            assert refused.status_code == 503 and "nothing was changed" in refused.json()["error"]
            assert client.get("/api/keys", headers=ADMIN).json()["keys"] == []
    finally:
        svc.close()


def test_the_pages_own_gradio_api_is_limited_as_an_anonymous_caller(make_service: Any) -> None:
    """The web UI's handlers (what the page and any gradio_client call) are charged to the
    page's address: with a zero anonymous budget a new text is refused in the operator's
    words, a cached one is played."""
    from types import SimpleNamespace

    import gradio as gr

    from lib.request.types import TTSRequest
    from lib.ui.handlers import Handlers

    engine = ToneEngine()
    service = make_service(admin_token=ADMIN_TOKEN, engine=engine, **{"tenants.anonymous_synth_chars_per_hour": 0})
    service.synthesise(TTSRequest(text="Cached for the page.", voice="tone-low"))
    calls = engine.calls
    h = Handlers(service, Path("hot.json"))
    page = SimpleNamespace(client=SimpleNamespace(host="127.0.0.1"), session_hash="s1")  # a token is set: not the admin

    def form(text: str) -> list[Any]:
        return ["preset", None, "tone-low", "", text, "", "", 1.0, "wav", True, []]

    quiet = {"progress": lambda *a, **k: None}
    _, badge, *_ = h.synthesise(*form("Cached for the page."), page, **quiet)  # type: ignore[arg-type]
    assert "HIT" in badge
    with pytest.raises(gr.Error):
        h.synthesise(*form("A new text for the page."), page, **quiet)  # type: ignore[arg-type]
    assert "synth_chars_per_hour" in h.failure_view("synth")(page)  # type: ignore[arg-type]
    assert engine.calls == calls
    admin_page = SimpleNamespace(client=SimpleNamespace(host="127.0.0.1"), session_hash="s2")
    open_service = make_service(engine=ToneEngine(), **{"tenants.anonymous_synth_chars_per_hour": 0})  # no token
    _, badge, *_ = Handlers(open_service, Path("hot.json")).synthesise(*form("A new text."), admin_page, **quiet)  # type: ignore[arg-type]
    assert "MISS" in badge  # a loopback page with no admin token set is the admin: not limited
