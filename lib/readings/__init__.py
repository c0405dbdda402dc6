"""The ``readings`` part of a service: its text front end and the operator's lexicon.

One :class:`lib.text.frontend.FrontEnd` per service, over the operator's lexicon
(``readings.lexicon``, default ``lexicon.json``; :mod:`lib.config.readings`):

- :meth:`Readings.read` is what every engine is given (misses, previews, preloads);
  :meth:`Readings.key_part` is what the cache key covers (a term scan, microseconds: the
  hit path never reads);
- :meth:`Readings.add` and :meth:`Readings.remove` edit the lexicon (the admin,
  :data:`lib.request.access.Action.LEXICON`): checked, written to the file atomically (0600),
  shared through Redis with a shared tier (:mod:`lib.readings.sync`); each answer says
  how many cached entries the change made stale (:mod:`lib.readings.stale`), which the
  dashboard shows too (:meth:`Readings.status`), and the preload asks
  :meth:`Readings.rekeyed` which of the phrases it makes were cached before a change.

The Mandarin reading model (jieba and pypinyin, about 100 MB) is loaded once per process,
in the background from the start of the first service, and shared by every service of the
process (read-only once loaded); jieba's dictionary cache goes in ``<cache.dir>/text``
when ``cache.size_limit`` leaves room for it (9 MB).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Unpack

from typing_extensions import TypedDict

from lib.config import AppConfig
from lib.config.readings import lexicon_path, load_lexicon
from lib.core.logtext import cut_text
from lib.core.reports import LexiconStatus
from lib.errors import NotFoundError, StoreUnavailableError, ValidationError
from lib.readings.journal import Change, Journal, diff
from lib.readings.stale import HeaderStore, VoiceIds, count_stale, old_keys
from lib.readings.sync import LexiconSync, SharedLexicon
from lib.request.access import Action, Caller, check
from lib.request.types import Resolved
from lib.request.validate import check_text
from lib.text.frontend import FrontEnd, mandarin_reader
from lib.text.lexicon import Lexicon, LexiconEntry, LexiconError, validate_entry
from lib.text.normalise import normalise_text
from lib.text.tokens import Reading

if TYPE_CHECKING:
    from lib.text.mandarin import MandarinReader

__all__ = [
    "JIEBA_MIN_LIMIT",
    "JOURNAL_NAME",
    "LexiconEdit",
    "Readings",
    "check_language",
    "lexicon_path",
    "load_lexicon",
    "shared_reader",
]

_LOGGER = logging.getLogger(__name__)

#: The journal of lexicon changes, in the cache directory (lib.readings.journal).
JOURNAL_NAME = "lexicon-changes.json"
#: jieba's cache file (9 MB) is kept in the cache directory only from this
#: ``cache.size_limit`` up (under 4 % of it); below, jieba builds its dictionary in memory.
JIEBA_MIN_LIMIT = 256 * 1024**2

#: Reading parts remembered (:meth:`Readings.key_part`): about 0.5 MB for short texts.
_PARTS_KEPT = 4096

_READER: MandarinReader | None = None
_READER_LOCK = threading.Lock()


class _Edited(TypedDict, total=False):
    """The entry an edit set (``entry``) or deleted (``deleted``), as ``GET /api/lexicon`` lists it."""

    entry: dict[str, str | None]
    deleted: dict[str, str | None]


class LexiconEdit(_Edited):
    """:meth:`Readings.add` and :meth:`Readings.remove`: the entry, and what the edit did to the cache."""

    stale: int | None
    """Cached entries the edit made stale (None: not known, ``cache.store_text`` off)."""
    lexicon_version: str
    """The lexicon's version after the edit."""


def shared_reader(jieba_dir: Path | None) -> MandarinReader:
    """The process's Mandarin reader (the first service's cache directory keeps jieba's cache)."""
    global _READER
    with _READER_LOCK:
        if _READER is None:
            _READER = mandarin_reader(jieba_dir)
        return _READER


