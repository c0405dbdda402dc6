"""Benchmark of the builtin engine's cloning on the 10 development voices.

Setup (bench only; not runtime requirements)::

    .venv/bin/pip install -r requirements-bench.txt
    .venv/bin/python bench/bench_voice.py            # all 10 voices, 3 seeds (about 5 min)
    .venv/bin/python bench/bench_voice.py --seeds 1  # quicker

Voices: ``../shared/testdata/voices/*.wav`` (2) and ``../shared/testdata/voices/dev/*.flac``
(8). The split into a tuning half and a held-out half was fixed before any tuning (by
language and pitch, so that both halves have Mandarin and English, high and low voices)
and every design choice in ``lib/engines/builtin`` was made on the TUNE half only:

- TUNE: zh_female_prompt, male_prompt, megatts3_zh, openvoice_example, openvoice_speaker2
- HELD: sparktts_zh, megatts3_en, openvoice_speaker0, openvoice_speaker1, zonos_example

Measures, per voice and per half, medians over seeds (the seed varies rate and pitch):

- similarity: cosine of resemblyzer (GE2E) speaker embeddings, clone vs prompt (median
  over the 9 sentences); "best preset" is the engine preset voice (zh-female, zh-male,
  en-female, en-male, yue-female) with the highest median similarity to that prompt;
  gain = clone - best preset;
- identification: the mean embedding of a voice's clones is nearest its own prompt
  among all 10 prompts;
- held-out reference: the profile is built from the first 60 % of the prompt and
  everything is scored against the last 40 % (facts.md: part of a pool method's gain
  is the recording, not the speaker, and this takes it out);
- English word error rate (pocketsphinx 5, its bundled en-us model) of the cloned English
  sentences, beside raw espeak-ng in the same base variant;
- ceiling: WORLD analysis-resynthesis (DIO + StoneMask, CheapTrick, D4C) of the prompt;
- convert mode: another voice's prompt (the next in the list, first 6 s) converted into
  this voice: similarity to the target and to the source speaker;
- RTF (synthesis wall and CPU time over output duration) and profile build time for a
  10 s prompt (wall). Wall times include waiting for other processes on a shared
  machine; CPU time does not (the espeak worker's CPU, about 0.002 RTF, is not in it).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import logging
import re
import statistics
import sys
import time
import types
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
from scipy.signal import resample_poly

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lib.engines.builtin import BuiltinEngine
from lib.engines.builtin.espeak import EspeakParams

_LOGGER = logging.getLogger(__name__)

VOICES = Path(__file__).resolve().parents[1].parent / "shared" / "testdata" / "voices"
TUNE = ["zh_female_prompt", "male_prompt", "megatts3_zh", "openvoice_example", "openvoice_speaker2"]
HELD = ["sparktts_zh", "megatts3_en", "openvoice_speaker0", "openvoice_speaker1", "zonos_example"]
ZH = [
    "请到三号窗口办理业务，谢谢你的耐心配合。",
    "今天天气很好，我们一起去公园散步吧。",
    "列车即将进站，请站在黄线以外排队候车。",
]
EN = [
    "Please go to window three, thank you for waiting.",
    "The next train to the city will arrive in five minutes.",
    "Our store will close soon, please bring your items to the front.",
    "Welcome, how can I help you today?",
    "Please take a number and wait for your turn.",
    "Thank you for calling, have a nice day.",
]
PROFILE_RUNS = 5


def _import_resemblyzer() -> Any:
    """resemblyzer imports webrtcvad, whose module imports pkg_resources, which
    setuptools 81 removed; a two-line stand-in gives it the one call it makes."""
    try:
        import pkg_resources  # noqa: F401
    except ImportError:
        shim = types.ModuleType("pkg_resources")
        shim.get_distribution = lambda name: types.SimpleNamespace(version=importlib.metadata.version(name))  # type: ignore[attr-defined]
        sys.modules["pkg_resources"] = shim
    import resemblyzer

    return resemblyzer


def load_pcm(name: str) -> np.ndarray:
    path = VOICES / f"{name}.wav"
    if not path.is_file():
        path = VOICES / "dev" / f"{name}.flac"
    audio, rate = sf.read(str(path), dtype="float64", always_2d=True)
    mono = resample_poly(audio.mean(axis=1), 16_000, int(rate))
    return np.clip(np.round(mono * 32767), -32768, 32767).astype(np.int16)


class Scorer:
    def __init__(self) -> None:
        rz = _import_resemblyzer()
        self._encoder = rz.VoiceEncoder("cpu", verbose=False)
        self._preprocess = rz.preprocess_wav
        from pocketsphinx import Decoder

        self._decoder = Decoder(samprate=16_000, loglevel="FATAL")

    def embed(self, audio: np.ndarray, rate: int) -> np.ndarray:
        raw = np.asarray(audio)
        x = raw.astype(np.float64) / (32768.0 if raw.dtype.kind == "i" else 1.0)
        if rate != 16_000:
            x = resample_poly(x, 16_000, rate)
        return np.asarray(self._encoder.embed_utterance(self._preprocess(x, source_sr=16_000)))

    def transcribe(self, audio: np.ndarray, rate: int) -> str:
        x = resample_poly(np.asarray(audio, dtype=np.float64), 16_000, rate) if rate != 16_000 else audio
        x = x / max(float(np.abs(x).max()), 1e-9) * 0.5
        pad = np.zeros(4000)
        pcm = (np.concatenate([pad, x, pad]) * 32767).astype(np.int16)
        self._decoder.start_utt()
        self._decoder.process_raw(pcm.tobytes(), full_utt=True)
        self._decoder.end_utt()
        hyp = self._decoder.hyp()
        return hyp.hypstr if hyp else ""


def wer(ref: str, hyp: str) -> float:
    r = re.findall(r"[a-z']+", ref.lower())
    h = re.findall(r"[a-z']+", hyp.lower())
    d = list(range(len(h) + 1))
    for i in range(1, len(r) + 1):
        prev, d = d, [i] + [0] * len(h)
        for j in range(1, len(h) + 1):
            d[j] = min(prev[j] + 1, d[j - 1] + 1, prev[j - 1] + (r[i - 1] != h[j - 1]))
    return d[len(h)] / len(r)


def resynthesis(pcm: np.ndarray) -> np.ndarray:
    import pyworld as pw

    x = pcm.astype(np.float64) / 32768.0
    f0, t = pw.dio(x, 16_000, f0_floor=60.0, f0_ceil=600.0, frame_period=5.0)
    f0 = pw.stonemask(x, f0, t, 16_000)
    sp = pw.cheaptrick(x, f0, t, 16_000, f0_floor=60.0, fft_size=1024)
    ap = pw.d4c(x, f0, t, 16_000, fft_size=1024)
    return np.asarray(pw.synthesize(f0, sp, ap, 16_000, 5.0))


def nearest(emb: list[np.ndarray], refs: dict[str, np.ndarray]) -> str:
    mean = np.mean(emb, axis=0)
    mean /= np.linalg.norm(mean)
    return max(refs, key=lambda name: float(mean @ refs[name]))


def cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    seeds = list(range(args.seeds))
    names = TUNE + HELD
    scorer = Scorer()
    engine = BuiltinEngine()
    rate = engine.sample_rate
    pcms = {n: load_pcm(n) for n in names}
    cut = {n: int(pcms[n].size * 0.6) for n in names}
    ref_full = {n: scorer.embed(pcms[n], 16_000) for n in names}
    ref_ho = {n: scorer.embed(pcms[n][cut[n] :], 16_000) for n in names}
    texts = ZH + EN

    # Presets: the same sentences, median similarity per preset, best per voice.
    preset_emb: dict[str, list[np.ndarray]] = {}
    for preset in engine.presets():
        voice = engine.preset_voice(preset)
        preset_emb[preset] = [
            scorer.embed(engine.synthesise(t, voice, style="", seed=0, speed=1.0, mode="preset").audio, rate)
            for t in texts
        ]

    rows: dict[str, dict[str, Any]] = {}
    for index, name in enumerate(names):
        pcm = pcms[name]
        voice_full = engine.extract_voice(pcm, "")
        voice_ho = engine.extract_voice(pcm[: cut[name]], "")
        row: dict[str, Any] = {"base": voice_full.params["base"], "blob_kb": len(voice_full.to_bytes()) / 1024}
        for label, voice, refs in (("full", voice_full, ref_full), ("ho", voice_ho, ref_ho)):
            best = max(statistics.median(cos(e, refs[name]) for e in embs) for embs in preset_emb.values())
            sims_by_seed, embs, rtfs, cpus, wers = [], [], [], [], []
            for seed in seeds:
                sims, seed_wers = [], []
                for text in texts:
                    start, cpu = time.perf_counter(), time.process_time()
                    out = engine.synthesise(text, voice, style="", seed=seed, speed=1.0, mode="cross_lingual").audio
                    seconds = out.size / rate
                    rtfs.append((time.perf_counter() - start) / seconds)
                    cpus.append((time.process_time() - cpu) / seconds)
                    emb = scorer.embed(out, rate)
                    embs.append(emb)
                    sims.append(cos(emb, refs[name]))
                    if label == "full" and text in EN:
                        seed_wers.append(wer(text, scorer.transcribe(out, rate)))
                sims_by_seed.append(statistics.median(sims))
                if seed_wers:
                    wers.append(float(np.mean(seed_wers)))
            sim = statistics.median(sims_by_seed)
            row[label] = {"sim": sim, "preset": best, "gain": sim - best, "id": nearest(embs, refs) == name}
            if label == "full":
                row["wer"] = statistics.median(wers)
                row["rtf"] = statistics.median(rtfs)
                row["cpu_rtf"] = statistics.median(cpus)
        base = str(voice_full.params["base"])
        raw = [engine._espeak.synth(t, EspeakParams(f"en-us+{base}" if base else "en-us")) for t in EN]
        row["raw_wer"] = float(np.mean([wer(t, scorer.transcribe(a.astype(np.float64) / 32768, rate))
                                        for t, a in zip(EN, raw, strict=True)]))  # fmt: skip
        row["ceiling"] = cos(scorer.embed(resynthesis(pcm), 16_000), ref_full[name])
        source_name = names[(index + 1) % len(names)]
        converted = engine.convert(pcms[source_name][: 6 * 16_000], voice_full, seed=0, speed=1.0).audio
        conv_emb = scorer.embed(converted, rate)
        row["convert"] = (cos(conv_emb, ref_full[name]), cos(conv_emb, ref_full[source_name]))
        ten = np.resize(pcm, 10 * 16_000)
        times = []
        for _ in range(PROFILE_RUNS):
            start = time.perf_counter()
            engine.extract_voice(ten, "")
            times.append(time.perf_counter() - start)
        row["profile_s"] = statistics.median(times)
        rows[name] = row
        f, h = row["full"], row["ho"]
        print(f"{name:20s} base {base or 'default':3s} sim {f['sim']:.3f} preset {f['preset']:.3f} "
              f"gain {f['gain']:+.3f} id {'Y' if f['id'] else 'n'} | held-out ref sim {h['sim']:.3f} "
              f"gain {h['gain']:+.3f} id {'Y' if h['id'] else 'n'} | WER {row['wer']:.2f} raw {row['raw_wer']:.2f} | "
              f"ceiling {row['ceiling']:.3f} | convert {row['convert'][0]:.3f} (source {row['convert'][1]:.3f}) | "
              f"RTF {row['rtf']:.3f} cpu {row['cpu_rtf']:.3f} | profile {row['profile_s'] * 1000:.0f} ms, "
              f"{row['blob_kb']:.0f} KiB", flush=True)  # fmt: skip
    engine.close()
    for label, group in (("all 10", names), ("TUNE", TUNE), ("HELD", HELD)):
        print(f"\n== {label} ==")
        for ref in ("full", "ho"):
            r = [rows[n][ref] for n in group]
            beats = sum(x["gain"] > 0 for x in r)
            print(f"  scored vs {'whole prompt' if ref == 'full' else 'held-out 40 %'}: "
                  f"sim {np.mean([x['sim'] for x in r]):.3f}, best preset {np.mean([x['preset'] for x in r]):.3f}, "
                  f"gain {np.mean([x['gain'] for x in r]):+.3f}, beats preset {beats}/{len(r)}, "
                  f"identified {sum(x['id'] for x in r)}/{len(r)}")  # fmt: skip
        ceiling = np.mean([rows[n]["ceiling"] for n in group])
        print(f"  English WER clone {np.mean([rows[n]['wer'] for n in group]):.3f} vs raw espeak "
              f"{np.mean([rows[n]['raw_wer'] for n in group]):.3f}; ceiling {ceiling:.3f}; "
              f"convert {np.mean([rows[n]['convert'][0] for n in group]):.3f} to target vs "
              f"{np.mean([rows[n]['convert'][1] for n in group]):.3f} to source")  # fmt: skip
        print(f"  RTF median {statistics.median(rows[n]['rtf'] for n in group):.3f} wall, "
              f"{statistics.median(rows[n]['cpu_rtf'] for n in group):.3f} CPU; profile for 10 s: median "
              f"{statistics.median(rows[n]['profile_s'] for n in group) * 1000:.0f} ms, "
              f"max {max(rows[n]['profile_s'] for n in group) * 1000:.0f} ms")  # fmt: skip


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    main()
