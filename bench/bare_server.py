"""The floor for ``bench_http.py --compare-bare``: a bare FastAPI app that does the
least work for the same requests as the real API -- GET answers the same bytes from
memory; POST parses the same multipart upload and answers the same bytes -- served by
the same uvicorn settings as the API (``lib.api.serving.uvicorn_config`` with the
``server:`` section of config.yaml: the header deadline, keep-alive, connection and
header limits), so that the ratio measures the app alone, in both directions.

    python bench/bare_server.py PORT BODY_FILE
"""

from __future__ import annotations

import sys
from pathlib import Path

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import Response

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lib.api.serving import uvicorn_config
from lib.config import default_config_path, load_config


def create(body: bytes) -> FastAPI:
    app = FastAPI()

    @app.get("/api/audio/{name}")
    async def audio(name: str) -> Response:
        return Response(body, media_type="audio/wav")

    @app.post("/api/tts")
    async def tts(request: Request) -> Response:
        form = await request.form()
        if "text" not in form:
            return Response(status_code=400)
        await form.close()
        return Response(body, media_type="audio/wav")

    return app


if __name__ == "__main__":
    port, body_file = int(sys.argv[1]), Path(sys.argv[2])
    server = load_config(default_config_path()).server
    config = uvicorn_config(create(body_file.read_bytes()), server, port=port, log_level="warning", access_log=False)
    uvicorn.Server(config).run()
