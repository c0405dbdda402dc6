"""Where Mandarin intelligibility is lost in the builtin engine's clone path, stage by stage (issue 33).

    .venv/bin/pip install -r requirements-bench.txt           # resemblyzer (similarity); optional
    nice -n 10 .venv/bin/python bench/record.py bench_clone_stages.py   # about 16 min on 2 cores
    nice -n 10 .venv/bin/python bench/record.py bench_clone_stages.py \
        --variants "blend 0.75,shift,shift blend 0.5,shift blend 0.75"   # about 5 min
    .venv/bin/python bench/bench_clone_stages.py --breakdown bench/results/bench_clone_stages-*.json
    .venv/bin/python bench/bench_clone_stages.py --voices 2 --sentences 3 --variants raw,shipped  # a quick look

Measurement only: nothing in ``lib/`` changes. The clones are made by the real engine
(``BuiltinEngine.synthesise``, Kokoro base, seed 0, cross-lingual mode) with the frame transfer
that ``lib.engines.builtin.plan`` calls (``plan.transfer``) replaced, in this process only, by a
copy of ``lib.engines.builtin.convert.transfer`` whose stages can be switched on and off:

- ``raw``: the Kokoro base voice alone (the voice the clone is read in: ``zf_xiaoxiao`` for a
  prompt above 160 Hz, ``zm_yunjian`` below), no WORLD at all;
- ``world``: WORLD analysis and resynthesis of the base with nothing changed (full CheapTrick
  envelope, full D4C aperiodicity): the vocoder's own loss;
- ``cep``: the transfer with every switch off: the base's envelope through the 40 mel cepstra
  the matching works on, the base's own band aperiodicity (6 bands), its own F0 -- the loss of
  the representation the matching writes into;
- the 2 x 2 x 2 factorial on top of ``cep``: ``F`` F0 mapped to the prompt's log-F0 mean and
  spread (the base's contour shape kept), ``E`` the envelope (cepstra 1-39) from the 4 nearest
  prompt frames, ``A`` voiced frames' band aperiodicity from the same neighbours;
  ``E+F+A`` is the matching as shipped before issue 33's change; ``shipped`` calls
  ``convert.transfer`` as it is now (since that change: ``shift blend 0.5``), checked
  bit-identical to the switchable copy with the shipped weight;
- ``blend a``: the shipped matching with the matched cepstra mixed with the base's,
  ``a * matched + (1 - a) * base`` (a = 0.25, 0.5, 0.75);
- ``shift``: no kNN envelope at all: the base's own cepstra 1-39 moved by the difference of the
  class means (the prompt's voiced mean minus the utterance's, the very means the matching
  removes before it compares frames), F0 and aperiodicity as shipped; ``shift blend a``: ``a *
  matched + (1 - a) * shifted base`` (a = 0.5, 0.75);
- ``nearest raw`` / ``nearest shipped``: the base voice chosen per prompt as the Kokoro Mandarin
  voice (of 8) whose reading of a calibration sentence is nearest the prompt (resemblyzer), alone
  and with the shipped matching (needs resemblyzer).

Every variant is judged on the same Mandarin sentences (10 from ``intelligibility-dev.tsv`` and
``bench/intelligibility-held.tsv``) for the same 6 prompt voices (2 in ``voices/``, 4 in
``voices/dev/``) by the offline judge (``tests/judge.py``: Whisper base, toneless pinyin error,
pooled = edits / reference syllables) and, as a proxy for tones, the same error with tone
numbers (pypinyin TONE3 of the reference and of the judge's characters, citation tones, no
sandhi, on both sides): ``tonal - toneless`` is the share of syllables heard with the right
segments but as a character of another tone. Similarity: cosine of resemblyzer GE2E embeddings,
clip vs its whole prompt, mean over clips; identified: the mean embedding of a voice's clips is
nearest its own prompt among the 6.

Prints one JSON line per item and per variant and a table; ``bench/record.py`` keeps them.
``--breakdown`` reads recorded results back and counts, per variant, the kinds of syllable error
(another initial, another final, both, deleted, inserted) and the commonest confusions.
Findings and figures: docs/builtin-engine.md, "Where Mandarin intelligibility is lost in the
matching (issue 33)".
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import math
import os
import re
import resource
import sys
import time
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
from scipy.signal import resample_poly

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lib.config import BuiltinConfig  # noqa: E402
from lib.engines.builtin import BuiltinEngine, _world, convert, plan  # noqa: E402
from lib.engines.builtin.convert import K, Prosody, _class_mean, _map_f0, _match  # noqa: E402
from lib.engines.builtin.features import (  # noqa: E402
    GRID_HZ,
    band_aperiodicity,
    bands_to_aperiodicity,
    cepstra_to_grid,
    envelope_to_cepstra,
    grid_to_bins,
    log_envelope_on_grid,
)
from lib.engines.builtin.pool import FRAME_PERIOD_MS, FramePool, audible  # noqa: E402
from tests.judge import Judge, align, score  # noqa: E402

VOICES = Path(os.environ.get("TTS_TESTDATA_DIR") or REPO.parent / "shared" / "testdata" / "voices")
#: 2 prompts of voices/ and 4 of voices/dev/: 3 read in the female base, 3 in the male one;
#: 3 Mandarin prompts (zh_female_prompt, megatts3_zh, sparktts_zh), 2 English, 1 unknown.
PROMPTS = ["zh_female_prompt", "male_prompt", "megatts3_zh", "sparktts_zh", "openvoice_speaker1", "openvoice_example"]
#: 5 rows of ../shared/testdata/intelligibility-dev.tsv, then 5 of bench/intelligibility-held.tsv.
SENTENCES = [
    "欢迎光临，请问有什么可以帮您？",
    "列车即将进站，请站在黄线以内候车。",
    "请保管好您的随身物品，谨防扒窃。",
    "前方到站是北京南站，请下车的乘客做好准备。",
    "车站为您提供免费热水。",
    "请携带好您的行李，按顺序下车。",
    "儿童请在家长的陪同下乘坐电梯。",
    "请前往七号登机口办理登机手续。",
    "下一站是人民广场，可换乘二号线。",
    "欢迎乘坐本次列车，祝您旅途愉快。",
]
#: What the base voices read to be compared with a prompt (``nearest``): none of the sentences.
CALIBRATION = "我们今天下午一起去公园散步，那里的风景非常美丽。"
SEED = 0
_EDGE_POINTS = 4


@dataclass(frozen=True)
class Spec:
    """One variant of the frame transfer."""

    label: str
    what: str
    kind: str = "transfer"  # raw | world | transfer | shipped
    env: float = 0.0  # weight of the matched cepstra (0: the base's own, 1: matched)
    f0: bool = False  # F0 mapped to the prompt's statistics
    ap: bool = False  # voiced frames' aperiodicity from the neighbours
    nearest: bool = False  # the base voice nearest the prompt instead of the fixed one
    shift: bool = False  # the base's share of the envelope moved to the prompt's class mean


VARIANTS = [
    Spec("raw", "Kokoro base alone (no WORLD)", kind="raw"),
    Spec("world", "WORLD analysis + resynthesis, nothing changed", kind="world"),
    Spec("cep", "through the 40 mel cepstra + 6 aperiodicity bands, nothing matched"),
    Spec("F", "F0 mapped only (base envelope, base aperiodicity)", f0=True),
    Spec("E", "envelope kNN only (base F0, base aperiodicity)", env=1.0),
    Spec("A", "aperiodicity from the neighbours only", ap=True),
    Spec("E+A", "envelope + aperiodicity matched, base F0", env=1.0, ap=True),
    Spec("E+F", "envelope matched + F0 mapped, base aperiodicity", env=1.0, f0=True),
    Spec("F+A", "F0 mapped + aperiodicity matched, base envelope", f0=True, ap=True),
    Spec("shipped", "the matching as shipped (convert.transfer; E+F+A before issue 33)", kind="shipped"),
    Spec("blend 0.25", "shipped, envelope 0.25 matched + 0.75 base", env=0.25, f0=True, ap=True),
    Spec("blend 0.5", "shipped, envelope 0.5 matched + 0.5 base", env=0.5, f0=True, ap=True),
    Spec("blend 0.75", "shipped, envelope 0.75 matched + 0.25 base", env=0.75, f0=True, ap=True),
    Spec(
        "shift",
        "shipped F0 + aperiodicity, base envelope moved by the class-mean difference",
        f0=True,
        ap=True,
        shift=True,
    ),
    Spec("shift blend 0.5", "shipped, envelope 0.5 matched + 0.5 shifted base", env=0.5, f0=True, ap=True, shift=True),
    Spec(
        "shift blend 0.75", "shipped, envelope 0.75 matched + 0.25 shifted base", env=0.75, f0=True, ap=True, shift=True
    ),
    Spec("nearest raw", "the Kokoro zh voice nearest the prompt, alone", kind="raw", nearest=True),
    Spec("nearest shipped", "the Kokoro zh voice nearest the prompt + shipped matching", kind="shipped", nearest=True),
]

#: Run by default (about 16 min on the shared 2-core machine); the rest by name or with
#: ``--variants all`` (A, E+A and F+A were not run: E+F vs shipped already isolates the
#: aperiodicity; the blend 0.75 and shift variants were a second run).
DEFAULT = ["raw", "world", "cep", "F", "E", "E+F", "shipped", "blend 0.25", "blend 0.5", "nearest raw",
           "nearest shipped"]  # fmt: skip


# --- the switchable transfer -----------------------------------------------------------------

_ANALYSES: dict[str, dict[str, Any]] = {}


def _key(x: np.ndarray) -> str:
    return hashlib.sha1(np.ascontiguousarray(x).tobytes()).hexdigest()


def _analysis(x: np.ndarray, rate: int, dio_speed: int) -> dict[str, Any]:
    """WORLD analysis of one base sentence, once (the same base audio serves every prompt)."""
    key = f"{_key(x)}:{rate}:{dio_speed}"
    if key not in _ANALYSES:
        f0, times = _world.f0_track(x, rate, FRAME_PERIOD_MS, speed=dio_speed)
        sp = _world.envelope(x, rate, f0, times)
        ap = _world.aperiodicity(x, rate, f0, times)
        _ANALYSES[key] = {"f0": f0, "times": times, "sp": sp, "ap": ap, "bands": band_aperiodicity(ap, rate)}
    return _ANALYSES[key]


def staged_transfer(spec: Spec, x: np.ndarray, rate: int, pool: FramePool, prosody: Prosody, *,
                    dio_speed: int = 2, unvoiced: bool = True, matched: float = 1.0) -> np.ndarray:  # fmt: skip
    """``convert.transfer`` with its stages switched by ``spec`` (same order of operations, so
    ``Spec(env=w, f0=True, ap=True, shift=w < 1)`` gives the same bytes as ``matched=w``); the
    engine's ``matched`` is ignored: ``spec.env`` decides."""
    if x.size < convert._MIN_SAMPLES:
        return x
    a = _analysis(x, rate, dio_speed)
    f0, sp = a["f0"], a["sp"]
    step = _world.FFT_SIZE // _world.SYNTH_FFT_SIZE
    if spec.kind == "world":
        return _world.synthesize(f0, np.ascontiguousarray(sp[:, ::step]), np.ascontiguousarray(a["ap"][:, ::step]),
                                 rate, FRAME_PERIOD_MS * prosody.duration_factor)  # fmt: skip
    log_sp = np.log(np.maximum(sp, 1e-300))
    cep = envelope_to_cepstra(sp, rate)
    active = audible(cep)
    voiced = f0 > 0
    out = cep.copy()
    bands = np.zeros((cep.shape[0], pool.ap_bands.shape[1]), dtype=np.float64)
    for cls in (True, False) if unvoiced else (True,):
        sel = (voiced == cls) & active
        pool_sel = pool.voiced == cls
        if not sel.any() or int(pool_sel.sum()) < K:
            continue
        own, own_mean, pool_mean = cep[sel, 1:], _class_mean(cep, sel), _class_mean(pool.cepstra, pool_sel)
        idx = _match(own, own_mean, pool, pool_sel, pool_mean)
        matched = pool.cepstra[idx][:, :, 1:].mean(axis=1)
        if spec.shift:
            # The base's own frames moved by the difference of the class means (the part of
            # the envelope the matching removes before it compares frames): the prompt's
            # average vocal tract, every phonetic detail of the base kept.
            own = own + (pool_mean - own_mean)
        if spec.env == 1.0:
            out[sel, 1:] = matched
        elif spec.env > 0.0 or spec.shift:
            out[sel, 1:] = spec.env * matched + (1.0 - spec.env) * own
        bands[sel] = pool.ap_bands[idx].mean(axis=1) if spec.ap else a["bands"][sel]
    new_f0 = _map_f0(f0, pool, prosody) if spec.f0 else f0
    bins = _world.SYNTH_FFT_SIZE // 2 + 1
    grid = cepstra_to_grid(out)
    new_log = grid_to_bins(grid, bins, rate)
    freqs = np.arange(bins) * (rate / _world.SYNTH_FFT_SIZE)
    top = freqs > GRID_HZ[-1]
    if top.any():
        source_grid = log_envelope_on_grid(log_sp, rate)
        offset = (grid[:, -_EDGE_POINTS:] - source_grid[:, -_EDGE_POINTS:]).mean(axis=1)
        new_log[:, top] = log_sp[:, ::step][:, top] + offset[:, None]
    ap = bands_to_aperiodicity(bands, bins, rate)
    ap[new_f0 <= 0] = 1.0
    return _world.synthesize(new_f0, np.exp(new_log), ap, rate, FRAME_PERIOD_MS * prosody.duration_factor)


