"""Disk faults, reproduced for real: a database truncated under a running server, an
unreadable database, a full filesystem (a small tmpfs), a cache directory deleted or
replaced while in use, and the size of the whole directory on disk.

The tmpfs tests need root (mount); they are skipped with a reason otherwise, except
under CI (which runs as root), where not being able to mount is a failure.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import lib.cache.handle
from lib.api import create_app
from lib.cache.diskutil import free_bytes
from lib.cache.store import directory_bytes
from lib.engines.tone import ToneEngine
from lib.pipeline.service import TTSService
from lib.request.access import LOCAL
from tests.api_server import LiveServer
from tests.server_process import ServerProcess
from tests.test_api import wav_file
from tests.test_cache import make_config, speak, tone_prompt


@contextlib.contextmanager
def tmpfs(mount: Path, size: str) -> Iterator[Path]:
    """A real, small filesystem at ``mount`` (root only; CI runs as root)."""
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("the full-disk tests need root to mount a tmpfs, and CI runs as root")
        pytest.skip("mounting a small tmpfs needs root")
    mount.mkdir(parents=True, exist_ok=True)
    if os.system(f"mount -t tmpfs -o size={size},mode=0700 tmpfs '{mount}'") != 0:
        if os.environ.get("CI"):
            pytest.fail("cannot mount a tmpfs")
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield mount
    finally:
        assert os.system(f"umount '{mount}' 2>/dev/null || umount -l '{mount}'") == 0


def fill(path: Path, chunk: int = 64 * 1024) -> int:
    """Write zeros to ``path`` until the filesystem is full; return the bytes written."""
    written = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        while chunk >= 512:
            try:
                written += os.write(fd, b"\0" * chunk)
            except OSError:
                chunk //= 2
    finally:
        os.close(fd)
    return written


def checkpoint(store: Path) -> None:
    """Write a store's log into its database file (where damage to the file is seen)."""
    with contextlib.closing(sqlite3.connect(store / "cache.db")) as con:
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()


def tts(client: httpx.Client, text: str, **fields: Any) -> httpx.Response:
    return client.post("/api/tts", data={"voice": "tone-low", "text": text, **fields}, files={"_": ("", b"")})


# -- a damaged database --------------------------------------------------------------------


