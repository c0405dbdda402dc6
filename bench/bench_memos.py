"""What each memo in front of the cache is worth on the hit path: the app's cost per
``POST /api/tts`` hit with every memo, and with one memo turned off at a time.

The memos on a hit's way to the memory tier: the resolver's memo of resolved requests in
preset voices (``Resolver._presets``: a hit skips validation, the reading and the key), the
text front end's memo of readings (``FrontEnd._memo``: jieba and pypinyin once per text),
the readings' memo of the key's reading part (``Readings._parts``: the lexicon's term scan),
and the prompt decoder's memo (``PromptDecoder``: an uploaded recording found by its bytes,
not decoded again). The others are not in front of the cache's lookup: a click's resolution
in the web UI (``lib.ui.forms.Resolutions``: one resolution for a click's check and its
handler), the fast path's route lookup, the voice profiles (engine work on a miss).

Calls the ASGI app in process as ``bench/bench_app.py`` does (no server, no socket),
``--rounds`` rounds of ``--requests`` each, and prints the median microseconds per hit and
the ratio to the run with every memo.

    python bench/bench_memos.py [--rounds 5] [--requests 1000] [--prompt FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_app import Headers, call, per_request  # noqa: E402
from bench_http import BOUNDARY, multipart, prompt_bytes  # noqa: E402


class _Forgetful(dict[Any, Any]):
    """A memo that keeps nothing."""

    def __setitem__(self, key: Any, value: Any) -> None:
        return None


def _no_resolver_memo(service: Any) -> None:
    service._resolver._presets = _Forgetful()


def _no_reading_memo(service: Any) -> None:
    service.readings.front_end._memo_size = 0
    service.readings.front_end._memo.clear()


def _no_key_part_memo(service: Any) -> None:
    service.readings._parts = _Forgetful()


def _no_prompt_memo(service: Any) -> None:
    decoder = service.voices.decoder
    decoder._memo.put = lambda *args, **kwargs: None
    decoder._memo.clear()


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=1000, help="requests per round and case")
    parser.add_argument("--prompt", help="the recording of the uploaded-prompt case (default: the shared male prompt)")
    args = parser.parse_args()
    os.environ.setdefault("TTS_VOICES_PREWARM", "false")
    from lib.api import create_app
    from lib.config import load_config
    from lib.pipeline.service import TTSService
    from lib.request.access import LOCAL

    text = "Passengers for the five fifteen train to Shanghai, please proceed to gate seven now."
    name, recording = prompt_bytes(args.prompt)
    cases: list[tuple[str, Callable[[Any], None] | None, bool]] = [
        ("every memo", None, False),
        ("no resolver memo", _no_resolver_memo, False),
        ("no resolver, key-part memo", lambda s: (_no_resolver_memo(s), _no_key_part_memo(s)), False),
        ("no resolver, reading memo", lambda s: (_no_resolver_memo(s), _no_reading_memo(s)), False),
        (
            "no resolver, reading, key-part",
            lambda s: (_no_resolver_memo(s), _no_reading_memo(s), _no_key_part_memo(s)),
            False,
        ),
        ("prompt: every memo", None, True),
        ("prompt: no prompt memo", _no_prompt_memo, True),
    ]
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'POST /api/tts hit':32} {'us':>8} {'x every memo':>13}")
    base: dict[bool, float] = {}
    for label, turn_off, with_prompt in cases:
        config = load_config(env={}, overrides={"engine": "tone", "cache.dir": tempfile.mkdtemp(prefix="bench-memo-")})
        service = TTSService(config)
        try:
            app = create_app(service)
            voice = next(v["name"] for v in service.voices.list(caller=LOCAL) if v["kind"] == "preset")
            form = (
                multipart({"text": text}, {"prompt_audio": (name, recording)})
                if with_prompt
                else multipart({"text": text, "voice": voice})
            )
            headers: Headers = [
                (b"host", b"bench"),
                (b"content-type", f"multipart/form-data; boundary={BOUNDARY}".encode()),
                (b"content-length", str(len(form)).encode()),
            ]
            first = await call(app, "POST", "/api/tts", headers, form)  # the MISS that makes the entry
            if first[0]["status"] != 200:
                raise RuntimeError(f"{label}: {first[1]['body'][:200]!r}")
            if turn_off is not None:
                turn_off(service)
            rounds = [
                await per_request(app, "POST", "/api/tts", headers, form, args.requests) for _ in range(args.rounds)
            ]
            us = statistics.median(rounds)
            base.setdefault(with_prompt, us)
            print(f"{label:32} {us:8.1f} {us / base[with_prompt]:13.2f}")
        finally:
            service.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
