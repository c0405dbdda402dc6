"""Benchmark of the builtin engine's cloning on the 10 development voices, Kokoro and espeak bases.

Setup (bench only; not runtime requirements)::

    .venv/bin/pip install -r requirements-bench.txt
    .venv/bin/python bench/bench_voice.py                  # both bases, 1 seed (about 30 min on 2 cores)
    .venv/bin/python bench/bench_voice.py --bases espeak   # the espeak base only (about 3 min)
    .venv/bin/python bench/bench_voice.py --timing-only    # cost figures only (RTF, CPU, RSS)

Voices: ``../shared/testdata/voices/*.wav`` (2) and ``../shared/testdata/voices/dev/*.flac``
(8), or ``$TTS_TESTDATA_DIR``. The split into a tuning half and a held-out half was fixed
before any tuning (by language and pitch, so that both halves have Mandarin and English,
high and low voices) and every design choice in ``lib/engines/builtin`` -- the espeak
base's matching and, for the Kokoro base, the pitch analysis of its audio and keeping its
unvoiced frames (``_DIO_SPEED``, ``_MATCH_UNVOICED`` in ``plan.py``) -- was made on the TUNE
half only:

- TUNE: zh_female_prompt, male_prompt, megatts3_zh, openvoice_example, openvoice_speaker2
- HELD: sparktts_zh, megatts3_en, openvoice_speaker0, openvoice_speaker1, zonos_example

Measures, per base, per voice and per half, medians over seeds (the seed varies rate and pitch):

- similarity: cosine of resemblyzer (GE2E) speaker embeddings, clone vs prompt (median over
  the 9 sentences); "best preset" is the best of the five named presets (zh-female, zh-male,
  en-female, en-male, yue-female) for that prompt; gain = clone - best preset;
- identification: the mean embedding of a voice's clones is nearest its own prompt among
  all 10 prompts;
- split variant: the profile is built from the first 60 % of the prompt and everything is
  scored against the last 40 % (part of a pool method's gain is the recording, not the
  speaker: this takes it out);
- English word error rate (pocketsphinx 5, its bundled en-us model) of the cloned English
  sentences;
- F0 range: 10th-90th percentile of the clones' voiced F0 in semitones (per voice, over its
  sentences), beside the prompts' own;
- ceiling: WORLD analysis-resynthesis of the prompt; convert mode: the next voice's prompt
  (first 6 s) converted into this voice, similarity to the target and to the source.

Cost (``--timing-runs``; each base in a fresh process, so that the bench's torch and
resemblyzer are not in its memory): wall RTF and CPU seconds per second of audio of a
clone of the 9 sentences (median over runs, model already loaded, first call excluded),
the process's RSS after them and its peak (VmHWM), with the load average of the machine
before and after: a shared machine's wall figures are only meaningful with it.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import logging
import os
import re
import statistics
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
from scipy.signal import resample_poly

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.bench_clone_stages import _memo_say  # noqa: E402
from lib.config import BuiltinConfig  # noqa: E402
from lib.engines.builtin import BuiltinEngine, _world, plan  # noqa: E402
from lib.engines.builtin.profile import pitch_stats  # noqa: E402

_LOGGER = logging.getLogger(__name__)

VOICES = Path(os.environ.get("TTS_TESTDATA_DIR") or REPO.parent / "shared" / "testdata" / "voices")
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
LEGACY_PRESETS = ["zh-female", "zh-male", "en-female", "en-male", "yue-female"]
#: Voices whose prompt is English speech (their repositories say so): the WER of their clones
#: is reported apart, since the others' frames come from Mandarin or unknown speech.
EN_PROMPTS = ["openvoice_example", "openvoice_speaker0", "openvoice_speaker1", "openvoice_speaker2", "zonos_example",
              "megatts3_en"]  # fmt: skip


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
        from tests.judge import Judge

        #: The offline ASR judge (tests/judge.py): Mandarin pinyin error, English word error.
        self.judge = Judge()

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


def f0_voiced(audio: np.ndarray, rate: int) -> np.ndarray:
    x = np.asarray(audio, dtype=np.float64)
    if x.dtype.kind == "i":
        x = x / 32768.0
    f0, _ = _world.f0_track(x, rate, 5.0)
    return f0[f0 > 0]


def f0_range(f0: np.ndarray) -> float:
    stats = pitch_stats(f0, 0.005)
    return stats.range_st if stats is not None else float("nan")


def nearest(emb: list[np.ndarray], refs: dict[str, np.ndarray]) -> str:
    mean = np.mean(emb, axis=0)
    mean /= np.linalg.norm(mean)
    return max(refs, key=lambda name: float(mean @ refs[name]))


def cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b))


def quality(base: str, names: list[str], seeds: list[int], scorer: Scorer, pcms: dict[str, np.ndarray],
            refs: dict[str, dict[str, np.ndarray]],
            envelopes: list[float]) -> dict[str, dict[str, dict[str, Any]]]:  # fmt: skip
    """Per variant (``base`` or ``kokoro matched <w>``) and voice: similarity, identification
    (whole and split), judged errors, WER, F0 range, convert."""
    engine = BuiltinEngine(BuiltinConfig(base=base))
    if engine.base != base:
        raise SystemExit(f"the {base} base is not installed (./run.sh installs it)")
    if base == "kokoro":
        _memo_say(engine)  # the base's reading once per sentence, for every variant
    rate = engine.sample_rate
    texts = ZH + EN
    cut = {n: int(pcms[n].size * 0.6) for n in names}
    preset_emb = {p: [scorer.embed(engine.synthesise(t, engine.preset_voice(p), style="", seed=0, speed=1.0,
                                                     mode="preset").audio, rate) for t in texts]
                  for p in LEGACY_PRESETS}  # fmt: skip
    weights = envelopes if base == "kokoro" and envelopes else [plan._MATCHED_ENVELOPE[base]]
    shipped = plan._MATCHED_ENVELOPE[base]
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for index, name in enumerate(names):
        profiles = {"full": engine.extract_voice(pcms[name], ""),
                    "ho": engine.extract_voice(pcms[name][: cut[name]], "")}  # fmt: skip
        for weight in weights:
            plan._MATCHED_ENVELOPE[base] = weight
            variant = base if len(weights) == 1 else f"{base} matched {weight:g}"
            row = _voice(engine, base, name, index, names, profiles, seeds, scorer, pcms, refs, preset_emb)
            out.setdefault(variant, {})[name] = row
            print(json.dumps({"variant": variant, "voice": name, **_flat(row)}), flush=True)
        plan._MATCHED_ENVELOPE[base] = shipped
    engine.close()
    return out


def _flat(row: dict[str, Any]) -> dict[str, Any]:
    """A voice's row as one JSON object (for bench/record.py)."""
    flat: dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, dict):
            flat.update({f"{key}_{k}": (bool(v) if isinstance(v, np.bool_) else v) for k, v in value.items()})
        else:
            flat[key] = list(value) if isinstance(value, tuple) else value
    return flat


