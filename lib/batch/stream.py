"""Batch jobs across replicas: a Redis Stream with a consumer group (imported only when
``cache.shared_url`` is set).

Keys (under ``tts:batch:``)::

    tts:batch:stream        the items to make: entries {job, index}; consumer group "makers"
    tts:batch:job:<id>      hash: status, total, done, failed, created
    tts:batch:items:<id>    hash: index -> the item's record (JSON: fields, key, url, cache, error, state)
    tts:batch:jobs          sorted set: job id by creation time (the listing)

Every replica's worker takes items with ``XREADGROUP`` (its consumer: host and pid), makes
them, records the result in the job's hashes and acknowledges the entry (``XACK``). An
item a replica took and never acknowledged (it died) is taken over by another replica
once it has been idle ``batch.lease_seconds`` (``XAUTOCLAIM``); a replica at work renews
its claim (``XCLAIM`` with ``JUSTID``) every third of that. Recording a result is one
script that counts an item once, so an item made twice (a lease taken over from a slow,
not dead, replica) is counted once and made once by the engine (single-flight).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import socket
import time
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

import redis

from lib.errors import StoreUnavailableError

from .board import Claim, ItemView, JobSummary, JobView, Planned

__all__ = ["StreamBoard"]

_LOGGER = logging.getLogger(__name__)

_PREFIX = "tts:batch:"
_GROUP = "makers"

# KEYS: job, items, jobs, stream; ARGV: id, created, total, failed, then one record per item
# (a record without an error is queued on the stream).
_CREATE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local total = tonumber(ARGV[3])
local failed = tonumber(ARGV[4])
local status = 'queued'
if failed >= total then status = 'done' end
redis.call('HSET', KEYS[1], 'status', status, 'total', total, 'done', 0, 'failed', failed, 'created', ARGV[2])
redis.call('ZADD', KEYS[3], ARGV[2], ARGV[1])
for i = 5, #ARGV do
  local record = cjson.decode(ARGV[i])
  redis.call('HSET', KEYS[2], record['index'], ARGV[i])
  if record['state'] == 'pending' then
    redis.call('XADD', KEYS[4], '*', 'job', ARGV[1], 'index', record['index'])
  end
end
return 1
"""

# KEYS: job, items; ARGV: index, record, counter ("done" or "failed").
_FINISH = """
local current = redis.call('HGET', KEYS[2], ARGV[1])
if current then
  local state = cjson.decode(current)['state']
  if state == 'done' or state == 'failed' then return 0 end
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('HINCRBY', KEYS[1], ARGV[3], 1)
local total = tonumber(redis.call('HGET', KEYS[1], 'total'))
local finished = tonumber(redis.call('HGET', KEYS[1], 'done')) + tonumber(redis.call('HGET', KEYS[1], 'failed'))
local status = redis.call('HGET', KEYS[1], 'status')
if finished >= total and (status == 'queued' or status == 'running') then
  redis.call('HSET', KEYS[1], 'status', 'done')
end
return 1
"""

# KEYS: job; ARGV: the status to leave, the new one.
_MOVE = """
if redis.call('HGET', KEYS[1], 'status') == ARGV[1] then redis.call('HSET', KEYS[1], 'status', ARGV[2]) return 1 end
return 0
"""

