"""Batch jobs over HTTP (docs/batch.md): submitted, made in the background through the
service's request path (one engine call per new text, cached items HIT), reported,
cancelled, refused or failed item by item, and continued after a restart. The replicas'
version (Redis Streams) is tests/test_batch_replicas.py."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import REPO, in_process, serving, wait_until
from test_background_preload import HeldTone

from lib.api import create_app
from lib.batch.jobs import BatchJobs, ItemSpec, price
from lib.batch.remote import RemoteRefusal, run_remote
from lib.request.phrases import expand, load_phrases
from lib.request.types import TTSRequest

VOICE = "tone-low"


def _items(*texts: str, **fields: Any) -> list[dict[str, Any]]:
    return [{"text": text, "voice": VOICE, **fields} for text in texts]


def _finished(client: Any, job_id: str) -> dict[str, Any]:
    """The job once it is done or cancelled (polled; the test asserts the outcome, not the time)."""
    assert wait_until(lambda: client.get(f"/api/batch/{job_id}").json()["status"] in ("done", "cancelled"), 30)
    job: dict[str, Any] = client.get(f"/api/batch/{job_id}").json()
    return job


def test_a_job_is_submitted_made_and_reported(make_service: Any) -> None:
    service = make_service()
    with in_process(create_app(service)) as client:
        answer = client.post("/api/batch", json={"items": _items("first batch line", "second batch line")})
        assert answer.status_code == 202
        body = answer.json()
        assert set(body) == {"id", "status_url", "total"} and body["total"] == 2
        assert re.fullmatch(r"[0-9a-f]{32}", body["id"]) and body["status_url"] == f"/api/batch/{body['id']}"

        job = _finished(client, body["id"])
        assert (job["status"], job["total"], job["done"], job["failed"]) == ("done", 2, 2, 0)
        assert [item["index"] for item in job["items"]] == [0, 1]
        for item, text in zip(job["items"], ["first batch line", "second batch line"], strict=True):
            assert item["cache"] == "MISS" and item["error"] is None
            assert item["url"] == f"/api/audio/{item['key']}.wav"
            audio = client.get(item["url"])  # the result, by its URL
            assert audio.status_code == 200 and audio.content[:4] == b"RIFF"
            again = client.post("/api/tts", data={"text": text, "voice": VOICE})  # the job cached it
            assert again.headers["x-cache"] == "HIT" and again.headers["x-cache-key"] == item["key"]
        assert [row["id"] for row in client.get("/api/batch").json()["jobs"]] == [body["id"]]

        missing = client.get("/api/batch/no-such-job")
        assert missing.status_code == 404 and "no batch job" in missing.json()["error"]
    folder = Path(service.config.cache.dir) / "batch"
    assert folder.stat().st_mode & 0o777 == 0o700 and (folder / "jobs.db").stat().st_mode & 0o777 == 0o600


def test_one_engine_call_per_new_text_and_cached_items_are_hits(make_service: Any) -> None:
    engine = HeldTone(held="new words")
    service = make_service(engine=engine)
    with in_process(create_app(service)) as client:
        assert client.post("/api/tts", data={"text": "cached words", "voice": VOICE}).headers["x-cache"] == "MISS"
        items = [
            *_items("cached words", "new words"),
            {"text": "new words", "voice": VOICE, "format": "mp3"},
            *_items("other words"),
        ]
        job_id = client.post("/api/batch", json={"items": items}).json()["id"]
        assert wait_until(lambda: engine.texts["new words"] == 1)  # the job stands on its new text

        # A request of the same text meanwhile waits for the job's synthesis (single-flight).
        answers: list[Any] = []
        asking = threading.Thread(
            target=lambda: answers.append(client.post("/api/tts", data={"text": "new words", "voice": VOICE}))
        )
        asking.start()
        engine.release.set()
        asking.join(30)
        job = _finished(client, job_id)
    assert engine.texts == {"cached words": 1, "new words": 1, "other words": 1}
    assert answers[0].status_code == 200 and answers[0].headers["x-cache"] == "HIT"
    assert [item["cache"] for item in job["items"]] == ["HIT", "MISS", "HIT", "MISS"]
    assert job["items"][1]["key"] == job["items"][2]["key"] and job["items"][2]["url"].endswith(".mp3")
    assert (job["done"], job["failed"]) == (4, 0)


def test_the_same_id_again_is_the_same_job(make_service: Any) -> None:
    service = make_service()
    with in_process(create_app(service)) as client:
        first = client.post("/api/batch", json={"id": "release-42", "items": _items("only once")})
        assert first.status_code == 202 and first.json()["id"] == "release-42"
        _finished(client, "release-42")
        again = client.post("/api/batch", json={"id": "release-42", "items": _items("only once")})
        assert again.status_code == 200 and again.json() == first.json()
        assert [row["id"] for row in client.get("/api/batch").json()["jobs"]] == ["release-42"]
        bad = client.post("/api/batch", json={"id": "no spaces!", "items": _items("x")})
        assert bad.status_code == 422 and "id" in bad.json()["error"]
    assert service.engine.calls == 1


def test_a_bad_item_fails_alone_and_a_bad_body_is_refused(make_service: Any) -> None:
    service = make_service()
    with in_process(create_app(service)) as client:
        items = [
            *_items("a good line"),
            {"text": "unknown voice", "voice": "nobody"},
            {"text": "seed out of range", "voice": VOICE, "seed": -1},
            {"text": "odd format", "voice": VOICE, "format": "xyz"},
            {"text": "   ", "voice": VOICE},
            *_items("another good line"),
        ]
        answer = client.post("/api/batch", json={"items": items})
        assert answer.status_code == 202
        job = _finished(client, answer.json()["id"])
        assert (job["status"], job["done"], job["failed"]) == ("done", 2, 4)
        assert [item["cache"] for item in job["items"]] == ["MISS", None, None, None, None, "MISS"]
        errors = [item["error"] or "" for item in job["items"]]
        assert "nobody" in errors[1] and errors[2].startswith("seed") and errors[3].startswith("format")
        assert errors[4].startswith("text") and errors[0] == errors[5] == ""
        # The same content refused by POST /api/tts, with the same message.
        tts = client.post("/api/tts", data={"text": "unknown voice", "voice": "nobody"})
        assert tts.status_code == 404 and tts.json()["error"] == errors[1]

        refused = [
            (b"not json", 422, "body"),
            (b'["a list"]', 422, "body"),
            (b'{"items": "words"}', 422, "items"),
            (b'{"items": []}', 422, "items"),
            (b'{"items": [{"text": 5, "voice": "tone-low"}]}', 422, "items[0].text"),
            (b'{"items": [{"text": "x", "colour": "red"}]}', 422, "items[0].colour"),
            (b'{"items": [{"text": "x"}], "priority": 1}', 422, "priority"),
        ]
        for raw, status, named in refused:
            answer = client.post("/api/batch", content=raw, headers={"content-type": "application/json"})
            assert answer.status_code == status and answer.json()["error"].startswith(named), raw
        many = client.post("/api/batch", json={"items": _items(*[f"line {i}" for i in range(1001)])})
        assert many.status_code == 413 and "1000" in many.json()["error"]
        assert len(client.get("/api/batch").json()["jobs"]) == 1  # nothing refused became a job
    assert service.engine.calls == 2


def test_a_job_is_cancelled_and_its_items_not_started_are_dropped(make_service: Any) -> None:
    engine = HeldTone(held="the first")
    service = make_service(engine=engine)
    with in_process(create_app(service)) as client:
        job_id = client.post("/api/batch", json={"items": _items("the first", "the second", "the third")}).json()["id"]
        assert wait_until(lambda: engine.texts["the first"] == 1)
        assert client.get(f"/api/batch/{job_id}").json()["status"] == "running"
        cancelled = client.delete(f"/api/batch/{job_id}")
        assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
        engine.release.set()
        assert wait_until(lambda: client.get(f"/api/batch/{job_id}").json()["done"] == 1)  # the item at work ends
        later = client.post("/api/batch", json={"items": _items("a later job")}).json()["id"]
        assert _finished(client, later)["status"] == "done"  # the worker went past the dropped items
        job = client.get(f"/api/batch/{job_id}").json()
        assert client.delete("/api/batch/no-such-job").status_code == 404
    assert job["status"] == "cancelled" and [item["cache"] for item in job["items"]] == ["MISS", None, None]
    assert engine.texts["the second"] == engine.texts["the third"] == 0


def test_the_admin_or_a_tenant_within_its_budget_submits_and_only_the_admin_cancels(make_service: Any) -> None:
    service = make_service(admin_token="s3cret")
    body = {"id": "guarded", "items": _items("guarded words")}
    with in_process(create_app(service)) as client:
        assert client.post("/api/batch", json=body).status_code == 401
        wrong = client.post("/api/batch", json=body, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401 and "not known" in wrong.json()["error"]  # neither the admin nor a tenant
        admin = {"Authorization": "Bearer s3cret"}
        # A tenant's job is priced before it starts and refused whole over its budget (issue 37, item 5).
        key = client.post("/api/keys", json={"name": "acme", "synth_chars_per_hour": 20}, headers=admin).json()["key"]
        tenant = {"Authorization": f"Bearer {key}"}
        calls = service.engine.calls
        dear = {"id": "dear", "items": _items("the first long line of a list", "the second long line of a list")}
        over = client.post("/api/batch", json=dear, headers=tenant)
        assert over.status_code == 429 and "synth_chars_per_hour" in over.json()["error"]
        assert client.get("/api/batch/dear").status_code == 404 and service.engine.calls == calls  # nothing made
        cheap = {"id": "cheap", "items": _items("twelve chars")}
        assert client.post("/api/batch", json=cheap, headers=tenant).status_code == 202
        assert _finished(client, "cheap")["done"] == 1
        usage = client.get("/api/usage", headers=tenant).json()["tenants"][0]
        assert usage["synth_chars"] == len("twelve chars")  # charged once, for the job
        assert client.get("/api/batch/guarded").status_code == 404  # nothing was made of it
        assert client.post("/api/batch", json=body, headers=admin).status_code == 202
        assert _finished(client, "guarded")["done"] == 1  # anyone reads the status
        assert client.delete("/api/batch/guarded").status_code == 401
        assert client.delete("/api/batch/guarded", headers=admin).status_code == 200


def test_the_price_counts_the_characters_of_new_texts(make_service: Any) -> None:
    service = make_service()
    service.synthesise(TTSRequest(text="already here", voice=VOICE))
    new = service.resolve(TTSRequest(text="a brand new line", voice=VOICE)).fields.text
    specs = [
        ItemSpec({"text": "already here", "voice": VOICE}),
        ItemSpec({"text": "a brand new line", "voice": VOICE}),
        ItemSpec({"text": "a brand new line", "voice": VOICE, "format": "mp3"}),  # the same text: once
        ItemSpec({"text": "no such voice", "voice": "nobody"}),
    ]
    assert price(service, specs) == len(new) > 0
    assert price(service, specs[:1]) == 0


def test_a_job_continues_after_a_restart(make_service: Any, tmp_path: Path) -> None:
    engine = HeldTone(held="line two")
    first = make_service(engine=engine)
    with in_process(create_app(first)) as client:
        job_id = client.post("/api/batch", json={"items": _items("line one", "line two", "line three")}).json()["id"]
        assert wait_until(lambda: engine.texts["line two"] == 1)  # line one made, line two at work
        # The process stops while the engine holds line two: the item is given back, not failed.
        closing = threading.Thread(target=first.close)
        closing.start()
        db = Path(first.config.cache.dir) / "batch" / "jobs.db"
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
            given_back = lambda: con.execute("SELECT state FROM items WHERE idx = 1").fetchone()[0] == "pending"  # noqa: E731
            assert wait_until(given_back)
        engine.release.set()
        closing.join(30)

    second_engine = HeldTone(held="")
    second = make_service(engine=second_engine, **{"cache.dir": first.config.cache.dir})
    with in_process(create_app(second)) as client:  # its worker picks the job up
        job = _finished(client, job_id)
    assert (job["status"], job["done"], job["failed"]) == ("done", 3, 0)
    assert [item["cache"] for item in job["items"]] == ["MISS", "MISS", "MISS"]
    assert second_engine.texts == {"line two": 1, "line three": 1}  # line one was not made again


@pytest.mark.slow
def test_preload_cache_submits_a_list_to_a_server_and_follows_it(
    make_service: Any, tmp_path: Path, free_port: int
) -> None:
    service = make_service(admin_token="tok")
    service.synthesise(TTSRequest(text="already cached", voice=VOICE))
    calls = service.engine.calls
    phrases = [
        {"text": "already cached", "voice": "low"},
        {"text": "made by the server", "voice": "low", "seeds": [1, 2]},
        {"text": "nobody speaks", "voice": "ghost"},
    ]
    doc = {"version": 1, "voices": {"low": {"preset": VOICE}, "ghost": {"preset": "no-such-voice"}}, "phrases": phrases}
    (tmp_path / "list.json").write_text(json.dumps(doc), encoding="utf-8")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, str(REPO / "preload_cache.py"), "--phrases", str(tmp_path / "list.json"), *args]
        # Not TQDM_DISABLE: the CosyVoice engine sets it in its process (lib/engines/cosyvoice/runtime.py),
        # and a CosyVoice test in the same worker left it in os.environ (the bar then never showed).
        env = {**{k: v for k, v in os.environ.items() if k != "TQDM_DISABLE"}, "TTS_ADMIN_TOKEN": "tok"}
        return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)

    with serving(create_app(service), free_port) as url:
        done = run("--server", url)
        assert done.returncode == 1, done.stderr  # a phrase failed: as the local preload
        assert done.stdout.startswith("preload: 4 phrases, 2 generated, 1 already cached, 1 failed in ")
        assert (
            "preload: 失败 failed: 「nobody speaks」（no-such-voice） · phrases[2]: "
            "音色 Voice：没有这个音色，请从列表中选择 — no saved or preset voice named 'no-such-voice'" in done.stderr
        )  # by its text and voice, why in both languages, as the local preload
        assert "4/4" in done.stderr  # the progress bar
        assert service.engine.calls == calls + 2

        # The same list again (in process): the same job, followed, nothing made again.
        requests = expand(load_phrases(tmp_path / "list.json"))
        again = run_remote(url, "tok", requests)
        assert again.summary().split(" in ")[0] == done.stdout.split(" in ")[0]
        assert service.engine.calls == calls + 2
        with httpx.Client(base_url=url) as client:
            assert len(client.get("/api/batch").json()["jobs"]) == 1
        with pytest.raises(RemoteRefusal, match=r"refused the job \(HTTP 401\)"):
            run_remote(url, "wrong", requests)


def test_the_preload_tab_submits_a_list_as_a_job_and_lists_the_jobs(
    make_service: Any, tmp_path: Path, free_port: int
) -> None:
    from gradio_client import Client, handle_file

    import webui
    from lib.ui.cache_handlers import batch_rows

    service = make_service(admin_token="tok")
    doc = {
        "version": 1,
        "voices": {"low": {"preset": VOICE}},
        "phrases": [{"text": "tab line", "seeds": [1, 2], "voice": "low"}],
    }
    upload = tmp_path / "upload.json"
    upload.write_text(json.dumps(doc), encoding="utf-8")
    with serving(webui.create_app(service, phrases_path=upload), free_port) as url:
        client = Client(url, verbose=False, download_files=str(tmp_path / "downloads"))
        with pytest.raises(Exception, match="admin"):
            client.predict(handle_file(str(upload)), "", api_name="/batch")  # not signed in
        message, table = client.predict(handle_file(str(upload)), "tok", api_name="/batch")
        job_id = re.search(r"Batch job `([^`]+)`: 2 items", message).group(1)  # type: ignore[union-attr]
        assert job_id.startswith("preload-") and table["data"][0][:2] == [job_id, table["data"][0][1]]
        jobs = BatchJobs.of(service)
        assert wait_until(lambda: jobs.status(job_id)["status"] == "done", 30)
    assert batch_rows(jobs.listing())[0][:5] == [job_id, "done", "2/2 (100 %)", 2, 0]
    assert service.engine.calls == 2


def test_with_redis_out_of_reach_the_endpoints_answer_503(make_service: Any) -> None:
    service = make_service(**{"cache.shared_url": "redis://127.0.0.1:9/0"})  # port 9: nothing answers
    with in_process(create_app(service)) as client:
        for answer in (
            client.post("/api/batch", json={"items": _items("not now")}),
            client.get("/api/batch/some-job"),
            client.get("/api/batch"),
            client.delete("/api/batch/some-job"),
        ):
            assert answer.status_code == 503 and "cache.shared_url" in answer.json()["error"]
