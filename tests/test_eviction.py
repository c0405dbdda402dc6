"""The cost-aware eviction policy (lib/cache/policy.py, lib/cache/keeper.py) on a real
diskcache store under tmp_path: ageing, cost and size weighting, preload admission,
pins, persistence, and the size limit held on disk."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from lib.batch.preload import preload
from lib.cache import policy as policy_module
from lib.cache.entry import CachedAudio, pack
from lib.cache.policy import CostAwarePolicy
from lib.cache.store import AudioStore
from lib.config import CacheConfig, load_config
from lib.engines.tone import ToneEngine
from lib.pipeline.service import TTSService
from lib.request.access import LOCAL
from lib.request.phrases import PhraseRequest
from lib.request.types import TTSRequest

LIMIT = 1024 * 1024


def _blob(key: str, seconds: float, cost: float) -> bytes:
    """A packed entry of noise (FLAC cannot shrink it much): about 40 KB per second."""
    rng = np.random.default_rng(int(key[:8], 16))
    pcm = rng.integers(-3000, 3000, int(22_050 * seconds), dtype=np.int16)
    return pack(CachedAudio.from_pcm(key, pcm, 22_050, {"engine_seconds": cost, "tag": "tone:tone-1"}))


def _key(i: int) -> str:
    return f"{i:032x}"


def _store(tmp_path: Path, **kw: object) -> AudioStore:
    config = CacheConfig(dir=str(tmp_path), size_limit=LIMIT, eviction_policy="cost-aware", **kw)  # type: ignore[arg-type]
    return AudioStore(config, tmp_path / "audio", lambda op, exc: None)


def _fill_with_cold(store: AudioStore, start: int, n: int, seconds: float = 1.0) -> list[str]:
    keys = [_key(start + i) for i in range(n)]
    for key in keys:
        store.put_blob(key, _blob(key, seconds, 0.1), tag="tone:tone-1", ttl=None)
    return keys


def test_diskcache_is_opened_without_its_own_policy(tmp_path: Path) -> None:
    store = _store(tmp_path)
    cache = store._disk.open()
    assert cache is not None and cache.eviction_policy == "none"  # hits write nothing to SQLite
    key = _key(1)
    store.put_blob(key, _blob(key, 0.5, 0.2), tag="t", ttl=None)
    store.get(key)
    store.get(key)
    # miss + 2 hits, in memory (decayed a little: a request weighs half 640 requests later)
    assert store._keeper is not None and store._keeper.policy.frequency(key) == pytest.approx(3, abs=0.01)
    store.close()


def test_frequent_entries_survive_and_the_size_limit_holds_on_disk(tmp_path: Path) -> None:
    store = _store(tmp_path)
    hot = _fill_with_cold(store, 0, 3)
    for _ in range(5):
        for key in hot:
            assert store.get(key) is not None
    _fill_with_cold(store, 100, 60)  # ~2.4x the limit of one-off entries
    for key in hot:
        assert store.contains(key), "a frequently requested entry was evicted by one-off ones"
    assert store.stats()["bytes"] <= LIMIT
    audio = tmp_path / "audio"
    on_disk = sum(f.stat().st_size for f in audio.rglob("*") if f.is_file() and not f.name.endswith(("-wal", "-shm")))
    assert on_disk <= LIMIT + len(_blob(_key(1), 1.0, 0.1))
    store.close()


def test_costlier_entry_of_the_same_size_is_kept(tmp_path: Path) -> None:
    store = _store(tmp_path)
    cheap, dear = _key(1), _key(2)
    store.put_blob(cheap, _blob(cheap, 1.0, 0.01), tag="t", ttl=None)
    store.put_blob(dear, _blob(dear, 1.0, 1.0), tag="t", ttl=None)
    policy = store._keeper.policy  # type: ignore[union-attr]
    assert policy.density(cheap) < policy.density(dear)
    assert policy.victims(1) == [cheap]
    store.close()


def test_smaller_entry_of_the_same_cost_and_frequency_is_kept(tmp_path: Path) -> None:
    store = _store(tmp_path)
    small, large = _key(1), _key(2)
    store.put_blob(small, _blob(small, 0.5, 0.1), tag="t", ttl=None)
    store.put_blob(large, _blob(large, 2.5, 0.1), tag="t", ttl=None)
    assert store._keeper.policy.victims(1) == [large]  # type: ignore[union-attr]
    store.close()


def test_counts_age_so_yesterdays_hot_phrases_fade(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(policy_module, "AGE_EVERY", 1)
    monkeypatch.setattr(policy_module, "_MIN_WINDOW", 8)
    store = _store(tmp_path)
    old, new = _key(1), _key(2)
    store.put_blob(old, _blob(old, 0.5, 0.1), tag="t", ttl=None)
    for _ in range(6):
        store.get(old)
    policy = store._keeper.policy  # type: ignore[union-attr]
    before = policy.frequency(old)
    store.put_blob(new, _blob(new, 0.5, 0.1), tag="t", ttl=None)
    for _ in range(8):  # the window is 8 requests here: 9 more requests weigh old's by 2**(-9/8)
        store.get(new)
    assert policy.frequency(old) == pytest.approx(before * 2 ** (-9 / 8))
    assert policy.frequency(old) < before / 2
    assert policy.victims(1) == [old]  # today's phrase outranks yesterday's
    store.close()


def test_counts_decay_smoothly_and_forget_ghosts_below_half_a_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each request weighs 2**(-n/window) after n later ones; integer halving once a
    window made a single request worth 1 up to the halving and 0 after it."""
    monkeypatch.setattr(policy_module, "AGE_EVERY", 1)
    monkeypatch.setattr(policy_module, "_MIN_WINDOW", 8)
    policy = CostAwarePolicy(limit=10**6)
    policy.added("b", 100, 0.1)
    policy.hit("b")  # requests 1, 2
    policy.added("a", 100, 0.1)  # request 3
    policy.removed("a")  # a ghost from now on: only its count is kept
    for _ in range(4):  # requests 4-7
        policy.hit("b")
    assert policy.frequency("a") == pytest.approx(2 ** (-4 / 8))
    policy.hit("b")  # request 8: the weight reaches 2 and every count is divided down
    assert policy.frequency("a") == pytest.approx(2 ** (-5 / 8))  # still more than half a request: kept
    b_ages = (0, 1, 2, 3, 4, 6, 7)  # b's requests 8, 7, 6, 5, 4, 2, 1 (a made request 3)
    assert policy.frequency("b") == pytest.approx(sum(2 ** (-n / 8) for n in b_ages))
    for _ in range(10):  # requests 9-18: divided down again, and a is worth under half a request
        policy.hit("b")
    assert policy.frequency("a") == 0


