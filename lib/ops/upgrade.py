"""Warm model upgrades: how ready each model version in the cache is for the hot phrases.

A new model is filled beside the old one while the old one serves (``preload_cache.py
--model-dir NEW`` on the same cache directory, or on another replica with the shared
tier): every key carries the engine and its model version, so the two never mix. Before
switching (a restart with the new ``--model-dir``), an operator wants to know how many
of the hot phrases the new version already has: :class:`Readiness` answers that for
every ``engine:model_version`` tag found in the cache, by computing each hot phrase's
key under that version (the same voice, text and settings; only the engine and model
version fields change) and asking the disk tier whether it holds it.

The hot phrases are the phrases of ``templates.file`` (``hot_phrases.json``, the list
``./run.sh`` preloads); the template pieces are those of every template the service
answers (:meth:`lib.compose.templatebook.TemplateBook.piece_fields`, given as
:attr:`Readiness.pieces`), counted apart. The answer is kept while the entry counts per version stay the
same (it reads the store once per phrase and version); any write, clear, evict or
preload changes them, so the figures never lag behind the store they describe.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from typing_extensions import TypedDict

from lib.cache.keys import KeyFields
from lib.cache.store import AudioStore
from lib.core.logtext import cut_text
from lib.errors import TTSError
from lib.request.phrases import expand, load_phrases
from lib.request.types import Resolved, TTSRequest

__all__ = ["MISSING_SHOWN", "Readiness", "VersionRow"]

MISSING_SHOWN = 5
"""Hot phrases a version lacks, named in its row (the rest are counted)."""

_LOGGER = logging.getLogger(__name__)


class VersionRow(TypedDict):
    """One model version in the cache (:meth:`Readiness.versions`; the dashboard's ``model_versions``)."""

    tag: str
    """``engine:model_version``."""
    engine: str
    model_version: str
    entries: int
    """Its entries on disk."""
    hot_ready: int
    """Hot phrases it already has."""
    hot_total: int
    hot_missing: list[str]
    """The first hot phrases it lacks, as an operator knows them (text and voice; at most
    :data:`MISSING_SHOWN`)."""
    pieces_ready: int
    """Pieces of the service's templates it already has."""
    pieces_total: int
    pieces_missing: list[str]
    """The first pieces it lacks (piece text and voice; at most :data:`MISSING_SHOWN`)."""
    serving: bool
    """Whether it is the version this service serves."""


class Readiness:
    """Per model version: entries in the cache and hot phrases ready."""

    def __init__(
        self, store: AudioStore, resolve: Callable[[TTSRequest], Resolved], phrase_file: str | None, current: str,
        *, revision: Callable[[], str] = lambda: "",
    ) -> None:  # fmt: skip
        """``revision``: changes when the keys of the same phrases change (the lexicon's
        version: an edit re-keys the phrases that contain its term)."""
        self.store = store
        self._revision = revision
        self._resolve = resolve
        self.phrase_file = phrase_file
        self.current = current
        """The serving version's tag (``engine:model_version``)."""
        self._lock = threading.Lock()
        self._answer: tuple[object, list[VersionRow]] | None = None
        self._fields: tuple[tuple[str, int, str], list[tuple[KeyFields, str]]] | None = None
        self.pieces: Callable[[], list[tuple[KeyFields, str]]] = list
        """The key fields and labels of the template pieces to count (none until the
        service's templates are wired in)."""

    def versions(self, counts: Mapping[str, int] | None = None) -> list[VersionRow]:
        """``[{"tag", "engine", "model_version", "entries", "hot_ready", "hot_total",
        "hot_missing", "pieces_ready", "pieces_total", "pieces_missing", "serving"}]``,
        the serving version first. ``counts``: the entries per tag as the caller read
        them (:meth:`AudioStore.tags`), so that its other figures and these come from
        one reading; read here when not given."""
        counts = dict(self.store.tags() if counts is None else counts)
        counts.setdefault(self.current, 0)
        hot = self._hot_fields()
        pieces = self.pieces()
        stamp = (tuple(sorted(counts.items())), id(hot), id(pieces))
        with self._lock:
            if self._answer is not None and self._answer[0] == stamp:
                return self._answer[1]
        rows: list[VersionRow] = []
        for tag, entries in counts.items():
            engine, _, version = tag.partition(":")
            missing = self._missing(hot, engine, version)
            lacking = self._missing(pieces, engine, version)
            rows.append({
                "tag": tag, "engine": engine, "model_version": version, "entries": entries,
                "hot_ready": len(hot) - len(missing), "hot_total": len(hot), "hot_missing": missing[:MISSING_SHOWN],
                "pieces_ready": len(pieces) - len(lacking), "pieces_total": len(pieces),
                "pieces_missing": lacking[:MISSING_SHOWN], "serving": tag == self.current,
            })  # fmt: skip
        rows.sort(key=lambda row: (not row["serving"], row["tag"]))
        with self._lock:
            self._answer = (stamp, rows)
        return rows

    def _missing(self, fields: list[tuple[KeyFields, str]], engine: str, version: str) -> list[str]:
        """The labels of the ``fields`` whose key under ``engine:version`` is not on disk."""
        return [
            label for f, label in fields
            if not self.store.contains(dataclasses.replace(f, engine=engine, model_version=version).key)
        ]  # fmt: skip

    def _hot_fields(self) -> list[tuple[KeyFields, str]]:
        """The key fields of every hot phrase with its text and voice, resolved once per
        version of the file."""
        path = Path(self.phrase_file) if self.phrase_file else None
        try:
            stat = path.stat() if path is not None else None
        except OSError:
            stat = None
        if path is None or stat is None:
            return []
        stamp = (str(path), stat.st_mtime_ns, self._revision())
        with self._lock:
            if self._fields is not None and self._fields[0] == stamp:
                return self._fields[1]
        fields: list[tuple[KeyFields, str]] = []
        try:
            requests = expand(load_phrases(path))
        except TTSError as exc:
            _LOGGER.warning("cannot read the hot phrases for the upgrade readiness: %s", exc)
            requests = []
        for item in requests:
            try:
                seed = f", seed {item.seed}" if item.seed is not None else ""
                label = f"「{cut_text(item.text)}」（{item.voice or '-'}{seed}）"
                fields.append((self._resolve(item.request()).fields, label))
            except TTSError:
                continue  # a phrase this version cannot say is not counted
        with self._lock:
            self._fields = (stamp, fields)
        return fields