def _voice(engine: BuiltinEngine, base: str, name: str, index: int, names: list[str], profiles: dict[str, Any],
           seeds: list[int], scorer: Scorer, pcms: dict[str, np.ndarray], refs: dict[str, dict[str, np.ndarray]],
           preset_emb: dict[str, list[np.ndarray]]) -> dict[str, Any]:  # fmt: skip
    """One voice in the engine's current variant: its row of figures."""
    rate = engine.sample_rate
    texts = ZH + EN
    row: dict[str, Any] = {}
    for label, voice in profiles.items():
        ref = refs[label]
        best = max(statistics.median(cos(e, ref[name]) for e in embs) for embs in preset_emb.values())
        sims_by_seed, embs, wers, f0s = [], [], [], []
        judged: dict[str, list[int]] = {"zh": [0, 0], "en": [0, 0]}  # edits, units over seeds
        for seed in seeds:
            sims, seed_wers = [], []
            for text in texts:
                result = engine.synthesise(text, voice, style="", seed=seed, speed=1.0, mode="cross_lingual")
                emb = scorer.embed(result.audio, rate)
                embs.append(emb)
                sims.append(cos(emb, ref[name]))
                if label == "full":
                    f0s.append(f0_voiced(result.audio, rate))
                    lang = "en" if text in EN else "zh"
                    s = scorer.judge.judge(np.asarray(result.audio), rate, lang, text)
                    judged[lang][0] += s.edits
                    judged[lang][1] += len(s.ref_units)
                    if text in EN:
                        seed_wers.append(wer(text, scorer.transcribe(result.audio, rate)))
            sims_by_seed.append(statistics.median(sims))
            if seed_wers:
                wers.append(float(np.mean(seed_wers)))
        sim = statistics.median(sims_by_seed)
        row[label] = {"sim": sim, "preset": best, "gain": sim - best, "id": nearest(embs, ref) == name}
        if label == "full":
            row["pinyin_error"], row["zh_edits"], row["zh_units"] = (
                judged["zh"][0] / max(1, judged["zh"][1]), *judged["zh"])
            row["word_error"], row["en_edits"], row["en_units"] = (
                judged["en"][0] / max(1, judged["en"][1]), *judged["en"])  # fmt: skip
            row["wer"] = statistics.median(wers)
            row["f0_range"] = f0_range(np.concatenate(f0s))
            row["base_voice"] = profiles["full"].params.get("pitch_class", profiles["full"].params["base"])
    source = names[(index + 1) % len(names)]
    converted = engine.convert(pcms[source][: 6 * 16_000], profiles["full"], seed=0, speed=1.0).audio
    conv = scorer.embed(converted, rate)
    row["convert"] = (cos(conv, refs["full"][name]), cos(conv, refs["full"][source]))
    f, h = row["full"], row["ho"]
    print(f"  [{base} {plan._MATCHED_ENVELOPE[base]:g}] {name:20s} {row['base_voice']:6s} sim {f['sim']:.3f} "
          f"(best preset {f['preset']:.3f}, gain {f['gain']:+.3f}) id {'Y' if f['id'] else 'n'} | split sim "
          f"{h['sim']:.3f} id {'Y' if h['id'] else 'n'} | pinyin error {row['pinyin_error']:.3f} | word error "
          f"{row['word_error']:.3f} | WER (pocketsphinx) {row['wer']:.2f} | F0 range {row['f0_range']:.1f} st | "
          f"convert {row['convert'][0]:.3f} (source {row['convert'][1]:.3f}) | load {os.getloadavg()[0]:.1f}",
          flush=True)  # fmt: skip
    return row


