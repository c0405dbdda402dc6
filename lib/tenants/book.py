"""The tenants of one service: keys made and revoked by the admin, each request's caller
(:class:`Account`), its limits checked before any engine work, and its usage.

The HTTP boundary names the caller of a request with :func:`acting` (a context
variable, so the worker thread that serves it sees it too); the service asks
:meth:`Tenants.admit_miss` before a miss is made and tells :meth:`Tenants.record` what
was answered. Code that names no caller (the preload, the command line, the admin) is
not limited.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import math
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter
from typing_extensions import TypedDict

from lib.config.tenants import LIMIT_NAMES, TenantsConfig
from lib.errors import ConflictError, NotFoundError, RateLimitedError, StoreUnavailableError, ValidationError
from lib.tenants.local import LocalTenants
from lib.tenants.records import ANONYMOUS, Limits, TenantRecord, check_name, hash_key, new_key

__all__ = ["Account", "MissTicket", "SharedTenants", "Tenants", "UsageRow", "acting", "current_account"]

_LOGGER = logging.getLogger(__name__)

#: A slot of ``concurrent_misses`` is given back at the end of its miss, or after this
#: long if its holder died (a replica killed mid-miss).
_SLOT_LEASE = 3600.0


class SharedTenants(Protocol):
    """Keys and counters in the shared tier (:class:`lib.shared.tenants.TenantKeys`).
    Every method answers None when Redis cannot; ``tenants_find`` answers "" for an
    unknown key and ``tenants_acquire`` "" when every slot is taken."""

    def tenants_put(self, name: str, record: str, key_hash: str) -> bool | None: ...
    def tenants_delete(self, name: str) -> bool | None: ...
    def tenants_all(self) -> dict[str, str] | None: ...
    def tenants_find(self, key_hash: str) -> str | None: ...
    def tenants_charge(
        self, counter: str, seconds: int, amount: int, limit: int
    ) -> tuple[bool, float, float] | None: ...

    def tenants_acquire(self, counter: str, limit: int, lease: float) -> str | None: ...
    def tenants_release(self, counter: str, token: str) -> None: ...
    def tenants_add_usage(self, name: str, fields: dict[str, float]) -> bool | None: ...
    def tenants_usage(self) -> dict[str, dict[str, float]] | None: ...


class UsageRow(TypedDict):
    """One tenant's row of ``GET /api/usage``."""

    name: str
    requests: int
    hits: int
    misses: int
    synth_chars: int
    engine_seconds: float
    audio_seconds: float
    engine_seconds_saved: float
    """What its hits saved: the engine seconds each answered entry cost when it was made."""


@dataclass(frozen=True)
class Account:
    """Who a request is charged to: a key's tenant, or an anonymous address."""

    name: str
    """The tenant's name, or ``anonymous``."""
    limits: Limits
    counter: str
    """Whose counters: the tenant's name, or ``anonymous:<address>``."""

    @property
    def keyed(self) -> bool:
        return self.name != ANONYMOUS


_CURRENT: contextvars.ContextVar[Account | None] = contextvars.ContextVar("tts_tenant_account", default=None)
_PREPAID: contextvars.ContextVar[bool] = contextvars.ContextVar("tts_tenant_prepaid", default=False)


def current_account() -> Account | None:
    """The caller the request being served is charged to; None: nobody (not limited)."""
    return _CURRENT.get()


@contextlib.contextmanager
def acting(account: Account | None) -> Iterator[None]:
    """Serve what runs inside as ``account`` (None: unlimited, e.g. the admin)."""
    token = _CURRENT.set(account)
    try:
        yield
    finally:
        _CURRENT.reset(token)


