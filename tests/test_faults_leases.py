"""A process killed (SIGKILL) while holding a key's single-flight lease blocks that key
for at most one lease (``cache.lock_lease``, 5 s by default), while a live holder keeps
its lease by renewing it. Asserted on the mechanism (the lease's expiry time, renewed
while the holder lives, running out after its death), never on how fast this machine is;
the measured wait is printed."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from lib.engines.tone import ToneEngine
from lib.pipeline.service import TTSService
from lib.request.types import TTSRequest
from tests.conftest import hold_write_lock
from tests.server_process import ServerProcess
from tests.test_cache import make_config, speak

REPO = Path(__file__).resolve().parents[1]
TEXT = "held by a process that dies"

_HOLDER = """
import sys
sys.path.insert(0, sys.argv[1])
from lib.config import load_config
from lib.engines.tone import ToneEngine
from lib.pipeline.service import TTSService, synthesise_with_cache
config = load_config(env={}, overrides={"engine": "tone", "cache.dir": sys.argv[2], "voices.prewarm": False})
service = TTSService(config, ToneEngine(delay=600))  # a synthesis that never ends before the kill
synthesise_with_cache(sys.argv[3], service=service, voice="tone-low")
"""


def _wait_for(condition: object, limit: float = 60.0) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return False


def test_a_killed_lock_holder_blocks_its_key_for_one_lease_at_most(tmp_path: Path) -> None:
    cache = tmp_path / "shared"
    engine = ToneEngine()
    svc = TTSService(make_config(cache), engine)  # the default lease
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(REPO), str(cache), TEXT], stderr=subprocess.PIPE)
    try:
        lease = svc.config.cache.lock_lease
        assert lease <= 5.0  # short by default: a dead holder blocks its key for seconds
        key = svc.resolve(TTSRequest(text=TEXT, voice="tone-low")).key
        locks = svc.singleflight.leases
        assert _wait_for(lambda: locks.expires_at(key) is not None), "the holder never took the lease"
        first = locks.expires_at(key)
        assert first is not None
        # A live holder renews its lease every third of it: the expiry moves on.
        assert _wait_for(lambda: (locks.expires_at(key) or 0) > first + lease / 4, limit=4 * lease)

        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
        killed_at = time.time()
        last = locks.expires_at(key)
        assert last is not None and last - killed_at <= lease  # it can outlive its holder by one lease at most

        result = speak(svc, TEXT)
        done = time.time()
        assert result.cache == "MISS" and engine.calls == 1  # taken over, synthesised once here
        assert done >= last  # the lease ran out first: a live one is never stolen
        print(f"\nholder SIGKILLed: the key was blocked {done - killed_at:.2f} s "
              f"(lease {lease:g} s; the lease had {last - killed_at:.2f} s left at the kill; "
              f"cache.lock_timeout {svc.config.cache.lock_timeout:g} s)")  # fmt: skip
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        if holder.stderr is not None:
            holder.stderr.close()
        svc.close()


# -- contention is not failure ------------------------------------------------------------


def _engine_calls(url: str) -> float:
    found = re.search(r"^tts_engine_calls_total (\S+)$", httpx.get(url + "/metrics", timeout=30).text, re.M)
    return float(found.group(1)) if found else 0.0


def test_64_streamed_misses_across_two_processes_under_lock_contention_run_the_engine_once_per_key(
    tmp_path: Path,
) -> None:
    cache = tmp_path / "cache"
    # Two segments each: 16 sentences of their own and one that all 16 share, 17 keys.
    texts = [f"Sentence number {i} of the contention test. And a second sentence for all of them." for i in range(16)]
    settings = {"TTS_WATCHDOG_PROBE_INTERVAL": "0", "TTS_TEMPLATES_FILE": "null"}
    with (
        ServerProcess(cache, tmp_path / "a.log", **settings) as a,
        ServerProcess(cache, tmp_path / "b.log", **settings) as b,
    ):
        holding = threading.Event()
        # 2.5 s: longer than a lease operation's 1 s busy time-out (each finds it busy).
        holder = threading.Thread(target=hold_write_lock, args=(cache / "locks" / "cache.db", 2.5, holding))
        holder.start()
        assert holding.wait(30)
        jobs = [(server.url, text) for text in texts for server in (a, b, a, b)]  # 64: each text 4 times, 2 per process
        answers: list[tuple[int, str, int]] = []

        def stream(url: str, text: str) -> None:
            with httpx.stream("POST", url + "/api/tts", data={"text": text, "voice": "tone-low", "stream": "true"},
                              timeout=120) as r:  # fmt: skip
                body = b"".join(r.iter_bytes())
                answers.append((r.status_code, r.headers.get("x-cache", ""), len(body)))

        threads = [threading.Thread(target=stream, args=job) for job in jobs]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        holder.join()
        assert len(answers) == 64 and all(status == 200 and size > 44 for status, _, size in answers), answers
        calls = _engine_calls(a.url) + _engine_calls(b.url)
        log = a.read_log() + b.read_log()
    assert calls == 17, f"{calls:g} engine calls for 17 keys"  # one per key, across both processes
    assert "serving without it" not in log and " ERROR " not in log
    print(f"\n64 streamed misses of 17 segment keys on 2 processes, lock store busy 2.5 s: {calls:g} engine calls")
