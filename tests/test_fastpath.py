"""The hit fast path (lib/api/fastpath.py): memory hits of ``GET /api/audio`` and
``POST /api/tts`` answered in front of the router must be answered there (counted), with
the very bytes and headers the endpoints give, counted once in the statistics and the
metrics -- in named voices and in uploaded prompts decoded before alike --, and must
leave everything else -- ranges, JSON, streams, prompts not in memory, bad fields,
misses, slow bodies -- to the endpoints, which never look up memory again."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import tone_service

from lib.api import create_app
from lib.api.fastpath import MAX_FORM_BYTES, TTSForm
from lib.audio.pcm import FORMATS
from lib.errors import ValidationError
from lib.pipeline.resolve import Resolver
from lib.pipeline.service import TTSService
from lib.request.access import LOCAL
from lib.request.types import TTSRequest
from lib.request.validate import MAX_SEED, MAX_SPEED, MAX_TTL, MIN_SPEED
from tests.api_server import LiveServer
from tests.test_cache import tone_prompt

VOICE = "tone-low"
#: Headers that differ between two answers by nature (the clock).
#: The request-rate headers count every request (lib.api.tenants): both apps see them, with their counts.
_VOLATILE = {"date", "server", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests"}


def make(tmp_path: Path, **overrides: Any) -> TTSService:
    service: TTSService = tone_service(tmp_path, admin_token="t", **overrides)
    return service


@pytest.fixture
def service(make_service: Any) -> TTSService:
    service: TTSService = make_service(admin_token="t")
    return service


class Pair:
    """The same service behind two servers: with the fast path, and without it."""

    def __init__(self, service: TTSService) -> None:
        self.service = service
        self.fast_app = create_app(service)
        self.slow_app = create_app(service, fast_path=False)

    @property
    def counts(self) -> Any:
        return self.fast_app.state.fast_path


@pytest.fixture
def pair(service: TTSService) -> Iterator[tuple[Pair, httpx.Client, httpx.Client]]:
    p = Pair(service)
    with (
        LiveServer(p.fast_app) as fast_live,
        LiveServer(p.slow_app) as slow_live,
        httpx.Client(base_url=fast_live.url, timeout=30) as fast,
        httpx.Client(base_url=slow_live.url, timeout=30) as slow,
    ):
        yield p, fast, slow


def same_answer(a: httpx.Response, b: httpx.Response) -> None:
    assert a.status_code == b.status_code
    assert a.content == b.content
    assert [(k, v) for k, v in a.headers.multi_items() if k not in _VOLATILE] == [
        (k, v) for k, v in b.headers.multi_items() if k not in _VOLATILE
    ]


def make_entry(slow: httpx.Client, text: str = "The fast path answers hits.", **fields: Any) -> str:
    """A MISS through the endpoint (the fast path never answers one): the entry's key."""
    r = slow.post("/api/tts", data={"text": text, "voice": VOICE, **fields})
    assert r.status_code == 200 and r.headers["x-cache"] == "MISS", r.text
    return r.headers["x-cache-key"]


def test_the_slow_app_has_no_fast_path(pair: tuple[Pair, httpx.Client, httpx.Client]) -> None:
    p, _, _ = pair
    assert p.slow_app.state.fast_path is None
    assert p.counts.audio == p.counts.tts == 0


def test_audio_hit_is_answered_by_the_fast_path_as_the_endpoint_answers_it(
    pair: tuple[Pair, httpx.Client, httpx.Client],
) -> None:
    p, fast, slow = pair
    key = make_entry(slow)
    for ext in ("wav", "mp3"):  # mp3: the transcode is made (and kept) by the endpoint first
        want = slow.get(f"/api/audio/{key}.{ext}")
        before = p.counts.audio
        got = fast.get(f"/api/audio/{key.upper()}.{ext}" if ext == "wav" else f"/api/audio/{key}.{ext}")
        assert p.counts.audio == before + 1, "the fast path did not answer the hit"
        same_answer(got, want)
        assert got.headers["etag"] == f'"{key}.{ext}"' and got.headers["accept-ranges"] == "bytes"
        assert got.headers["content-type"] == ("audio/wav" if ext == "wav" else "audio/mpeg")


