"""Which cached entries a lexicon change made stale, and which old key a phrase had.

A change to the entry for a term re-keys every text that contains the term, in the
voices the entry applies to (every voice for a global entry, except those with their
own entry for the term; one voice for a scoped entry). The entries stored under the old
keys are no longer found: stale. They are counted from the entries' metadata (their
``text``, kept with ``cache.store_text``, and their ``voice``), never deleted here: the
eviction policy removes them like any entry nobody asks for.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from lib.cache.entry import EntryHeader
from lib.cache.keys import KeyFields
from lib.readings.journal import Change
from lib.text.lexicon import LexiconEntry
from lib.text.scan import TermIndex

__all__ = ["HeaderStore", "count_stale", "old_keys"]

#: The voice ids (``preset:<name>`` or a saved voice's prompt fingerprint, as entries'
#: metadata has them) of a voice name; empty for an unknown name.
VoiceIds = Callable[[str], set[str]]


class HeaderStore(Protocol):
    """The disk tier as the count needs it (:class:`lib.cache.store.AudioStore`)."""

    def count_where(self, match: Callable[[EntryHeader], bool]) -> int | None: ...


def count_stale(
    store: HeaderStore, changes: Sequence[Change], entries: Iterable[LexiconEntry], voice_ids: VoiceIds
) -> int | None:
    """How many stored entries ``changes`` re-keyed (``entries``: the lexicon after them);
    None when the store cannot be read."""
    if not changes:
        return 0
    scoped: dict[str, set[str]] = {}  # term -> voice ids with their own entry for it
    for e in entries:
        if e.voice is not None:
            scoped.setdefault(e.term, set()).update(voice_ids(e.voice))
    rules: list[tuple[str, set[str] | None, set[str]]] = []  # term, only these voices, not these
    for c in changes:
        if c.voice is None:
            rules.append((c.term, None, scoped.get(c.term, set())))
        else:
            rules.append((c.term, voice_ids(c.voice), set()))

    def match(head: EntryHeader) -> bool:
        text = head.get("text")
        if not isinstance(text, str) or not text:
            return False
        voice = head.get("voice")
        for term, only, unless in rules:
            if term in text and (only is None or voice in only) and voice not in unless:
                return True
        return False

    return store.count_where(match)


def old_keys(
    fields: KeyFields, voice: str | None, version: str, entries: Iterable[LexiconEntry], changes: Sequence[Change]
) -> list[str]:
    """The keys ``fields`` had before each of ``changes`` (newest first, each one undone
    on top of the ones after it): where the same phrase was cached before them.
    ``entries``: the lexicon now; ``version``: the front end's."""
    text = fields.text
    state = {(e.term, e.voice): e for e in entries if e.term in text}
    keys: list[str] = []
    for c in changes:
        if c.before is None:
            state.pop((c.term, c.voice), None)
        else:
            state[(c.term, c.voice)] = LexiconEntry(c.term, c.before, c.voice)
        part = f"{version}:{TermIndex(state.values()).digest(text, voice)}"
        if part != fields.reading:
            keys.append(dataclasses.replace(fields, reading=part).key)
    return keys
