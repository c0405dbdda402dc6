"""Administration of the cache: clear, evict by tag, sweep expired entries, verify,
forget one key. Each operation reaches every tier it concerns and empties the memory
tiers, so nothing removed is served again from this process.

Clear empties the results and the derived voice data (voice profiles, decoded
prompts); saved voices are the users' own and are kept (delete them one by one), and so
are approved takes (:mod:`lib.takes`) unless the clear asks to drop them. Evicting a
model version keeps its approved takes too: both put them back from their copies and
report how many were kept.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from lib.cache.entry import CachedAudio
from lib.cache.keys import KEY_RE
from lib.cache.tiers import Tiers
from lib.core.logtext import cut_text
from lib.core.reports import ClearReport, EvictReport, SweepReport, VerifyReport
from lib.errors import ValidationError
from lib.request.access import Action, Caller, check

__all__ = ["Admin"]

_LOGGER = logging.getLogger(__name__)


class Clearable(Protocol):
    """Voice data that clear empties (derived from prompts, made again when needed):
    the voice profiles, the memo of decoded prompts."""

    def clear(self) -> int | None: ...


class Approvals(Protocol):
    """The approved takes (:class:`lib.takes.book.ApprovalBook`), kept through clear and evict."""

    def restore_missing(self, tag: str | None = None) -> int: ...

    def drop_all(self) -> int: ...


class Admin:
    """Admin operations over the tiers; each checks that its caller is the admin."""

    def __init__(
        self,
        tiers: Tiers,
        profiles: Clearable | None = None,
        prompts: Clearable | None = None,
        verify_side: Callable[[], list[str]] | None = None,
        *,
        approvals: Approvals | None = None,
        plausible: Callable[[CachedAudio], str | None] | None = None,
    ) -> None:
        self.tiers = tiers
        self._plausible = plausible
        """Why an entry's audio cannot be its text (lib.engines.plausible.implausible), or None."""
        self.profiles = profiles
        self.prompts = prompts
        self._verify_side = verify_side
        """Checks the side stores' databases (voices, profiles, locks, statistics)."""
        self.approvals = approvals

    def clear(self, *, caller: Caller, drop_approved: bool = False) -> ClearReport:
        """Remove every result from every tier and the derived voice data; saved
        voices stay, and approved takes unless ``drop_approved`` (then their approvals
        are withdrawn too)."""
        check(caller, Action.ADMIN)
        t = self.tiers
        t.writer.flush()
        removed = t.store.clear()
        t.drop_memory()
        shared = t.shared.clear() if t.shared is not None else 0
        objects = t.objects.clear() if t.objects is not None else 0
        profiles = int(self.profiles.clear() or 0) if self.profiles is not None else 0
        if self.prompts is not None:
            self.prompts.clear()
        kept = dropped = 0
        if self.approvals is not None:
            if drop_approved:
                dropped = self.approvals.drop_all()
            else:
                kept = self.approvals.restore_missing()
        _LOGGER.warning(
            "cache cleared: %d entries and %d voice profiles removed; %d approved takes kept, %d dropped",
            removed, profiles, kept, dropped,
        )  # fmt: skip
        report: ClearReport = {
            "removed": removed, "shared_removed": shared, "profiles_removed": profiles,
            "approved_kept": kept, "approved_dropped": dropped,
        }  # fmt: skip
        if t.objects is not None:
            report["objects_removed"] = objects
        return report

    def evict(self, tag: str, *, caller: Caller) -> EvictReport:
        check(caller, Action.ADMIN)
        if not isinstance(tag, str) or not tag.strip() or len(tag) > 200:
            raise ValidationError("tag: give engine:model_version or voice:<fingerprint>")
        tag = tag.strip()
        self.tiers.writer.flush()
        removed = self.tiers.store.evict(tag)
        self.tiers.drop_memory()
        report: EvictReport = {"tag": tag, "removed": removed}
        if self.tiers.shared is not None:
            # Redis's copies, and (through the eviction feed) every other replica's.
            # None: Redis could not be reached, its copies stay (evict again later).
            report["shared_removed"] = self.tiers.shared.evict(tag)
        if self.tiers.objects is not None:
            # The object store's copies, listed by its tag index. None: unreachable, evict again later.
            report["objects_removed"] = self.tiers.objects.evict(tag)
        if self.approvals is not None:  # approved takes of that version stay (their copies go back)
            report["approved_kept"] = self.approvals.restore_missing(tag)
        return report

    def apply_remote(self, tag: str | None) -> None:
        """Another replica evicted ``tag`` (None: cleared everything): drop this
        replica's local copies (Redis's and the object store's are gone already). No access check: it comes
        from the shared tier, where only an admin action puts it."""
        t = self.tiers
        t.writer.flush()
        if tag is None:
            removed = t.store.clear()
            if self.profiles is not None:
                self.profiles.clear()
            if self.prompts is not None:
                self.prompts.clear()
        else:
            removed = t.store.evict(tag)
        t.drop_memory()
        if self.approvals is not None:  # a clear that dropped them withdrew them through Redis already
            self.approvals.restore_missing()
        what = cut_text(tag) if tag is not None else "everything"
        _LOGGER.warning("%s was evicted on another replica: %d local entries removed", what, removed)

    def sweep_expired(self, *, caller: Caller) -> SweepReport:
        check(caller, Action.ADMIN)
        self.tiers.writer.flush()
        report: SweepReport = {"expired_removed": self.tiers.store.expire()}
        if self.tiers.objects is not None:
            report["objects_expired_removed"] = self.tiers.objects.sweep()
        return report

    def verify(self, *, caller: Caller) -> VerifyReport:
        """Every disk entry checked (damage, and audio implausible for its text); what is
        removed here is removed from the shared tiers too."""
        check(caller, Action.ADMIN)
        self.tiers.writer.flush()
        flagged: list[str] = []

        def plausible(entry: CachedAudio) -> str | None:
            problem = self._plausible(entry) if self._plausible is not None else None
            if problem is not None:
                flagged.append(entry.key)
            return problem

        report = self.tiers.store.verify(plausible)
        for key in flagged:
            self.tiers.forget(key)
        if self._verify_side is not None:
            report["repairs"] = [*report["repairs"], *self._verify_side()]
        self.tiers.drop_memory()
        return report

    def forget(self, key: str, *, caller: Caller) -> bool:
        """Drop one entry from every tier (``preload_cache.py --force`` regenerates it)."""
        check(caller, Action.FORCE)
        if not KEY_RE.match(key):
            raise ValidationError("key: must be 32 hexadecimal digits")
        return self.tiers.forget(key)
