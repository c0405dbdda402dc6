"""One app replica for the multi-process shared-tier tests (and bench/bench_shared.py).

Builds a :class:`lib.pipeline.service.TTSService` with the ``tone`` engine (optionally slow),
its own local cache directory and a shared Redis, and serves a tiny JSON protocol
over loopback HTTP (threaded, so concurrent requests overlap in the service):

    POST /synth  {"text", "voice"?, "prompt_path"?, "prompt_text"?, "seed"?}
                 -> {"key", "cache", "tier", "wav_sha256", "wav_bytes"}
    POST /voice  {"name", "prompt_path", "prompt_text"?} -> the saved voice
    POST /delete_voice {"name"} -> {"deleted": name}
    POST /evict  {"tag"} -> the admin report;  POST /clear {} -> the admin report
    POST /lookup {"key"} -> {"memory", "disk", "shared"}: which tiers hold the entry (no copying)
    GET  /status -> {"engine_calls", "extract_calls", "voices", "local_voices", "shared", "metrics"}
    POST /batch  {"id"?, "items"} -> a batch job submitted (lib.batch.jobs; with --batch-lease)
    GET  /batch/<id> -> the job's status and items
    POST /quit   -> closes the service and exits

Prints ``PORT <n>`` on stdout once it listens. Usage:
    python tests/shared_replica.py --cache-dir DIR --shared-url redis://... [--delay 0.5] [--batch-lease 2]

With ``--batch-lease`` the replica's batch worker runs (``batch.lease_seconds``): it takes
items of every replica's jobs from the Redis Stream.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lib.batch.jobs import BatchJobs, ItemSpec
from lib.config import load_config
from lib.engines.tone import ToneEngine
from lib.errors import TTSError
from lib.pipeline.service import TTSService
from lib.request.access import LOCAL
from lib.request.types import TTSRequest


def build_service(cache_dir: str, shared_url: str | None, delay: float, batch_lease: float | None = None) -> TTSService:
    overrides = {
        "engine": "tone", "cache.dir": cache_dir, "cache.shared_url": shared_url, "voices.prewarm": False,
        "batch.lease_seconds": batch_lease,
    }  # fmt: skip
    config = load_config(env={}, overrides=overrides)
    return TTSService(config, engine=ToneEngine(delay=delay))


class _Handler(BaseHTTPRequestHandler):
    service: TTSService
    engine: ToneEngine

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length", "0"))
        loaded = json.loads(self.rfile.read(length) or b"{}")
        return loaded if isinstance(loaded, dict) else {}

    def do_GET(self) -> None:
        if self.path.startswith("/batch/"):
            try:
                self._reply(200, dict(BatchJobs.of(self.service).status(self.path[len("/batch/") :])))
            except TTSError as exc:
                self._reply(exc.http_status, {"error": str(exc)})
            return
        if self.path != "/status":
            self._reply(404, {"error": "not found"})
            return
        svc = self.service
        self._reply(
            200,
            {
                "engine_calls": self.engine.calls,
                "extract_calls": self.engine.extract_calls,
                "voices": [v["name"] for v in svc.voices.list(caller=LOCAL) if v["kind"] == "saved"],
                "local_voices": _local_voices(svc),
                "shared": svc.cache.shared.status() if svc.cache.shared is not None else None,
                "metrics": svc.dashboard.metrics.exposition().decode(),
            },
        )

    def do_POST(self) -> None:
        body = self._body()
        try:
            if self.path == "/synth":
                prompt = body.get("prompt_path")
                request = TTSRequest(
                    text=body["text"], voice=body.get("voice"), prompt_audio=prompt,
                    prompt_text=body.get("prompt_text", ""), seed=int(body.get("seed", 0)),
                )  # fmt: skip
                result = self.service.synthesise(request)
                self._reply(
                    200,
                    {
                        "key": result.key,
                        "cache": result.cache,
                        "tier": result.info.get("tier", ""),
                        "wav_sha256": hashlib.sha256(result.wav).hexdigest(),
                        "wav_bytes": len(result.wav),
                    },
                )
            elif self.path == "/voice":
                saved = self.service.voices.save(
                    body["name"], body["prompt_path"], body.get("prompt_text", ""), caller=LOCAL
                )
                self._reply(200, saved)
            elif self.path == "/delete_voice":
                self.service.voices.delete(body["name"], caller=LOCAL)
                self._reply(200, {"deleted": body["name"]})
            elif self.path == "/evict":
                self._reply(200, self.service.admin.evict(body["tag"], caller=LOCAL))
            elif self.path == "/clear":
                self._reply(200, self.service.admin.clear(caller=LOCAL))
            elif self.path == "/lookup":
                key, svc = body["key"], self.service
                shared = svc.cache.shared is not None and svc.cache.shared.get(key) is not None
                tiers = {"memory": svc.cache.memory_entry(key) is not None, "disk": svc.cache.store.contains(key)}
                self._reply(200, {**tiers, "shared": shared})
            elif self.path == "/batch":
                specs = [ItemSpec(item) for item in body["items"]]
                summary, _ = BatchJobs.of(self.service).submit(specs, job_id=body.get("id"), caller=LOCAL)
                self._reply(200, dict(summary))
            elif self.path == "/quit":
                self._reply(200, {"bye": True})
                threading.Thread(target=self.server.shutdown, daemon=True).start()
            else:
                self._reply(404, {"error": "not found"})
        except TTSError as exc:
            self._reply(exc.http_status, {"error": str(exc)})
        except Exception as exc:  # report, never hang the test
            self._reply(500, {"error": f"{type(exc).__name__}: {exc}"})


def _local_voices(service: TTSService) -> list[str]:
    """The voices in this replica's own disk store (not the shared tier)."""
    with service.voices.library.store.using("test") as cache:
        keys = list(cache.iterkeys()) if cache is not None else []
    return sorted(str(k)[len("voice:") :] for k in keys if str(k).startswith("voice:"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cache-dir", required=True)
    parser.add_argument("--shared-url", default=None)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds the tone engine sleeps per call")
    parser.add_argument("--batch-lease", type=float, default=None, help="run the batch worker (batch.lease_seconds)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    service = build_service(args.cache_dir, args.shared_url, args.delay, args.batch_lease)
    if args.batch_lease is not None:
        BatchJobs.of(service)  # with the Redis tier its worker starts now
    handler = type("Handler", (_Handler,), {"service": service, "engine": service.engine})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    print(f"PORT {server.server_address[1]}", flush=True)
    try:
        server.serve_forever(poll_interval=0.1)
    finally:
        server.server_close()
        service.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