def test_a_preload_scan_does_not_displace_requested_entries(tmp_path: Path) -> None:
    store = _store(tmp_path)
    hot = _fill_with_cold(store, 0, 20)  # ~0.8 MB, all requested once
    keeper = store._keeper
    assert keeper is not None
    stored = [store.put_blob(_key(500 + i), _blob(_key(500 + i), 1.0, 5.0), tag="t", ttl=None, origin="preload")
              for i in range(40)]  # fmt: skip
    assert all(store.contains(key) for key in hot)
    # Preloaded entries took the free space, then replaced each other (they start with
    # no count, so they are worth nothing until someone asks for them).
    present = [_key(500 + i) for i in range(40) if store.contains(_key(500 + i))]
    assert 0 < len(present) <= 8 and all(stored)
    assert all(keeper.policy.frequency(key) == 0 for key in present)
    assert store.stats()["bytes"] <= LIMIT
    # Once the hot entries' counts are gone (aged to nothing), a preload may replace them;
    # while they are requested it may not: a user's entry worth more is never a victim.
    assert not keeper.policy.admits(_key(999), 10**6, 5.0, requested=False, free=0)
    store.close()


def test_pinned_entries_are_kept_until_their_list_changes(tmp_path: Path) -> None:
    store = _store(tmp_path)
    pinned = [_key(900), _key(901)]
    digest = store.pin("preload", pinned)
    assert digest is not None and len(digest) == 16
    for key in pinned:
        assert store.put_blob(key, _blob(key, 1.0, 0.01), tag="t", ttl=None, origin="preload")
    hot = _fill_with_cold(store, 0, 60)
    for key in hot[-5:]:
        store.get(key)
    assert all(store.contains(key) for key in pinned)
    store.pin("preload", [_key(902)])  # a new version of the list: the old pins are released
    _fill_with_cold(store, 200, 30)
    assert not any(store.contains(key) for key in pinned)
    store.close()


def test_pins_beyond_the_pin_budget_are_evicted_like_others(tmp_path: Path) -> None:
    store = _store(tmp_path, pin_fraction=0.1)
    pinned = [_key(900 + i) for i in range(10)]
    store.pin("preload", pinned)
    for key in pinned:
        store.put_blob(key, _blob(key, 1.0, 0.01), tag="t", ttl=None, origin="preload")
    _fill_with_cold(store, 0, 40)
    kept = sum(store.contains(key) for key in pinned)
    assert kept < len(pinned)
    assert store.stats()["bytes"] <= LIMIT
    store.close()


