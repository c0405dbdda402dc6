"""Benchmark of sentence segments, templates and streaming (builtin engine unless
``--engine tone``; real diskcache under a temporary directory).

Prints, as medians over several runs:
- a 300-character paragraph: time to the first audio of a streamed answer vs time to the
  whole result, and vs one engine call for the whole text (what a miss cost before);
- a 10-sentence paragraph with one sentence changed: engine time vs the first synthesis;
- 1,000 random ticket calls after preloading one template's pieces: the share answered
  with no engine call, and p50 / p99 latency.

Run: .venv/bin/python bench/bench_segments.py [--runs N] [--calls N] [--engine tone]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lib.batch.preload import preload
from lib.compose.segments import split
from lib.compose.templates import parse_templates
from lib.config import load_config
from lib.pipeline.service import TTSService
from lib.request.access import LOCAL
from lib.request.types import TTSRequest
from lib.text.normalise import normalise_text

#: 302 characters, 12 sentences: a station notice.
PARAGRAPH = (
    "各位旅客请注意，开往北京南站的G102次列车即将开始检票。请持有本次车票的旅客到十二号检票口排队检票。"
    "检票时请出示您的车票和有效身份证件，并配合工作人员进行安全检查。"
    "携带大件行李的旅客请提前做好准备，不要在检票口附近停留。"
    "老人、儿童和行动不便的旅客可以走绿色通道，工作人员会为您提供帮助。"
    "列车停靠本站的时间为三分钟，请您抓紧时间上车，上车后请对号入座。"
    "车厢内禁止吸烟，请照看好您的随身物品，注意防范盗窃。"
    "如果您需要补票或者改签，请到二号售票窗口办理相关手续。"
    "本站候车室设有饮水处和充电区，欢迎您使用。"
    "列车运行期间，请不要在车门附近逗留，以免发生危险。"
    "感谢您选择铁路出行，祝您旅途愉快，一路平安！谢谢合作。"
)
TEMPLATE = {
    "voices": {"counter": "zh-male"},
    "templates": [{
        "template": "请{ticket}号顾客到{window}号窗口办理业务。", "voice": "counter",
        "slots": {"ticket": {"pattern": "[A-Z][0-9]{3}", "read": "characters"},
                  "window": {"values": [str(n) for n in range(1, 11)], "read": "number"}},
    }],
}  # fmt: skip


def _service(cache_dir: str, engine: str) -> TTSService:
    overrides: dict[str, Any] = {"engine": engine, "cache.dir": cache_dir, "voices.prewarm": False}
    return TTSService(load_config(env={"TTS_TEMPLATES_FILE": "null"}, overrides=overrides))


def _voice(engine: str) -> str:
    return "zh-female" if engine == "builtin" else "tone-low"


def bench_first_audio(engine: str, runs: int) -> None:
    firsts, wholes, direct = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        svc = _service(tmp, engine)
        try:
            svc.synthesise(TTSRequest(text="预热。", voice=_voice(engine)))  # the engine's first-call costs
            for run in range(runs):
                request = TTSRequest(text=PARAGRAPH, voice=_voice(engine), seed=1000 + run)  # a new key each run
                started = time.perf_counter()
                answer = svc.stream(request)
                chunks = iter(answer.chunks)
                next(chunks)
                firsts.append(time.perf_counter() - started)
                for _ in chunks:
                    pass
                answer.result()
                wholes.append(time.perf_counter() - started)
                resolved = svc.resolve(request)
                voice = svc.voices.profile(resolved)
                f = resolved.fields
                t = time.perf_counter()
                svc.engine.synthesise(f.text, voice, style=f.style, seed=f.seed, speed=f.speed, mode=f.mode)
                direct.append(time.perf_counter() - t)
        finally:
            svc.close()
    first, whole, one = (statistics.median(x) * 1e3 for x in (firsts, wholes, direct))
    print(f"300-character paragraph ({len(PARAGRAPH)} chars, {engine}), medians of {runs} runs:")
    print(f"  first audio of a streamed miss   {first:8.1f} ms")
    print(f"  whole result (12 segments)       {whole:8.1f} ms   first audio at {first / whole:.0%} of it")
    print(f"  one engine call for the text     {one:8.1f} ms   (a miss before segments)")


def bench_edit(engine: str, runs: int) -> None:
    sentences = [s.text for s in split(normalise_text(PARAGRAPH), 80)][:10]
    full, edited, wall_full, wall_edit = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        svc = _service(tmp, engine)
        try:
            svc.synthesise(TTSRequest(text="预热。", voice=_voice(engine)))
            for run in range(runs):
                seed = 2000 + run
                first = svc.synthesise(TTSRequest(text="".join(sentences), voice=_voice(engine), seed=seed))
                changed = list(sentences)
                changed[run % 10] = "现在" + changed[run % 10]
                second = svc.synthesise(TTSRequest(text="".join(changed), voice=_voice(engine), seed=seed))
                if second.info.get("segments_synthesised") != 1:
                    raise RuntimeError(f"expected one new sentence, got {second.info}")
                full.append(first.timings["engine"])
                edited.append(second.timings["engine"])
                wall_full.append(first.timings["total"])
                wall_edit.append(second.timings["total"])
        finally:
            svc.close()
    f, e = statistics.median(full), statistics.median(edited)
    print(f"10-sentence paragraph, one sentence changed ({engine}), medians of {runs} runs:")
    print(f"  engine time, first synthesis     {f:8.1f} ms   (request {statistics.median(wall_full):.1f} ms)")
    print(f"  engine time, after the edit      {e:8.1f} ms   (request {statistics.median(wall_edit):.1f} ms)"
          f"   = {e / f:.2f} of the whole")  # fmt: skip


def bench_tickets(engine: str, runs: int, calls: int) -> None:
    shares, p50s, p99s, preload_s = [], [], [], []
    for run in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            svc = _service(tmp, engine)
            try:
                voice = "zh-male" if engine == "builtin" else "tone-low"
                templates = parse_templates(dict(TEMPLATE, voices={"counter": voice}), base_dir=Path(tmp))
                svc.templates.add(templates, caller=LOCAL)
                t = time.perf_counter()
                report = preload(svc, [], templates=templates, caller=LOCAL)
                preload_s.append(time.perf_counter() - t)
                svc.cache.flush()
                rng = random.Random(run)
                before = svc.dashboard.stats.counters()["engine_calls"]
                times, free = [], 0
                for _ in range(calls):
                    ticket = f"{rng.choice('ABCDEFGHIJKLMNOPQRSTUVWXYZ')}{rng.randrange(1000):03d}"
                    text = f"请{ticket}号顾客到{rng.randrange(1, 11)}号窗口办理业务。"
                    calls_before = svc.dashboard.stats.counters()["engine_calls"]
                    t = time.perf_counter()
                    result = svc.synthesise(TTSRequest(text=text, voice=voice))
                    times.append((time.perf_counter() - t) * 1e3)
                    free += svc.dashboard.stats.counters()["engine_calls"] == calls_before
                    if result.cache not in ("COMPOSED", "HIT"):
                        raise RuntimeError(f"expected a composed answer, got {result.cache}")
                spent = svc.dashboard.stats.counters()["engine_calls"] - before
                if spent != calls - free:
                    raise RuntimeError("engine-call accounting is off")
                times.sort()
                shares.append(free / calls)
                p50s.append(statistics.median(times))
                p99s.append(times[int(len(times) * 0.99) - 1])
            finally:
                svc.close()
    print(f"{calls} random ticket calls after preloading one template ({engine}), medians of {runs} runs:")
    print(f"  pieces preloaded                 {report.total} in {statistics.median(preload_s):.1f} s")
    print(f"  answered with no engine call     {statistics.median(shares):.1%}")
    print(f"  latency p50 / p99                {statistics.median(p50s):.2f} ms / {statistics.median(p99s):.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--engine", default="builtin", choices=("builtin", "tone"))
    args = parser.parse_args()
    bench_first_audio(args.engine, args.runs)
    bench_edit(args.engine, args.runs)
    bench_tickets(args.engine, max(args.runs // 2, 1), args.calls)


if __name__ == "__main__":
    main()
