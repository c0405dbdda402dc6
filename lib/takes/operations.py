"""The service's ``takes`` part: render takes, approve one, withdraw it, list approvals,
and hand the request path a phrase's approved take.

A take is an ordinary cache entry: the phrase's request under one seed. Approving a
take's key makes it the approved take of its phrase (the entry says which phrase and
seed it is: :meth:`lib.compose.produce.Producer.meta`); from then on a request of the phrase
that names no seed is answered that entry (``X-Take: approved``), one that names a seed
gets that seed's render as before. The approved entry is kept forever (no expiry),
pinned and copied (:mod:`lib.takes.book`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from typing_extensions import TypedDict

from lib.cache.entry import CachedAudio, pack
from lib.cache.keys import KEY_RE
from lib.cache.tiers import Tiers
from lib.core.logtext import cut_text
from lib.errors import NotFoundError, OutOfRangeError, StoreUnavailableError, ValidationError
from lib.request.access import Action, Caller, check
from lib.request.types import Resolved, TTSRequest
from lib.request.validate import check_seed
from lib.takes.book import ApprovalBook
from lib.takes.records import Approval, pcm_digest

__all__ = ["DEFAULT_TAKES", "MAX_TAKES", "ApprovalRow", "Rendered", "Takes"]

_LOGGER = logging.getLogger(__name__)

DEFAULT_TAKES = 3
MAX_TAKES = 8
_REMEMBERED = 4096
"""Takes rendered here whose text is remembered for the approval's record (when the
entries do not keep texts: ``cache.store_text`` off)."""


class Serving(Protocol):
    """The serving engine, as the approvals list compares it."""

    @property
    def name(self) -> str: ...

    @property
    def model_version(self) -> str: ...


@dataclasses.dataclass(frozen=True)
class Rendered:
    """One rendered take: its seed and what the request path answered."""

    seed: int
    key: str
    duration: float
    cache: str


class ApprovalRow(TypedDict):
    """One approval as the approvals list shows it (:meth:`Takes.listing`,
    ``GET /api/takes/approved``)."""

    phrase: str
    """The phrase's text (its id is ``phrase_id``)."""
    voice: str
    seed: int
    key: str
    """The approved take's cache key."""
    url: str
    """Where its audio is served (``/api/audio/<key>.wav``)."""
    model_version: str
    who: str
    when: str
    """The approval's time, ISO 8601 UTC."""
    duration: float
    needs_review: bool
    """Made by another model than the serving one."""
    style: str
    speed: float
    phrase_id: str


