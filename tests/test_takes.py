"""Approved takes over the real HTTP API (tone engine, real diskcache store): render
takes, approve one, unseeded requests answered it (``X-Take: approved``), seeded ones
not, withdraw, restart, access, needs review after a model upgrade, bad input."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import in_process

from lib.api import create_app
from lib.config import load_config
from lib.engines.tone import ToneEngine
from lib.pipeline.service import TTSService
from lib.request.access import LOCAL
from lib.request.types import TTSRequest
from tests.api_server import LiveServer

TOKEN = "takes-admin-token"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
TEXT = "Train 42 to the airport leaves from platform 3"


class ToneTwo(ToneEngine):
    """The same engine after a model upgrade: other audio, another version."""

    model_version = "tone-2"


def make_service(folder: Path, engine: ToneEngine | None = None, **overrides: Any) -> TTSService:
    values: dict[str, Any] = {"engine": "tone", "cache.dir": str(folder), "voices.prewarm": False, **overrides}
    return TTSService(load_config(env={}, overrides=values), engine or ToneEngine(), admin_token=TOKEN)


@pytest.fixture
def service(tmp_path: Path) -> Iterator[TTSService]:
    svc = make_service(tmp_path / "cache")
    yield svc
    svc.close()


@pytest.fixture
def live(service: TTSService) -> Iterator[LiveServer]:
    with LiveServer(create_app(service)) as server:
        yield server


@pytest.fixture
def client(live: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live.url, timeout=30) as c:
        yield c


def tts(client: httpx.Client, **fields: Any) -> httpx.Response:
    data = {"text": TEXT, "voice": "tone-low", **{k: str(v) for k, v in fields.items()}}
    return client.post("/api/tts", data=data)


def render(client: httpx.Client, **fields: Any) -> list[dict[str, Any]]:
    r = client.post("/api/takes", data={"text": TEXT, "voice": "tone-low", **fields})
    assert r.status_code == 200, r.text
    takes: list[dict[str, Any]] = r.json()["takes"]
    return takes


def approve(client: httpx.Client, key: str, headers: dict[str, str] | None = None) -> httpx.Response:
    return client.post("/api/takes/approve", data={"key": key}, headers=ADMIN if headers is None else headers)


def test_takes_are_distinct_cache_entries(client: httpx.Client, service: TTSService) -> None:
    takes = render(client)
    assert [t["seed"] for t in takes] == [0, 1, 2]
    assert len({t["key"] for t in takes}) == 3
    for take in takes:
        assert set(take) == {"seed", "key", "url", "duration"} and take["duration"] > 0
        audio = client.get(take["url"])
        assert audio.status_code == 200 and audio.headers["X-Cache-Key"] == take["key"]
        # an ordinary entry: the same request with that seed is a hit on that key
        seeded = tts(client, seed=take["seed"])
        assert seeded.headers["X-Cache"] == "HIT" and seeded.headers["X-Cache-Key"] == take["key"]
        assert seeded.content == audio.content
    assert len({client.get(t["url"]).content for t in takes}) == 3  # distinct renders
    chosen = render(client, seeds="7,9")
    assert [t["seed"] for t in chosen] == [7, 9]
    json_body = client.post("/api/takes", json={"text": TEXT, "voice": "tone-low", "seeds": [7, 11]})
    assert [t["seed"] for t in json_body.json()["takes"]] == [7, 11]


def test_unseeded_requests_get_the_approved_take_and_seeded_ones_do_not(
    client: httpx.Client, live: LiveServer, service: TTSService
) -> None:
    default = tts(client)
    assert "X-Take" not in default.headers
    default_key = default.headers["X-Cache-Key"]
    takes = render(client)
    assert takes[0]["key"] == default_key  # no seed and no approval: seed 0's key, as before
    chosen = takes[2]
    r = approve(client, chosen["key"])
    assert r.status_code == 200, r.text
    assert r.json()["approved"]["seed"] == 2 and r.json()["approved"]["needs_review"] is False
    chosen_audio = client.get(chosen["url"]).content
    for _ in range(3):  # a disk or memory hit, then the fast path's memory hits
        unseeded = tts(client)
        assert unseeded.status_code == 200
        assert unseeded.headers["X-Take"] == "approved"
        assert unseeded.headers["X-Cache-Key"] == chosen["key"]
        assert unseeded.headers["X-Cache"] == "HIT"
        assert unseeded.content == chosen_audio
    streamed = client.post("/api/tts", data={"text": TEXT, "voice": "tone-low", "stream": "true"})
    assert streamed.headers["X-Take"] == "approved" and streamed.headers["X-Cache-Key"] == chosen["key"]
    # the OpenAI endpoint names no seed either
    v1 = client.post("/v1/audio/speech", json={"input": TEXT, "voice": "tone-low", "response_format": "wav"})
    assert v1.headers["X-Take"] == "approved" and v1.headers["X-Cache-Key"] == chosen["key"]
    for seed in (0, 2):  # a request that names a seed gets that seed's render, never flagged
        seeded = tts(client, seed=seed)
        assert "X-Take" not in seeded.headers
        assert seeded.headers["X-Cache-Key"] == takes[seed]["key"]
    # withdraw: back to seed 0's render
    gone = client.delete(f"/api/takes/approved/{chosen['key']}", headers=ADMIN)
    assert gone.status_code == 200 and gone.json()["withdrawn"]["key"] == chosen["key"]
    after = tts(client)
    assert "X-Take" not in after.headers and after.headers["X-Cache-Key"] == default_key
    assert client.get("/api/takes/approved").json()["approvals"] == []


def test_the_memory_hit_path_answers_the_approved_take(service: TTSService) -> None:
    first = service.synthesise(TTSRequest(text=TEXT, voice="tone-low", seed=5))
    service.takes.approve(first.key, caller=LOCAL)
    hit = service.memory_hit(TTSRequest(text=TEXT, voice="tone-low"))
    assert hit is not None and hit.take == "approved" and hit.key == first.key
    seeded = service.memory_hit(TTSRequest(text=TEXT, voice="tone-low", seed=5))
    assert seeded is not None and seeded.take == "" and seeded.key == first.key


def test_approval_survives_a_restart_and_its_files_are_private(tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    svc = make_service(folder)
    take = svc.synthesise(TTSRequest(text=TEXT, voice="tone-low", seed=3))
    svc.takes.approve(take.key, caller=LOCAL, who="night shift")
    svc.close()
    again = make_service(folder)
    try:
        with in_process(create_app(again)) as client:
            r = tts(client)
            assert r.headers["X-Take"] == "approved" and r.headers["X-Cache-Key"] == take.key
            listed = client.get("/api/takes/approved").json()["approvals"]
            assert [(a["key"], a["seed"], a["who"], a["phrase"]) for a in listed] == [
                (take.key, 3, "night shift", TEXT)
            ]
    finally:
        again.close()
    takes_dir = folder / "takes"
    assert stat.S_IMODE(os.stat(takes_dir).st_mode) == 0o700
    files = list(takes_dir.iterdir())
    assert {f.name for f in files} == {"approvals.json", f"{take.key}.take"}
    assert all(stat.S_IMODE(os.stat(f).st_mode) == 0o600 for f in files)
    assert json.loads((takes_dir / "approvals.json").read_text())["approvals"][0]["key"] == take.key


def test_approving_needs_the_admin(client: httpx.Client) -> None:
    take = render(client, n="1")[0]
    missing = approve(client, take["key"], headers={})
    assert missing.status_code == 401 and "admin" in missing.json()["error"]
    wrong = approve(client, take["key"], headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 403 and "error" in wrong.json()
    assert client.get("/api/takes/approved").json()["approvals"] == []
    assert "X-Take" not in tts(client).headers
    assert approve(client, take["key"]).status_code == 200
    assert client.delete(f"/api/takes/approved/{take['key']}").status_code == 401
    assert client.delete(f"/api/takes/approved/{take['key']}", headers={"Authorization": "Bearer x"}).status_code == 403
    assert tts(client).headers["X-Take"] == "approved"  # refused withdrawals changed nothing


def test_bad_input_is_a_clear_4xx_and_caches_nothing(client: httpx.Client, service: TTSService) -> None:
    engine: ToneEngine = service.engine  # type: ignore[assignment]
    for fields, status, words in [
        ({"n": "0"}, 422, "n:"),
        ({"n": "9"}, 422, "at most|1 to 8"),
        ({"seeds": "1,2,3,4,5,6,7,8,9"}, 422, "seeds"),
        ({"seeds": "4,4"}, 400, "distinct"),
        ({"seeds": "1,2", "n": "3"}, 400, "n:"),
        ({"seeds": "-1"}, 400, "seeds"),
        ({"n": "two"}, 400, "n:"),
        ({"speed": "9"}, 400, "speed"),
        ({"voice": "nobody"}, 404, "voice"),
    ]:
        r = client.post("/api/takes", data={"text": TEXT, "voice": "tone-low", **fields})
        assert r.status_code == status, (fields, r.text)
        assert any(w in r.json()["error"] for w in words.split("|")), (fields, r.json())
    assert engine.calls == 0 and service.cache.store.stats()["entries"] == 0
    unknown = approve(client, "0" * 32)
    assert unknown.status_code == 404 and "POST /api/takes" in unknown.json()["error"]
    assert approve(client, "not-a-key").status_code == 400
    assert client.post("/api/takes/approve", json={}, headers=ADMIN).status_code == 400
    gone = client.delete(f"/api/takes/approved/{'1' * 32}", headers=ADMIN)
    assert gone.status_code == 404 and "GET /api/takes/approved" in gone.json()["error"]


def test_approve_takes_json_and_a_new_approval_replaces_the_old(client: httpx.Client) -> None:
    takes = render(client, n="2")
    assert client.post("/api/takes/approve", json={"key": takes[0]["key"]}, headers=ADMIN).status_code == 200
    assert client.post("/api/takes/approve", json={"key": takes[1]["key"]}, headers=ADMIN).status_code == 200
    listed = client.get("/api/takes/approved").json()["approvals"]
    assert [a["key"] for a in listed] == [takes[1]["key"]]
    assert tts(client).headers["X-Cache-Key"] == takes[1]["key"]


def test_after_a_model_upgrade_the_approved_audio_stays_and_needs_review(tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    old = make_service(folder)
    take = old.synthesise(TTSRequest(text=TEXT, voice="tone-low", seed=1))
    old.takes.approve(take.key, caller=LOCAL)
    old_audio = take.wav
    old.close()
    new = make_service(folder, ToneTwo())
    try:
        with in_process(create_app(new)) as client:
            listed = client.get("/api/takes/approved").json()
            assert listed["model_version"] == "tone-2"
            (row,) = listed["approvals"]
            assert row["needs_review"] is True and row["model_version"] == "tone-1"
            r = tts(client)  # the approved audio, made by the old version
            assert r.headers["X-Take"] == "approved" and r.headers["X-Cache-Key"] == take.key
            assert r.content == old_audio
            seeded = tts(client, seed=1)  # the new version's render of that seed
            assert "X-Take" not in seeded.headers and seeded.headers["X-Cache-Key"] != take.key
            # evicting the old model version keeps the approved take
            evicted = client.post("/api/cache/clear", json={"tag": "tone:tone-1"}, headers=ADMIN).json()
            assert evicted["approved_kept"] == 1
            assert tts(client).content == old_audio
            # approving a take of the new version moves the approval: reviewed
            fresh = render(client, n="2")
            assert approve(client, fresh[1]["key"]).status_code == 200
            (row,) = client.get("/api/takes/approved").json()["approvals"]
            assert row["needs_review"] is False and row["key"] == fresh[1]["key"]
    finally:
        new.close()


def test_clearing_over_http_keeps_approved_takes_unless_asked(client: httpx.Client) -> None:
    take = render(client, n="2")[1]
    assert approve(client, take["key"]).status_code == 200
    kept = client.post("/api/cache/clear", headers=ADMIN)
    assert kept.status_code == 200 and kept.json()["approved_kept"] == 1 and kept.json()["approved_dropped"] == 0
    assert tts(client).headers["X-Take"] == "approved"
    mixed = client.post("/api/cache/clear", json={"tag": "tone:tone-1", "drop_approved": True}, headers=ADMIN)
    assert mixed.status_code == 400 and "drop_approved" in mixed.json()["error"]
    dropped = client.post("/api/cache/clear", json={"drop_approved": True}, headers=ADMIN).json()
    assert dropped["approved_dropped"] == 1 and dropped["approved_kept"] == 0
    assert "X-Take" not in tts(client).headers
    assert client.get("/api/takes/approved").json()["approvals"] == []
