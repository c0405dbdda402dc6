"""The object-store tier (lib/objects) against a real S3-protocol server process
(moto's, tests/s3_server.py), through the same client code that talks to MinIO or AWS:
entries and their indexes, eviction by tag, TTL expiry and the sweep, clear, the
breaker (store killed, slow, refusing) and the lease objects. Each test works under a
prefix of its own, so tests share one server without seeing each other's objects."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import wait_until
from s3_server import ACCESS_KEY, SECRET_KEY, S3Server

from lib.cache.entry import CachedAudio, pack, unpack
from lib.cache.leases import DiskLeases
from lib.cli import add_config_flags, config_from_args
from lib.config import load_config
from lib.config.objects import parse_objects_url
from lib.errors import ConfigError
from lib.objects.layout import Card, hour_of
from lib.objects.sigv4 import Credentials
from lib.objects.tier import ObjectTier

KEY = "0123456789abcdef0123456789abcdef"
CREDS = Credentials(ACCESS_KEY, SECRET_KEY)


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with S3Server() as server:
        yield server


@pytest.fixture
def make_tier(s3: S3Server) -> Iterator[Callable[..., ObjectTier]]:
    tiers: list[ObjectTier] = []

    def make(url: str | None = None, **kwargs: Any) -> ObjectTier:
        kwargs.setdefault("creds", CREDS)
        kwargs.setdefault("probe_every", 0.05)
        kwargs.setdefault("sweep_every", 1e9)
        tier = ObjectTier(url or s3.url(f"t{uuid.uuid4().hex[:8]}"), **kwargs)
        tiers.append(tier)
        return tier

    yield make
    for tier in tiers:
        tier.close()


def blob(key: str = KEY, **meta: Any) -> bytes:
    pcm = (np.sin(np.arange(2205) / 7.0) * 8000).astype(np.int16)
    return pack(CachedAudio.from_pcm(key, pcm, 22050, {"engine": "tone", "tag": "tone:1", "voice": "v1", **meta}))


def names(tier: ObjectTier, part: str = "") -> list[str]:
    root = tier.location.name("")
    return sorted(item.name[len(root) :] for item in tier.client.list(root + part))


# -- the URL and the configuration ------------------------------------------------------------


def test_the_url_names_endpoint_bucket_and_prefix() -> None:
    url = parse_objects_url("http://minio.internal:9000/tts-cache/prod/eu")
    assert (url.endpoint, url.bucket, url.prefix) == ("http://minio.internal:9000", "tts-cache", "prod/eu")
    bare = parse_objects_url("https://s3.eu-west-1.amazonaws.com/my-bucket")
    assert (bare.endpoint, bare.bucket, bare.prefix, bare.secure) == (
        "https://s3.eu-west-1.amazonaws.com", "my-bucket", "", True,
    )  # fmt: skip
    with pytest.raises(ConfigError, match="bucket") as missing:
        parse_objects_url("http://minio:9000/")
    assert "cache.objects_url" in str(missing.value)
    with pytest.raises(ConfigError, match="AWS_ACCESS_KEY_ID") as secret:
        parse_objects_url("http://admin:hunter2@minio:9000/bucket")
    assert "hunter2" not in str(secret.value)  # the message never repeats the password


def test_the_setting_comes_from_yaml_environment_and_flags(tmp_path: Path) -> None:
    url = "http://minio.internal:9000/tts-cache/prod"
    assert load_config(env={}).cache.objects_url is None
    assert load_config(env={}).cache.objects_redirect is False
    env = {"TTS_CACHE_OBJECTS_URL": url, "TTS_CACHE_OBJECTS_REDIRECT": "true"}
    config = load_config(env=env)
    assert (config.cache.objects_url, config.cache.objects_redirect) == (url, True)
    with pytest.raises(ConfigError, match=r"cache\.objects_url"):
        load_config(env={"TTS_CACHE_OBJECTS_URL": "ftp://minio/bucket"})
    import argparse

    for server in (True, False):  # webui.py adds the server flags, preload_cache.py does not
        parser = argparse.ArgumentParser()
        add_config_flags(parser, server=server)
        args = parser.parse_args(["--objects-url", url, "--cache-dir", str(tmp_path)])
        assert config_from_args(args).cache.objects_url == url


def test_a_tier_without_credentials_is_refused_with_a_fix(monkeypatch: pytest.MonkeyPatch, s3: S3Server) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID", raising=False)
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY", raising=False)
    with pytest.raises(ConfigError, match="AWS_SECRET_ACCESS_KEY"):
        ObjectTier(s3.url("nocreds"))


# -- entries ----------------------------------------------------------------------------------


def test_an_entry_round_trips_with_its_expiry_as_metadata_and_its_index_beside_it(
    make_tier: Callable[..., ObjectTier],
) -> None:
    tier = make_tier()
    expires = time.time() + 7200
    value = blob(expires=expires)
    assert tier.put(KEY, value, ttl=7200)
    assert tier.get(KEY) == value  # the same packed bytes the disk tier holds
    assert unpack(tier.get(KEY) or b"", KEY).meta["voice"] == "v1"
    got = tier.client.head(tier.layout.entry(KEY))
    assert got is not None and float(got.metadata["expires"]) == pytest.approx(expires)
    card = str(Card(KEY, "tone:1", "voice:v1", hour_of(expires)))
    assert names(tier) == sorted(
        [f"a/{KEY}", f"t/dG9uZTox/{card}", f"t/dm9pY2U6djE/{card}", f"x/{hour_of(expires)}/{card}"]
    )
    assert tier.get("f" * 32) is None
    assert tier.status()["hits"] == 2 and tier.status()["puts"] == 1


def test_evicting_a_tag_lists_only_that_tags_index(make_tier: Callable[..., ObjectTier]) -> None:
    tier = make_tier()
    old, new, other_voice = "a" * 32, "b" * 32, "c" * 32
    tier.put(old, blob(old, tag="tone:1"))
    tier.put(new, blob(new, tag="tone:2"))
    tier.put(other_voice, blob(other_voice, tag="tone:2", voice="v2"))
    listed: list[str] = []
    real_list = tier.client.list

    def spy(prefix: str, start_after: str | None = None) -> Iterator[Any]:
        listed.append(prefix)
        return real_list(prefix, start_after)

    tier.client.list = spy  # type: ignore[method-assign]
    assert tier.evict("tone:1") == 1
    assert listed == [tier.layout.tag_dir("tone:1")]  # never the whole bucket
    assert tier.get(old) is None and tier.get(new) is not None
    assert not [n for n in names(tier) if old in n]  # the entry and all of its index objects
    assert tier.evict("voice:v1") == 1  # a voice's entries, of any model version
    assert tier.get(new) is None and tier.get(other_voice) is not None
    assert tier.evict("tone:9") == 0


def test_expired_objects_are_never_served_and_are_swept(make_tier: Callable[..., ObjectTier]) -> None:
    tier = make_tier()
    now = time.time()
    stale, fresh, forever, remade = "1" * 32, "2" * 32, "3" * 32, "4" * 32
    assert tier.put(stale, blob(stale, expires=now - 7200), ttl=1)
    tier.put(fresh, blob(fresh, expires=now + 7200), ttl=7200)
    tier.put(forever, blob(forever))
    tier.put(remade, blob(remade, expires=now - 7200), ttl=1)
    tier.put(remade, blob(remade, expires=now + 7200), ttl=7200)  # made again since: a later expiry
    assert tier.get(stale) is None  # past its expiry: not served, though still stored
    assert tier.status()["expired"] == 1
    assert tier.sweep(now) == 1
    left = names(tier)
    assert not [n for n in left if stale in n]  # entry and index objects
    assert tier.get(fresh) is not None and tier.get(forever) is not None and tier.get(remade) is not None
    assert not [n for n in left if n.startswith(f"x/{hour_of(now - 7200)}/")]  # the stale index object went too
    assert tier.sweep(now + 3 * 3600) == 2  # hours later: the two with a TTL
    assert tier.get(forever) is not None


def test_clear_removes_entries_copies_and_indexes_but_not_leases(make_tier: Callable[..., ObjectTier]) -> None:
    tier = make_tier()
    other = make_tier()  # another prefix in the same bucket
    for key in ("5" * 32, "6" * 32):
        tier.put(key, blob(key, expires=time.time() + 60), ttl=60)
    other.put(KEY, blob())
    leases = tier.leases(None)
    token = leases.acquire(KEY, 30)
    tier.client.put(tier.layout.playable("5" * 32, "wav"), b"RIFF")
    assert tier.clear() == 2
    assert names(tier) == [f"l/{KEY}"]  # the lease in use stays
    assert other.get(KEY) is not None  # nothing outside the prefix
    assert token is not None
    leases.release(KEY, token)


def test_a_corrupt_object_is_deleted_and_counted(make_tier: Callable[..., ObjectTier]) -> None:
    errors: list[int] = []
    tier = make_tier(on_error=lambda: errors.append(1))
    tier.put(KEY, blob())
    tier.client.put(tier.layout.entry(KEY), (tier.get(KEY) or b"")[:-300])  # truncated
    damaged = tier.get(KEY)
    assert damaged is not None
    with pytest.raises(ValueError) as exc:
        unpack(damaged, KEY)
    tier.corrupt(KEY, exc.value)
    assert tier.client.get(tier.layout.entry(KEY)) is None
    assert errors == [1] and tier.status()["corrupt"] == 1


# -- faults -----------------------------------------------------------------------------------


def test_a_killed_store_never_fails_a_call_logs_once_and_heals(
    make_tier: Callable[..., ObjectTier], caplog: pytest.LogCaptureFixture
) -> None:
    with S3Server() as own:
        tier = make_tier(own.url("k"))
        assert tier.put(KEY, blob()) and tier.up
        own.stop(kill=True)
        caplog.set_level(logging.WARNING)
        for _ in range(20):
            assert tier.get(KEY) is None
            assert tier.put(KEY, blob()) is False
        assert tier.evict("tone:1") is None and tier.sweep() is None and tier.clear() == 0
        assert not tier.up and tier.status()["last_error"]
        unreachable = [r for r in caplog.records if "is unreachable" in r.getMessage()]
        assert len(unreachable) == 1  # logged once, not once per call
        own.start()  # a new, empty store (moto keeps nothing), the bucket made again
        assert wait_until(lambda: tier.up)  # the background probe closed the breaker
        assert tier.put(KEY, blob()) and tier.get(KEY) is not None
        assert any("reachable again" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("fault", [{"delay": 3.0}, {"status": 503}, {"status": 403}])
def test_a_slow_or_refusing_store_opens_the_breaker(
    make_tier: Callable[..., ObjectTier], fault: dict[str, Any]
) -> None:
    with S3Server() as own:
        tier = make_tier(own.url("f"))
        tier.put(KEY, blob())
        own.faults(**fault)
        assert tier.get(KEY) is None  # one time-out or refusal, then skipped at once
        assert not tier.up
        assert tier.get(KEY) is None
        own.faults()
        assert wait_until(lambda: tier.up)
        assert tier.get(KEY) is not None


def test_a_refusal_that_is_no_outage_is_counted_without_opening_the_breaker(
    make_tier: Callable[..., ObjectTier],
) -> None:
    with S3Server() as own:
        tier = make_tier(own.url("r"))
        own.faults(status=400)
        assert tier.put(KEY, blob()) is False
        assert tier.up and tier.breaker.errors == 1
        own.faults()


# -- leases -----------------------------------------------------------------------------------


def test_a_lease_is_taken_by_one_replica_at_a_time(make_tier: Callable[..., ObjectTier]) -> None:
    tier = make_tier()
    replicas = [tier.leases(None) for _ in range(8)]
    barrier = threading.Barrier(len(replicas))
    tokens: list[str | None] = [None] * len(replicas)

    def take(i: int) -> None:
        barrier.wait()
        tokens[i] = replicas[i].acquire(KEY, 30)

    threads = [threading.Thread(target=take, args=(i,)) for i in range(len(replicas))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    won = [t for t in tokens if t is not None]
    assert len(won) == 1 and won[0].startswith("o:")
    assert all(r.held(KEY) for r in replicas)
    holder = replicas[tokens.index(won[0])]
    assert replicas[0].renew(KEY, "o:not-ours", 30) is False
    replicas[0].release(KEY, "o:not-ours")  # never someone else's
    assert holder.held(KEY) and holder.renew(KEY, won[0], 30)
    holder.release(KEY, won[0])
    assert not replicas[0].held(KEY)
    assert replicas[0].acquire(KEY, 30) is not None


def test_a_dead_holders_lease_is_taken_over_once_it_has_run_out(make_tier: Callable[..., ObjectTier]) -> None:
    tier = make_tier()
    dead, alive = tier.leases(None), tier.leases(None)
    assert dead.acquire(KEY, 1.0) is not None  # its holder never renews
    assert alive.acquire(KEY, 1.0) is None
    assert wait_until(lambda: not alive.held(KEY))  # the store's clock says it ran out
    taken = alive.acquire(KEY, 30)
    assert taken is not None and alive.holder(KEY) == taken[2:]


def test_leases_fall_back_to_the_local_lock_store_while_the_store_is_down(
    make_tier: Callable[..., ObjectTier], tmp_path: Path
) -> None:
    with S3Server() as own:
        tier = make_tier(own.url("l"))
        local = DiskLeases(str(tmp_path / "locks"))
        leases = tier.leases(local)
        own.stop(kill=True)
        token = leases.acquire(KEY, 30)
        assert token is not None and token.startswith("l:")
        assert leases.acquire(KEY, 30) is None  # the host's lock holds it
        leases.release(KEY, token)
        assert not local.held(KEY)
        local.close()


def test_credentials_are_in_no_log_line_and_no_status(
    make_tier: Callable[..., ObjectTier], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with S3Server() as own:
        tier = make_tier(own.url("s"))
        tier.put(KEY, blob())
        own.faults(status=403)
        tier.get(KEY)
        own.stop(kill=True)
        time.sleep(0.3)
        tier.get(KEY)
        shown = repr(tier.status()) + repr(tier) + repr(tier.client.__dict__) + caplog.text
    assert "is unreachable" in caplog.text  # the faults were logged ...
    assert SECRET_KEY not in shown  # ... without the secret
    assert ACCESS_KEY not in repr(tier.status()) + caplog.text
