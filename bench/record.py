"""Run one benchmark and keep what it printed as a dated JSON result under bench/results/.

    .venv/bin/python bench/record.py bench_cache.py [its arguments...]

writes ``bench/results/<bench>-<UTC date>[-N].json``::

    {"bench": "bench_cache.py", "args": [...], "started": "2026-12-01T20:15:03Z",
     "seconds": 41.2, "exit_code": 0, "commit": "95426dd", "dirty": false,
     "machine": {"cores": 2, "load_before": [..], "load_after": [..], "python": "3.11.7"},
     "figures": [<each line the bench printed that is a JSON object>],
     "output": [<every line it printed>]}

The bench's own output is passed through unchanged as it runs. The docs cite these files:
a figure in README.md or docs/ names the result it came from, and the load average says
how busy the machine was (a shared machine's wall-clock figures mean little without it).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"


def _git(*args: str) -> str:
    try:
        done = subprocess.run(["git", *args], cwd=HERE, capture_output=True, text=True, timeout=10, check=False)
    except OSError:
        return ""
    return done.stdout.strip()


def _figure(line: str) -> dict[str, Any] | None:
    line = line.strip()
    if not (line.startswith("{") and line.endswith("}")):
        return None
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _target(bench: str, day: str) -> Path:
    stem = Path(bench).stem
    path = RESULTS / f"{stem}-{day}.json"
    n = 2
    while path.exists():
        path = RESULTS / f"{stem}-{day}-{n}.json"
        n += 1
    return path


def main(argv: list[str]) -> int:
    if not argv or not (HERE / argv[0]).is_file():
        names = ", ".join(sorted(p.name for p in HERE.glob("bench_*.py")))
        print(f"usage: bench/record.py BENCH.py [args...]; benches: {names}", file=sys.stderr)
        return 2
    bench, args = argv[0], argv[1:]
    started = dt.datetime.now(dt.UTC)
    load_before = list(os.getloadavg())
    t0 = time.monotonic()
    lines: list[str] = []
    with subprocess.Popen(
        [sys.executable, str(HERE / bench), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as proc:
        for line in proc.stdout or ():
            sys.stdout.write(line)
            sys.stdout.flush()
            lines.append(line.rstrip("\n"))
    result = {
        "bench": bench,
        "args": args,
        "started": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "seconds": round(time.monotonic() - t0, 1),
        "exit_code": proc.returncode,
        "commit": _git("rev-parse", "--short", "HEAD"),
        "dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "machine": {
            "cores": os.cpu_count(),
            "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in os.getloadavg()],
            "python": platform.python_version(),
        },
        "figures": [f for f in map(_figure, lines) if f is not None],
        "output": lines,
    }
    RESULTS.mkdir(exist_ok=True)
    path = _target(bench, started.strftime("%Y-%m-%d"))
    path.write_text(json.dumps(result, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"recorded: {path.relative_to(HERE.parent)}", file=sys.stderr)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