class MissTicket:
    """An admitted miss: holds its ``concurrent_misses`` slot until closed."""

    def __init__(self, release: Any = None) -> None:
        self._release = release
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            release, self._release = self._release, None
        if release is not None:
            release()

    def __enter__(self) -> MissTicket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _reset_words(seconds: float) -> str:
    """OpenAI's spelling of a reset time: ``1s``, ``6m0s``, ``1h2m3s``."""
    whole = max(1, math.ceil(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


class _Instruments:
    def __init__(self, registry: CollectorRegistry | None) -> None:
        kw: dict[str, Any] = {"registry": registry}
        self.requests = Counter(
            "tts_tenant_requests", "Synthesis requests by tenant and cache result", ["tenant", "cache"], **kw
        )
        self.chars = Counter("tts_tenant_synth_chars", "Characters sent to the engine by tenant", ["tenant"], **kw)
        self.engine = Counter(
            "tts_tenant_engine_seconds", "Engine seconds spent on a tenant's misses", ["tenant"], **kw
        )
        self.saved = Counter(
            "tts_tenant_engine_seconds_saved", "Engine seconds a tenant's hits saved", ["tenant"], **kw
        )
        self.audio = Counter("tts_tenant_audio_seconds", "Seconds of audio answered by tenant", ["tenant"], **kw)
        self.limited = Counter("tts_tenant_rate_limited", "Requests refused over a limit", ["tenant", "limit"], **kw)


class Tenants:
    """Keys, limits and usage (see the module). Thread-safe."""

    def __init__(
        self, config: TenantsConfig, directory: Path, shared: SharedTenants | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:  # fmt: skip
        self.config = config
        self.local = LocalTenants(directory)
        self.shared = shared
        self._known: dict[str, TenantRecord] = {}
        """Keys the shared tier answered lately, by hash: served while it is down."""
        self._instruments = _Instruments(registry)

    # -- keys (the admin's) ----------------------------------------------------------------

    def create(self, name: object, limits: dict[str, object]) -> tuple[TenantRecord, str]:
        """A new key for ``name``: its record and the key itself (shown once, never stored)."""
        name = check_name(name)
        record_limits = Limits.for_key(self.config, limits)
        if len(self.records()) >= self.config.max_keys:
            raise ConflictError(f"there are {self.config.max_keys} keys (tenants.max_keys): revoke one first")
        key = new_key()
        record = TenantRecord(name, hash_key(key), record_limits)
        if self.shared is not None:
            done = self.shared.tenants_put(name, record.to_json(), record.key_hash)
            if done is None:
                raise StoreUnavailableError("the shared tier (Redis) is not answering: no key was made; try again")
        else:
            done = self.local.put(record)
        if not done:
            raise ConflictError(
                f"a key named {name!r} exists: revoke it first (DELETE /api/keys/{name}) or choose another name"
            )
        _LOGGER.info("API key made for tenant %s", name)
        return record, key

    def revoke(self, name: str) -> None:
        """Revoke ``name``'s key on every replica (its usage is kept)."""
        if self.shared is not None:
            done = self.shared.tenants_delete(name)
            if done is None:
                raise StoreUnavailableError(
                    "the shared tier (Redis) is not answering: the key was not revoked; try again"
                )
            self._known = {h: r for h, r in self._known.items() if r.name != name}
        else:
            done = self.local.delete(name)
        if not done:
            raise NotFoundError(f"no key is named {name!r}; GET /api/keys lists them")
        _LOGGER.info("API key of tenant %s revoked", name)

    def records(self) -> list[TenantRecord]:
        """Every key's record, by name."""
        if self.shared is not None:
            found = self.shared.tenants_all()
            if found is None:
                records = {r.name: r for r in self._known.values()}
            else:
                records = {}
                for text in found.values():
                    try:
                        record = TenantRecord.from_json(text)
                    except (ValueError, KeyError, TypeError):
                        continue
                    records[record.name] = record
        else:
            records = self.local.all()
        return [records[name] for name in sorted(records)]

    def find(self, key: str) -> TenantRecord | None:
        """The tenant whose key is ``key``, or None for none."""
        key_hash = hash_key(key)
        if self.shared is None:
            return self.local.by_hash(key_hash)
        found = self.shared.tenants_find(key_hash)
        if found is None:  # Redis is down: the keys seen lately (a revocation meanwhile is not seen)
            return self._known.get(key_hash)
        if not found:
            self._known.pop(key_hash, None)
            return None
        try:
            record = TenantRecord.from_json(found)
        except (ValueError, KeyError, TypeError):
            _LOGGER.error("a tenant record in the shared tier cannot be read; the key is refused")
            return None
        if len(self._known) > 10_000:
            self._known.clear()
        self._known[key_hash] = record
        return record

    # -- accounts and limits ---------------------------------------------------------------

    def account(self, record: TenantRecord | None, host: str | None) -> Account:
        """The account of a request by ``record``'s tenant, or anonymous from ``host``."""
        if record is not None:
            return Account(record.name, record.limits, record.name)
        return Account(ANONYMOUS, Limits.anonymous(self.config), f"{ANONYMOUS}:{host or '?'}")

    def admit_request(self, account: Account) -> dict[str, str]:
        """Count one synthesis request against ``requests_per_minute``: OpenAI's rate
        headers for the answer, or :class:`RateLimitedError` (429) over the limit."""
        limit = account.limits.requests_per_minute
        if limit is None:
            return {}
        charged, used, reset, wait = self._charge(account.counter + ":rpm", 60, 1, limit)
        headers = {
            "x-ratelimit-limit-requests": str(limit),
            "x-ratelimit-remaining-requests": str(max(0, limit - used)),
            "x-ratelimit-reset-requests": _reset_words(reset),
        }
        if not charged:
            self._refused(account, "requests_per_minute")
            who = "this key" if account.keyed else "callers without an API key (per address)"
            raise RateLimitedError(
                f"rate limit reached: {limit} requests per minute for {who} (requests_per_minute); "
                f"try again in {_reset_words(wait)}"
                + ("" if account.keyed else ", or ask the operator for an API key"),
                limit="requests_per_minute",
                headers={**headers, "Retry-After": str(max(1, math.ceil(wait)))},
            )
        return headers

    def admit_miss(self, chars: int, what: str = "this request") -> MissTicket:
        """Before any engine work for the current account: a slot of its
        ``concurrent_misses`` and ``chars`` of its ``synth_chars_per_hour``, or
        :class:`RateLimitedError` (429) and nothing taken. Close the ticket when the
        work ends (a context manager). Nobody acting: not limited."""
        account = current_account()
        if account is None or _PREPAID.get():
            return MissTicket()
        release = None
        slots = account.limits.concurrent_misses
        if slots is not None:
            counter = account.counter + ":busy"
            token = self._acquire(counter, slots)
            if token is None:
                self._refused(account, "concurrent_misses")
                raise RateLimitedError(
                    f"{what} is not cached and {self._whose(account)} may have {slots} new "
                    f"announcement{'s' if slots != 1 else ''} made at once (concurrent_misses): "
                    "try again when the one being made is done"
                    if slots
                    else f"{what} is not cached, and {self._whose(account)} may only be served cached audio here "
                    "(concurrent_misses is 0)",
                    limit="concurrent_misses",
                    headers={"Retry-After": "1"},
                )
            release = lambda: self._release(counter, token)  # noqa: E731
        budget = account.limits.synth_chars_per_hour
        if budget is not None and chars > 0:
            charged, used, _, wait = self._charge(account.counter + ":chars", 3600, chars, budget)
            if not charged:
                if release is not None:
                    release()
                self._refused(account, "synth_chars_per_hour")
                raise RateLimitedError(self._budget_message(account, what, chars, budget, used, wait),
                    limit="synth_chars_per_hour", headers={"Retry-After": str(max(1, math.ceil(wait)))})  # fmt: skip
        if chars > 0:
            self._add_usage(account, {"synth_chars": chars})
            self._instruments.chars.labels(account.name).inc(chars)
        return MissTicket(release)

    @contextlib.contextmanager
    def prepaid(self, chars: int, what: str) -> Iterator[None]:
        """Admit work of ``chars`` characters as one (:meth:`admit_miss`: refused whole
        before any engine call); the misses made inside are not charged again."""
        with self.admit_miss(chars, what):
            token = _PREPAID.set(True)
            try:
                yield
            finally:
                _PREPAID.reset(token)

    def _budget_message(self, account: Account, what: str, chars: int, budget: int, used: int, wait: float) -> str:
        whose = self._whose(account)
        if budget == 0:
            return (f"{what} is not cached, and {whose} may only be served cached audio here "
                    "(synth_chars_per_hour is 0); ask the operator for an API key")  # fmt: skip
        if chars > budget:
            return (f"{what} needs {chars} characters of synthesis, more than {whose}'s whole budget of "
                    f"{budget} an hour (synth_chars_per_hour): send less text, or fewer takes")  # fmt: skip
        return (f"{what} needs {chars} characters of synthesis and {whose} has {max(0, budget - used)} of "
                f"{budget} an hour left (synth_chars_per_hour, given back evenly over the hour); cached audio "
                f"is still served; there is room for this in {_reset_words(wait)}")  # fmt: skip

    @staticmethod
    def _whose(account: Account) -> str:
        return f"the key '{account.name}'" if account.keyed else "a caller without an API key"

    def record(self, cache: str, audio_seconds: float, engine_seconds: float) -> None:
        """One answered request of the current account: ``cache`` HIT (or COMPOSED: no
        engine call; ``engine_seconds`` is what the entry cost when it was made, i.e. what
        this answer saved) or MISS/BYPASS (``engine_seconds`` spent)."""
        account = current_account()
        if account is None:
            return
        hit = cache in ("HIT", "COMPOSED")
        fields = {"requests": 1.0, "hits": float(hit), "misses": float(not hit), "audio_seconds": audio_seconds}
        fields["engine_seconds_saved" if hit else "engine_seconds"] = engine_seconds
        self._add_usage(account, fields)
        instruments = self._instruments
        instruments.requests.labels(account.name, "hit" if hit else "miss").inc()
        instruments.audio.labels(account.name).inc(audio_seconds)
        (instruments.saved if hit else instruments.engine).labels(account.name).inc(engine_seconds)

    # -- usage -----------------------------------------------------------------------------

    def usage(self, names: list[str] | None = None) -> list[UsageRow]:
        """Usage rows (``GET /api/usage``): ``names`` only, or every key's and anonymous."""
        rows = None
        if self.shared is not None:
            rows = self.shared.tenants_usage()
        if rows is None:
            rows = self.local.usage()
        wanted = names if names is not None else [r.name for r in self.records()] + [ANONYMOUS]
        table = []
        for name in wanted:
            row = rows.get(name, {})

            def count(field: str, row: dict[str, float] = row) -> int:
                return int(row.get(field, 0.0))

            def seconds(field: str, row: dict[str, float] = row) -> float:
                return round(float(row.get(field, 0.0)), 3)

            table.append(
                UsageRow(
                    name=name, requests=count("requests"), hits=count("hits"), misses=count("misses"),
                    synth_chars=count("synth_chars"), engine_seconds=seconds("engine_seconds"),
                    audio_seconds=seconds("audio_seconds"), engine_seconds_saved=seconds("engine_seconds_saved"),
                )
            )  # fmt: skip
        return table

    def flush(self) -> None:
        self.local.flush()

    # -- the store, shared or local --------------------------------------------------------

    def _charge(self, counter: str, seconds: int, amount: int, limit: int) -> tuple[bool, int, float, float]:
        """Count ``amount`` against ``limit`` per ``seconds``, a bucket given back evenly
        (GCRA: no burst of twice the limit across a window's edge): (charged, used
        afterwards, seconds until all is given back, seconds until ``amount`` fits)."""
        if limit <= 0:
            return False, 0, 0.0, float(seconds)
        done = None
        if self.shared is not None:
            done = self.shared.tenants_charge(counter, seconds, amount, limit)
        if done is None:
            done = self.local.charge(counter, seconds, amount, limit)
        charged, level, wait = done
        used = min(limit, math.ceil(level * limit / seconds - 1e-6))
        return charged, used, level, wait

    def _acquire(self, counter: str, limit: int) -> str | None:
        if self.shared is not None:
            token = self.shared.tenants_acquire(counter, limit, _SLOT_LEASE)
            if token is not None:
                return ("shared:" + token) if token else None
        local = self.local.acquire(counter, limit, _SLOT_LEASE)
        return None if local is None else "local:" + local

    def _release(self, counter: str, token: str) -> None:
        where, _, token = token.partition(":")
        if where == "shared" and self.shared is not None:
            self.shared.tenants_release(counter, token)
        else:
            self.local.release(counter, token)

    def _add_usage(self, account: Account, fields: dict[str, float]) -> None:
        if self.shared is None or self.shared.tenants_add_usage(account.name, fields) is None:
            self.local.add_usage(account.name, fields)

    def _refused(self, account: Account, limit: str) -> None:
        self._instruments.limited.labels(account.name, limit).inc()


def parse_limits(body: dict[str, Any]) -> dict[str, object]:
    """The limits a ``POST /api/keys`` body gives (unknown fields refused)."""
    unknown = sorted(set(body) - {"name", *LIMIT_NAMES})
    if unknown:
        raise ValidationError(f"{unknown[0]}: unknown field; a key takes name and {', '.join(LIMIT_NAMES)}")
    return {name: body[name] for name in LIMIT_NAMES if name in body}