class Takes:
    """Takes and approvals over the tiers and the approval book (see the module)."""

    def __init__(
        self, book: ApprovalBook, tiers: Tiers, engine: Serving,
        admit: Callable[[int], AbstractContextManager[Any]] = lambda chars: contextlib.nullcontext(),
    ) -> None:  # fmt: skip
        """``admit(chars)``: the caller's limits, asked once for a rendering of takes
        before any engine call (the tenants' :meth:`~lib.tenants.Tenants.prepaid`)."""
        self._admit = admit
        self.book = book
        self.tiers = tiers
        self.engine = engine
        self._texts: dict[str, tuple[str, str]] = {}
        """Key -> (text, style) of takes rendered here (the approval record's phrase)."""

    # -- the request path ------------------------------------------------------------------

    def approved_entry(self, approval: Approval) -> tuple[CachedAudio, str] | None:
        """The approved take's entry and the tier that had it; from its copy when no
        tier has it (put back into the store and memory). None if it is lost."""
        found = self.tiers.lookup(approval.key)
        if found is not None:
            return found
        entry = self.book.entry(approval.key)
        if entry is None:
            return None
        _LOGGER.warning("approved take %s was missing from the cache; put back from its copy", approval.key)
        blob = self.book.blob(approval.key)
        if blob is not None:
            self.tiers.store.put_blob(approval.key, blob, tag=approval.tag, ttl=None)
        entry = entry.relabelled(self.tiers.provider)
        self.tiers.memory.put(approval.key, entry)
        return entry, "copy"

    def approval_for(self, r: Resolved) -> Approval | None:
        """The approval that concerns ``r``: its phrase's, when ``r`` names no seed or
        names the approved take's very key; else None."""
        approval = self.book.get(r.phrase) if r.phrase else None
        if approval is None or (r.seeded and approval.key != r.key):
            return None
        return approval

    def answering(self, r: Resolved) -> Approval | None:
        """The approval whose take answers ``r`` in place of ``r``'s own key: its
        phrase's, when ``r`` names no seed (the one rule; the request path, preload and
        pinning ask it here). One dict lookup."""
        if r.seeded or not r.phrase:
            return None
        return self.book.get(r.phrase)

    def current(self, approval: Approval) -> bool:
        """Whether the serving model could rebuild the take (same engine and version)."""
        return not self.needs_review(approval)

    def reinstate(self, approval: Approval) -> bool:
        """Put the approved audio back under its key (over a rebuilt take that differs).
        False if its copy is lost."""
        blob = self.book.blob(approval.key)
        entry = self.book.entry(approval.key)
        if blob is None or entry is None:
            return False
        self.tiers.writer.flush()
        self.tiers.store.put_blob(approval.key, blob, tag=approval.tag, ttl=None)
        self.tiers.memory.put(approval.key, entry.relabelled(self.tiers.provider))
        self.tiers.transcodes.discard_where(lambda k: k[0] == approval.key)
        return True

    # -- rendering -------------------------------------------------------------------------

    def render(
        self, request: TTSRequest, resolve: Callable[[TTSRequest], Resolved], serve: Callable[[Resolved], Any], *,
        n: int | None = None, seeds: Sequence[Any] | None = None,
    ) -> list[Rendered]:  # fmt: skip
        """Render ``n`` takes of ``request``'s phrase (default 3, at most 8) under
        distinct seeds: ``seeds``, else ``request.seed`` (default 0) and the next ones.
        Every request is checked before anything is made (a bad one caches nothing)."""
        chosen = self._seeds(request, n, seeds)
        if not request.use_cache or not request.store:
            raise ValidationError("cache, store: takes are cache entries; leave cache and store on to render takes")
        resolved = [resolve(dataclasses.replace(request, seed=seed)) for seed in chosen]
        # Priced whole before any engine call: the takes not cached yet, each its text.
        chars = sum(len(r.fields.text) for r in resolved if self.tiers.find(r.key) is None)
        out = []
        with self._admit(chars):
            for seed, r in zip(chosen, resolved, strict=True):
                result = serve(r)
                self._remember(result.key, r)
                out.append(Rendered(seed, result.key, round(float(result.duration), 4), str(result.cache)))
        return out

    @staticmethod
    def _seeds(request: TTSRequest, n: int | None, seeds: Sequence[Any] | None) -> list[int]:
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_TAKES):
            raise OutOfRangeError(f"n: {cut_text(repr(n))} takes is out of range; ask for 1 to {MAX_TAKES}")
        if seeds is not None:
            if not 1 <= len(seeds) <= MAX_TAKES:
                raise OutOfRangeError(f"seeds: give 1 to {MAX_TAKES} seeds, got {len(seeds)}")
            chosen = [check_seed(s, "seeds") for s in seeds]
            if len(set(chosen)) != len(chosen):
                raise ValidationError("seeds: give distinct seeds (each take is one seed)")
            if n is not None and n != len(chosen):
                raise ValidationError(f"n: {n} does not match the {len(chosen)} seeds given; give one of n and seeds")
            return chosen
        first = check_seed(request.seed) if request.seed is not None else 0
        count = DEFAULT_TAKES if n is None else n
        return [(first + i) % (2**32) for i in range(count)]

    def _remember(self, key: str, r: Resolved) -> None:
        if len(self._texts) >= _REMEMBERED:
            self._texts.pop(next(iter(self._texts)))
        self._texts[key] = (r.fields.text, r.fields.style)

    # -- approving -------------------------------------------------------------------------

    def approve(self, key: str, *, caller: Caller, who: str = "") -> Approval:
        """Make the take ``key`` its phrase's approved take. Raises 404 for a key with no
        entry, 400 for an entry that is not a take of a phrase."""
        check(caller, Action.APPROVE)
        key = _checked_key(key)
        self.tiers.wait_written(key)  # a take made a moment ago may still be on its way to disk
        entry = self.tiers.find(key)
        if entry is None:
            raise NotFoundError(
                f"key: no take with key {key} is cached; render takes with POST /api/takes and approve one of "
                "their keys"
            )
        meta = entry.meta
        phrase = meta.get("phrase")
        if not isinstance(phrase, str) or not KEY_RE.match(phrase) or meta.get("role") in ("segment", "piece"):
            raise ValidationError(
                f"key: {key} is not a take of a phrase (a segment, a template piece, a conversion, or an entry made "
                "before takes existed); render takes with POST /api/takes and approve one of their keys"
            )
        kept = dataclasses.replace(entry, meta={**meta, "expires": None})  # an approved take never expires
        blob = pack(kept)
        tag = str(meta.get("tag", ""))
        self.tiers.store.put_blob(key, blob, tag=tag, ttl=None)
        self.tiers.memory.put(key, kept)
        text, style = self._texts.get(key, (str(meta.get("text", "")), str(meta.get("style", ""))))
        approval = Approval(
            phrase=phrase, key=key, seed=int(meta.get("seed", 0)), engine=str(meta.get("engine", "")),
            model_version=str(meta.get("model_version", "")), tag=tag, voice=str(meta.get("voice_name", "")),
            voice_id=str(meta.get("voice", "")), text=text, style=style, speed=float(meta.get("speed", 1.0)),
            who=(who.strip()[:64] or caller.who), at=time.time(), duration=round(entry.duration, 4),
            digest=pcm_digest(entry.wav[entry.offset :]),
        )  # fmt: skip
        try:
            old = self.book.approve(approval, blob)
        except OSError as exc:  # the takes folder cannot be written: nothing was approved
            _LOGGER.error("cannot keep approved take %s: %s", key, exc)
            raise StoreUnavailableError(
                f"the approved take could not be written under the cache folder ({exc.strerror or exc}); "
                "nothing was approved: free space or fix the folder's permissions and approve again"
            ) from exc
        _LOGGER.info(
            "take %s approved for %r (seed %d)%s", key, cut_text(text), approval.seed,
            f", replacing {old.key}" if old is not None and old.key != key else "",
        )  # fmt: skip
        return approval

    def withdraw(self, key: str, *, caller: Caller) -> Approval:
        """Withdraw the approval whose take is ``key`` (its phrase is answered by its
        default seed again); 404 when no approval has that key."""
        check(caller, Action.APPROVE)
        key = _checked_key(key)
        found = self.book.withdraw(key)
        if found is None:
            raise NotFoundError(f"key: no approved take has key {key}; GET /api/takes/approved lists them")
        _LOGGER.info("approval of take %s withdrawn", key)
        return found

    # -- listing ---------------------------------------------------------------------------

    def needs_review(self, approval: Approval) -> bool:
        """Whether the take was made by another model than the serving one."""
        return approval.engine != self.engine.name or approval.model_version != self.engine.model_version

    def listing(self) -> list[ApprovalRow]:
        """Every approval as the API lists it."""
        return [
            {
                "phrase": a.text, "voice": a.voice, "seed": a.seed, "key": a.key, "url": f"/api/audio/{a.key}.wav",
                "model_version": a.model_version, "who": a.who, "when": _iso(a.at), "duration": a.duration,
                "needs_review": self.needs_review(a), "style": a.style, "speed": a.speed, "phrase_id": a.phrase,
            }
            for a in self.book.approvals()
        ]  # fmt: skip

    def close(self) -> None:
        self.book.close()


def _checked_key(key: Any) -> str:
    if not isinstance(key, str) or not KEY_RE.match(key.strip().lower()):
        raise ValidationError("key: must be a take's key, 32 hexadecimal digits (the key field of POST /api/takes)")
    return key.strip().lower()


def _iso(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))
