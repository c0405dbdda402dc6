"""The OpenAI-compatible API's figures: SSE first event for a hit and a miss, and what
each format costs to make from a stored entry.

    python bench/bench_openai.py [--engine builtin|tone] [--runs 7] [--format pcm]

1. Starts the API server (``python -m lib.api``) in its own process on a free loopback
   port with a fresh cache, then times ``POST /v1/audio/speech`` with
   ``stream_format: "sse"`` from this process: for a miss (a new two-sentence text each
   run: the first event is the first sentence's audio), its first hit (the whole event
   stream at once, after the format's transcode is made) and a later hit (the transcode
   in memory). Prints medians of ``--runs`` runs: time to the first event, time to
   ``speech.audio.done``.
2. Transcode cost: 5 s of speech at 22.05 kHz (a real recording, or a tone when the
   recordings are not found) as a stored entry, labelled, encoded into every format
   ``--runs`` times (the first, which loads PyAV's libraries, not counted): median ms per
   5 s of audio and the size. The tiers keep each transcode in memory, so a hit pays
   this once per entry and format.
3. Speed: the built-in engine's output at 0.25-4.0 against 1.0 (presets and a prompt
   voice, English and Chinese).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lib.audio.pcm import PromptDecoder  # noqa: E402
from lib.audio.resample import resample  # noqa: E402
from lib.cache.entry import CachedAudio  # noqa: E402

FORMATS = ("wav", "pcm", "pcm24k", "flac", "mp3", "ogg", "opus", "aac")
RECORDING = Path(os.environ.get("TTS_TESTDATA_DIR") or ROOT.parent / "shared" / "testdata" / "voices")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(engine: str, cache_dir: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, "TTS_ENGINE": engine, "TTS_CACHE_DIR": cache_dir, "TTS_VOICES_PREWARM": "false"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "lib.api", "--port", str(port), "--log-level", "warning"], cwd=ROOT, env=env
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("the server did not start")


def sse_times(http: httpx.Client, text: str, fmt: str) -> tuple[float, float, str]:
    """Seconds to the first event and to the done event, and the cache outcome."""
    body = {"model": "tts-1", "voice": "alloy", "input": text, "response_format": fmt, "stream_format": "sse"}
    started = time.perf_counter()
    first = 0.0
    with http.stream("POST", "/v1/audio/speech", json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if line.startswith("data:"):
                first = first or time.perf_counter() - started
                event = json.loads(line[5:])
                if event["type"] == "speech.audio.done":
                    return first, time.perf_counter() - started, str(event["cache"])
                if event["type"] == "speech.audio.error":
                    raise SystemExit(f"error event: {event['error']['message']}")
    raise SystemExit("the stream ended without speech.audio.done")


def bench_sse(engine: str, runs: int, fmt: str) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-openai-") as cache_dir:
        proc, url = start_server(engine, cache_dir)
        try:
            # TCP_NODELAY: httpx writes a request's headers and body apart, and with Nagle's
            # algorithm the body waits for the server's delayed ACK (40 ms), not for the server.
            nodelay = httpx.HTTPTransport(socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
            with httpx.Client(base_url=url, timeout=120, transport=nodelay) as http:
                sse_times(http, "A warm-up sentence. And its second part.", fmt)  # engine loaded, voices ready
                miss_first, miss_done, hit_first, hit_done, warm_first, warm_done = [], [], [], [], [], []
                for i in range(runs):
                    text = f"Ticket number {i + 101} to window three. Please have your documents ready."
                    first, done, cache = sse_times(http, text, fmt)
                    if cache != "MISS":
                        raise SystemExit(f"expected a miss, got {cache}")
                    miss_first.append(first)
                    miss_done.append(done)
                    first, done, cache = sse_times(http, text, fmt)
                    if cache != "HIT":
                        raise SystemExit(f"expected a hit, got {cache}")
                    hit_first.append(first)
                    hit_done.append(done)
                    first, done, cache = sse_times(http, text, fmt)
                    warm_first.append(first)
                    warm_done.append(done)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    ms = lambda xs: f"{statistics.median(xs) * 1e3:8.1f}"  # noqa: E731
    print(f"SSE ({fmt}, engine {engine}, medians of {runs} runs)   first event ms   done ms")
    print(f"  miss (two sentences, new text)          {ms(miss_first)}   {ms(miss_done)}")
    print(f"  first hit (its {fmt} transcode made)      {ms(hit_first)}   {ms(hit_done)}")
    print(f"  later hit (the transcode in memory)     {ms(warm_first)}   {ms(warm_done)}")


def five_seconds() -> np.ndarray:
    path = RECORDING / "zh_female_prompt.wav"
    if path.is_file():
        pcm = PromptDecoder().decode(path).pcm  # 16 kHz canonical
        speech = resample(pcm, 16_000, 22_050)
        reps = int(np.ceil(5 * 22_050 / speech.size))
        return np.tile(speech, reps)[: 5 * 22_050]
    t = np.arange(5 * 22_050) / 22_050
    return (8000 * np.sin(2 * np.pi * 180 * t) * (1 + 0.5 * np.sin(2 * np.pi * 4 * t))).astype(np.int16)


def bench_transcodes(runs: int) -> None:
    meta = {"created": time.time(), "engine": "builtin", "model_version": "bench", "tag": "builtin:bench"}
    entry = CachedAudio.from_pcm("0" * 32, five_seconds(), 22_050, {**meta, "provider": "bench"})
    print(f"Transcode of 5 s at 22.05 kHz from a stored entry, labelled (median of {runs}, first call not counted)")
    print("  format    ms/5 s    KB")
    for fmt in FORMATS:
        entry.encoded(fmt)
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            data = entry.encoded(fmt)
            times.append(time.perf_counter() - t0)
        print(f"  {fmt:7s} {statistics.median(times) * 1e3:8.2f}  {len(data) / 1000:6.1f}")


def bench_speeds() -> None:
    """Durations of the built-in engine's raw output across OpenAI's speed range."""
    from lib.engines.builtin import BuiltinEngine

    engine = BuiltinEngine()
    texts = {
        "English": "Please have your ticket ready, the train to the airport leaves in five minutes.",
        "Chinese": "请大家排好队，按顺序进入会场，谢谢合作。",
    }
    voices = {"en-female": engine.preset_voice("en-female"), "zh-male": engine.preset_voice("zh-male")}
    recording = RECORDING / "male_prompt.wav"
    if recording.is_file():
        voices["prompt (male_prompt.wav)"] = engine.extract_voice(PromptDecoder().decode(recording).pcm, "")
    speeds = (0.25, 0.5, 1.0, 2.0, 4.0)
    print("Built-in engine: duration at each speed against speed 1.0 (raw engine output, no tail)")
    print("  voice, text                         " + "".join(f"{s:>9}" for s in speeds))
    try:
        for name, voice in voices.items():
            mode = "preset" if voice.kind == "preset" else "cross_lingual"
            for lang, text in texts.items():
                seconds = {
                    speed: engine.synthesise(text, voice, style="", seed=0, speed=speed, mode=mode).audio.size
                    / engine.sample_rate
                    for speed in speeds
                }
                ratios = "".join(f"{seconds[s] / seconds[1.0]:8.2f}x" for s in speeds)
                print(f"  {name + ', ' + lang:36s}{ratios}   ({seconds[1.0]:.2f} s at 1.0)")
    finally:
        engine.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", default="builtin", choices=("builtin", "tone"))
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--format", default="pcm", help="SSE response_format (pcm and wav stream in chunks)")
    args = parser.parse_args()
    bench_transcodes(args.runs)
    print()
    bench_sse(args.engine, args.runs, args.format)
    print()
    bench_speeds()


if __name__ == "__main__":
    main()
