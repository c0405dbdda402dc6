"""The HTTP API through a real server on a loopback port, with the tone engine."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import soundfile as sf

from lib.api import create_app
from lib.config import load_config
from lib.engines.tone import ToneEngine
from lib.errors import EngineUnavailableError
from lib.pipeline.service import TTSService
from tests.api_server import LiveServer

TOKEN = "s3cret-test-token"


def wav_file(seconds: float = 2.0, rate: int = 22_050, hz: float = 180.0, amplitude: float = 0.3) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    samples = amplitude * np.sin(2 * np.pi * hz * t) * (1 + 0.5 * np.sin(2 * np.pi * 4 * t))
    buf = io.BytesIO()
    sf.write(buf, samples.astype(np.float32), rate, format="WAV", subtype="PCM_16")
    return buf.getvalue()


@pytest.fixture
def engine() -> ToneEngine:
    return ToneEngine()


def _service(tmp_path: Path, engine: ToneEngine, *, admin_token: str | None = None, **overrides: Any) -> TTSService:
    values: dict[str, Any] = {"engine": "tone", "cache.dir": str(tmp_path / "cache"), "voices.prewarm": False}
    values.update(overrides)
    return TTSService(load_config(env={}, overrides=values), engine, admin_token=admin_token)


@pytest.fixture
def service(make_service: Any, engine: ToneEngine) -> TTSService:
    service: TTSService = make_service(engine=engine, admin_token=TOKEN, **{"prompt.max_upload_bytes": 1_000_000})
    return service


@pytest.fixture
def server(service: TTSService) -> Iterator[LiveServer]:
    with LiveServer(create_app(service)) as live:
        yield live


@pytest.fixture(scope="module")
def read_only_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One real server for the module's tests that send raw bytes and change nothing."""
    svc = _service(tmp_path_factory.mktemp("ro"), ToneEngine(), admin_token=TOKEN)
    with LiveServer(create_app(svc)) as live:
        yield live
    svc.close()


@pytest.fixture
def client(http: httpx.Client) -> httpx.Client:
    """The module's service in process (conftest's ``http``)."""
    return http


def tts(client: httpx.Client, text: str = "hello there", **fields: Any) -> httpx.Response:
    """multipart/form-data, as browsers and curl -F send it (the empty file part forces it)."""
    data = {"voice": "tone-low", "text": text}
    data.update({k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in fields.items()})
    return client.post("/api/tts", data=data, files={"_": ("", b"")})


def test_urlencoded_form_is_accepted_too(client: httpx.Client) -> None:
    r = client.post("/api/tts", data={"text": "plain form", "voice": "tone-low", "format": "flac"})
    assert r.status_code == 200 and r.headers["content-type"] == "audio/flac"


