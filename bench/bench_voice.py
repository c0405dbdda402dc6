"""Benchmark of the builtin engine: speaker similarity, real-time factor, extraction time.

Needs, beyond requirements.txt (bench only): ``pip install torch==2.13.0`` (CPU build from
this machine's disk; never plain ``pip install torch``), then ``pip install resemblyzer``;
afterwards re-pin ``pip install "setuptools<81"`` if pyworld is installed (torch pulls
a newer setuptools, which breaks pyworld's import of pkg_resources).

Run: ``python bench/bench_voice.py`` from the repository root. Prints medians of several
runs. Similarity is resemblyzer's cosine between the prompt and the output embeddings,
for the raw espeak base voice of the profile, for raw default ``cmn`` and for the
matched output (median over the texts and, for matched output, over the seeds too:
the seed's prosody variation moves one output's similarity by about +-0.02). Times are
printed as wall clock and as CPU time of this process: on a shared machine the wall
clock includes waiting for other processes, CPU time does not (the espeak worker's CPU
is not in it, about 0.002 RTF).
"""

from __future__ import annotations

import logging
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import soundfile as sf
from scipy.signal import resample_poly

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lib.engines.builtin import BuiltinEngine
from lib.engines.builtin.espeak import EspeakParams

_LOGGER = logging.getLogger(__name__)

VOICES = Path(__file__).resolve().parents[1].parent / "shared" / "testdata" / "voices"
TEXTS = [
    "请到三号窗口办理业务，谢谢你的耐心配合。",
    "今天天气很好，我们一起去公园散步吧。",
    "希望你以后能够做得比我还好。",
]
RUNS = 5


def load_pcm(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(16 kHz int16 prompt PCM, 16 kHz float for the encoder)."""
    audio, rate = sf.read(str(path), dtype="float64", always_2d=True)
    mono = resample_poly(audio.mean(axis=1), 16_000, int(rate))
    return np.clip(np.round(mono * 32767), -32768, 32767).astype(np.int16), mono


def main() -> None:
    from resemblyzer import VoiceEncoder, preprocess_wav

    encoder = VoiceEncoder("cpu", verbose=False)
    engine = BuiltinEngine()

    def embed(audio: np.ndarray, rate: int) -> np.ndarray:
        return encoder.embed_utterance(preprocess_wav(resample_poly(audio.astype(np.float64), 16_000, rate)))

    for path in sorted(VOICES.glob("*.wav")):
        pcm, mono = load_pcm(path)
        ref = embed(mono, 16_000)
        voice = engine.extract_voice(pcm, "")
        raw_sims, default_sims, matched_sims, rtfs, cpu_rtfs = [], [], [], [], []
        for text in TEXTS:
            raw = engine._espeak.synth(text, EspeakParams("cmn+" + voice.params["base"] if voice.params["base"]
                                                          else "cmn"))  # fmt: skip
            raw_sims.append(float(np.dot(ref, embed(raw.astype(np.float64) / 32768, engine.sample_rate))))
            default = engine._espeak.synth(text, EspeakParams("cmn"))
            default_sims.append(float(np.dot(ref, embed(default.astype(np.float64) / 32768, engine.sample_rate))))
            times, cpu_times = [], []
            for seed in range(RUNS):
                start, cpu_start = time.perf_counter(), time.process_time()
                out = engine.synthesise(text, voice, style="", seed=seed, speed=1.0, mode="cross_lingual").audio
                seconds = len(out) / engine.sample_rate
                times.append((time.perf_counter() - start) / seconds)
                cpu_times.append((time.process_time() - cpu_start) / seconds)
                matched_sims.append(float(np.dot(ref, embed(out, engine.sample_rate))))
            rtfs.append(statistics.median(times))
            cpu_rtfs.append(statistics.median(cpu_times))
        ten = np.resize(pcm, 10 * 16_000)
        extract, extract_cpu = [], []
        for _ in range(RUNS):
            start, cpu_start = time.perf_counter(), time.process_time()
            engine.extract_voice(ten, "")
            extract.append((time.perf_counter() - start) * 1000)
            extract_cpu.append((time.process_time() - cpu_start) * 1000)
        print(f"{path.name}: params {dict(voice.params)}")
        print(f"  similarity raw {statistics.median(raw_sims):.3f}  matched {statistics.median(matched_sims):.3f}"
              f"  (raw default cmn {statistics.median(default_sims):.3f})")
        print(f"  RTF (synthesis + matching) median {statistics.median(rtfs):.4f} wall,"
              f" {statistics.median(cpu_rtfs):.4f} CPU")
        print(f"  profile extraction, 10 s prompt: median {statistics.median(extract):.1f} ms wall,"
              f" {statistics.median(extract_cpu):.1f} ms CPU")
    engine.close()


if __name__ == "__main__":
    main()
