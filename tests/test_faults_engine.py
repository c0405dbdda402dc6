"""Engine faults: a worker that dies or goes silent, and an engine call that never returns.

- The builtin engine's espeak-ng worker: a child that crashes (espeak-ng 1.52 aborts on a
  long chain of spelled letters) is reported at once and the worker replaced; a worker
  that goes silent is killed with its whole process group at the call's deadline; a call
  blocked on it can be interrupted from another thread.
- The engine watchdog (lib.engines.watchdog) around every engine call, with a deliberately stuck
  engine that cannot be interrupted (as CosyVoice inside torch): the request fails with
  504 and nothing is cached, the key's lease is released, the timeout is counted and
  logged, ``/healthz`` says the engine is stuck and new calls are refused with 503 until
  the stuck call returns; then everything works again.
- A probe synthesis reports a failing engine to ``/healthz``.
- SIGTERM stops the real server within seconds although an engine call is stuck in it.

No test measures speed: each waits for an outcome with a bound far above what it needs
(a hang fails the test instead of hanging the suite).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import soundfile as sf

from lib.api import create_app
from lib.cache.leases import DiskLeases, Renewer
from lib.config import load_config
from lib.config.watchdog import WatchdogConfig
from lib.core.metrics import Metrics
from lib.engines.builtin import espeak
from lib.engines.builtin.espeak import EspeakParams, EspeakSynth
from lib.engines.tone import ToneEngine
from lib.engines.watchdog import Watchdog
from lib.engines.watched import WatchedEngine
from lib.errors import EngineError, EngineTimeoutError, EngineUnavailableError
from lib.pipeline.service import TTSService
from lib.request.types import ConvertRequest, TTSRequest
from tests.api_server import LiveServer
from tests.test_cache import tone_prompt

REPO = Path(__file__).resolve().parents[1]


def within(seconds: float, fn: Callable[[], Any]) -> Any:
    """``fn()``'s result or exception; the test fails (instead of hanging) if it has not
    returned after ``seconds``."""
    box: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            box.append((True, fn()))
        except BaseException as exc:
            box.append((False, exc))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert box, f"still blocked after {seconds} s: the call hangs"
    ok, value = box[0]
    if not ok:
        raise value
    return value


def _quietly(fn: Callable[[], Any]) -> None:
    """``fn()`` in a background thread whose failure (at shutdown) is expected."""
    with contextlib.suppress(Exception):
        fn()


def wait_for(condition: Callable[[], Any], limit: float = 30.0) -> Any:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"not within {limit} s")


# -- the espeak-ng worker -----------------------------------------------------------------


def test_a_crashing_espeak_child_is_reported_at_once_and_the_worker_replaced() -> None:
    synth = EspeakSynth()
    try:
        params = EspeakParams("en-us")
        crash = "a." * 200  # espeak-ng 1.52: "stack smashing detected" (SIGABRT)
        with pytest.raises(EngineError, match=r"espeak-ng crashed on this text \(killed by SIG"):
            within(60, lambda: synth.synth(crash, params))
        assert synth.restarts == 1  # the worker was replaced
        assert within(60, lambda: synth.synth("hello there", params)).size > 1000  # and the next call works
        with pytest.raises(EngineError, match="remembered"):  # the same text again: refused without a crash
            within(60, lambda: synth.synth(crash, params))
        assert synth.restarts == 1
    finally:
        synth.close()


_FAKE_WORKER = r"""
import json, os, struct, sys, time
def read(n):
    data = b""
    while len(data) < n:
        chunk = os.read(0, n - len(data))
        if not chunk:
            sys.exit(0)
        data += chunk
    return data
def reply(status, payload):
    os.write(1, struct.pack("<II", status, len(payload)) + payload)
