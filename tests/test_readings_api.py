"""``POST /api/reading`` and the lexicon endpoints through a real server (issue 27 items
1 and 2): the reading in the exact format the shared scorer reads, form or JSON; bad
input a 4xx naming the field; lexicon precedence and scope; bad entries a 422 naming
the entry; the admin required to change it; each change says how many cached entries
it made stale; the real scorer run against the server."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
from conftest import REPO, tone_service

from lib.api import create_app
from lib.pipeline.service import TTSService
from tests.api_server import LiveServer

TOKEN = "lexicon-test-token"
# ../shared beside the repository, or the one $TTS_TESTDATA_DIR (its testdata/voices) is in.
_VOICES = os.environ.get("TTS_TESTDATA_DIR")
SHARED = Path(_VOICES).parents[1] if _VOICES else REPO.parent / "shared"
SCORER = SHARED / "tools" / "score_readings.py"
DEV_SET = SHARED / "testdata" / "readings-dev.tsv"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def service(tmp_path: Path) -> Iterator[TTSService]:
    svc = tone_service(tmp_path, admin_token=TOKEN, **{"readings.max_entries": 5})
    yield svc
    svc.close()


@pytest.fixture
def client(http: httpx.Client) -> httpx.Client:
    """The module's service in process (conftest's ``http``)."""
    return http


def scorer() -> ModuleType:
    if not SCORER.is_file():
        pytest.skip(f"the shared scorer is not at {SCORER}")
    spec = importlib.util.spec_from_file_location("score_readings", SCORER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reading(client: httpx.Client, text: str, **fields: Any) -> dict[str, Any]:
    r = client.post("/api/reading", data={"text": text, **fields})
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


# -- POST /api/reading -----------------------------------------------------------------


def test_the_reading_is_in_the_scorers_format_from_a_form_or_json(client: httpx.Client) -> None:
    score = scorer()
    form = reading(client, "请A023号到3号窗口，拨打110")
    assert set(form) == {"reading", "spoken", "tokens", "lexicon_version"}
    assert form["reading"] == "qing3 A ling2 er4 san1 hao4 dao4 san1 hao4 chuang1 kou3 bo1 da3 yao1 yao1 ling2"
    pattern = score.compile_pattern("qing3 A ling2 er4 san1 hao4 dao4 san1 hao4 chuang1 kou3 bo1 da3 yao1 yao1 ling2")
    assert pattern.match(score.norm_reading(form["reading"]))
    assert all(set(t) == {"text", "reading", "source"} for t in form["tokens"])
    assert {t["text"]: t["source"] for t in form["tokens"]}["110"] == "rule"
    assert "幺幺零" in form["spoken"]
    as_json = client.post("/api/reading", json={"text": "请A023号到3号窗口，拨打110"})
    assert as_json.status_code == 200 and as_json.json() == form
    english = client.post("/api/reading", json={"text": "Gate C7", "language": "en"}).json()
    assert english["reading"] == "gate C seven"


@pytest.mark.parametrize(
    ("send", "status", "field"),
    [
        ({"data": {"voice": "tone-low"}}, 400, "text"),
        ({"data": {"text": "   "}}, 400, "text"),
        ({"json": {"text": 5}}, 400, "text"),
        ({"json": {"text": "你好", "language": "fr"}}, 400, "language"),
        ({"json": {"text": "你好", "voice": "nobody"}}, 404, "voice"),
        ({"json": {"text": "你好", "speed": 2}}, 400, "speed"),
        ({"json": ["你好"]}, 400, "body"),
        ({"content": b"{not json", "headers": {"content-type": "application/json"}}, 400, "body"),
        ({"json": {"text": "好" * 1001}}, 400, "text"),
    ],
)
def test_bad_input_is_a_4xx_naming_the_field(
    client: httpx.Client, send: dict[str, Any], status: int, field: str
) -> None:
    r = client.post("/api/reading", **send)
    assert r.status_code == status, r.text
    assert r.json()["error"].startswith(f"{field}:")


def test_the_shared_scorer_reads_every_answer(service: TTSService) -> None:
    """The real scorer, as the issue runs it, against a real server (another process):
    every row answered in a form it can score."""
    if not DEV_SET.is_file():
        pytest.skip(f"no development set at {DEV_SET}")
    scorer()  # skips without it
    with LiveServer(create_app(service)) as live:
        out = _score(live.url)
    rows = [line for line in DEV_SET.read_text(encoding="utf-8").splitlines() if line.strip() and line[0] != "#"]
    total = re.search(r"^(\d+)/(\d+) right: ", out.stdout, re.MULTILINE)
    assert total is not None, out.stdout + out.stderr
    assert int(total.group(2)) == len(rows)
    assert "got:      <" not in out.stdout  # no row failed to be answered (an HTTP or JSON error)
    print("\n" + out.stdout.splitlines()[-1])


def _score(base: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCORER), base, str(DEV_SET)], capture_output=True, text=True, timeout=300
    )


# -- the lexicon ---------------------------------------------------------------------------


def test_changing_the_lexicon_needs_the_admin(client: httpx.Client) -> None:
    entry = {"term": "六安", "reading": "lu4 an1", "voice": None}
    assert client.post("/api/lexicon", json=entry).status_code == 401
    assert client.post("/api/lexicon", json=entry, headers={"Authorization": "Bearer wrong"}).status_code == 403
    assert client.post("/api/lexicon", json=entry, headers=ADMIN).status_code == 200
    assert client.delete("/api/lexicon/六安").status_code == 401
    assert client.get("/api/lexicon").json()["entries"] == [entry]  # listing is open: see lib/api/readings.py
    assert client.delete("/api/lexicon/六安", headers=ADMIN).json()["deleted"] == entry
    assert client.get("/api/lexicon").json()["entries"] == []


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"term": "六安", "reading": "lu9 an1"}, "lexicon entry '六安': 'lu9' has tone 9; a tone is 1-5"),
        ({"term": "六安", "reading": "lux4 an1"}, "lexicon entry '六安': 'lux' (in 'lux4') is not a pinyin syllable"),
        ({"term": "六安", "reading": "lu4"}, "lexicon entry '六安': the term has 2 Han characters but the reading"),
        ({"term": "", "reading": "lu4"}, "lexicon entry '': the term is empty"),
        ({"term": "六安", "reading": ""}, "lexicon entry '六安': the reading is empty"),
        ({"term": "六安", "reading": "lu4 an1", "voice": "a b"}, "lexicon entry '六安': voice must be null or a voice"),
    ],
)
def test_a_bad_entry_is_a_422_naming_it(client: httpx.Client, entry: dict[str, Any], message: str) -> None:
    r = client.post("/api/lexicon", json=entry, headers=ADMIN)
    assert r.status_code == 422, r.text
    assert r.json()["error"].startswith(message)
    assert client.get("/api/lexicon").json()["entries"] == []


def test_a_malformed_entry_is_a_400_naming_the_field(client: httpx.Client) -> None:
    r = client.post("/api/lexicon", json={"term": "六安"}, headers=ADMIN)
    assert r.status_code == 400 and r.json()["error"].startswith("reading:")
    r = client.post("/api/lexicon", json={"term": "六安", "reading": "lu4 an1", "note": "x"}, headers=ADMIN)
    assert r.status_code == 400 and r.json()["error"].startswith("note:")


def test_a_full_lexicon_refuses_one_more(client: httpx.Client) -> None:
    for term, syllables in [("六安", "lu4 an1"), ("台州", "tai1 zhou1"), ("丽水", "li2 shui3"), ("蚌埠", "beng4 bu4"),
                            ("番禺", "pan1 yu2")]:  # fmt: skip
        assert client.post("/api/lexicon", json={"term": term, "reading": syllables}, headers=ADMIN).status_code == 200
    r = client.post("/api/lexicon", json={"term": "洪洞", "reading": "hong2 tong2"}, headers=ADMIN)
    assert r.status_code == 422 and "lexicon entry '洪洞': the lexicon is full (5 entries" in r.json()["error"]
    replaced = client.post("/api/lexicon", json={"term": "六安", "reading": "liu4 an1"}, headers=ADMIN)
    assert replaced.status_code == 200  # replacing an entry is not one more


def test_precedence_and_scope_through_the_api(client: httpx.Client) -> None:
    def said(text: str, voice: str | None = None) -> list[tuple[str, str, str]]:
        fields = {"voice": voice} if voice else {}
        return [(t["text"], t["reading"], t["source"]) for t in reading(client, text, **fields)["tokens"]]

    assert ("六安", "lu4 an1", "shipped") in said("下一站六安")  # the shipped lexicon
    client.post("/api/lexicon", json={"term": "六安", "reading": "liu4 an1"}, headers=ADMIN)
    assert ("六安", "liu4 an1", "lexicon") in said("下一站六安")  # the operator's over the shipped one
    client.post("/api/lexicon", json={"term": "六安", "reading": "lu4 an1", "voice": "tone-high"}, headers=ADMIN)
    assert ("六安", "lu4 an1", "lexicon") in said("下一站六安", "tone-high")  # the voice's own entry
    assert ("六安", "liu4 an1", "lexicon") in said("下一站六安", "tone-low")  # the global one elsewhere
    # A longer term wins where terms overlap.
    client.post("/api/lexicon", json={"term": "六安站", "reading": "lu4 an1 zhan4"}, headers=ADMIN)
    assert said("六安站到了")[0] == ("六安站", "lu4 an1 zhan4", "lexicon")
    # Deleting the scoped entry needs ?voice=; the global one stays.
    assert client.delete("/api/lexicon/六安", params={"voice": "nobody"}, headers=ADMIN).status_code == 404
    assert client.delete("/api/lexicon/六安", params={"voice": "tone-high"}, headers=ADMIN).status_code == 200
    assert ("六安", "liu4 an1", "lexicon") in said("下一站六安", "tone-high")


def test_a_change_says_how_many_cached_entries_it_made_stale(client: httpx.Client, service: TTSService) -> None:
    for text in ("下一站六安", "六安站到了", "欢迎光临"):
        assert client.post("/api/tts", data={"text": text, "voice": "tone-low"}).status_code == 200
    service.cache.flush()  # on disk (written in the background), where the count looks
    added = client.post("/api/lexicon", json={"term": "六安", "reading": "lu4 an1"}, headers=ADMIN).json()
    assert added["stale"] == 2 and re.fullmatch(r"[0-9a-f]{16}", added["lexicon_version"])
    stats = client.get("/api/cache/stats").json()
    assert stats["lexicon"]["last_change"]["stale"] == 2 and stats["lexicon"]["entries"] == 1
    r = client.post("/api/tts", data={"text": "欢迎光临", "voice": "tone-low"})
    assert r.headers["x-cache"] == "HIT"
    r = client.post("/api/tts", data={"text": "下一站六安", "voice": "tone-low"})
    assert r.headers["x-cache"] == "MISS"
    service.cache.flush()
    deleted = client.delete("/api/lexicon/六安", headers=ADMIN).json()
    assert deleted["stale"] == 3  # both old entries and the one just made


def test_the_openapi_schema_documents_the_endpoints(client: httpx.Client) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    body = paths["/api/reading"]["post"]["requestBody"]["content"]
    assert {"application/json", "application/x-www-form-urlencoded"} <= set(body)
    assert set(paths["/api/lexicon"]) == {"get", "post"}
    assert "delete" in paths["/api/lexicon/{term}"]
    assert {"401", "403", "422"} <= set(paths["/api/lexicon"]["post"]["responses"])


def test_an_entry_is_bounded_free_of_control_characters_and_scoped_to_a_voice_that_exists(
    client: httpx.Client, service: TTSService
) -> None:
    """A reading cannot be longer than its term can take (2,000 units once made a
    5-character text 19 minutes of audio), a NUL or other control character is refused
    where it is, and a scope must name a saved or preset voice. Nothing is written."""
    refused = {
        "units": {"term": "六安市", "reading": " ".join(["lu4"] * 2000)},
        "nul": {"term": "六\x00安", "reading": "lu4 an1"},
        "bell": {"term": "六安", "reading": "lu4\x07 an1"},
        "scope": {"term": "六安", "reading": "lu4 an1", "voice": "no-such-voice"},
    }
    said = {}
    for case, entry in refused.items():
        answer = client.post("/api/lexicon", json=entry, headers=ADMIN)
        assert answer.status_code == 422, (case, answer.text)
        said[case] = answer.json()["error"]
    assert "2000 units, more than the 5 a term of 3 characters can take" in said["units"]
    assert "control character U+0000" in said["nul"] and "control character U+0007" in said["bell"]
    assert "'no-such-voice' is no saved or preset voice" in said["scope"]
    assert client.get("/api/lexicon").json()["entries"] == []
    fine = {"term": "5G网络", "reading": "wu3 G wang3 luo4", "voice": "tone-low"}  # within the bound, a preset
    assert client.post("/api/lexicon", json=fine, headers=ADMIN).status_code == 200