def test_revalidation_is_answered_by_the_fast_path(pair: tuple[Pair, httpx.Client, httpx.Client]) -> None:
    p, fast, slow = pair
    key = make_entry(slow)
    etag = f'"{key}.wav"'
    want = slow.get(f"/api/audio/{key}.wav", headers={"If-None-Match": etag})
    before = p.counts.audio
    got = fast.get(f"/api/audio/{key}.wav", headers={"If-None-Match": f'W/"x", {etag}'})
    assert p.counts.audio == before + 1
    assert got.status_code == 304 and got.content == b""
    same_answer(got, want)


def test_an_entry_with_a_ttl_keeps_its_private_lifetime_on_the_fast_path(
    pair: tuple[Pair, httpx.Client, httpx.Client],
) -> None:
    p, fast, slow = pair
    key = make_entry(slow, ttl="600")
    got = fast.get(f"/api/audio/{key}.wav")
    assert p.counts.audio == 1
    control = got.headers["cache-control"]
    assert control.startswith("private, max-age=") and 590 <= int(control.rsplit("=", 1)[1]) <= 600


def test_ranges_head_misses_and_bad_names_are_left_to_the_endpoint(
    pair: tuple[Pair, httpx.Client, httpx.Client],
) -> None:
    p, fast, slow = pair
    key = make_entry(slow)
    ranged = fast.get(f"/api/audio/{key}.wav", headers={"Range": "bytes=0-99"})
    assert ranged.status_code == 206 and len(ranged.content) == 100
    assert fast.get(f"/api/audio/{key}.wav", headers={"If-Range": '"other"'}).status_code == 200
    assert fast.head(f"/api/audio/{key}.wav").status_code == 200
    assert fast.get(f"/api/audio/{'0' * 32}.wav").status_code == 404
    assert fast.get(f"/api/audio/{key}.aiff").status_code == 400
    p.service.cache.memory.clear()  # on disk only: the endpoint reads it in a worker thread
    from_disk = fast.get(f"/api/audio/{key}.wav")
    assert from_disk.status_code == 200
    assert p.counts.audio == 0


def test_tts_hit_is_answered_by_the_fast_path_as_the_endpoint_answers_it(
    pair: tuple[Pair, httpx.Client, httpx.Client],
) -> None:
    p, fast, slow = pair
    text = "One hit, two ways."
    make_entry(slow, text)
    for fields in ({}, {"format": "mp3"}, {"format": "pcm"}, {"seed": "0", "speed": "1.0", "style": ""}):
        data = {"text": text, "voice": VOICE, **fields}
        want = slow.post("/api/tts", data=data)
        assert want.headers["x-cache"] == "HIT"
        for form in ({"data": data}, {"files": {k: (None, v) for k, v in data.items()}}):  # urlencoded, multipart
            before = p.counts.tts
            got = fast.post("/api/tts", **form)
            assert p.counts.tts == before + 1, f"the fast path did not answer {fields} {list(form)}"
            same_answer(got, want)


def test_a_fast_hit_is_counted_once_in_the_statistics_and_the_metrics(
    pair: tuple[Pair, httpx.Client, httpx.Client],
) -> None:
    p, fast, slow = pair
    text = "Counted once."
    make_entry(slow, text)
    key = make_entry(slow, "And fetched.")
    hits = p.service.dashboard.snapshot(caller=LOCAL)["hits"]
    posts, gets = _metric(fast, _POSTS), _metric(fast, _GETS)
    for _ in range(3):
        assert fast.post("/api/tts", data={"text": text, "voice": VOICE}).headers["x-cache"] == "HIT"
    fast.get(f"/api/audio/{key}.wav")
    assert p.counts.tts == 3 and p.counts.audio == 1
    snap = p.service.dashboard.snapshot(caller=LOCAL)
    assert snap["hits"] == hits + 3
    assert any(row["text"] == text and row["count"] >= 4 for row in snap["top_requested"]), snap["top_requested"]
    # The HTTP metrics label them with their route, as the endpoints' requests are.
    assert _metric(fast, _POSTS) == posts + 3
    assert _metric(fast, _GETS) == gets + 1