while True:
    request = json.loads(read(struct.unpack("<I", read(4))[0]))
    if request["op"] == "info":
        reply(0, b"fake")
    elif request["text"] == "hang":
        child = os.fork()
        if child == 0:
            time.sleep(3600)  # a child that never answers, like a wedged espeak-ng
            os._exit(0)
        open(sys.argv[1], "w").write(f"{os.getpid()} {child}")
        os.waitpid(child, 0)
    else:
        reply(0, b"\x01\x00" * 100)
"""


@pytest.fixture
def fake_synth(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[EspeakSynth, Path]]:
    script = tmp_path / "worker.py"
    script.write_text(_FAKE_WORKER)
    pids = tmp_path / "pids"
    monkeypatch.setattr(espeak, "_DEADLINE_BASE", 1.0)
    monkeypatch.setattr(espeak, "_DEADLINE_PER_CHAR", 0.0)
    synth = EspeakSynth([sys.executable, str(script), str(pids)])
    yield synth, pids
    synth.close()


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie still answers kill(0): look at its state.
    stat = Path(f"/proc/{pid}/stat")
    return not stat.exists() or stat.read_text().split(")")[-1].split()[0] == "Z"


def test_a_silent_worker_is_killed_with_its_child_at_the_deadline(fake_synth: tuple[EspeakSynth, Path]) -> None:
    synth, pids = fake_synth
    params = EspeakParams("en-us")
    with pytest.raises(EngineTimeoutError, match="no answer within 1 s"):
        within(30, lambda: synth.synth("hang", params))
    worker, child = (int(p) for p in pids.read_text().split())
    assert wait_for(lambda: _gone(worker) and _gone(child), 10)  # the whole process group
    assert synth.restarts == 1
    assert within(30, lambda: synth.synth("hello", params)).size == 100  # a fresh worker answers


def test_interrupt_ends_a_call_blocked_on_the_worker(
    fake_synth: tuple[EspeakSynth, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    synth, pids = fake_synth
    monkeypatch.setattr(espeak, "_DEADLINE_BASE", 3600.0)  # only the interrupt can end it
    result: list[BaseException] = []

    def call() -> None:
        try:
            synth.synth("hang", EspeakParams("en-us"))
        except BaseException as exc:
            result.append(exc)

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    wait_for(pids.exists)
    assert synth.interrupt()
    thread.join(30)
    assert not thread.is_alive() and isinstance(result[0], EngineError)
    assert within(30, lambda: synth.synth("hello", EspeakParams("en-us"))).size == 100


# -- the watchdog, with an engine that cannot be interrupted ------------------------------


class StuckTone(ToneEngine):
    """The tone engine, where any call on a text (or prompt transcript) starting with
    "stuck" blocks until the test opens ``gate``: an engine call nothing can interrupt."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.started = 0

    def _block(self, text: str) -> None:
        self.started += 1
        if text.startswith("stuck"):
            self.entered.set()
            self.gate.wait(120)

    def synthesise(self, text: str, *args: Any, **kwargs: Any) -> Any:
        self._block(text)
        return super().synthesise(text, *args, **kwargs)

    def stream(self, text: str, *args: Any, **kwargs: Any) -> Iterator[Any]:
        yield np.zeros(100, dtype=np.float32)
        self._block(text)
        yield from super().stream(text, *args, **kwargs)

    def extract_voice(self, prompt_pcm: Any, prompt_text: str) -> Any:
        self._block(prompt_text)
        return super().extract_voice(prompt_pcm, prompt_text)

    def convert(self, source_pcm: Any, voice: Any, *, seed: int, speed: float) -> Any:
        self._block("stuck" if seed == 666 else "")
        return super().convert(source_pcm, voice, seed=seed, speed=speed)


def _config(tmp_path: Path, env: dict[str, str] | None = None, **overrides: Any) -> Any:
    values = {
        "engine": "tone", "cache.dir": str(tmp_path / "cache"), "voices.prewarm": False, "templates.file": None,
        "watchdog.timeout": 1.0, "watchdog.per_char": 0.0, "watchdog.per_audio_second": 0.0,
        "watchdog.probe_interval": 0, "cache.lock_lease": 1.0, **overrides,
    }  # fmt: skip
    return load_config(env=env or {}, overrides=values)