def test_counts_and_pins_survive_a_restart(tmp_path: Path) -> None:
    store = _store(tmp_path)
    hot, cold = _key(1), _key(2)
    for key in (hot, cold):
        store.put_blob(key, _blob(key, 0.5, 0.1), tag="t", ttl=None)
    for _ in range(4):
        store.get(hot)
    store.pin("template:calls", [cold])
    store.close()
    store = _store(tmp_path)
    store.put_blob(_key(3), _blob(_key(3), 0.5, 0.1), tag="t", ttl=None)  # attaches the policy
    policy = store._keeper.policy  # type: ignore[union-attr]
    assert policy.frequency(hot) == pytest.approx(5, abs=0.05)  # 5 requests (decayed a little), not 1
    assert policy.pinned(cold)
    assert store._keeper.policy.pins()["template:calls"][1] == frozenset({cold})  # type: ignore[union-attr]
    store.close()


def test_another_process_pins_are_seen_before_a_cull(tmp_path: Path) -> None:
    server, other = _store(tmp_path), _store(tmp_path)
    key = _key(7)
    server.put_blob(key, _blob(key, 1.0, 0.01), tag="t", ttl=None)
    other.pin("preload", [key])  # e.g. preload_cache.py beside the server
    _fill_with_cold(server, 0, 40)
    assert server.contains(key)
    server.close()
    other.close()


def test_clear_and_delete_keep_the_bookkeeping_in_step(tmp_path: Path) -> None:
    store = _store(tmp_path)
    keys = _fill_with_cold(store, 0, 5)
    policy = store._keeper.policy  # type: ignore[union-attr]
    store.delete(keys[0])
    assert keys[0] not in policy and len(policy) == 4
    store.clear()
    assert len(policy) == 0
    store.close()


@pytest.mark.parametrize("name", ["least-recently-used", "least-frequently-used"])
def test_diskcache_policies_still_hold_the_limit(tmp_path: Path, name: str) -> None:
    config = CacheConfig(dir=str(tmp_path), size_limit=LIMIT, eviction_policy=name)
    store = AudioStore(config, tmp_path / "audio", lambda op, exc: None)
    assert store._keeper is None and store.pin("preload", [_key(1)]) is None
    _fill_with_cold(store, 0, 40)
    assert store.stats()["bytes"] <= LIMIT
    store.close()


def test_preload_pins_its_list_when_configured(tmp_path: Path) -> None:
    config = load_config(env={}, overrides={
        "engine": "tone", "cache.dir": str(tmp_path), "voices.prewarm": False, "cache.pin_preload": True,
    })  # fmt: skip
    svc = TTSService(config, ToneEngine())
    try:
        items = [PhraseRequest(f"phrases[{i}]", f"hello {i}", voice="tone-low") for i in range(3)]
        report = preload(svc, items, caller=LOCAL)
        assert report.generated == 3
        keys = {svc.resolve(TTSRequest(text=f"hello {i}", voice="tone-low")).key for i in range(3)}
        pins = svc.cache.store._keeper.policy.pins()  # type: ignore[union-attr]
        assert pins["preload"][1] == frozenset(keys)
    finally:
        svc.close()


def test_bad_policy_names_the_key(tmp_path: Path) -> None:
    from lib.errors import ConfigError

    with pytest.raises(ConfigError, match=r"cache\.eviction_policy: use one of cost-aware"):
        load_config(env={}, overrides={"cache.eviction_policy": "random", "cache.dir": str(tmp_path)})
    with pytest.raises(ConfigError, match=r"cache\.pin_fraction"):
        load_config(env={}, overrides={"cache.pin_fraction": 2, "cache.dir": str(tmp_path)})
    assert os.path.isdir(tmp_path)


def test_engine_seconds_saved_total_and_last_hour_are_shown(tmp_path: Path) -> None:
    from lib.ui.views import stats_markdown

    config = load_config(env={}, overrides={"engine": "tone", "cache.dir": str(tmp_path), "voices.prewarm": False})
    svc = TTSService(config, ToneEngine(delay=0.05))
    try:
        request = TTSRequest(text="what a hit saves", voice="tone-low")
        made = svc.synthesise(request)
        assert svc.synthesise(request).cache == "HIT"
        cost = float(made.audio.meta["engine_seconds"])
        snap = svc.dashboard.snapshot(caller=LOCAL)
        assert snap["engine_seconds_saved_last_hour"] == pytest.approx(cost, abs=0.002)
        assert snap["engine_seconds_saved_total"] == pytest.approx(cost, abs=0.002)
        # An hour later the per-hour figure is empty again; the total stays.
        assert svc.dashboard.stats.saved_last_hour(now=made.audio.meta["created"] + 3700) == 0
        text = svc.dashboard.metrics.exposition().decode()
        line = next(x for x in text.splitlines() if x.startswith("tts_engine_seconds_saved_last_hour "))
        assert float(line.split()[1]) == pytest.approx(cost, abs=0.002)
        assert "tts_engine_seconds_saved_total" in text
        assert f"{cost:.1f} s in the last hour" in stats_markdown(snap)
    finally:
        svc.close()
