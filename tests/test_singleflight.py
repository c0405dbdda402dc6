"""Single-flight across processes (lib.cache.singleflight.lead_or_wait) against the real
lock store on disk: the re-check after taking a lease, and the lease's release."""

from __future__ import annotations

from pathlib import Path

from lib.cache.leases import DiskLeases, Lease
from lib.cache.singleflight import lead_or_wait

KEY = "0123456789abcdef0123456789abcdef"


def test_the_leader_looks_again_after_taking_the_lease(tmp_path: Path) -> None:
    """Another process stored the result and released its lease between this one's last
    look and its lease: the new leader finds it and never runs the engine."""
    leases = DiskLeases(str(tmp_path / "locks"))
    looks: list[str] = []
    produced: list[Lease] = []

    def lookup() -> str | None:
        looks.append("look")
        return "stored by the other process"

    def produce(lease: Lease) -> str:
        produced.append(lease)
        return "made again"

    try:
        value, made = lead_or_wait(
            KEY, leases, None, lease=5.0, timeout=5.0, lookup=lookup, produce=produce, on_lock_error=lambda e: None
        )
        assert (value, made) == ("stored by the other process", False)
        assert produced == [] and looks == ["look"]
        assert not leases.held(KEY), "the lease taken for the re-check is released"
    finally:
        leases.close()


def test_the_leader_produces_under_the_lease_when_nothing_is_stored(tmp_path: Path) -> None:
    leases = DiskLeases(str(tmp_path / "locks"))
    held_while_producing: list[bool] = []

    def produce(lease: Lease) -> str:
        held_while_producing.append(leases.held(KEY))
        lease.release()
        return "made"

    try:
        value, made = lead_or_wait(
            KEY, leases, None, lease=5.0, timeout=5.0, lookup=lambda: None, produce=produce,
            on_lock_error=lambda e: None,
        )  # fmt: skip
        assert (value, made) == ("made", True)
        assert held_while_producing == [True] and not leases.held(KEY)
    finally:
        leases.close()
