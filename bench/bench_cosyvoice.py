"""Time per CosyVoice request with and without the prompt-feature cache.

Without the cache every request in a cloned voice runs the prompt frontend (speech
tokenizer, speech features, speaker embedding, prompt text tokens) before synthesis, as
upstream ``inference_zero_shot(prompt_wav=...)`` does; with it the frontend runs once per
voice and later requests go straight to the LLM, flow and vocoder. The bench also prints
the frontend's share of an uncached request.

    python bench/bench_cosyvoice.py                       # on the tiny test fixture (built)
    python bench/bench_cosyvoice.py --model-dir DIR -n 5  # on a real model

On the fixture the networks are tiny, so the frontend's share is an upper bound: with a
real model synthesis dominates. Needs the CosyVoice stack (tests/install_cosyvoice.sh).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _prompt(seconds: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(16_000 * seconds)) / 16_000
    phase = 2 * np.pi * np.cumsum(140 + 20 * np.sin(2 * np.pi * 0.7 * t)) / 16_000
    voiced = sum(np.sin(k * phase) / k for k in range(1, 8))
    audio = 0.25 * voiced * (0.5 + 0.5 * np.sin(2 * np.pi * 3.1 * t) ** 2) + 0.01 * rng.standard_normal(t.size)
    return (np.clip(audio, -1, 1) * 32767).astype(np.int16)


def _median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", help="model directory (default: build the tiny fixture)")
    parser.add_argument("-n", type=int, default=12, help="requests per condition")
    parser.add_argument("--prompt-seconds", type=float, default=6.0)
    parser.add_argument("--mode", default="zero_shot", choices=["zero_shot", "cross_lingual"])
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")

    from lib.config import CosyVoiceConfig
    from lib.engines.cosyvoice import CosyVoiceEngine

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = args.model_dir
        if model_dir is None:
            sys.path.insert(0, str(ROOT / "tests"))
            import cosyvoice_fixture

            model_dir = str(cosyvoice_fixture.build(tmp))
        started = time.perf_counter()
        engine = CosyVoiceEngine(CosyVoiceConfig(model_dir=model_dir, device="cpu",
                                                 fingerprint_file=str(Path(tmp) / "fp.json")))  # fmt: skip
        loaded = time.perf_counter() - started
        print(f"engine {engine.model_version} loaded in {loaded:.1f} s (code: {engine._rt.source}); "
              f"mode {args.mode}, prompt {args.prompt_seconds:g} s, n={args.n}")  # fmt: skip
        prompt_text = "" if args.mode == "cross_lingual" else "this is what the prompt says"
        # Short texts: the fixture's random LLM never emits end-of-speech and runs to its
        # length limit (20 speech tokens per text token), so long texts only add noise.
        texts = [f"Hi {i}." for i in range(args.n)]
        kw: dict[str, Any] = {"style": "", "seed": 1, "speed": 1.0, "mode": args.mode}
        # Warm-up: first calls allocate and compile kernels.
        warm = engine.extract_voice(_prompt(args.prompt_seconds, 99), prompt_text)
        engine.synthesise("warm up", warm, **kw)

        # The same prompt in both conditions, so that synthesis does the same work and only
        # the frontend differs (a random-weight LLM's output length depends on the voice).
        # The conditions alternate request by request, so that other load on the machine
        # falls on both alike.
        pcm = _prompt(args.prompt_seconds, 1)
        voice = engine.extract_voice(pcm, prompt_text)
        frontend: list[float] = []
        synth_cold: list[float] = []
        cached: list[float] = []
        for i, text in enumerate(texts):
            for uncached_turn in (i % 2 == 0, i % 2 == 1):
                if uncached_turn:  # without the cache: the frontend runs on every request
                    t0 = time.perf_counter()
                    profile = engine.extract_voice(pcm, prompt_text)
                    t1 = time.perf_counter()
                    engine.synthesise(text, profile, **kw)
                    frontend.append(t1 - t0)
                    synth_cold.append(time.perf_counter() - t1)
                else:  # with the cache: the features are reused from the speaker table
                    t0 = time.perf_counter()
                    engine.synthesise(text, voice, **kw)
                    cached.append(time.perf_counter() - t0)
        engine.close()

    uncached = [f + s for f, s in zip(frontend, synth_cold, strict=True)]
    print(f"{'request without prompt-feature cache':<40} median {_median_ms(uncached):8.1f} ms")
    print(f"{'  of which prompt frontend':<40} median {_median_ms(frontend):8.1f} ms")
    print(f"{'request with prompt-feature cache':<40} median {_median_ms(cached):8.1f} ms")
    share = statistics.median([f / u for f, u in zip(frontend, uncached, strict=True)])
    print(f"frontend share of an uncached request: {share:.0%}; "
          f"speed-up with the cache: {_median_ms(uncached) / _median_ms(cached):.2f}x")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