def _metric(exposition: str, name: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    found = re.search(rf"^{name}\{{{re.escape(want)}\}} (\S+)$", exposition, re.M)
    return float(found.group(1)) if found else 0.0


@pytest.fixture
def stuck() -> Iterator[StuckTone]:
    engine = StuckTone()
    yield engine
    engine.gate.set()


def test_a_stuck_call_fails_504_is_reported_and_refused_until_it_returns(
    tmp_path: Path, stuck: StuckTone, caplog: pytest.LogCaptureFixture
) -> None:
    svc = TTSService(_config(tmp_path), stuck)
    try:
        with LiveServer(create_app(svc)) as live, httpx.Client(base_url=live.url, timeout=60) as http:
            key = svc.resolve(TTSRequest(text="stuck for good", voice="tone-low")).key
            with caplog.at_level(logging.ERROR, logger="lib.engines.watchdog"):
                r = http.post("/api/tts", data={"text": "stuck for good", "voice": "tone-low"})
            assert r.status_code == 504 and "deadline" in r.json()["error"]
            assert "passed its 1.0 s deadline" in caplog.text
            assert not svc.cache.store.contains(key) and svc.cache.lookup(key) is None  # nothing cached
            assert not svc.singleflight.leases.held(key)  # the key's lease was released
            metrics = http.get("/metrics").text
            assert _metric(metrics, "tts_engine_timeouts_total", engine="tone", call="synthesise") == 1
            assert _metric(metrics, "tts_engine_healthy") == 0

            health = http.get("/healthz").json()
            assert health["status"] == "degraded" and health["engine_state"]["state"] == "stuck"
            assert any("engine stuck" in reason for reason in health["reasons"])
            refused = http.post("/api/tts", data={"text": "another text", "voice": "tone-low"})
            assert refused.status_code == 503 and "stuck" in refused.json()["error"]
            assert stuck.started == 1  # refused without reaching the engine
            assert _metric(http.get("/metrics").text, "tts_engine_refused_total", engine="tone") == 1

            stuck.gate.set()  # the stuck call returns at last
            wait_for(lambda: http.get("/healthz").json()["status"] == "ok")
            fine = http.post("/api/tts", data={"text": "another text", "voice": "tone-low"})
            assert fine.status_code == 200 and fine.headers["x-cache"] == "MISS"
            assert not svc.cache.store.contains(key)  # the late result of the stuck call was not cached either
    finally:
        svc.close()


def _call(engine: WatchedEngine, call: str) -> Any:
    voice = engine.preset_voice("tone-low")
    pcm = (tone_prompt(2.0, 16_000) * 32767).astype(np.int16)
    if call == "synthesise":
        return engine.synthesise("stuck", voice, style="", seed=0, speed=1.0, mode="preset")
    if call == "stream":
        return list(engine.stream("stuck", voice, style="", seed=0, speed=1.0, mode="preset"))
    if call == "convert":
        return engine.convert(pcm, voice, seed=666, speed=1.0)
    return engine.extract_voice(pcm, "stuck")


@pytest.mark.parametrize("call", ["synthesise", "stream", "convert", "extract_voice"])
def test_every_kind_of_engine_call_has_a_deadline(stuck: StuckTone, call: str) -> None:
    metrics = Metrics(dict)
    watchdog = Watchdog(stuck, WatchdogConfig(timeout=0.5, per_char=0, per_audio_second=0, probe_interval=0), metrics)
    engine = WatchedEngine(stuck, watchdog)
    with pytest.raises(EngineTimeoutError, match=r"deadline of [01] s"):
        within(30, lambda: _call(engine, call))
    assert _metric(metrics.exposition().decode(), "tts_engine_timeouts_total", engine="tone", call=call) == 1
    assert watchdog.health()["state"] == "stuck"
    stuck.gate.set()
    wait_for(lambda: watchdog.health()["state"] == "ok")
    within(30, lambda: _call(engine, call))  # works again once the stuck call returned
    watchdog.close()


def test_stuck_prompt_analysis_and_conversion_fail_504_through_the_service(tmp_path: Path, stuck: StuckTone) -> None:
    svc = TTSService(_config(tmp_path), stuck)
    wav = io.BytesIO()
    sf.write(wav, tone_prompt(2.0), 22_050, format="WAV", subtype="PCM_16")
    try:
        with pytest.raises(EngineTimeoutError):
            within(30, lambda: svc.synthesise(TTSRequest(text="hello", prompt_audio=wav.getvalue(),
                                                         prompt_text="stuck prompt", mode="zero_shot")))  # fmt: skip
        stuck.gate.set()
        wait_for(lambda: svc.watchdog.health()["state"] == "ok")
        stuck.gate.clear()
        with pytest.raises(EngineTimeoutError):
            within(30, lambda: svc.convert(ConvertRequest(source_audio=wav.getvalue(), voice="tone-low", seed=666)))
        assert svc.cache.store.stats()["entries"] == 0
    finally:
        stuck.gate.set()
        svc.close()


def test_a_stuck_streamed_answer_ends_with_the_timeout_and_caches_nothing(tmp_path: Path, stuck: StuckTone) -> None:
    # No finishing: the engine's own stream is the answer (lib.compose.produce streams it).
    svc = TTSService(_config(tmp_path, {"TTS_SEGMENTS_LOUDNESS": "null"}, **{"segments.tail": 0}), stuck)
    try:
        answer = svc.stream(TTSRequest(text="stuck stream", voice="tone-low"))
        chunks: list[Any] = []
        with pytest.raises(EngineTimeoutError):
            within(30, lambda: chunks.extend(answer.chunks))
        assert len(chunks) == 1  # what came before the engine stuck was passed on
        assert svc.cache.lookup(answer.key) is None
        assert _metric(
            svc.dashboard.metrics.exposition().decode(), "tts_engine_timeouts_total", engine="tone", call="stream"
        )
    finally:
        stuck.gate.set()
        svc.close()


def test_the_lease_of_a_running_call_is_bounded_by_its_deadline(tmp_path: Path, stuck: StuckTone) -> None:
    svc = TTSService(_config(tmp_path, **{"watchdog.timeout": 20.0}), stuck)
    request = TTSRequest(text="stuck here", voice="tone-low")
    try:
        key = svc.resolve(request).key
        threading.Thread(target=lambda: _quietly(lambda: svc.synthesise(request)), daemon=True).start()
        stuck.entered.wait(30)
        renewer = svc.singleflight.renewer
        assert renewer is not None
        bound = wait_for(lambda: renewer._bounds.get(key))
        assert 10 < bound - time.monotonic() <= 20  # renewed no longer than the call's 20 s deadline
        assert svc.singleflight.leases.held(key)
    finally:
        stuck.gate.set()
        svc.close()


def test_the_renewer_stops_renewing_a_lease_at_its_bound(tmp_path: Path) -> None:
    leases = DiskLeases(str(tmp_path / "locks"))
    renewer = Renewer(leases, 1.0)
    try:
        bounded, free = leases.acquire("bounded", 1.0), leases.acquire("free", 1.0)
        assert bounded is not None and free is not None
        renewer.add("bounded", bounded)
        renewer.add("free", free)
        renewer.bound("bounded", bounded, time.monotonic() + 0.2)
        wait_for(lambda: not leases.held("bounded"), 10)  # ran out: no longer renewed
        assert leases.held("free")  # renewed all along
    finally:
        renewer.stop()
        leases.close()


# -- probes ------------------------------------------------------------------------------


def test_a_probe_reports_a_failing_engine_to_healthz(tmp_path: Path) -> None:
    engine = ToneEngine()
    engine.fail = EngineError("the model fell over")
    svc = TTSService(_config(tmp_path, **{"watchdog.probe_interval": 1.0}), engine)
    try:
        with LiveServer(create_app(svc)) as live, httpx.Client(base_url=live.url, timeout=60) as http:
            health = wait_for(lambda: (h := http.get("/healthz").json())["engine_state"]["probe"] and h, 30)
            assert health["status"] == "degraded" and health["engine_state"]["state"] == "failing"
            assert any("probe synthesis failed" in reason and "fell over" in reason for reason in health["reasons"])
            assert _metric(http.get("/metrics").text, "tts_engine_probes_total", engine="tone", result="failed") >= 1
            engine.fail = None
            wait_for(lambda: http.get("/healthz").json()["status"] == "ok", 30)  # the next probe finds it working
            assert _metric(http.get("/metrics").text, "tts_engine_probes_total", engine="tone", result="ok") >= 1
    finally:
        svc.close()


def test_three_failed_calls_in_a_row_make_the_engine_failing(tmp_path: Path) -> None:
    engine = ToneEngine()
    svc = TTSService(_config(tmp_path), engine)
    try:
        engine.fail = RuntimeError("CUDA out of memory")
        for i in range(3):
            with pytest.raises(EngineError):
                svc.synthesise(TTSRequest(text=f"text {i}", voice="tone-low"))
        health = svc.dashboard.health()
        assert health["status"] == "degraded" and health["engine_state"]["state"] == "failing"
        assert "CUDA out of memory" in health["engine_state"]["reason"]
        engine.fail = None
        svc.synthesise(TTSRequest(text="text 4", voice="tone-low"))
        assert svc.dashboard.health()["engine_state"]["state"] == "ok"
    finally:
        svc.close()


# -- shutdown with a stuck call ---------------------------------------------------------

_LAUNCHER = """
import sys, threading
sys.path.insert(0, {repo!r})
sys.path.insert(0, {tests!r})
import lib.pipeline.wiring
from test_faults_engine import StuckTone

class Held(StuckTone):
    def _block(self, text):
        super()._block(text)
        if text.startswith("stuck"):  # the held call returned: the exit waited for it
            open({returned!r}, "w").close()

lib.pipeline.wiring.create_engine = lambda config: Held()  # every call on "stuck..." blocks for good
from lib.api.serving import exit_now
from {module} import main
exit_now(main({argv!r}))  # as the entry points end
"""


@pytest.mark.parametrize("module", ["lib.api.__main__", "webui"])
def test_sigterm_stops_the_server_within_seconds_with_a_stuck_call(tmp_path: Path, free_port: int, module: str) -> None:
    """A SIGTERM with an engine call held in flight (an engine nothing can interrupt):
    the call is abandoned at once (its client gets 503, nothing is stored), the service
    is closed and the process exits 0 without waiting for the call, which never returns."""
    argv = ["--port", str(free_port)]
    returned = tmp_path / "held-call-returned"
    launcher = textwrap.dedent(_LAUNCHER).format(
        repo=str(REPO), tests=str(REPO / "tests"), module=module, argv=argv, returned=str(returned)
    )
    env = {
        **os.environ, "TTS_ENGINE": "tone", "TTS_CACHE_DIR": str(tmp_path / "cache"), "TTS_VOICES_PREWARM": "false",
        "TTS_WATCHDOG_TIMEOUT": "3600", "TTS_WATCHDOG_PROBE_INTERVAL": "0", "TTS_TEMPLATES_FILE": "null",
        "GRADIO_ANALYTICS_ENABLED": "False",
    }  # fmt: skip
    log = (tmp_path / "server.log").open("wb")
    server = subprocess.Popen([sys.executable, "-c", launcher], cwd=tmp_path, env=env, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{free_port}"
    try:
        wait_for(lambda: _answers(url + "/healthz"), 120)
        answers: list[httpx.Response] = []
        client = threading.Thread(
            target=lambda: _post(url + "/api/tts", {"text": "stuck until the end", "voice": "tone-low"}, answers),
            daemon=True,
        )
        client.start()
        wait_for(lambda: httpx.get(url + "/healthz", timeout=5).json()["engine_state"]["calls_in_flight"] == 1)
        stopped = time.monotonic()
        server.send_signal(signal.SIGTERM)
        try:
            code = server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail("the server did not stop within 30 s of SIGTERM: a stuck engine call holds it")
        took = time.monotonic() - stopped
        print(f"\n{module}: stopped {took:.1f} s after SIGTERM with an engine call stuck (exit {code})")
        assert code == 0  # main() returned: the service was closed (cache writes flushed), not killed
        assert not returned.exists()  # the exit did not wait for the held call
        client.join(30)
        assert answers[0].status_code == 503 and "shutting down" in answers[0].json()["error"]
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        log.close()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=5).status_code in (200, 503)
    except httpx.HTTPError:
        return False


def _post(url: str, data: dict[str, str], answers: list[httpx.Response] | None = None) -> None:
    with contextlib.suppress(httpx.HTTPError):
        answer = httpx.post(url, data=data, timeout=120)
        if answers is not None:
            answers.append(answer)


def test_engine_unavailable_at_shutdown_is_a_clear_503(tmp_path: Path, stuck: StuckTone) -> None:
    svc = TTSService(_config(tmp_path, **{"watchdog.timeout": 3600.0}), stuck)
    failed: list[BaseException] = []

    def call() -> None:
        try:
            svc.synthesise(TTSRequest(text="stuck at shutdown", voice="tone-low"))
        except BaseException as exc:
            failed.append(exc)

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    stuck.entered.wait(30)
    within(60, svc.close)  # returns although the engine call is stuck
    thread.join(30)
    assert isinstance(failed[0], EngineUnavailableError) and "shutting down" in str(failed[0])
    assert json.dumps(svc.watchdog.health())  # still readable after close


class SlowLoadTone(ToneEngine):
    """A tone engine whose one-time ``warm()`` (like the builtin engine's model load and
    check) takes ``load`` seconds, or never ends while ``gate`` is clear."""

    def __init__(self, load: float) -> None:
        super().__init__()
        self.load = load
        self.loads = 0
        self.gate = threading.Event()

    def warm(self) -> None:
        self.loads += 1
        if self.load == float("inf"):
            self.gate.wait(30)
        else:
            time.sleep(self.load)


@pytest.mark.parametrize("call", ["synthesise", "stream", "convert"])
def test_the_first_call_is_not_failed_by_the_engines_load(call: str) -> None:
    """The load runs under a deadline of its own (LOAD_FACTOR x timeout) before the call's
    starts: a load longer than the call's deadline does not fail the first request, and
    runs once; a load that never ends fails with the watchdog's error."""
    config = WatchdogConfig(timeout=0.4, per_char=0, per_audio_second=0, probe_interval=0)
    slow = SlowLoadTone(load=0.8)  # twice the call's deadline, within the load's (1.6 s)
    watchdog = Watchdog(slow, config, Metrics(dict))
    engine = WatchedEngine(slow, watchdog)
    within(30, lambda: _call(engine, call))
    within(30, lambda: _call(engine, call))
    assert slow.loads == 1
    watchdog.close()
    hung = SlowLoadTone(load=float("inf"))
    watchdog = Watchdog(hung, config, Metrics(dict))
    try:
        with pytest.raises(EngineTimeoutError, match="model load"):
            within(30, lambda: _call(WatchedEngine(hung, watchdog), call))
    finally:
        hung.gate.set()
        watchdog.close()