def admin(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# -- /api/tts --------------------------------------------------------------------------


def test_tts_miss_then_hit(client: httpx.Client, engine: ToneEngine) -> None:
    first = tts(client)
    second = tts(client)
    assert first.status_code == 200, first.text
    assert first.headers["content-type"] == "audio/wav"
    assert (first.headers["x-cache"], second.headers["x-cache"]) == ("MISS", "HIT")
    key = first.headers["x-cache-key"]
    assert len(key) == 32 and all(c in "0123456789abcdef" for c in key)
    assert first.headers["etag"] == second.headers["etag"] == f'"{key}.wav"'
    assert first.content == second.content and first.content[:4] == b"RIFF"
    assert engine.calls == 1


@pytest.mark.parametrize(
    ("fmt", "mime", "magic"),
    [
        ("mp3", "audio/mpeg", b""),
        ("flac", "audio/flac", b"fLaC"),
        ("ogg", "audio/ogg", b"OggS"),
        ("wav", "audio/wav", b"RIFF"),
    ],
)
def test_tts_formats(client: httpx.Client, fmt: str, mime: str, magic: bytes) -> None:
    r = tts(client, format=fmt)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == mime
    assert r.content.startswith(magic) and len(r.content) > 100
    data, rate = sf.read(io.BytesIO(r.content))
    assert rate == 22_050 and len(data) > 1000


def test_tts_with_uploaded_prompt_and_json_variant(client: httpx.Client) -> None:
    files = {"prompt_audio": ("me.wav", wav_file(), "audio/wav")}
    r = client.post(
        "/api/tts", data={"text": "clone me", "prompt_text": "hello"}, files=files,
        headers={"Accept": "application/json"},
    )  # fmt: skip
    assert r.status_code == 200, r.text
    doc = r.json()
    assert set(doc) == {"key", "cache", "url", "duration", "sample_rate"}
    assert doc["cache"] == "MISS" and doc["url"] == f"/api/audio/{doc['key']}.wav"
    assert doc["sample_rate"] == 22_050 and doc["duration"] > 0.1
    audio = client.get(doc["url"])
    assert audio.status_code == 200 and audio.content[:4] == b"RIFF"
    # The same voice as FLAC is the same prompt: same key, a hit.
    flac = io.BytesIO()
    data, rate = sf.read(io.BytesIO(wav_file()), dtype="int16")
    sf.write(flac, data, rate, format="FLAC")
    again = client.post(
        "/api/tts",
        data={"text": "clone me", "prompt_text": "hello"},
        files={"prompt_audio": ("me.flac", flac.getvalue(), "audio/flac")},
    )
    assert again.headers["x-cache"] == "HIT" and again.headers["x-cache-key"] == doc["key"]


def test_cache_false_bypasses_and_store_false_never_writes(
    client: httpx.Client, engine: ToneEngine, service: TTSService
) -> None:
    r = tts(client, "private words", store=False)
    assert r.headers["x-cache"] == "MISS"
    key = r.headers["x-cache-key"]
    assert client.get(f"/api/audio/{key}.wav").status_code == 404
    assert tts(client, "private words", store=False).headers["x-cache"] == "MISS"
    assert engine.calls == 2
    mp3 = tts(client, "private words", store=False, format="mp3")
    assert mp3.status_code == 200 and mp3.headers["content-type"] == "audio/mpeg"
    assert len(service.cache.transcodes) == 0 and len(service.cache.memory) == 0  # nothing kept, not even in memory
    tts(client, "public words")
    bypass = tts(client, "public words", cache=False)
    assert bypass.headers["x-cache"] == "BYPASS" and engine.calls == 5
    j = client.post(
        "/api/tts",
        data={"text": "other", "voice": "tone-low", "cache": "false"},
        headers={"Accept": "application/json"},
    ).json()
    assert j["cache"] == "BYPASS" and j["url"] is None


def test_ttl_is_accepted(client: httpx.Client, service: TTSService) -> None:
    r = tts(client, "short lived", ttl=60)
    assert r.status_code == 200 and r.headers["x-cache"] == "MISS"
    service.cache.flush()
    # The mechanism: the entry carries its expiry, on disk too.
    found = service.cache.lookup(r.headers["x-cache-key"])
    assert found is not None and found[0].remaining() is not None and 55 < found[0].remaining() <= 60
    blob = service.cache.store.get_blob(r.headers["x-cache-key"])
    assert blob is not None
    from lib.cache.entry import unpack

    remaining = unpack(blob, r.headers["x-cache-key"]).remaining()
    assert remaining is not None and 55 < remaining <= 60


@pytest.mark.parametrize("ttl", ["inf", "-inf", "nan", "1e300", str(11 * 365 * 86400), "0"])
def test_ttl_out_of_bounds_is_400(client: httpx.Client, ttl: str) -> None:
    r = tts(client, "bounded", ttl=ttl)
    assert r.status_code == 400 and "ttl" in r.json()["error"], r.text


@pytest.mark.parametrize(
    ("fields", "status", "needle"),
    [
        ({"text": "   "}, 400, "text"),
        ({"text": "x" * 1001}, 400, "text"),
        ({"seed": "-1"}, 400, "seed"),
        ({"seed": str(2**32)}, 400, "seed"),
        ({"seed": "abc"}, 400, "seed"),
        ({"speed": "5"}, 400, "speed"),
        ({"speed": "nan"}, 400, "speed"),
        ({"format": "m4a"}, 400, "format"),
        ({"mode": "karaoke"}, 400, "mode"),
        ({"cache": "maybe"}, 400, "cache"),
        ({"ttl": "-5"}, 400, "ttl"),
        ({"style": "s" * 4097}, 400, "style"),
        ({"voice": "nobody"}, 404, "nobody"),
        ({"voice": ""}, 400, "voice"),
    ],
)
def test_tts_bad_fields(client: httpx.Client, fields: dict[str, str], status: int, needle: str) -> None:
    data = {"text": "hello", "voice": "tone-low", **fields}
    r = client.post("/api/tts", data=data, files={"_": ("", b"")})
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    assert needle in r.json()["error"]


def test_tts_missing_text(client: httpx.Client) -> None:
    r = client.post("/api/tts", data={"voice": "tone-low"}, files={"_": ("", b"")})
    assert r.status_code == 400 and "text" in r.json()["error"]


def test_tts_not_multipart(client: httpx.Client) -> None:
    r = client.post("/api/tts", content=b"{nonsense", headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and "error" in r.json()


@pytest.mark.parametrize(
    ("audio", "status"),
    [
        (b"this is not audio at all" * 10, 415),
        (wav_file(seconds=0.4), 422),
        (wav_file(seconds=31.0, rate=8000), 422),
        (wav_file(amplitude=0.0), 422),
    ],
    ids=["not-audio", "too-short", "too-long", "silent"],
)
def test_prompt_audio_errors(client: httpx.Client, audio: bytes, status: int) -> None:
    r = client.post("/api/tts", data={"text": "hi"}, files={"prompt_audio": ("p.wav", audio, "audio/wav")})
    assert r.status_code == status, r.text
    assert r.json()["error"]


def test_upload_too_large_is_refused_before_reading(server: LiveServer, client: httpx.Client) -> None:
    big = b"\0" * 1_100_000  # over the 1 MB limit of these tests, under limit + form overhead
    r = client.post("/api/tts", data={"text": "hi"}, files={"prompt_audio": ("p.wav", big, "audio/wav")})
    assert r.status_code == 413 and "limit" in r.json()["error"]
    # A declared length far over the limit is refused from the headers alone: the body is never sent.
    head = (
        b"POST /api/tts HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=b\r\n"
        b"Content-Length: 50000000\r\n\r\n"
    )
    answer = server.raw(head)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b'"error"' in answer

    # A chunked body is counted as it arrives.
    def chunks() -> Iterator[bytes]:
        yield b'--b\r\nContent-Disposition: form-data; name="prompt_audio"; filename="p.wav"\r\n\r\n'
        for _ in range(40):
            yield b"\0" * 65536

    r = client.post("/api/tts", content=chunks(), headers={"Content-Type": "multipart/form-data; boundary=b"})
    assert r.status_code == 413 and "limit" in r.json()["error"]


def test_concurrent_identical_misses_cost_one_engine_call(tmp_path: Path) -> None:
    engine = ToneEngine(delay=0.5)
    svc = _service(tmp_path, engine)
    try:
        with LiveServer(create_app(svc)) as live, httpx.Client(base_url=live.url, timeout=30) as c:
            results: list[httpx.Response] = []
            lock = threading.Lock()

            def one() -> None:
                r = c.post("/api/tts", data={"text": "together now", "voice": "tone-high"}, files={"_": ("", b"")})
                with lock:
                    results.append(r)

            threads = [threading.Thread(target=one) for _ in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        assert [r.status_code for r in results] == [200] * 8
        assert sorted(r.headers["x-cache"] for r in results).count("MISS") == 1
        assert len({r.content for r in results}) == 1
        assert engine.calls == 1
    finally:
        svc.close()


def test_engine_unavailable_is_503(client: httpx.Client, engine: ToneEngine) -> None:
    engine.fail = EngineUnavailableError("the model is not loaded; put the weights in models/")
    r = tts(client, "cannot say this")
    assert r.status_code == 503 and "weights" in r.json()["error"]


# -- /api/audio ------------------------------------------------------------------------


def test_audio_by_key_with_etag_range_and_formats(client: httpx.Client) -> None:
    key = tts(client).headers["x-cache-key"]
    r = client.get(f"/api/audio/{key}.wav")
    assert r.status_code == 200 and r.headers["content-type"] == "audio/wav"
    assert r.headers["cache-control"] == "public, max-age=31536000, immutable"
    etag = r.headers["etag"]
    assert client.get(f"/api/audio/{key}.wav", headers={"If-None-Match": etag}).status_code == 304
    assert client.get(f"/api/audio/{key}.wav", headers={"If-None-Match": f'W/{etag}, "x"'}).status_code == 304
    part = client.get(f"/api/audio/{key}.wav", headers={"Range": "bytes=0-99"})
    assert part.status_code == 206 and part.content == r.content[:100]
    assert part.headers["content-range"] == f"bytes 0-99/{len(r.content)}"
    tail = client.get(f"/api/audio/{key}.wav", headers={"Range": "bytes=-10"})
    assert tail.status_code == 206 and tail.content == r.content[-10:]
    bad = client.get(f"/api/audio/{key}.wav", headers={"Range": f"bytes={len(r.content)}-"})
    assert bad.status_code == 416
    for fmt, mime in (("mp3", "audio/mpeg"), ("flac", "audio/flac"), ("ogg", "audio/ogg")):
        enc = client.get(f"/api/audio/{key}.{fmt}")
        assert enc.status_code == 200 and enc.headers["content-type"] == mime
        assert enc.headers["etag"] == f'"{key}.{fmt}"'
        assert client.get(f"/api/audio/{key}.{fmt}").content == enc.content
    assert client.get(f"/api/audio/{key.upper()}.wav").content == r.content
    assert client.head(f"/api/audio/{key}.wav").status_code == 200


def test_audio_from_disk_after_restart(tmp_path: Path, engine: ToneEngine) -> None:
    svc = _service(tmp_path, engine)
    with LiveServer(create_app(svc)) as live, httpx.Client(base_url=live.url) as c:
        r = c.post("/api/tts", data={"text": "persist", "voice": "tone-low"}, files={"_": ("", b"")})
        key = r.headers["x-cache-key"]
    svc.close()
    svc2 = _service(tmp_path, engine)
    try:
        with LiveServer(create_app(svc2)) as live, httpx.Client(base_url=live.url) as c:
            again = c.get(f"/api/audio/{key}.wav")
            assert again.status_code == 200 and again.content == r.content
            assert c.get(f"/api/audio/{key}.mp3").status_code == 200
    finally:
        svc2.close()


def test_audio_unknown_key_is_404(client: httpx.Client) -> None:
    r = client.get("/api/audio/" + "0" * 32 + ".wav")
    assert r.status_code == 404 and "error" in r.json()


@pytest.mark.parametrize(
    "path",
    [
        "/api/audio/../../etc/passwd",
        "/api/audio/..%2f..%2fetc%2fpasswd",
        "/api/audio/%2e%2e/%2e%2e/etc/passwd.wav",
        "/api/audio/..%5c..%5cwindows%5cwin.ini",
        "/api/audio/" + "0" * 32 + ".wav/../../x",
        "/api/audio/" + "0" * 31 + ".wav",
        "/api/audio/" + "0" * 33 + ".wav",
        "/api/audio/" + "g" * 32 + ".wav",
        "/api/audio/" + "0" * 32 + ".exe",
        "/api/audio/" + "0" * 32,
        "/api/audio/" + "0" * 32 + ".wav%00.txt",
        "/api/audio/" + "0" * 32 + ".wav.wav",
        "/api/audio//etc/passwd",
        "/api/audio/%00",
    ],
)
def test_audio_path_traversal_refused(read_only_server: LiveServer, path: str) -> None:
    answer = read_only_server.raw(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    status = answer.split(b" ", 2)[1]
    assert status == b"400", answer[:300]
    assert b"root:" not in answer


# -- OpenAI-compatible -----------------------------------------------------------------


def test_openai_client_speech(server: LiveServer, engine: ToneEngine, service: TTSService) -> None:
    import openai

    _, key = service.tenants.create("openai-client", {})  # an unknown key would be 401 (lib.api.tenants)
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=key)
    reply = client.audio.speech.create(
        model="tts-1", voice="tone-high", input="hello from openai", response_format="wav"
    )
    assert reply.content[:4] == b"RIFF"
    again = client.audio.speech.with_raw_response.create(
        model="tts-1", voice="tone-high", input="hello from openai", response_format="wav"
    )
    assert again.headers["x-cache"] == "HIT" and engine.calls == 1
    mp3 = client.audio.speech.create(model="tts-1", voice="tone-high", input="hello from openai", speed=1.0)
    assert len(mp3.content) > 100 and mp3.response.headers["content-type"] == "audio/mpeg"
    styled = client.audio.speech.create(
        model="tts-1",
        voice="tone-high",
        input="hello from openai",
        instructions="slow and calm",
        response_format="flac",
    )
    assert styled.content[:4] == b"fLaC"
    pcm = client.audio.speech.create(model="tts-1", voice="tone-high", input="raw", response_format="pcm")
    assert len(pcm.content) % 2 == 0 and pcm.content[:4] != b"RIFF"
    with pytest.raises(openai.BadRequestError) as err:
        client.audio.speech.create(model="tts-1", voice="alloy-nobody", input="hi")
    assert "alloy-nobody" in err.value.message
    body = err.value.body
    assert isinstance(body, dict) and body["type"] == "invalid_request_error"


def test_openai_extras_and_errors(client: httpx.Client) -> None:
    r = client.post(
        "/v1/audio/speech",
        json={
            "model": "tts-1",
            "input": "hi",
            "voice": {"id": "tone-low"},
            "response_format": "wav",
            "seed": 7,
            "style": "happy",
        },
    )
    assert r.status_code == 200 and r.headers["x-cache"] == "MISS"
    for body, param in (
        ({"model": "tts-1", "voice": "tone-low"}, "input"),
        ({"model": "tts-1", "input": "hi", "voice": "tone-low", "speed": 9}, "speed"),
        ({"model": "tts-1", "input": "hi", "voice": "tone-low", "response_format": "m4a"}, "response_format"),
        ({"model": "tts-1", "input": " ", "voice": "tone-low"}, "text"),
    ):
        bad = client.post("/v1/audio/speech", json=body)
        assert bad.status_code == 400, bad.text
        err = bad.json()["error"]
        assert set(err) == {"message", "type", "param", "code"} and err["type"] == "invalid_request_error"
        assert param in err["message"]


# -- voices ----------------------------------------------------------------------------


def test_voices_save_list_use_delete(client: httpx.Client) -> None:
    listed = client.get("/api/voices").json()["voices"]
    assert {"name": "tone-low", "kind": "preset"} in listed
    saved = client.post(
        "/api/voices",
        data={"name": "front desk", "prompt_text": "hello"},
        files={"prompt_audio": ("v.wav", wav_file(), "audio/wav")},
    )
    assert saved.status_code == 201, saved.text
    assert "front desk" in {v["name"] for v in client.get("/api/voices").json()["voices"]}
    r = client.post("/api/tts", data={"text": "welcome", "voice": "front desk"}, files={"_": ("", b"")})
    assert r.status_code == 200
    # The saved voice is the same as uploading its prompt.
    up = client.post(
        "/api/tts",
        data={"text": "welcome", "prompt_text": "hello"},
        files={"prompt_audio": ("v.wav", wav_file(), "audio/wav")},
    )
    assert up.headers["x-cache"] == "HIT" and up.headers["x-cache-key"] == r.headers["x-cache-key"]
    assert client.delete("/api/voices/front desk").status_code == 401
    assert client.delete("/api/voices/front desk", headers=admin("wrong")).status_code == 403
    gone = client.delete("/api/voices/front desk", headers=admin())
    assert gone.status_code == 200 and gone.json() == {"deleted": "front desk"}
    assert client.delete("/api/voices/front desk", headers=admin()).status_code == 404


@pytest.mark.parametrize(
    ("data", "audio", "status"),
    [
        ({"name": "../../etc"}, wav_file(), 400),
        ({"name": "tone-low"}, wav_file(), 400),
        ({"name": "ok"}, b"garbage" * 20, 415),
        ({"name": "ok"}, wav_file(seconds=0.3), 422),
    ],
)
def test_voice_save_errors(client: httpx.Client, data: dict[str, str], audio: bytes, status: int) -> None:
    r = client.post("/api/voices", data=data, files={"prompt_audio": ("v.wav", audio, "audio/wav")})
    assert r.status_code == status, r.text
    assert r.json()["error"]


# -- cache admin, stats, metrics, health -----------------------------------------------


def test_stats(client: httpx.Client) -> None:
    tts(client, "a long sentence that is more than thirty-two characters long")
    tts(client, "a long sentence that is more than thirty-two characters long")
    tts(client, "other", cache=False)
    s = client.get("/api/cache/stats").json()
    for field in (
        "entries",
        "bytes",
        "size_limit",
        "hits",
        "misses",
        "bypasses",
        "errors",
        "hit_rate",
        "engine_calls",
    ):
        assert field in s, field
    assert (s["hits"], s["misses"], s["bypasses"], s["engine_calls"]) == (1, 1, 1, 2)
    assert s["entries"] == 1 and s["hit_rate"] == 0.5
    # The public view has counts, sizes and rates, never a user's text.
    assert "top_requested" not in s and "top_missed" not in s
    assert "thirty-two" not in json.dumps(s, ensure_ascii=False)
    full = client.get("/api/cache/stats", headers=admin()).json()
    assert full["top_requested"][0]["count"] == 2
    assert full["top_requested"][0]["text"] == "a long sentence that is more than thirty-two characters long"
    assert client.get("/api/cache/stats?top=0").status_code == 400


def test_admin_needs_token(client: httpx.Client) -> None:
    for path in ("/api/cache/clear", "/api/cache/verify"):
        assert client.post(path).status_code == 401
        assert client.post(path, headers=admin("nope")).status_code == 403
        assert client.post(path, headers={"Authorization": "Basic abc"}).status_code in (401, 403)


def test_clear_variants(client: httpx.Client, service: TTSService) -> None:
    key = tts(client).headers["x-cache-key"]
    assert client.post("/api/cache/verify", headers=admin()).json()["checked"] == 1
    assert client.post("/api/cache/clear", json={"expired_only": True}, headers=admin()).status_code == 200
    assert client.get(f"/api/audio/{key}.wav").status_code == 200
    r = client.post("/api/cache/clear", json={"tag": "other:1"}, headers=admin())
    assert r.status_code == 200 and r.json()["removed"] == 0
    r = client.post("/api/cache/clear", json={"tag": service.tag}, headers=admin())
    assert r.json()["removed"] == 1
    tts(client)
    assert client.post("/api/cache/clear", headers=admin()).json()["removed"] == 1
    assert client.get(f"/api/audio/{key}.wav").status_code == 404
    for body in ({"tag": "x", "expired_only": True}, {"nonsense": 1}, {"expired_only": "perhaps"}):
        bad = client.post("/api/cache/clear", json=body, headers=admin())
        assert bad.status_code == 400 and bad.json()["error"]
    bad = client.post("/api/cache/clear", content=b"{", headers={**admin(), "Content-Type": "application/json"})
    assert bad.status_code == 400


def test_admin_without_token_is_loopback_only(tmp_path: Path, engine: ToneEngine) -> None:
    svc = _service(tmp_path, engine)
    try:
        app = create_app(svc)
        with LiveServer(app) as live, httpx.Client(base_url=live.url) as c:
            assert c.post("/api/cache/verify").status_code == 200  # loopback: allowed
        # A remote client (simulated in-process: no network traffic) is refused.
        import asyncio

        async def remote() -> int:
            transport = httpx.ASGITransport(app=app, client=("203.0.113.7", 5555))
            async with httpx.AsyncClient(transport=transport, base_url="http://api") as c:
                return (await c.post("/api/cache/clear")).status_code

        assert asyncio.run(remote()) == 403
    finally:
        svc.close()


def test_metrics(client: httpx.Client, service: TTSService) -> None:
    tts(client)
    tts(client)
    # New entries reach the disk tier in the background (lib.cache.writer): the answer can
    # come first (a full run read "tts_cache_entries 0" once).
    service.cache.flush()
    text = client.get("/metrics").text
    assert 'tts_cache_requests_total{result="hit"} 1.0' in text
    assert 'tts_cache_requests_total{result="miss"} 1.0' in text
    assert "tts_engine_calls_total 1.0" in text
    assert 'tts_http_requests_total{method="POST",route="/api/tts",status="200"} 2.0' in text
    assert "tts_cache_entries 1.0" in text


def test_healthz(client: httpx.Client, engine: ToneEngine) -> None:
    r = client.get("/healthz")
    assert r.status_code == 200
    assert r.json()["engine"] == "tone" and r.json()["model_version"] == "tone-1"
    assert r.json()["cache"]["available"] is True

    def check() -> None:
        raise EngineUnavailableError("no model")

    engine.check = check  # type: ignore[attr-defined]
    down = client.get("/healthz")
    assert down.status_code == 503 and down.json()["status"] == "unavailable"


def test_openapi_documents_every_endpoint(client: httpx.Client) -> None:
    spec = client.get("/openapi.json").json()
    expected = {
        ("post", "/api/tts"), ("get", "/api/audio/{key}.{ext}"), ("post", "/v1/audio/speech"),
        ("get", "/api/voices"), ("post", "/api/voices"), ("delete", "/api/voices/{name}"),
        ("get", "/api/cache/stats"), ("post", "/api/cache/clear"), ("post", "/api/cache/verify"),
        ("get", "/metrics"), ("get", "/healthz"),
    }  # fmt: skip
    found = {(m, p) for p, ops in spec["paths"].items() for m in ops}
    assert expected <= found
    assert json.dumps(spec).count("HTTPValidationError") == 0


def test_unknown_route_and_method_are_json(client: httpx.Client) -> None:
    r = client.get("/api/nothing")
    assert r.status_code == 404 and "error" in r.json()
    r = client.get("/api/tts")
    assert r.status_code == 405 and "error" in r.json()


@pytest.mark.parametrize("text", [".", "-", "😀", "١٢٣"])
def test_unspeakable_text_is_a_client_error_with_the_builtin_engine(tmp_path: Path, text: str) -> None:
    config = load_config(env={}, overrides={"cache.dir": str(tmp_path / "c"), "voices.prewarm": False,
                                            "builtin.base": "espeak"})  # fmt: skip
    svc = TTSService(config)
    try:
        with LiveServer(create_app(svc)) as live, httpx.Client(base_url=live.url, timeout=60) as c:
            r = c.post("/api/tts", data={"text": text, "voice": svc.engine.presets()[0]})
            assert r.status_code == 400, r.text
            assert "nothing the builtin engine can speak" in r.json()["error"]
    finally:
        svc.close()