_POSTS = 'tts_http_requests_total{method="POST",route="/api/tts",status="200"}'
_GETS = 'tts_http_requests_total{method="GET",route="/api/audio/{key}.{ext}",status="200"}'


def _metric(client: httpx.Client, name: str) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_everything_but_a_plain_hit_goes_to_the_endpoint(pair: tuple[Pair, httpx.Client, httpx.Client]) -> None:
    p, fast, slow = pair
    text = "Not for the fast path."
    key = make_entry(slow, text)
    base = {"text": text, "voice": VOICE}
    answer = fast.post("/api/tts", data=base, headers={"Accept": "application/json"})
    assert answer.json()["url"] == f"/api/audio/{key}.wav"
    assert fast.post("/api/tts", data={**base, "stream": "true"}).headers["cache-control"] == "no-store"
    assert fast.post("/api/tts", data={**base, "cache": "false"}).headers["x-cache"] == "BYPASS"
    assert fast.post("/api/tts", data={**base, "text": "A miss."}).headers["x-cache"] == "MISS"
    for bad in ({"seed": "-1"}, {"format": "aiff"}, {"voice": "nobody"}, {"text": ""}, {"mode": "instruct"}):
        got, want = fast.post("/api/tts", data={**base, **bad}), slow.post("/api/tts", data={**base, **bad})
        assert got.status_code >= 400, bad
        same_answer(got, want)
    big = fast.post("/api/tts", data={**base, "padding": "x" * MAX_FORM_BYTES})  # an unknown field: ignored
    assert big.headers["x-cache"] == "HIT"  # a hit, but a body this large is not read by the fast path
    assert p.counts.tts == 0


def test_a_slow_small_body_still_meets_the_body_deadline(tmp_path: Path) -> None:
    svc = make(tmp_path, **{"server.body_timeout": 1.0})
    try:
        app = create_app(svc)
        with LiveServer(app, server=svc.config.server) as live:
            head = (
                b"POST /api/tts HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                b"Content-Length: 200\r\n\r\ntext=a"
            )
            with socket.create_connection(("127.0.0.1", live.port), timeout=10) as conn:
                conn.sendall(head)
                time.sleep(1.5)
                got = conn.recv(65536)
            assert got.startswith(b"HTTP/1.1 408"), got
            assert b"server.body_timeout" in got
            assert app.state.fast_path.tts == 0
    finally:
        svc.close()


def test_the_endpoint_and_the_fast_path_read_one_form_with_the_validators_bounds(service: TTSService) -> None:
    schema = create_app(service).openapi()
    body = schema["paths"]["/api/tts"]["post"]["requestBody"]["content"]
    ref = body["multipart/form-data"]["schema"]["$ref"]
    assert ref.rsplit("/", 1)[1] == TTSForm.__name__  # the endpoint's form is the fast path's model
    props = schema["components"]["schemas"][TTSForm.__name__]["properties"]
    assert list(props) == list(TTSForm.model_fields)
    seed = props["seed"]["anyOf"][0]  # or null: a request that names no seed (its phrase's approved take)
    assert (seed["minimum"], seed["maximum"], props["seed"].get("default")) == (0, MAX_SEED, None)
    assert (props["speed"]["minimum"], props["speed"]["maximum"]) == (MIN_SPEED, MAX_SPEED)
    ttl = props["ttl"]["anyOf"][0]
    assert (ttl["exclusiveMinimum"], ttl["maximum"]) == (0, MAX_TTL)
    assert set(props["format"]["enum"]) == set(FORMATS)


# -- uploaded prompts -----------------------------------------------------------------------------


def _upload(path: Path, text: str, **fields: str) -> dict[str, Any]:
    return {"data": {"text": text, **fields}, "files": {"prompt_audio": (path.name, path.read_bytes(), "audio/wav")}}