_SHIPPED = convert.transfer
_ORIGINAL_VOICE = plan.Plan.kokoro_voice


def install(spec: Spec, nearest_voice: str | None) -> None:
    """Point the engine's transfer (and, for ``nearest``, its choice of base voice) at ``spec``."""
    if spec.kind == "raw":
        plan.transfer = lambda x, rate, pool, prosody, **kw: x  # type: ignore[assignment]
    elif spec.kind == "shipped":
        plan.transfer = _SHIPPED  # type: ignore[assignment]
    else:
        plan.transfer = lambda x, rate, pool, prosody, **kw: staged_transfer(spec, x, rate, pool, prosody, **kw)  # type: ignore[assignment]
    if spec.nearest and nearest_voice:
        plan.Plan.kokoro_voice = lambda self, language: nearest_voice  # type: ignore[assignment,method-assign]
    else:
        plan.Plan.kokoro_voice = _ORIGINAL_VOICE  # type: ignore[method-assign]


# --- scoring -------------------------------------------------------------------------------------


def _import_resemblyzer() -> Any:
    """As bench/bench_voice.py: webrtcvad imports pkg_resources, gone from setuptools 81."""
    try:
        import pkg_resources  # noqa: F401
    except ImportError:
        shim = types.ModuleType("pkg_resources")
        shim.get_distribution = lambda name: types.SimpleNamespace(version=importlib.metadata.version(name))  # type: ignore[attr-defined]
        sys.modules["pkg_resources"] = shim
    import resemblyzer

    return resemblyzer