def summary(
    base: str, rows: dict[str, dict[str, Any]], prompt_range: dict[str, float], ceiling: dict[str, float]
) -> None:
    for label, group in (("all 10", TUNE + HELD), ("TUNE", TUNE), ("HELD", HELD)):
        group = [n for n in group if n in rows]
        if not group:
            continue
        r = [rows[n] for n in group]
        full, ho = [x["full"] for x in r], [x["ho"] for x in r]
        print(f"== {base} base, {label} ({len(group)} voices) ==")
        print(f"  similarity {np.mean([x['sim'] for x in full]):.3f} (best preset "
              f"{np.mean([x['preset'] for x in full]):.3f}, gain {np.mean([x['gain'] for x in full]):+.3f}), "
              f"identified {sum(x['id'] for x in full)}/{len(group)}; split: similarity "
              f"{np.mean([x['sim'] for x in ho]):.3f}, identified {sum(x['id'] for x in ho)}/{len(group)}")  # fmt: skip
        zh_e, zh_u = sum(x["zh_edits"] for x in r), sum(x["zh_units"] for x in r)
        en_e, en_u = sum(x["en_edits"] for x in r), sum(x["en_units"] for x in r)
        figures = {
            "variant": base, "voices": label, "n": len(group),
            "similarity": round(float(np.mean([x["sim"] for x in full])), 4),
            "best_preset": round(float(np.mean([x["preset"] for x in full])), 4),
            "gain": round(float(np.mean([x["gain"] for x in full])), 4),
            "identified": sum(bool(x["id"]) for x in full),
            "split_similarity": round(float(np.mean([x["sim"] for x in ho])), 4),
            "split_gain": round(float(np.mean([x["gain"] for x in ho])), 4),
            "split_identified": sum(bool(x["id"]) for x in ho),
            "pinyin_error": round(zh_e / max(1, zh_u), 4), "zh_edits": zh_e, "zh_units": zh_u,
            "word_error": round(en_e / max(1, en_u), 4), "en_edits": en_e, "en_units": en_u,
            "f0_range_st": round(float(np.nanmean([x["f0_range"] for x in r])), 2),
            "prompt_f0_range_st": round(float(np.mean([prompt_range[n] for n in group])), 2),
        }  # fmt: skip
        print(json.dumps({"summary": figures}), flush=True)
        print(f"  judge: pinyin error {figures['pinyin_error']:.3f} ({zh_e}/{zh_u}), word error "
              f"{figures['word_error']:.3f} ({en_e}/{en_u}); split gain {figures['split_gain']:+.3f}")  # fmt: skip
        prompts = np.mean([prompt_range[n] for n in group])
        en = [rows[n]["wer"] for n in group if n in EN_PROMPTS]
        print(f"  English WER of clones {np.mean([x['wer'] for x in r]):.3f} (English prompts: "
              f"{np.mean(en) if en else float('nan'):.3f} over {len(en)}); F0 range "
              f"{np.nanmean([x['f0_range'] for x in r]):.1f} st (prompts {prompts:.1f}); "
              f"convert {np.mean([x['convert'][0] for x in r]):.3f} to target vs "
              f"{np.mean([x['convert'][1] for x in r]):.3f} to source; "
              f"ceiling {np.mean([ceiling[n] for n in group]):.3f}")  # fmt: skip


def proc_mb(key: str) -> float:
    """A size line of ``/proc/self/status`` (``VmRSS:``, ``VmHWM:``) in MB."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(key):
                return int(line.split()[1]) / 1024
    return float("nan")


_TIMING_CHILD = """
import json, os, sys, time
sys.path.insert(0, {repo!r})
import numpy as np
from bench.bench_voice import EN, ZH, load_pcm, proc_mb as status
from lib.config import BuiltinConfig
from lib.engines.builtin import BuiltinEngine
engine = BuiltinEngine(BuiltinConfig(base={base!r}, threads={threads}))
engine.warm()
voice = engine.extract_voice(load_pcm("zh_female_prompt"), "")
for text in ZH + EN:  # the first calls (allocations, caches) are not timed
    engine.synthesise(text, voice, style="", seed=0, speed=1.0, mode="cross_lingual")