def _count_decodes(service: TTSService, monkeypatch: pytest.MonkeyPatch) -> list[object]:
    decodes: list[object] = []
    decode = service.voices.decoder.decode

    def counted(*args: Any, **kwargs: Any) -> Any:
        decodes.append(args[0])
        return decode(*args, **kwargs)

    monkeypatch.setattr(service.voices.decoder, "decode", counted)
    return decodes


def test_a_hit_in_an_uploaded_prompt_is_answered_by_the_fast_path_without_decoding_it(
    pair: tuple[Pair, httpx.Client, httpx.Client], testdata_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p, fast, slow = pair
    form = _upload(testdata_dir / "zh_female_prompt.wav", "In a recorded voice.")
    assert slow.post("/api/tts", **form).headers["x-cache"] == "MISS"
    want = slow.post("/api/tts", **form)
    assert want.headers["x-cache"] == "HIT"
    decodes = _count_decodes(p.service, monkeypatch)
    got = fast.post("/api/tts", **form)
    assert p.counts.tts == 1, "the fast path did not answer the hit"
    assert decodes == []  # found by the hash of the uploaded bytes
    same_answer(got, want)
    # A recording this process never decoded: the endpoint decodes it once, in a worker thread ...
    p.service.voices.decoder.clear()
    again = fast.post("/api/tts", **form)
    assert again.headers["x-cache"] == "HIT" and p.counts.tts == 1 and len(decodes) == 1
    same_answer(again, want)
    # ... and from then on the fast path answers it.
    assert fast.post("/api/tts", **form).headers["x-cache"] == "HIT"
    assert p.counts.tts == 2 and len(decodes) == 1


def test_a_request_that_asked_for_no_trace_leaves_no_prompt_for_the_fast_path(
    pair: tuple[Pair, httpx.Client, httpx.Client], testdata_dir: Path
) -> None:
    p, fast, _ = pair
    path, text = testdata_dir / "male_prompt.wav", "Nothing of mine stays."
    for fields in ({"store": "false"}, {"cache": "false"}, {"store": "false"}):
        r = fast.post("/api/tts", **_upload(path, text, **fields))
        assert r.status_code == 200 and r.headers["x-cache"] in ("MISS", "BYPASS")
        assert len(p.service.voices.decoder) == 0 and p.counts.tts == 0
    assert fast.post("/api/tts", **_upload(path, text)).headers["x-cache"] == "MISS"  # stored, prompt remembered
    remembered = len(p.service.voices.decoder)
    hit = fast.post("/api/tts", **_upload(path, text, store="false"))  # may read what is there
    assert hit.headers["x-cache"] == "HIT" and p.counts.tts == 1
    assert len(p.service.voices.decoder) == remembered


def test_a_miss_is_read_looked_up_and_resolved_once(
    pair: tuple[Pair, httpx.Client, httpx.Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fast path reads the form and resolves it in memory; on a miss it hands that
    resolution to the worker thread that makes the answer: no second parse by the
    endpoint, no second resolution, one look in memory."""
    p, fast, slow = pair
    looked: list[TTSRequest] = []
    resolved: list[TTSRequest] = []
    memory_lookup, resolve = p.service.memory_lookup, p.service._resolver.resolve

    def counted_lookup(request: TTSRequest) -> Any:
        looked.append(request)
        return memory_lookup(request)

    def counted_resolve(request: TTSRequest) -> Any:
        resolved.append(request)
        return resolve(request)

    monkeypatch.setattr(p.service, "memory_lookup", counted_lookup)
    monkeypatch.setattr(p.service._resolver, "resolve", counted_resolve)
    miss = fast.post("/api/tts", data={"text": "Looked up once.", "voice": VOICE})
    assert miss.status_code == 200 and miss.headers["x-cache"] == "MISS"
    assert len(looked) == 1 and resolved == [] and p.counts.made == 1 and p.counts.tts == 0
    assert fast.post("/api/tts", data={"text": "Looked up once.", "voice": VOICE}).headers["x-cache"] == "HIT"
    assert len(looked) == 2 and resolved == [] and p.counts.tts == 1
    refused = fast.post("/api/tts", data={"text": "Nobody speaks.", "voice": "nobody"})
    assert refused.status_code == 404 and "nobody" in refused.json()["error"]  # answered as the endpoint would
    assert len(resolved) == 1  # refused in memory: resolved once more where it is reported
    assert slow.post("/api/tts", data={"text": "Not at all.", "voice": VOICE}).headers["x-cache"] == "MISS"
    assert slow.post("/api/tts", data={"text": "Not at all.", "voice": VOICE}).headers["x-cache"] == "HIT"
    assert len(looked) == 3 and len(resolved) == 3  # without the fast path: the endpoint resolves each


# -- the service's part: a hit from memory, without I/O --------------------------------------


def test_memory_hit_answers_only_what_memory_alone_can(tmp_path: Path) -> None:
    preset = TTSRequest(text="From memory.", voice=VOICE)
    saved = TTSRequest(text="From memory.", voice="desk")
    first = make(tmp_path)
    try:
        first.voices.save("desk", (22_050, tone_prompt()), "", caller=LOCAL)
        assert first.memory_hit(preset) is None  # a miss: the caller synthesises
        assert first.synthesise(preset).cache == "MISS"
        before = first.dashboard.snapshot(caller=LOCAL)
        hit = first.memory_hit(preset)
        assert hit is not None and hit.cache == "HIT" and hit.info["tier"] == "memory"
        after = first.dashboard.snapshot(caller=LOCAL)
        assert after["hits"] == before["hits"] + 1 and after["errors"] == before["errors"]
        assert first.synthesise(saved).cache == "MISS"
        assert first.memory_hit(saved) is not None  # the saved voice is remembered
    finally:
        first.close()
    again = make(tmp_path)  # a new process: the voice and the entries are on disk only
    try:
        assert again.memory_hit(saved) is None  # it must not read the voice library's store
        assert again.memory_hit(preset) is None  # nor the disk tier
        assert again.synthesise(saved).info["tier"] == "disk"  # which the normal path does
        assert again.memory_hit(saved) is not None  # and now both are in memory
        upload = TTSRequest(text="From memory.", prompt_audio=(22_050, tone_prompt()))
        assert again.memory_hit(upload) is None  # a prompt to decode is not event-loop work
        errors = again.dashboard.snapshot(caller=LOCAL)["errors"]
        assert again.memory_hit(TTSRequest(text="", voice=VOICE)) is None  # refused: recorded by synthesise
        assert again.dashboard.snapshot(caller=LOCAL)["errors"] == errors
    finally:
        again.close()


def test_the_hit_path_remembers_preset_resolutions_but_never_a_saved_voices(
    service: TTSService, monkeypatch: pytest.MonkeyPatch
) -> None:
    resolutions: list[str] = []
    real = Resolver._resolve

    def counted(self: Resolver, request: TTSRequest, saved: Any) -> Any:
        resolutions.append(request.text)
        return real(self, request, saved)

    monkeypatch.setattr(Resolver, "_resolve", counted)
    preset = TTSRequest(text="Remembered.", voice=VOICE, seed=1)
    assert service.synthesise(preset).cache == "MISS"
    assert service.memory_hit(preset) is not None and service.memory_hit(preset) is not None
    # synthesise, then the first hit; the second hit is remembered (templates resolve their own texts)
    assert resolutions.count("Remembered.") == 2
    with pytest.raises(ValidationError, match="seed"):  # True == 1, but a bool is no seed
        service.synthesise(TTSRequest(text="Remembered.", voice=VOICE, seed=True))
    assert service.memory_hit(TTSRequest(text="Remembered.", voice=VOICE, seed=True)) is None

    service.voices.save("desk", (22_050, tone_prompt(hz=180.0)), "", caller=LOCAL)
    saved = TTSRequest(text="Remembered.", voice="desk")
    assert service.synthesise(saved).cache == "MISS"
    assert service.memory_hit(saved) is not None
    service.voices.save(
        "desk", (22_050, tone_prompt(hz=240.0)), "", replace=True, caller=LOCAL
    )  # another voice, same name
    assert service.memory_hit(saved) is None  # a new key: not the old voice's audio
    assert service.synthesise(saved).cache == "MISS"