class Embedder:
    def __init__(self) -> None:
        rz = _import_resemblyzer()
        self._encoder = rz.VoiceEncoder("cpu", verbose=False)
        self._preprocess = rz.preprocess_wav

    def __call__(self, audio: np.ndarray, rate: int) -> np.ndarray:
        raw = np.asarray(audio)
        x = raw.astype(np.float64) / (32768.0 if raw.dtype.kind == "i" else 1.0)
        if rate != 16_000:
            x = resample_poly(x, 16_000, rate)
        return np.asarray(self._encoder.embed_utterance(self._preprocess(x, source_sr=16_000)))


def tonal_syllables(text: str) -> list[str]:
    """Han characters of ``text`` as pinyin with tone numbers (simplified first, digits as
    Chinese numerals, punctuation and Latin dropped): for the tone proxy only."""
    import cn2an
    from opencc import OpenCC
    from pypinyin import Style, lazy_pinyin

    simplified = OpenCC("t2s").convert(text)
    simplified = re.sub(r"\d+", lambda m: cn2an.an2cn(m.group(0)), simplified)
    han = "".join(re.findall(r"[\u4e00-\u9fff]", simplified))
    return lazy_pinyin(han, style=Style.TONE3, neutral_tone_with_five=True) if han else []


def tonal_edits(reference: str, hypothesis: str) -> tuple[int, int]:
    ref, hyp = tonal_syllables(reference), tonal_syllables(hypothesis)
    return sum(op != "=" for op, _, _ in align(ref, hyp)), len(ref)