load_before = os.getloadavg()[0]
walls, cpus = [], []
for run in range({runs}):
    wall = cpu = seconds = 0.0
    for text in ZH + EN:
        t, c = time.perf_counter(), time.process_time()
        audio = engine.synthesise(text, voice, style="", seed=run + 1, speed=1.0, mode="cross_lingual").audio
        wall += time.perf_counter() - t
        cpu += time.process_time() - c
        seconds += audio.size / engine.sample_rate
    walls.append(wall / seconds)
    cpus.append(cpu / seconds)
print(json.dumps({{"base": engine.base, "threads": {threads}, "rtf": sorted(walls)[len(walls) // 2],
                  "cpu": sorted(cpus)[len(cpus) // 2], "rss": status("VmRSS:"), "hwm": status("VmHWM:"),
                  "load_before": load_before, "load_after": os.getloadavg()[0], "audio_s": seconds}}))
engine.close()
"""


def timing(base: str, threads: int, runs: int) -> dict[str, Any]:
    code = _TIMING_CHILD.format(repo=str(REPO), base=base, threads=threads, runs=runs)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"  [{base}] {threads} thread(s): wall RTF {result['rtf']:.3f}, CPU {result['cpu']:.3f} s per s of audio, "
          f"RSS {result['rss']:.0f} MB (peak {result['hwm']:.0f} MB) over {result['audio_s']:.0f} s of audio x {runs}; "
          f"load average {result['load_before']:.2f} before, {result['load_after']:.2f} after", flush=True)  # fmt: skip
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bases", default="kokoro,espeak", help="comma-separated: kokoro, espeak")
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--voices", choices=("all", "tune", "held"), default="all")
    parser.add_argument("--timing-runs", type=int, default=3, help="0 skips the cost figures")
    parser.add_argument("--threads", default="2", help="comma-separated onnxruntime thread counts to time")
    parser.add_argument("--timing-only", action="store_true")
    parser.add_argument("--kokoro-dio-speed", type=int, help="tuning: DIO decimation on Kokoro audio (plan.py)")
    parser.add_argument("--kokoro-match-unvoiced", choices=("yes", "no"),
                        help="tuning: match Kokoro's unvoiced frames too, or keep its own (plan.py)")
    parser.add_argument("--kokoro-envelope", default="",
                        help="tuning: comma-separated weights of the matched envelope (plan._MATCHED_ENVELOPE), "
                             "each a variant of the Kokoro base in the same run")  # fmt: skip
    args = parser.parse_args()
    bases = [b.strip() for b in args.bases.split(",") if b.strip()]
    if args.kokoro_dio_speed:
        plan._DIO_SPEED["kokoro"] = args.kokoro_dio_speed
    if args.kokoro_match_unvoiced:
        plan._MATCH_UNVOICED["kokoro"] = args.kokoro_match_unvoiced == "yes"
    print(f"bench_voice: bases {', '.join(bases)}, load average {os.getloadavg()[0]:.2f} at start", flush=True)
    if not args.timing_only:
        names = {"all": TUNE + HELD, "tune": TUNE, "held": HELD}[args.voices]
        scorer = Scorer()
        pcms = {n: load_pcm(n) for n in TUNE + HELD}
        cut = {n: int(pcms[n].size * 0.6) for n in pcms}
        refs = {"full": {n: scorer.embed(pcms[n], 16_000) for n in pcms},
                "ho": {n: scorer.embed(pcms[n][cut[n]:], 16_000) for n in pcms}}  # fmt: skip
        prompt_range = {n: f0_range(f0_voiced(pcms[n], 16_000)) for n in names}
        ceiling = {n: cos(scorer.embed(resynthesis(pcms[n]), 16_000), refs["full"][n]) for n in names}
        envelopes = [float(w) for w in args.kokoro_envelope.split(",") if w.strip()]
        results: dict[str, dict[str, dict[str, Any]]] = {}
        for base in bases:
            results.update(quality(base, names, list(range(args.seeds)), scorer, pcms, refs, envelopes))
        for base, rows in results.items():
            summary(base, rows, prompt_range, ceiling)
    if args.timing_runs > 0:
        print("== cost (fresh process per base; clone of the 9 sentences, model loaded) ==")
        for base in bases:
            for threads in [int(t) for t in args.threads.split(",")] if base == "kokoro" else [0]:
                timing(base, threads, args.timing_runs)


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    main()
