"""Statistics read while they are being written: a snapshot taken during a flush sees
every request (found by the web UI's export, which read an empty top list now and then)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from lib.cache.handle import DiskHandle
from lib.cache.stats import Phrase, Stats


def test_a_snapshot_during_a_flush_misses_no_phrase(tmp_path: Path) -> None:
    handle = DiskHandle(tmp_path / "meta", name="statistics", eviction_policy="none")
    stats = Stats(handle, flush_every=0)
    stats.record("miss", 0.5, key="a" * 32, phrase=Phrase("欢迎光临", "zh-female", "preset:zh-female"))
    cache = handle.open()
    assert cache is not None
    writing, release = threading.Event(), threading.Event()
    real_set = cache.set

    def slow_set(key: str, value: Any, *args: Any, **kwargs: Any) -> bool:
        if key == "phrases":  # the flush has taken the counts from memory: hold it here
            writing.set()
            release.wait(timeout=5)
        return bool(real_set(key, value, *args, **kwargs))

    cache.set = slow_set
    flusher = threading.Thread(target=stats.flush)
    flusher.start()
    assert writing.wait(timeout=5)
    seen: list[dict[str, Any]] = []
    reader = threading.Thread(target=lambda: seen.append(stats.snapshot(top=5)))
    reader.start()
    reader.join(timeout=0.5)  # without the flush lock it returns now, without the phrase
    release.set()
    flusher.join(timeout=5)
    reader.join(timeout=5)
    assert [row["text"] for row in seen[0]["top_requested"]] == ["欢迎光临"]
    assert seen[0]["total"]["misses"] == 1
    stats.close()
    handle.close()