def check_language(language: object) -> str | None:
    """``zh`` or ``en`` (``zh-CN``, ``cmn``, ``en-US``... accepted), or None to detect it
    from the text (``auto`` or nothing); :class:`ValidationError` naming the field."""
    if language is None or language == "" or language == "auto":
        return None
    if isinstance(language, str):
        tag = language.strip().lower().replace("_", "-")
        if tag in ("zh", "cmn") or tag.startswith(("zh-", "cmn-")):
            return "zh"
        if tag == "en" or tag.startswith("en-"):
            return "en"
    raise ValidationError(f"language: use zh or en (or leave it out to detect it from the text), not {language!r}")


class Readings:
    """The text front end and the operator's lexicon of one service; thread-safe."""

    def __init__(
        self, config: AppConfig, lexicon: Lexicon, *, store: HeaderStore | None = None,
        shared: SharedLexicon | None = None, voice_ids: VoiceIds = lambda name: set(),
        contains: Callable[[str], bool] = lambda key: False,
    ) -> None:  # fmt: skip
        """``lexicon``: the operator's, as :func:`load_lexicon` read it. ``store``: the
        disk tier, for stale counts; ``contains``: whether a key is on disk (the
        preload's question); ``shared``: the shared tier's lexicon keys; ``voice_ids``: a
        voice name's ids as entries' metadata has them."""
        self._config = config
        self.path = lexicon_path(config.readings)
        """The operator's lexicon file (None: in memory only)."""
        cache_dir = Path(config.cache.dir)
        jieba_dir = cache_dir / "text" if config.cache.size_limit >= JIEBA_MIN_LIMIT else None
        self.front_end = FrontEnd(lexicon, reader=shared_reader(jieba_dir))
        self._parts: dict[tuple[str, str | None, str], str] = {}
        """Reading parts by text, voice and lexicon version (plain dict operations: atomic
        under the GIL, so no lock on the hit path)."""
        self._store = store if config.cache.store_text else None
        self._contains = contains
        self._voice_ids = voice_ids
        self._lock = threading.RLock()
        self._counting: ThreadPoolExecutor | None = None
        self._closed = False
        self._journal = Journal(cache_dir / JOURNAL_NAME, lexicon.snapshot())
        self._count_later(self._journal.found)  # the file edited while the service was stopped
        self._sync: LexiconSync | None = None
        if shared is not None:
            self._sync = LexiconSync(shared, lexicon.snapshot, self._adopt, self._lock)
            self._sync.start()  # Redis's lexicon, or ours published; while Redis is down, the file's
        self.front_end.key_part("")  # the term index, built now rather than on the first request
        self._warm = threading.Thread(target=self._warm_up, name="readings-warm", daemon=True)
        self._warm.start()

    # -- reading and keys -------------------------------------------------------------------

    @property
    def lexicon(self) -> Lexicon:
        """The operator's entries (edit them through :meth:`add` and :meth:`remove`)."""
        return self.front_end.lexicon

    @property
    def version(self) -> str:
        """The lexicon's version: changes with every edit, here or on another replica."""
        return self.front_end.lexicon.version

    def key_part(self, text: str, voice: str | None = None) -> str:
        """The cache key's reading part of ``text`` in ``voice`` (a term scan, no reading),
        remembered per text, voice and lexicon version: hot phrases come back thousands of
        times, and the scan costs about 0.18 µs per character with 1,000 entries (0.25 µs
        for a remembered one)."""
        memo = (text, voice, self.front_end.lexicon.version)
        part = self._parts.get(memo)
        if part is None:
            part = self.front_end.key_part(text, voice)
            if len(self._parts) >= _PARTS_KEPT:
                self._parts.clear()  # the simplest bound: refilled by the texts asked for now
            self._parts[memo] = part
        return part

    def read(self, text: str, *, voice: str | None = None, language: str | None = None) -> Reading:
        """The reading of ``text`` as ``voice`` will say it (memoised per text)."""
        return self.front_end.read(text, voice=voice or None, language=language)

    def preview(self, text: object, *, voice: object = None, language: object = None) -> Reading:
        """:meth:`read` for a caller's input (``POST /api/reading``, the UI): the text
        normalised as a request's is, so the reading is what the engine will be given.
        Raises :class:`ValidationError` (400) or :class:`NotFoundError` (404, an unknown
        voice) naming the field."""
        clean = check_text(text, "text", self._config)
        if not clean.strip():
            raise ValidationError("text: is empty; give the text to read")
        name = None
        if voice is not None and voice != "":
            if not isinstance(voice, str):
                raise ValidationError("voice: must be the name of a saved or preset voice")
            name = voice.strip()
            if not self._voice_ids(name):
                raise NotFoundError(f"voice: no saved or preset voice named {cut_text(name)!r}")
        return self.read(clean, voice=name, language=check_language(language))

    # -- the lexicon ------------------------------------------------------------------------

    def entries(self) -> list[dict[str, str | None]]:
        """The operator's entries, by term (global first). Open to every caller: they are
        what every voice says, which anyone hears (and :meth:`read` shows)."""
        self._refresh()
        return [e.to_json() for e in self.lexicon.snapshot()]

    def add(self, term: object, reading: object, voice: object = None, *, caller: Caller) -> LexiconEdit:
        """Add or replace an entry (the admin). Raises :class:`LexiconError` (422) naming
        a bad entry or a full lexicon, :class:`StoreUnavailableError` (503) when the file
        or the shared tier cannot take it (nothing changed then)."""
        check(caller, Action.LEXICON)
        entry = validate_entry(term, reading, voice or None)
        if entry.voice is not None and not self._voice_ids(entry.voice):
            raise LexiconError(
                f"lexicon entry {cut_text(entry.term)!r}: voice {cut_text(entry.voice)!r} is no saved or preset "
                "voice; name one that exists, or leave voice empty for every voice"
            )
        with self._lock:
            self._refresh()
            lexicon = self.lexicon
            old = lexicon.snapshot()
            if lexicon.get(entry.term, entry.voice) is None and len(lexicon) >= lexicon.limit:
                raise LexiconError(
                    f"lexicon entry {entry.term!r}: the lexicon is full ({lexicon.limit} entries, "
                    "readings.max_entries); delete some first"
                )
            new = [e for e in old if (e.term, e.voice) != (entry.term, entry.voice)] + [entry]
            self._write(new)
            sync = self._sync
            if sync is not None:
                self._shared(lambda: sync.put(entry, lexicon.limit), old)
            lexicon.add(entry.term, entry.reading, entry.voice)
            changes = self._changed(old, "here")
        _LOGGER.info("lexicon entry %r set to %r (voice %s)", cut_text(entry.term), entry.reading, entry.voice)
        return self._answer(changes, entry=entry.to_json())

    def remove(self, term: str, voice: str | None = None, *, caller: Caller) -> LexiconEdit:
        """Delete the entry of ``term`` in scope ``voice`` (the admin);
        :class:`NotFoundError` (404) if there is none."""
        check(caller, Action.LEXICON)
        voice = voice or None
        with self._lock:
            self._refresh()
            lexicon = self.lexicon
            found = lexicon.get(term, voice)
            if found is None:
                scope = f" for voice {voice!r}" if voice else " (global)"
                raise NotFoundError(
                    f"lexicon entry {cut_text(normalise_text(term))!r}{scope}: there is no such entry; "
                    "GET /api/lexicon lists them (a voice-scoped one is deleted with ?voice=NAME)"
                )
            old = lexicon.snapshot()
            self._write([e for e in old if (e.term, e.voice) != (found.term, found.voice)])
            sync = self._sync
            if sync is not None:
                self._shared(lambda: sync.delete(found.term, found.voice), old)
            lexicon.remove(found.term, found.voice)
            changes = self._changed(old, "here")
        _LOGGER.info("lexicon entry %r deleted (voice %s)", cut_text(found.term), found.voice)
        return self._answer(changes, deleted=found.to_json())

    def _answer(self, changes: list[Change], **what: Unpack[_Edited]) -> LexiconEdit:
        stale: int | None = 0
        for c in changes:
            stale = None if c.stale is None or stale is None else stale + c.stale
        return {**what, "stale": stale, "lexicon_version": self.version}

    def _refresh(self) -> None:
        if self._sync is not None:
            self._sync.poll()

    def _write(self, entries: Sequence[LexiconEntry]) -> None:
        if self.path is None:
            return
        try:
            Lexicon(entries, limit=max(len(entries), 1)).save(self.path)
        except OSError as exc:
            raise StoreUnavailableError(
                f"the lexicon file {self.path} cannot be written ({exc.strerror or exc}); nothing was changed: "
                "check readings.lexicon and the permissions of its folder"
            ) from exc

    def _shared(self, edit: Callable[[], object], old: Sequence[LexiconEntry]) -> None:
        """``edit`` in Redis; if it fails, the file goes back to ``old``."""
        try:
            edit()
        except BaseException:
            self._write(old)  # the file as it was: the change did not happen
            raise

    def _adopt(self, entries: list[LexiconEntry]) -> None:
        """Another replica's lexicon (or Redis's at the start) becomes ours."""
        with self._lock:
            old = self.lexicon.snapshot()
            if not diff(old, entries, "replica"):
                return
            self.lexicon.replace(entries)
            try:
                self._write(self.lexicon.snapshot())
            except StoreUnavailableError as exc:  # Redis holds it; the file catches up at the next change
                _LOGGER.warning("%s", exc)
            self._changed(old, "replica")

    def _changed(self, old: Sequence[LexiconEntry], origin: str) -> list[Change]:
        """Record what changed from ``old``; count the entries it made stale (now for an
        edit here, whose answer says it; in the background for the others)."""
        current = self.lexicon.snapshot()
        changes = diff(old, current, origin)
        self._journal.record(changes, current)
        self.front_end.key_part("")  # rebuild the term index here, never on a request's path
        if origin != "here":
            self._count_later(changes)
            return changes
        stale = self._count(changes) if changes else 0
        return [self._journal.counted(c, stale) for c in changes]

    def _count(self, changes: Sequence[Change]) -> int | None:
        if self._store is None:
            return None  # cache.store_text off: entries keep no text to look at
        return count_stale(self._store, changes, self.lexicon.snapshot(), self._voice_ids)

    def _count_later(self, changes: Sequence[Change]) -> None:
        if not changes or self._store is None or self._closed:
            return
        if self._counting is None:
            self._counting = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lexicon-stale")

        def count() -> None:
            stale = self._count(changes)
            for c in changes:
                self._journal.counted(c, stale)

        self._counting.submit(count)

    # -- the dashboard and the preload ------------------------------------------------------

    def status(self) -> LexiconStatus:
        """What the dashboard shows: the lexicon's size and versions, and the last changes
        with how many cached entries each made stale (``last_change.stale``; None while
        being counted, or when ``cache.store_text`` is off)."""
        recent = self._journal.recent(10)
        return {
            "entries": len(self.lexicon),
            "limit": self.lexicon.limit,
            "version": self.version,
            "frontend_version": self.front_end.version,
            "shared": self._sync is not None,
            "last_change": recent[0].to_json() if recent else None,
            "recent_changes": [c.to_json() for c in recent],
        }

    def rekeyed(self, r: Resolved) -> bool:
        """Whether ``r`` was cached under the key it had before a remembered lexicon
        change (the preload's "re-rendered after a lexicon change")."""
        if not r.fields.reading:
            return False
        voice = r.voice_name or None
        changes = [c for c in self._journal.affecting(r.fields.text) if c.voice is None or c.voice == voice]
        if not changes:
            return False
        keys = old_keys(r.fields, voice, self.front_end.version, self.lexicon.snapshot(), changes)
        return any(self._contains(key) for key in keys)

    # -- lifecycle ----------------------------------------------------------------------------

    def _warm_up(self) -> None:
        try:
            self.front_end.warm()
        except Exception as exc:  # a reading that needs the model loads it then, and says why it cannot
            _LOGGER.warning("cannot load the reading model in the background: %s", exc)

    def close(self) -> None:
        self._closed = True
        if self._sync is not None:
            self._sync.close()
        if self._counting is not None:
            self._counting.shutdown(wait=True, cancel_futures=True)
