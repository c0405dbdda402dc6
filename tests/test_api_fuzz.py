"""Property-based fuzz of the HTTP API from its own OpenAPI schema (schemathesis),
through a real server on a loopback port: no input may cause a 5xx."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import product
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from lib.api import create_app
from lib.config import load_config
from lib.engines.tone import ToneEngine
from lib.pipeline.service import TTSService
from tests.api_server import LiveServer

TOKEN = "fuzz-token"


@pytest.fixture(
    scope="module",
    params=["tone", "builtin"],
)
def live(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    cache = Path(tmp_path_factory.mktemp("fuzz")) / "cache"
    overrides = {
        "engine": request.param, "cache.dir": str(cache), "voices.prewarm": False, "builtin.base": "espeak",
        "readings.lexicon": str(cache.parent / "lexicon.json"),  # fuzzed edits: never the working directory's
    }  # fmt: skip
    config = load_config(env={}, overrides=overrides)
    engine = ToneEngine(seconds_per_char=0.01) if request.param == "tone" else None
    service = TTSService(config, engine, admin_token=TOKEN)
    with LiveServer(create_app(service)) as server:
        yield server
    service.close()


def test_no_server_errors(live: LiveServer) -> None:
    # The operations are walked by hand (schemathesis' pytest plugin does not run under
    # this pytest); each gets its own hypothesis run, and every failure is reported.
    schema = schemathesis.openapi.from_url(f"{live.url}/openapi.json")
    failures: list[str] = []
    operations = 0
    for found, mode in product(schema.get_all_operations(), (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)):
        operation = found.ok()
        operations += 1

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def run(case: Any) -> None:
            case.headers = {**(case.headers or {}), "Authorization": f"Bearer {TOKEN}"}
            case.call_and_validate(checks=[not_a_server_error])

        try:
            run()
        except Unsatisfiable:
            continue  # nothing to negate (no parameters, or only free-form strings)
        except Exception as exc:
            failures.append(f"{operation.method.upper()} {operation.path} ({mode.value}): {exc}")
    assert operations >= 22
    metrics = httpx.get(f"{live.url}/metrics").text
    sent = sum(
        float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines() if line.startswith("tts_http_requests_total{")
    )
    assert sent > 200  # the fuzz really ran
    assert not failures, "\n\n".join(failures)