# KEYS: job; a queued or running job becomes cancelled. 0: unknown job.
_CANCEL = """
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return 0 end
if status == 'queued' or status == 'running' then redis.call('HSET', KEYS[1], 'status', 'cancelled') end
return 1
"""


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _reachable(method: Callable[_P, _R]) -> Callable[_P, _R]:
    """Redis out of reach as a 503 that says so (an endpoint's call), never a 500."""

    @functools.wraps(method)
    def call(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(*args, **kwargs)
        except redis.RedisError as exc:
            raise StoreUnavailableError(
                f"batch jobs are kept in Redis (cache.shared_url), which cannot be reached now ({exc}); try again"
            ) from exc

    return call


def as_text(value: Any) -> str:
    """A value read from Redis as text."""
    return value.decode() if isinstance(value, bytes) else str(value)


class StreamBoard:
    """Jobs in Redis, made by every replica's worker (see the module)."""

    renews = True

    def __init__(self, url: str, *, lease: float, consumer: str | None = None) -> None:
        # Its own client: XREADGROUP blocks for up to a second, longer than the shared
        # tier's short time-outs allow.
        self.client: redis.Redis = redis.Redis.from_url(url, socket_timeout=10, socket_connect_timeout=5)
        self.lease_ms = int(lease * 1000)
        self.consumer = consumer or f"{socket.gethostname()}:{os.getpid()}"
        self.stream = _PREFIX + "stream"
        self._create = self.client.register_script(_CREATE)
        self._finish = self.client.register_script(_FINISH)
        self._move = self.client.register_script(_MOVE)
        self._cancel = self.client.register_script(_CANCEL)
        self._group_made = False

    @staticmethod
    def _job(job_id: str) -> str:
        return _PREFIX + "job:" + job_id

    @staticmethod
    def _items(job_id: str) -> str:
        return _PREFIX + "items:" + job_id

    def _group(self) -> None:
        """The consumer group (and the stream), made by the first job."""
        if self._group_made:
            return
        try:
            self.client.xgroup_create(self.stream, _GROUP, id="0", mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self._group_made = True

    @_reachable
    def create(self, job_id: str, items: list[Planned]) -> bool:
        self._group()
        records = [
            json.dumps({**item.record(), "cache": None, "state": "failed" if item.error is not None else "pending"})
            for item in items
        ]
        failed = sum(1 for item in items if item.error is not None)
        keys = [self._job(job_id), self._items(job_id), _PREFIX + "jobs", self.stream]
        return bool(self._create(keys=keys, args=[job_id, time.time(), len(items), failed, *records]))

    @_reachable
    def summary(self, job_id: str) -> JobSummary | None:
        return self._summary(job_id, self.client.hgetall(self._job(job_id)))

    @staticmethod
    def _summary(job_id: str, raw: dict[Any, Any]) -> JobSummary | None:
        if not raw:
            return None
        job = {as_text(k): as_text(v) for k, v in raw.items()}
        return {
            "id": job_id, "status": job["status"], "total": int(job["total"]), "done": int(job["done"]),
            "failed": int(job["failed"]), "created": float(job["created"]),
        }  # fmt: skip

    @_reachable
    def view(self, job_id: str) -> JobView | None:
        pipe = self.client.pipeline(transaction=True)
        pipe.hgetall(self._job(job_id))
        pipe.hgetall(self._items(job_id))
        raw_job, raw_items = pipe.execute()
        summary = self._summary(job_id, raw_job)
        if summary is None:
            return None
        records = sorted((json.loads(as_text(v)) for v in raw_items.values()), key=lambda r: int(r["index"]))
        items: list[ItemView] = [
            {"index": int(r["index"]), "key": r.get("key") or None, "url": r.get("url") or None,
             "cache": r.get("cache"), "error": r.get("error")}
            for r in records
        ]  # fmt: skip
        return {
            "id": job_id, "status": summary["status"], "total": summary["total"], "done": summary["done"],
            "failed": summary["failed"], "items": items,
        }  # fmt: skip

    @_reachable
    def listing(self, most: int) -> list[JobSummary]:
        ids = [as_text(i) for i in self.client.zrevrange(_PREFIX + "jobs", 0, most - 1)]
        pipe = self.client.pipeline(transaction=False)
        for job_id in ids:
            pipe.hgetall(self._job(job_id))
        found = [self._summary(job_id, raw) for job_id, raw in zip(ids, pipe.execute(), strict=True)]
        return [summary for summary in found if summary is not None]

    @_reachable
    def cancel(self, job_id: str) -> bool:
        return bool(self._cancel(keys=[self._job(job_id)]))

    def unfinished(self) -> bool:
        return True  # the other replicas may submit at any time

    def take(self, wait: float) -> Claim | None:
        entries = self._autoclaim() or self._read(wait)
        for entry_id, fields in entries:
            claim = self._claim(as_text(entry_id), {as_text(k): as_text(v) for k, v in fields.items()})
            if claim is not None:
                return claim
        return None

    def _autoclaim(self) -> list[Any]:
        """An item another replica took and left idle past the lease (it died)."""
        try:
            answer = self.client.xautoclaim(self.stream, _GROUP, self.consumer, self.lease_ms, "0-0", count=1)
        except redis.ResponseError as exc:
            if "NOGROUP" in str(exc):
                return []
            raise
        taken: list[Any] = answer[1] if len(answer) > 1 else []
        if taken:
            _LOGGER.info("batch: took over an item left by a replica that stopped (%s)", as_text(taken[0][0]))
        return [entry for entry in taken if entry and entry[1]]

    def _read(self, wait: float) -> list[Any]:
        try:
            answer: Any = self.client.xreadgroup(
                _GROUP, self.consumer, {self.stream: ">"}, count=1, block=max(1, int(wait * 1000))
            )
        except redis.ResponseError as exc:
            if "NOGROUP" in str(exc):  # no job was ever submitted
                time.sleep(wait)
                return []
            raise
        return list(answer[0][1]) if answer else []

    def _claim(self, entry_id: str, fields: dict[str, str]) -> Claim | None:
        """The item of a stream entry, or None (acknowledged) when it has nothing left to do."""
        job_id, index = fields.get("job", ""), fields.get("index", "")
        raw = self.client.hget(self._items(job_id), index)
        status = self.client.hget(self._job(job_id), "status")
        record = json.loads(as_text(raw)) if raw is not None else None
        if record is None or record.get("state") != "pending" or as_text(status or b"") not in ("queued", "running"):
            self._ack(entry_id)  # made already, or its job was cancelled: dropped
            return None
        self._move(keys=[self._job(job_id)], args=["queued", "running"])
        return Claim(job_id, int(index), record["fields"], record.get("key") or "", record.get("url") or "", entry_id)

    def _ack(self, entry_id: str) -> None:
        pipe = self.client.pipeline(transaction=True)
        pipe.xack(self.stream, _GROUP, entry_id)
        pipe.xdel(self.stream, entry_id)
        pipe.execute()

    def renew(self, claim: Claim) -> None:
        self.client.xclaim(self.stream, _GROUP, self.consumer, 0, [claim.token], justid=True)

    def finish(self, claim: Claim, key: str, url: str, cache: str | None, error: str | None) -> None:
        state = "failed" if error is not None else "done"
        record = {
            "index": claim.index, "fields": claim.fields, "key": key or None, "url": url or None,
            "cache": cache, "error": error, "state": state,
        }  # fmt: skip
        self._finish(keys=[self._job(claim.job), self._items(claim.job)], args=[claim.index, json.dumps(record), state])
        self._ack(claim.token)

    def release(self, claim: Claim) -> None:
        """Left unacknowledged: another replica (or this one, restarted) takes it after the lease."""
        return None

    def close(self) -> None:
        self.client.close()
