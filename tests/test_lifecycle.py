"""Lifecycles that end: the writer's flush is a barrier, nothing is submitted after
close, followers do not wait forever, and every thread the service starts is joined
when it closes. Real threads, real stores under tmp_path, the tone engine."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from lib.cache.leases import DiskLeases, Renewer
from lib.cache.singleflight import LocalFlights
from lib.cache.writer import Writer, WriterClosedError
from lib.config import load_config
from lib.engines.tone import ToneEngine
from lib.pipeline.service import TTSService
from lib.request.access import LOCAL
from lib.request.types import TTSRequest

_SERVICE_THREADS = {
    "cache-writer",
    "lease-renewer",
    "stats-flush",
    "voice-prewarm",
    "shared-tier-stats",
    "engine-probe",
}


def test_flush_waits_for_earlier_jobs_only() -> None:
    writer = Writer()
    first_running, release_first, release_later = threading.Event(), threading.Event(), threading.Event()
    done: list[str] = []

    def first() -> None:
        first_running.set()
        release_first.wait()
        done.append("first")

    writer.submit(first)
    assert first_running.wait(10)
    flushed = threading.Event()
    flusher = threading.Thread(target=lambda: (writer.flush(timeout=60), flushed.set()))
    flusher.start()
    writer.submit(lambda: (release_later.wait(), done.append("later")))  # submitted after the flush began
    assert not flushed.is_set()
    release_first.set()
    flusher.join(30)
    assert flushed.is_set() and done == ["first"]  # the barrier did not wait for the later job
    release_later.set()
    writer.close()
    assert done == ["first", "later"]


def test_submit_after_close_fails_fast_and_flush_returns() -> None:
    writer = Writer()
    ran: list[int] = []
    writer.submit(lambda: ran.append(1))
    writer.close()
    assert ran == [1]  # close runs what was submitted before it
    assert not writer._thread.is_alive()
    with pytest.raises(WriterClosedError):
        writer.submit(lambda: ran.append(2))
    assert writer.flush(timeout=0.1) is True
    assert ran == [1]


def test_a_follower_runs_the_work_itself_when_the_leader_hangs() -> None:
    flights: LocalFlights[str] = LocalFlights(timeout=0.2)
    leader_in, release = threading.Event(), threading.Event()

    def hang() -> str:
        leader_in.set()
        release.wait()
        return "leader"

    leader = threading.Thread(target=lambda: flights.run("k", hang))
    leader.start()
    assert leader_in.wait(10)
    value, led = flights.run("k", lambda: "follower")
    assert (value, led) == ("follower", True)
    release.set()
    leader.join(10)


def test_renewer_thread_is_joined_on_stop(tmp_path: Path) -> None:
    leases = DiskLeases(str(tmp_path / "locks"))
    renewer = Renewer(leases, lease=3.0)
    token = leases.acquire("k", 3.0)
    assert token is not None
    renewer.add("k", token)
    thread = renewer._thread
    assert thread is not None and thread.is_alive()
    renewer.stop()
    assert not thread.is_alive()
    leases.close()


class _ReleasedDuringRenewal(DiskLeases):
    """Real disk leases; the renewal of ``k`` finds it released meanwhile by its holder
    (as the writer does once an entry is on disk), the renewal of ``lost`` finds it taken."""

    renewer: Renewer
    renewed: threading.Event

    def renew(self, key: str, token: str, lease: float) -> bool:
        if key == "k":
            self.release(key, token)
            self.renewer.remove(key)
        elif key == "lost":
            self.release(key, token)  # expired and gone while still held
        ok = super().renew(key, token, lease)
        if key == "lost":
            self.renewed.set()
        return ok


def test_a_lease_released_during_renewal_is_not_reported_lost(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    leases = _ReleasedDuringRenewal(str(tmp_path / "locks"))
    leases.renewed = threading.Event()
    renewer = leases.renewer = Renewer(leases, lease=0.3)
    held = {key: leases.acquire(key, 0.3) for key in ("k", "lost")}
    with caplog.at_level("WARNING", logger="lib.cache.leases"):
        for key, token in held.items():
            assert token is not None
            renewer.add(key, token)
        assert leases.renewed.wait(10)
        renewer.stop()
    lost = [r.getMessage() for r in caplog.records if "lost the single-flight lease" in r.getMessage()]
    assert lost and set(lost) == {"lost the single-flight lease on lost (expired while running)"}
    leases.close()


def test_dashboard_refresh_does_not_wait_for_background_writes(tmp_path: Path) -> None:
    svc = TTSService(load_config(env={}, overrides={"engine": "tone", "cache.dir": str(tmp_path / "c")}), ToneEngine())
    try:
        blocked, release = threading.Event(), threading.Event()
        svc.cache.writer.submit(lambda: (blocked.set(), release.wait()))
        assert blocked.wait(10)
        snapshots: list[dict[str, object]] = []
        reader = threading.Thread(target=lambda: snapshots.append(svc.dashboard.snapshot(caller=LOCAL)))
        reader.start()
        reader.join(30)
        assert snapshots and not reader.is_alive()  # answered while the writer was still busy
        release.set()
    finally:
        svc.close()


def test_close_joins_every_thread_the_service_started(tmp_path: Path) -> None:
    before = {t.ident for t in threading.enumerate()}
    config = load_config(env={}, overrides={"engine": "tone", "cache.dir": str(tmp_path / "c"), "voices.prewarm": True})
    svc = TTSService(config, ToneEngine(delay=0.05))
    svc.synthesise(TTSRequest(text="hello", voice="tone-low"))
    started = [t for t in threading.enumerate() if t.ident not in before]
    assert {t.name for t in started} >= {"cache-writer", "lease-renewer", "stats-flush", "engine-probe"}
    svc.close()
    alive = [t.name for t in started if t.is_alive() and t.name in _SERVICE_THREADS]
    assert alive == []
