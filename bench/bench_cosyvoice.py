"""CosyVoice request times: with and without the prompt-feature cache, and the first chunk of
a stream against the whole answer.

Without the prompt-feature cache every request in a cloned voice runs the prompt frontend
(speech tokenizer, speech features, speaker embedding, prompt text tokens) before synthesis,
as upstream ``inference_zero_shot(prompt_wav=...)`` does; with it the frontend runs once per
voice. For CosyVoice2/3 the bench also times how long a caller of ``engine.stream`` waits for
the first chunk (upstream's own ``stream=True``) against how long ``synthesise`` takes for the
whole text.

    python bench/bench_cosyvoice.py                          # v2 and v3 fixtures, upstream code
    python bench/bench_cosyvoice.py --family 300m v2 v3 -n 9
    python bench/bench_cosyvoice.py --model-dir DIR -n 5     # a real model

The fixtures have random weights and tiny networks: their times say nothing about a real
model's speed (there synthesis dominates far more), only about the mechanisms. The
upstream source is ``../shared/upstream/CosyVoice`` or ``--repo-dir`` /
``$TTS_COSYVOICE_UPSTREAM``. Needs the CosyVoice stack (tests/install_cosyvoice.sh).
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

TEXT = "This sentence is long enough for several streamed chunks of speech."


def _ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1e3:8.1f} ms"


def _build(family: str, out: str) -> str:
    if family == "300m":
        import cosyvoice_fixture

        return str(cosyvoice_fixture.build(out))
    import cosyvoice2_fixture

    return str(cosyvoice2_fixture.build(out, family=family))


def bench(model_dir: str, repo_dir: str, n: int, tmp: str) -> None:
    from cosyvoice2_fixture import prompt_pcm

    from lib.config import CosyVoiceConfig
    from lib.engines.cosyvoice import CosyVoiceEngine

    started = time.perf_counter()
    engine = CosyVoiceEngine(CosyVoiceConfig(model_dir=model_dir, repo_dir=repo_dir, device="cpu",
                                             fingerprint_file=str(Path(tmp) / "fp.json")))  # fmt: skip
    print(f"\n{engine.model_version} ({Path(model_dir).name}) loaded in {time.perf_counter() - started:.1f} s; "
          f"{engine.version_parts.describe()}; n={n}")  # fmt: skip
    kw: dict[str, Any] = {"style": "", "seed": 1, "speed": 1.0, "mode": "zero_shot"}
    pcm = prompt_pcm(6.0, 1)
    warm = engine.extract_voice(pcm, "this is what the prompt says")
    engine.synthesise("warm up", warm, **kw)

    # The same prompt in both conditions, so that synthesis does the same work and only the
    # frontend differs; the conditions alternate, so that other load falls on both alike.
    voice = engine.extract_voice(pcm, "this is what the prompt says")
    frontend: list[float] = []
    uncached: list[float] = []
    cached: list[float] = []
    for i in range(n):
        text = f"Hi {i}."
        for turn in ("uncached", "cached") if i % 2 == 0 else ("cached", "uncached"):
            t0 = time.perf_counter()
            profile = engine.extract_voice(pcm, "this is what the prompt says") if turn == "uncached" else voice
            t1 = time.perf_counter()
            engine.synthesise(text, profile, **kw)
            if turn == "uncached":
                frontend.append(t1 - t0)
                uncached.append(time.perf_counter() - t0)
            else:
                cached.append(time.perf_counter() - t0)
    print(f"  {'request without prompt-feature cache':<44} median {_ms(uncached)}")
    print(f"  {'  of which the prompt frontend':<44} median {_ms(frontend)}")
    print(f"  {'request with prompt-feature cache':<44} median {_ms(cached)}")
    print(f"  speed-up with the cache: {statistics.median(uncached) / statistics.median(cached):.2f}x")

    first: list[float] = []
    streamed: list[float] = []
    whole: list[float] = []
    chunks = 0
    for i in range(n):
        for turn in ("stream", "whole") if i % 2 == 0 else ("whole", "stream"):
            t0 = time.perf_counter()
            if turn == "whole":
                engine.synthesise(TEXT, voice, **{**kw, "seed": i})
                whole.append(time.perf_counter() - t0)
                continue
            parts = engine.stream(TEXT, voice, **{**kw, "seed": i})
            next(parts)
            first.append(time.perf_counter() - t0)
            chunks = 1 + sum(1 for _ in parts)
            streamed.append(time.perf_counter() - t0)
    mode = "upstream stream=True" if engine.native_stream else "one chunk per text segment"
    print(f"  long text, {chunks} chunks ({mode}):")
    print(f"  {'  first chunk of engine.stream':<44} median {_ms(first)}")
    print(f"  {'  last chunk of engine.stream':<44} median {_ms(streamed)}")
    print(f"  {'  engine.synthesise (whole)':<44} median {_ms(whole)}")
    print(f"  first chunk / whole: {statistics.median(first) / statistics.median(whole):.2f}")
    engine.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", nargs="+", default=["v2", "v3"], choices=["300m", "v2", "v3"])
    parser.add_argument("--model-dir", help="a real model directory instead of the fixtures")
    parser.add_argument("--repo-dir", help="upstream CosyVoice source (default: ../shared/upstream/CosyVoice)")
    parser.add_argument("-n", type=int, default=7, help="runs per condition (medians are printed)")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    from cosyvoice_code import upstream_dir, use_upstream

    repo = Path(args.repo_dir) if args.repo_dir else upstream_dir()
    use_upstream(repo)  # the fixture builders import the upstream code
    with tempfile.TemporaryDirectory() as tmp:
        dirs = [args.model_dir] if args.model_dir else [_build(family, tmp) for family in args.family]
        for model_dir in dirs:
            bench(model_dir, str(repo), args.n, tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