def breakdown(paths: list[Path]) -> int:
    """What kind of errors each variant's items have, from recorded results (no synthesis, no
    judge): reference syllables substituted with the same final and another initial, the same
    initial and another final, both different; deleted; inserted; and the commonest confusions."""
    from pypinyin.style._utils import get_initials

    def split(syllable: str) -> tuple[str, str]:
        initial = get_initials(syllable, strict=False)
        return initial, syllable[len(initial) :]

    items: dict[str, list[dict[str, Any]]] = {}
    for path in paths:
        for f in json.loads(path.read_text(encoding="utf-8"))["figures"]:
            if "variant" in f and "hypothesis" in f:
                items.setdefault(f["variant"], []).append(f)
    for variant, mine in items.items():
        kinds: dict[str, int] = {"initial": 0, "final": 0, "both": 0, "del": 0, "ins": 0}
        confusions: dict[str, int] = {}
        for r in mine:
            s = score(r["text"], r["hypothesis"], "zh")
            for op, ref, hyp in align(list(s.ref_units), list(s.hyp_units)):
                if op == "sub":
                    (ri, rf), (hi, hf) = split(ref), split(hyp)
                    kinds["initial" if rf == hf else "final" if ri == hi else "both"] += 1
                    confusions[f"{ref}>{hyp}"] = confusions.get(f"{ref}>{hyp}", 0) + 1
                elif op != "=":
                    kinds[op] += 1
        units = sum(r["units"] for r in mine)
        common = sorted(confusions.items(), key=lambda kv: (-kv[1], kv[0]))[:8]
        print(json.dumps({"breakdown": {"variant": variant, "units": units, **kinds, "common": dict(common)}},
                         ensure_ascii=False))  # fmt: skip
    return 0


