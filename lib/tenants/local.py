"""Keys and counters of one machine: in the cache directory (``tenants/``, 0700, files
0600) and in this process's memory. Used without a shared tier, and while it is down.

Counters are this process's own (limits hold per process: one ``webui.py`` per cache
directory); usage is written to ``usage.json`` every few seconds and at close, so it
survives a restart. Keys are re-read when ``keys.json`` changes, so a key made or revoked
by another process on the same directory is seen at the next request.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
import uuid
from pathlib import Path

from lib.core.atomicfile import write_private
from lib.errors import StoreUnavailableError
from lib.tenants.records import TenantRecord

__all__ = ["LocalTenants"]

_LOGGER = logging.getLogger(__name__)
_SAVE_EVERY = 5.0


class LocalTenants:
    """The key store and the counters in ``directory`` and memory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory  # made at the first write: a missing or unusable cache never stops the service
        self._keys_file = directory / "keys.json"
        self._usage_file = directory / "usage.json"
        self._lock = threading.Lock()
        self._keys: dict[str, TenantRecord] = {}
        self._by_hash: dict[str, TenantRecord] = {}
        self._seen: tuple[int, int] | None = None
        self._due: dict[str, float] = {}  # counter -> when its bucket is empty again (GCRA)
        self._slots: dict[str, dict[str, float]] = {}  # counter -> {token: expiry}
        self._usage: dict[str, dict[str, float]] = self._read_usage()
        self._saved = time.monotonic()
        self._dirty = False

    # -- keys ------------------------------------------------------------------------------

    def _refresh(self) -> None:
        try:
            stat = self._keys_file.stat()
        except OSError:  # none yet, or the cache directory is missing or unusable: no keys
            seen = None
        else:
            seen = (stat.st_mtime_ns, stat.st_size)
        if seen == self._seen:
            return
        keys: dict[str, TenantRecord] = {}
        if seen is not None:
            try:
                for text in json.loads(self._keys_file.read_text(encoding="utf-8")).values():
                    record = TenantRecord.from_json(text)
                    keys[record.name] = record
            except (OSError, ValueError, KeyError, TypeError) as exc:
                _LOGGER.error(
                    "tenant keys in %s cannot be read (%s); keeping the last known keys", self._keys_file, exc
                )
                return
        self._keys, self._seen = keys, seen
        self._by_hash = {record.key_hash: record for record in keys.values()}

    def _write_keys(self) -> None:
        data = json.dumps({n: r.to_json() for n, r in self._keys.items()}, indent=1).encode()
        try:
            self._private_dir()
            write_private(self._keys_file, data)
        except OSError as exc:
            raise StoreUnavailableError(
                f"the tenant keys cannot be written to {self.directory} ({exc.strerror or exc}); nothing was changed: "
                "fix the cache directory (cache.dir) and try again"
            ) from exc
        self._seen = None  # read back at the next look: mtime granularity

    def _private_dir(self) -> None:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.directory, 0o700)

    def put(self, record: TenantRecord) -> bool:
        """Store ``record``; False when its name is taken."""
        with self._lock:
            self._refresh()
            if record.name in self._keys:
                return False
            self._keys[record.name] = record
            try:
                self._write_keys()
            except StoreUnavailableError:
                del self._keys[record.name]
                raise
            self._by_hash[record.key_hash] = record
            return True

    def delete(self, name: str) -> bool:
        with self._lock:
            self._refresh()
            record = self._keys.pop(name, None)
            if record is None:
                return False
            try:
                self._write_keys()
            except StoreUnavailableError:
                self._keys[name] = record
                raise
            self._by_hash.pop(record.key_hash, None)
            return True

    def all(self) -> dict[str, TenantRecord]:
        with self._lock:
            self._refresh()
            return dict(self._keys)

    def by_hash(self, key_hash: str) -> TenantRecord | None:
        with self._lock:
            self._refresh()
            return self._by_hash.get(key_hash)

    # -- counters --------------------------------------------------------------------------

    def charge(self, counter: str, seconds: int, amount: int, limit: int) -> tuple[bool, float, float]:
        """Add ``amount`` to ``counter``, a bucket of ``limit`` that empties evenly over
        ``seconds`` (GCRA), unless that overfills it: (charged, how many seconds of the
        bucket are full afterwards, seconds until ``amount`` fits when refused)."""
        now = time.time()
        step = seconds / limit
        with self._lock:
            due = max(self._due.get(counter, now), now)
            after = due + amount * step
            if after - now > seconds + 1e-6:
                return False, due - now, after - seconds - now
            self._due[counter] = after
            if len(self._due) > 100_000:  # addresses come and go: drop the empty buckets
                self._due = {c: d for c, d in self._due.items() if d > now}
            return True, after - now, 0.0

    def acquire(self, counter: str, limit: int, lease: float) -> str | None:
        """A slot of ``counter`` (at most ``limit`` at once, each held at most ``lease``
        seconds), or None when all are taken."""
        now = time.time()
        with self._lock:
            slots = {t: e for t, e in self._slots.get(counter, {}).items() if e > now}
            if len(slots) >= limit:
                self._slots[counter] = slots
                return None
            token = uuid.uuid4().hex
            slots[token] = now + lease
            self._slots[counter] = slots
            return token

    def release(self, counter: str, token: str) -> None:
        with self._lock:
            slots = self._slots.get(counter)
            if slots is not None:
                slots.pop(token, None)
                if not slots:
                    del self._slots[counter]

    # -- usage -----------------------------------------------------------------------------

    def add_usage(self, name: str, fields: dict[str, float]) -> None:
        with self._lock:
            row = self._usage.setdefault(name, {})
            for field, value in fields.items():
                row[field] = row.get(field, 0.0) + value
            self._dirty = True
            due = time.monotonic() - self._saved >= _SAVE_EVERY
        if due:
            self.flush()

    def usage(self) -> dict[str, dict[str, float]]:
        with self._lock:
            return {name: dict(row) for name, row in self._usage.items()}

    def flush(self) -> None:
        """Write the usage now (also at close)."""
        with self._lock:
            if not self._dirty:
                return
            data = json.dumps(self._usage).encode()
            self._dirty = False
            self._saved = time.monotonic()
        try:
            self._private_dir()
            write_private(self._usage_file, data)
        except OSError as exc:
            _LOGGER.error("tenant usage cannot be written to %s: %s", self._usage_file, exc)

    def _read_usage(self) -> dict[str, dict[str, float]]:
        try:
            data = json.loads(self._usage_file.read_text(encoding="utf-8"))
        except (FileNotFoundError, NotADirectoryError):
            return {}
        except (OSError, ValueError) as exc:
            _LOGGER.error("tenant usage in %s cannot be read (%s); counting from zero", self._usage_file, exc)
            return {}
        usage: dict[str, dict[str, float]] = {}
        if isinstance(data, dict):
            for name, row in data.items():
                if isinstance(row, dict):
                    usage[str(name)] = {
                        str(k): float(v) for k, v in row.items() if isinstance(v, int | float) and math.isfinite(v)
                    }
        return usage
