"""The operator's lexicon shared through a real ``redis-server`` (issue 27 item 1: "shared
through Redis when the shared tier is on, like voices"): an edit on one replica reaches
another within seconds (its keys, its file, its dashboard), a replica that starts reads
Redis's lexicon, the first one publishes its file's, and an edit is refused while Redis
is down, nothing changed."""

from __future__ import annotations

import json
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import tone_service
from redis_server import RedisServer, require_redis_server

from lib.errors import StoreUnavailableError
from lib.pipeline.service import TTSService
from lib.request.access import LOCAL
from lib.request.types import TTSRequest


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer(require_redis_server()) as running:
        yield running


@pytest.fixture
def replicas(server: RedisServer, tmp_path: Path) -> Iterator[Callable[..., TTSService]]:
    """Services on the same Redis, each with its own cache directory and lexicon file."""
    client = server.client()
    client.flushdb()  # a fresh lexicon for each test
    client.close()
    made: list[TTSService] = []

    def make(name: str, url: str | None = None, **overrides: Any) -> TTSService:
        svc = tone_service(tmp_path / name, **{"cache.shared_url": url or server.url, **overrides})
        made.append(svc)
        return svc

    yield make
    for svc in made:
        svc.close()


def wait_for(check: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "the other replica did not follow in time"
        time.sleep(0.05)


def test_an_edit_on_one_replica_reaches_the_other_within_seconds(
    replicas: Callable[..., TTSService], tmp_path: Path
) -> None:
    a, b = replicas("a"), replicas("b")
    key_b = b.resolve(TTSRequest(text="下一站六安", voice="tone-low")).key
    answer = a.readings.add("六安", "lu4 an1", caller=LOCAL)
    started = time.monotonic()
    wait_for(lambda: b.readings.version == answer["lexicon_version"])
    follow = time.monotonic() - started
    assert b.readings.entries() == [{"term": "六安", "reading": "lu4 an1", "voice": None}]
    assert b.resolve(TTSRequest(text="下一站六安", voice="tone-low")).key != key_b  # b's keys follow
    assert (
        b.resolve(TTSRequest(text="下一站六安", voice="tone-low")).key
        == a.resolve(TTSRequest(text="下一站六安", voice="tone-low")).key
    )  # and agree with a's: one shared cache
    path_b = tmp_path / "b" / "lexicon.json"
    wait_for(lambda: path_b.is_file())
    assert json.loads(path_b.read_text(encoding="utf-8"))[0]["term"] == "六安"
    assert stat.S_IMODE(path_b.stat().st_mode) == 0o600
    last = b.dashboard.snapshot(caller=LOCAL)["lexicon"]["last_change"]
    assert last["term"] == "六安" and last["origin"] == "replica"

    b.readings.remove("六安", caller=LOCAL)  # and back the other way
    wait_for(lambda: a.readings.entries() == [])
    assert a.readings.version == b.readings.version
    print(f"\nthe other replica followed in {follow:.2f} s")


def test_a_replica_that_starts_reads_the_lexicon_in_redis(replicas: Callable[..., TTSService], tmp_path: Path) -> None:
    a = replicas("a")
    a.readings.add("六安", "lu4 an1", caller=LOCAL)
    a.readings.add("长春", "chang2 chun1", "tone-high", caller=LOCAL)
    # A new replica whose own file says otherwise: Redis is the authority.
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "lexicon.json").write_text(
        '[{"term": "台州", "reading": "tai1 zhou1", "voice": null}]', encoding="utf-8"
    )
    c = replicas("c")
    assert c.readings.entries() == a.readings.entries() and c.readings.version == a.readings.version
    saved = json.loads((tmp_path / "c" / "lexicon.json").read_text(encoding="utf-8"))
    assert {e["term"] for e in saved} == {"六安", "长春"}


def test_the_first_replica_publishes_its_file(replicas: Callable[..., TTSService], tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "lexicon.json").write_text(
        '[{"term": "台州", "reading": "tai1 zhou1", "voice": null}]', encoding="utf-8"
    )
    a = replicas("a")
    b = replicas("b")  # no file of its own
    assert b.readings.entries() == [{"term": "台州", "reading": "tai1 zhou1", "voice": None}]
    assert a.readings.version == b.readings.version


def test_an_edit_is_refused_while_redis_is_down(tmp_path: Path) -> None:
    with RedisServer(require_redis_server()) as own:
        svc = tone_service(tmp_path, **{"cache.shared_url": own.url})
        try:
            svc.readings.add("六安", "lu4 an1", caller=LOCAL)
            path = tmp_path / "lexicon.json"
            before = path.read_bytes()
            own.stop()
            with pytest.raises(StoreUnavailableError, match="nothing was changed"):
                svc.readings.add("台州", "tai1 zhou1", caller=LOCAL)
            with pytest.raises(StoreUnavailableError, match="nothing was changed"):
                svc.readings.remove("六安", caller=LOCAL)
            assert path.read_bytes() == before
            assert svc.readings.entries() == [{"term": "六安", "reading": "lu4 an1", "voice": None}]
            own.start()  # an empty Redis (no persistence): this replica's lexicon is published again
            wait_for(lambda: own.client().exists("tts:lexicon:rev") == 1, 15)
            svc.readings.add("台州", "tai1 zhou1", caller=LOCAL)
            assert {e["term"] for e in svc.readings.entries()} == {"六安", "台州"}
        finally:
            svc.close()