def load_pcm(name: str) -> np.ndarray:
    path = VOICES / f"{name}.wav"
    if not path.is_file():
        path = VOICES / "dev" / f"{name}.flac"
    audio, rate = sf.read(str(path), dtype="float64", always_2d=True)
    mono = resample_poly(audio.mean(axis=1), 16_000, int(rate))
    return np.clip(np.round(mono * 32767), -32768, 32767).astype(np.int16)


# --- the run -------------------------------------------------------------------------------------


def _memo_say(engine: BuiltinEngine) -> Callable[..., Any]:
    """Kokoro's reading of a sentence, once per (sentence, voice, speed): every variant and
    every prompt with that base voice gets the same base audio."""
    kokoro = engine._kokoro
    assert kokoro is not None
    original = kokoro.say
    memo: dict[Any, Any] = {}

    def say(sentence: Any, voice: str, speed: float) -> Any:
        key = (sentence, voice, speed)
        if key not in memo:
            memo[key] = original(sentence, voice, speed)
        x, residual = memo[key]
        return x.copy(), residual

    kokoro.say = say  # type: ignore[method-assign]
    return original


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--voices", type=int, default=len(PROMPTS), help="the first N prompt voices")
    parser.add_argument("--sentences", type=int, default=len(SENTENCES), help="the first N sentences")
    parser.add_argument("--variants", default=",".join(DEFAULT), help="comma-separated labels, or all")
    parser.add_argument("--no-similarity", action="store_true", help="skip resemblyzer")
    parser.add_argument("--breakdown", type=Path, nargs="+", help="only the error kinds of recorded results")
    args = parser.parse_args(argv)
    if args.breakdown:
        return breakdown(args.breakdown)

    t0 = time.monotonic()
    load_before = [round(v, 2) for v in os.getloadavg()]
    names = PROMPTS[: args.voices]
    sentences = SENTENCES[: args.sentences]
    variants = VARIANTS
    if args.variants != "all":
        wanted = [v.strip() for v in args.variants.split(",")]
        variants = [v for v in VARIANTS if v.label in wanted]
    embed: Embedder | None = None
    similarity_note = "resemblyzer GE2E"
    if not args.no_similarity:
        try:
            embed = Embedder()
        except Exception as exc:  # a bench without its optional scorer
            similarity_note = f"skipped: {type(exc).__name__}: {exc}"
    else:
        similarity_note = "skipped (--no-similarity)"
    if embed is None:
        variants = [v for v in variants if not v.nearest]

    judge = Judge()
    engine = BuiltinEngine(BuiltinConfig(base="kokoro"))
    if engine.base != "kokoro":
        raise SystemExit("the Kokoro base is not installed (./run.sh installs it)")
    rate = engine.sample_rate
    raw_say = _memo_say(engine)
    profiles = {n: engine.extract_voice(load_pcm(n), "") for n in names}
    refs = {n: embed(load_pcm(n), 16_000) for n in names} if embed is not None else {}

    # Per voice: the base it is read in, and what the F0 mapping does to the base's contour.
    voice_info: dict[str, dict[str, Any]] = {}
    zh_voices = [v for v in engine._kokoro.voices.names if v.startswith(("zf_", "zm_"))]  # type: ignore[union-attr]
    calib: dict[str, np.ndarray] = {}
    if embed is not None and any(v.nearest for v in variants):
        sentence = engine._kokoro.sentences(engine._read(CALIBRATION))[0]  # type: ignore[union-attr]
        for v in zh_voices:
            x, _ = raw_say(sentence, v, 1.0)
            calib[v] = embed(x, rate)
    for n in names:
        params = profiles[n].params
        pool = FramePool.from_stored(dict(params["pool"]), profiles[n].blob)
        info: dict[str, Any] = {
            "base_voice": plan.BASE_VOICES[("zh", params["pitch_class"])],
            "prompt_f0_hz": round(math.exp(pool.log_f0_mean), 1),
            "prompt_log_f0_std_st": round(pool.log_f0_std * 12 / math.log(2), 2),
            "pool_voiced_frames": int(pool.voiced.sum()),
        }
        if calib:
            sims = {v: float(e @ refs[n]) for v, e in calib.items()}
            info["nearest_voice"] = max(sims, key=sims.__getitem__)
            info["base_voices_similarity"] = {v: round(s, 3) for v, s in sims.items()}
        voice_info[n] = info

    rows: list[dict[str, Any]] = []
    judged: dict[str, tuple[str, Any, tuple[int, int]]] = {}
    embedded: dict[str, np.ndarray] = {}
    checked_identity = False
    for spec in variants:
        for n in names:
            install(spec, voice_info[n].get("nearest_voice"))
            for text in sentences:
                started = time.process_time()
                result = engine.synthesise(text, profiles[n], style="", seed=SEED, speed=1.0, mode="cross_lingual")
                synth_cpu = time.process_time() - started
                audio = np.asarray(result.audio, dtype=np.float32)
                if spec.kind == "shipped" and not checked_identity and not spec.nearest:
                    # The switchable copy with every stage on must be the shipped transfer.
                    weight = plan._MATCHED_ENVELOPE["kokoro"]
                    install(Spec("check", "", env=weight, f0=True, ap=True, shift=weight < 1.0), None)
                    again = engine.synthesise(text, profiles[n], style="", seed=SEED, speed=1.0, mode="cross_lingual")
                    install(spec, None)
                    if not np.array_equal(np.asarray(again.audio, dtype=np.float32), audio):
                        raise SystemExit("the staged transfer with every stage on differs from convert.transfer")
                    checked_identity = True
                    print(f"# staged transfer (matched {weight:g}) == convert.transfer: bit-identical", flush=True)
                key = _key(audio)
                if key not in judged:
                    s = score(text, judge.transcribe(audio, rate, "zh"), "zh")
                    judged[key] = (s.hypothesis, s, tonal_edits(text, s.hypothesis))
                hypothesis, s, (t_edits, t_units) = judged[key]
                row: dict[str, Any] = {
                    "variant": spec.label, "voice": n, "text": text, "hypothesis": hypothesis,
                    "edits": s.edits, "units": len(s.ref_units), "tonal_edits": t_edits, "tonal_units": t_units,
                    "base_voice": result.info.get("base_voice"), "seconds": round(audio.size / rate, 3),
                    "synth_cpu_s": round(synth_cpu, 3),
                }  # fmt: skip
                if embed is not None:
                    if key not in embedded:
                        embedded[key] = embed(audio, rate)
                    row["similarity"] = round(float(embedded[key] @ refs[n]), 4)
                    row["_emb"] = embedded[key]
                rows.append(row)
                print(json.dumps({k: v for k, v in row.items() if k != "_emb"}, ensure_ascii=False), flush=True)
        print(f"# {spec.label} done at {time.monotonic() - t0:.0f} s, load {os.getloadavg()[0]:.1f}", flush=True)

    plan.transfer = _SHIPPED  # type: ignore[assignment]
    plan.Plan.kokoro_voice = _ORIGINAL_VOICE  # type: ignore[method-assign]
    engine.close()

    summary = []
    for spec in variants:
        mine = [r for r in rows if r["variant"] == spec.label]
        edits, units = sum(r["edits"] for r in mine), sum(r["units"] for r in mine)
        t_edits, t_units = sum(r["tonal_edits"] for r in mine), sum(r["tonal_units"] for r in mine)
        entry: dict[str, Any] = {
            "variant": spec.label, "what": spec.what, "items": len(mine),
            "pinyin_error": round(edits / units, 4), "edits": edits, "units": units,
            "tonal_error": round(t_edits / t_units, 4), "tone_only": round(t_edits / t_units - edits / units, 4),
            "perfect_items": sum(r["edits"] == 0 for r in mine),
            "per_voice": {n: round(sum(r["edits"] for r in mine if r["voice"] == n)
                                   / max(1, sum(r["units"] for r in mine if r["voice"] == n)), 3) for n in names},
        }  # fmt: skip
        if embed is not None:
            entry["similarity"] = round(float(np.mean([r["similarity"] for r in mine])), 4)
            ident = 0
            for n in names:
                mean = np.mean([r["_emb"] for r in mine if r["voice"] == n], axis=0)
                ident += max(refs, key=lambda m: float(mean @ refs[m])) == n
            entry["identified"] = f"{ident}/{len(names)}"
        summary.append(entry)
        print(json.dumps({"summary": entry}, ensure_ascii=False), flush=True)
    print(json.dumps({"voices": voice_info}, ensure_ascii=False), flush=True)
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"run": {
        "voices": names, "sentences": sentences, "seed": SEED, "model_version": engine.model_version,
        "similarity": similarity_note, "judge": "faster-whisper, Whisper base int8 (tests/judge.py), greedy",
        "seconds": round(time.monotonic() - t0, 1), "cpu_seconds": round(cpu.ru_utime + cpu.ru_stime, 1),
        "load_before": load_before, "load_after": [round(v, 2) for v in os.getloadavg()],
    }}, ensure_ascii=False), flush=True)  # fmt: skip

    print("\n| variant | what | pinyin error | tonal error (tone only) | perfect items | similarity | identified |")
    print("|---|---|---:|---:|---:|---:|:-:|")
    for e in summary:
        print(f"| {e['variant']} | {e['what']} | {e['pinyin_error']:.3f} ({e['edits']}/{e['units']}) | "
              f"{e['tonal_error']:.3f} ({e['tone_only']:+.3f}) | {e['perfect_items']}/{e['items']} | "
              f"{e.get('similarity', float('nan')):.3f} | {e.get('identified', '-')} |")  # fmt: skip
    print("\nper voice (pinyin error):", flush=True)
    for e in summary:
        print(f"  {e['variant']:16s} " + "  ".join(f"{n} {v:.3f}" for n, v in e["per_voice"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