def test_truncated_database_under_a_running_server_is_moved_aside(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    server = ServerProcess(cache, tmp_path / "server.log", TTS_CACHE_MEMORY_BYTES=0, TTS_ADMIN_TOKEN="t")
    texts = [f"phrase number {i:03d}" for i in range(60)]
    statuses: Counter[tuple[str, int]] = Counter()
    failures: list[str] = []
    with server, httpx.Client(base_url=server.url, timeout=60) as client:
        keys = [tts(client, text).headers["x-cache-key"] for text in texts]
        db = cache / "audio" / "cache.db"
        for round_ in range(3):  # with SQLite's mmap on, the process died (SIGBUS) in the first round
            stop = threading.Event()

            def load(offset: int, stop: threading.Event, keys: list[str]) -> None:  # readers in flight at the cut
                with httpx.Client(base_url=server.url, timeout=60) as own:
                    i = offset
                    while not stop.is_set():
                        try:
                            if i % 3:
                                statuses["GET", own.get(f"/api/audio/{keys[i % len(keys)]}.wav").status_code] += 1
                            else:
                                statuses["POST", tts(own, texts[i % len(texts)]).status_code] += 1
                        except httpx.HTTPError as exc:
                            failures.append(f"{type(exc).__name__}: {exc}")
                            return
                        i += 7

            checkpoint(db.parent)  # the pages into the file, so that the cut hits them
            threads = [threading.Thread(target=load, args=(n, stop, keys)) for n in range(4)]
            for thread in threads:
                thread.start()
            time.sleep(0.5)
            os.truncate(db, 4096)  # what a careless cleanup or a full disk leaves: the header only
            time.sleep(1.5)
            stop.set()
            for thread in threads:
                thread.join(timeout=60)
            assert server.alive, f"the server died in round {round_} ({server.returncode}):\n{server.read_log()}"
            # Noticed by a request whose connection had to read a lost page (a connection
            # with the pages in its cache reads none), else by verify (a fresh connection).
            if server.read_log().count("moved it aside") <= round_:
                verified = client.post("/api/cache/verify", headers={"Authorization": "Bearer t"})
                assert verified.status_code == 200 and any("moved it aside" in r for r in verified.json()["repairs"])
            assert server.read_log().count("moved it aside") == round_ + 1, server.read_log()
            keys = [tts(client, text).headers["x-cache-key"] for text in texts]  # stored again
        assert failures == []
        # Synthesis always answers; a lost entry asked for by key is a 404 until made again.
        assert set(statuses) <= {("POST", 200), ("GET", 200), ("GET", 404)}, statuses
        assert statuses["POST", 200] > 0 and statuses["GET", 200] > 0
        damaged = list((cache / "audio").glob("cache.db.damaged-*"))
        assert len(damaged) == 1  # the newest copy is kept, older ones removed
        # A fresh store works: every text is stored again and served from disk.
        assert tts(client, texts[0]).headers["x-cache"] == "HIT"
        assert client.get("/healthz").json()["status"] == "ok"
        answered = ", ".join(f"{m} {c}: {n}" for (m, c), n in sorted(statuses.items()))
        print(f"\n3 truncations under load: {sum(statuses.values())} requests answered ({answered}), "
              f"0 failed, the process survived; damaged copy kept: {damaged[0].name}")  # fmt: skip


def test_verify_repairs_an_unreadable_database_in_every_store(tmp_path: Path) -> None:
    svc = TTSService(make_config(tmp_path / "c"), ToneEngine())
    try:
        speak(svc, "stored before the damage")
        svc.voices.save("desk", (22_050, tone_prompt()), "", caller=LOCAL)
        svc.cache.flush()
        for store in ("audio", "voices"):
            checkpoint(tmp_path / "c" / store)
            with open(tmp_path / "c" / store / "cache.db", "r+b") as db:  # same file, content destroyed
                db.write(os.urandom(8192))
        report = svc.admin.verify(caller=LOCAL)
        moved = [line for line in report["repairs"] if "moved it aside" in line]
        assert len(moved) == 2, report
        assert {"cache store" in line or "voice store" in line for line in moved} == {True}
        for store in ("audio", "voices"):
            assert len(list((tmp_path / "c" / store).glob("cache.db.damaged-*"))) == 1
        again = speak(svc, "written after the repair")
        svc.cache.flush()
        assert svc.cache.store.contains(again.key)
        svc.voices.save("desk 2", (22_050, tone_prompt()), "", caller=LOCAL)  # the voice store takes writes again
        assert svc.admin.verify(caller=LOCAL)["repairs"] == []
    finally:
        svc.close()


# -- a full disk ---------------------------------------------------------------------------


def test_full_disk_evicts_to_make_room_and_resumes_when_space_returns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with tmpfs(tmp_path / "small", "8m") as mount:
        other = mount / "someone-elses-data"
        with open(other, "wb") as f:
            f.write(b"\1" * 3 * 1024 * 1024)  # 3 MiB of the 8 belong to another program
        engine = ToneEngine(seconds_per_char=1.0)  # 19 s, about 250 KB of FLAC per phrase
        svc = TTSService(make_config(mount / "cache", **{"cache.memory_bytes": 0}), engine)
        try:
            with caplog.at_level(logging.WARNING):
                results = []
                for i in range(80):  # about 20 MB of entries for the 5 MiB left
                    results.append(speak(svc, f"full disk phrase {i:02d}"))
                    svc.cache.flush()
            assert [r.cache for r in results] == ["MISS"] * 80 and engine.calls == 80
            stats = svc.cache.store.stats()
            assert stats["disk_full"] and stats["effective_limit"] < stats["size_limit"]
            assert any("is full: the audio store is held to" in r.getMessage() for r in caplog.records)
            held = stats["entries"]
            kept = [r.key for r in results if svc.cache.store.contains(r.key)]
            assert 0 < held < 80 and len(kept) == held  # evicted to make room ...
            assert svc.cache.store.contains(results[-1].key)  # ... and kept writing at the lower limit
            hit = speak(svc, "full disk phrase 79")  # hits are served, from the disk tier
            assert hit.cache == "HIT" and hit.info["tier"] == "disk" and engine.calls == 80
            assert free_bytes(mount) > 0
            health = svc.dashboard.health()
            assert health["status"] == "degraded" and any("disk full" in r for r in health["reasons"])

            other.unlink()  # space returns
            for i in range(80, 90):
                speak(svc, f"full disk phrase {i:02d}")
                svc.cache.flush()
            assert svc.cache.store.stats()["entries"] > held  # stored without evicting the others
            assert all(svc.cache.store.contains(key) for key in kept)
            after = svc.cache.store.stats()["entries"]
            print(f"\n8 MiB tmpfs: held {held} entries while full, {after} once 3 MiB returned")
        finally:
            svc.close()


def test_a_restart_on_a_full_disk_opens_the_store(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with tmpfs(tmp_path / "small", "4m") as mount:
        svc = TTSService(make_config(mount / "cache", **{"cache.memory_bytes": 0}), ToneEngine(seconds_per_char=0.2))
        try:
            kept = speak(svc, "kept across the restart")
            svc.cache.flush()
            time.sleep(0.1)
            svc.dashboard.disks.upkeep()  # writes the disk reserve
            assert svc.dashboard.disks.reserve.present
        finally:
            svc.close()
        fill(mount / "filler")  # another program fills the disk to the last byte
        assert free_bytes(mount) < 64 * 1024
        engine = ToneEngine(seconds_per_char=0.2)
        with caplog.at_level(logging.WARNING):
            svc = TTSService(make_config(mount / "cache", **{"cache.memory_bytes": 0}), engine)
        try:
            assert svc.cache.store.available  # opened, in the room the reserve left
            assert any("released the" in r.getMessage() and "reserve" in r.getMessage() for r in caplog.records)
            again = speak(svc, "kept across the restart")
            assert again.cache == "HIT" and again.info["tier"] == "disk" and again.wav == kept.wav
            assert engine.calls == 0
        finally:
            svc.close()


# -- a deleted or replaced cache directory -----------------------------------------------------


def test_deleted_cache_directory_is_recreated_and_nothing_written_after_is_lost(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lib.cache.handle, "REOPEN_AFTER", 0.0)
    root = tmp_path / "cache"
    svc = TTSService(make_config(root), ToneEngine())
    try:
        with LiveServer(create_app(svc)) as live, httpx.Client(base_url=live.url, timeout=30) as c:
            assert tts(c, "before the deletion").status_code == 200
            svc.cache.flush()
            with caplog.at_level(logging.ERROR):
                shutil.rmtree(root)  # rm -rf under the running service
                saved = c.post(
                    "/api/voices", data={"name": "after"}, files={"prompt_audio": ("v.wav", wav_file(), "audio/wav")}
                )
                assert saved.status_code == 201, saved.text
                new = tts(c, "after the deletion")
                assert new.status_code == 200 and new.headers["x-cache"] == "MISS"
                svc.cache.flush()
            assert any("was deleted or replaced" in r.getMessage() for r in caplog.records)
            for path in [root, *root.iterdir()]:  # recreated private (a file too, once one is back)
                assert path.stat().st_mode & 0o777 == (0o700 if path.is_dir() else 0o600), path
            assert c.get("/healthz").json()["status"] == "ok"

            # Replaced by something unusable: degraded, with a reason per store, until fixed.
            shutil.rmtree(root)
            root.write_text("not a directory")
            health = c.get("/healthz").json()
            assert health["status"] == "degraded"
            assert {"audio", "voices", "locks", "statistics", "profiles"} <= {
                reason.split(" ")[0] for reason in health["reasons"]
            }
            root.unlink()
            assert c.get("/healthz").json()["status"] == "ok"
            saved = c.post(
                "/api/voices", data={"name": "later"}, files={"prompt_audio": ("v.wav", wav_file(), "audio/wav")}
            )
            assert saved.status_code == 201
            key = tts(c, "after the repair").headers["x-cache-key"]
            svc.cache.flush()
    finally:
        svc.close()
    engine = ToneEngine()
    svc = TTSService(make_config(root), engine)  # a restart: what was written after the deletion is there
    try:
        assert {"later"} <= {v["name"] for v in svc.voices.list(caller=LOCAL)}
        assert speak(svc, "after the repair").key == key
        assert speak(svc, "after the repair").cache == "HIT" and engine.calls == 0
    finally:
        svc.close()


# -- the size limit, on disk ---------------------------------------------------------------------


def test_whole_cache_directory_stays_within_the_size_limit(tmp_path: Path) -> None:
    limit = 2 * 1024 * 1024
    engine = ToneEngine(seconds_per_char=0.3)
    root = tmp_path / "c"
    config = make_config(root, **{"cache.size_limit": limit, "cache.memory_bytes": 0})
    svc = TTSService(config, engine)
    try:
        svc.voices.save("desk", (22_050, tone_prompt()), "", caller=LOCAL)
        peak = biggest = written = 0
        n = 0
        while written < 3 * limit:
            if n % 5 == 0:  # a new uploaded prompt now and then: a voice profile too
                speak(svc, f"upload {n}", voice=None, prompt_audio=(22_050, tone_prompt(hz=150.0 + n)))
            result = speak(svc, f"entry {n:03d}" + "." * (n % 4), voice="desk" if n % 2 else "tone-low")
            svc.cache.flush()
            blob = svc.cache.store.get_blob(result.key)
            if blob is not None:
                written += len(blob)
                biggest = max(biggest, len(blob))
            if n % 10 == 0:
                svc.dashboard.disks.upkeep()
            size = directory_bytes(root)
            peak = max(peak, size)
            # The documented bound: the limit, plus one entry being written, plus the last
            # transaction in each SQLite log beyond its bound (64 KiB in all).
            assert size <= limit + biggest + 64 * 1024, f"{size} bytes on disk after {n} entries (limit {limit})"
            n += 1
        assert svc.cache.store.stats()["entries"] < n
        files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and "cache.db" in p.name)
        print(f"\nsize limit {limit}: {n} entries written ({written} bytes), directory peak {peak} bytes "
              f"({peak / limit:.2f}x the limit, biggest entry {biggest}); databases: {files}")  # fmt: skip
    finally:
        svc.close()


def test_voice_library_is_capped_at_a_quarter_of_the_limit(tmp_path: Path) -> None:
    svc = TTSService(make_config(tmp_path / "c", **{"cache.size_limit": 1024 * 1024}), ToneEngine())
    try:
        from lib.errors import StoreFullError

        with pytest.raises(StoreFullError, match="voice library is full"):
            for i in range(40):  # each 10 s prompt is about 80 KB of FLAC; the cap is 256 KiB
                svc.voices.save(f"v{i}", (22_050, tone_prompt(seconds=10.0, hz=100.0 + i)), "", caller=LOCAL)
        assert 1 <= len([v for v in svc.voices.list(caller=LOCAL) if v["kind"] == "saved"]) < 40
        assert directory_bytes(tmp_path / "c" / "voices") <= 1024 * 1024 // 4 + 256 * 1024
    finally:
        svc.close()


def test_damage_messages_name_the_store(tmp_path: Path) -> None:
    """The log line says which store and where the damaged copy went (for operators)."""
    svc = TTSService(make_config(tmp_path / "c"), ToneEngine())
    try:
        speak(svc, "something")
        svc.cache.flush()
        checkpoint(tmp_path / "c" / "audio")
        with open(tmp_path / "c" / "audio" / "cache.db", "r+b") as db:
            db.write(b"\0" * 4096)
        report = svc.admin.verify(caller=LOCAL)
        assert any(re.search(r"cache store database .*cache\.db is damaged .*cache\.db\.damaged-\d", line)
                   for line in report["repairs"]), report  # fmt: skip
    finally:
        svc.close()


# -- the voice library cannot write ------------------------------------------------------------------


def _save(client: httpx.Client, name: str) -> httpx.Response:
    return client.post("/api/voices", data={"name": name}, files={"prompt_audio": ("v.wav", wav_file(), "audio/wav")})


def test_voice_save_and_delete_are_503_on_a_read_only_disk(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "disk", "16m") as mount:
        svc = TTSService(make_config(mount / "cache"), ToneEngine())
        try:
            svc.voices.save("kept", (22_050, tone_prompt()), "", caller=LOCAL)
        finally:
            svc.close()
        assert os.system(f"mount -o remount,ro '{mount}'") == 0  # the filesystem turns read-only
        try:
            svc = TTSService(make_config(mount / "cache"), ToneEngine())
            try:
                with LiveServer(create_app(svc)) as live, httpx.Client(base_url=live.url) as c:
                    saved = _save(c, "new")
                    assert saved.status_code == 503, saved.text
                    assert "cannot write" in saved.json()["error"] and "nothing was changed" in saved.json()["error"]
                    gone = c.delete("/api/voices/kept", headers={"Authorization": "Bearer t"})
                    assert gone.status_code == 503, gone.text
                    health = c.get("/healthz").json()
                    assert health["status"] == "degraded" and any(r.startswith("voices") for r in health["reasons"])
            finally:
                svc.close()
        finally:
            assert os.system(f"mount -o remount,rw '{mount}'") == 0
        svc = TTSService(make_config(mount / "cache"), ToneEngine())
        try:  # nothing was changed
            assert [v["name"] for v in svc.voices.list(caller=LOCAL) if v["kind"] == "saved"] == ["kept"]
        finally:
            svc.close()


def test_voice_save_is_503_on_a_full_disk_and_201_once_space_returns(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "disk", "8m") as mount:
        svc = TTSService(make_config(mount / "cache"), ToneEngine())
        try:
            with LiveServer(create_app(svc)) as live, httpx.Client(base_url=live.url) as c:
                assert _save(c, "before").status_code == 201
                svc.dashboard.disks.reserve.release()  # nothing left to free: the disk is full for good
                fill(mount / "filler")
                full = _save(c, "during")
                assert full.status_code == 503, full.text
                assert "full, read-only or missing" in full.json()["error"]
                (mount / "filler").unlink()
                assert _save(c, "after").status_code == 201
            assert {"before", "after"} <= {v["name"] for v in svc.voices.list(caller=LOCAL)}
            assert "during" not in {v["name"] for v in svc.voices.list(caller=LOCAL)}
        finally:
            svc.close()


@contextlib.contextmanager
def immutable(folders: list[Path]) -> Iterator[None]:
    """``chattr +i`` on ``folders``: nothing can be created in them, by root either (as
    root, ``chmod 000`` stops nothing). Skipped where the filesystem has no such flag."""
    done: list[Path] = []
    try:
        for folder in folders:
            if os.system(f"chattr +i '{folder}' 2>/dev/null") != 0:
                pytest.skip("chattr +i is not supported here (the filesystem has no immutable flag)")
            done.append(folder)
        yield
    finally:
        for folder in done:
            os.system(f"chattr -i '{folder}'")


def test_unwritable_value_folders_are_degraded_until_a_value_is_written_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The audio store's value folders refuse new files while its SQLite file works:
    entries cannot be stored, /healthz says degraded naming the value folders, and the
    store is not "available again" (after its reopen) until a value file was written."""
    monkeypatch.setattr(lib.cache.handle, "REOPEN_AFTER", 0.0)
    svc = TTSService(make_config(tmp_path / "cache"), ToneEngine())
    audio = tmp_path / "cache" / "audio"
    try:
        with LiveServer(create_app(svc)) as live, httpx.Client(base_url=live.url, timeout=30) as c:
            first = tts(c, "stored before the fault")
            assert first.status_code == 200 and svc.cache.wait_written(first.headers["X-Cache-Key"])
            assert c.get("/healthz").json()["status"] == "ok"
            folders = [audio, *(p for p in audio.rglob("*") if p.is_dir())]
            with immutable(folders), caplog.at_level(logging.INFO):
                served = tts(c, "made while the value folders are unwritable")
                assert served.status_code == 200  # served all the same
                key = served.headers["X-Cache-Key"]
                svc.cache.wait_written(key, timeout=5)  # the write was tried (and failed)
                assert svc.cache.store.get(key) is None  # not on disk
                for _ in range(3):  # the failed store is reopened (REOPEN_AFTER 0): still not healthy
                    health = c.get("/healthz").json()
                    assert health["status"] == "degraded", health
                    audio_reasons = [r for r in health["reasons"] if r.startswith("audio store")]
                    assert audio_reasons and "value" in audio_reasons[0], health["reasons"]
                    time.sleep(0.05)
                again = [r.getMessage() for r in caplog.records if "again" in r.getMessage()]
                assert again == [], again
            health = c.get("/healthz").json()
            assert health["status"] == "ok", health
            assert any(f"{audio} is available again (a value file was written)" in r.getMessage()
                       for r in caplog.records)  # fmt: skip
            after = tts(c, "stored after the fault")
            assert svc.cache.wait_written(after.headers["X-Cache-Key"])
            assert svc.cache.store.get(after.headers["X-Cache-Key"]) is not None
    finally:
        svc.close()
