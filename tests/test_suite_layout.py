"""The suite's own layout: the slow list names files that exist (a renamed file would
silently join the fast set)."""

from __future__ import annotations

from tests.conftest import LONGEST_FIRST, REPO, SLOW_FILES


def test_every_slow_file_exists() -> None:
    missing = sorted(name for name in SLOW_FILES if not (REPO / "tests" / name).is_file())
    assert missing == [], f"tests/conftest.py SLOW_FILES names files that do not exist: {missing}"


def test_every_longest_first_file_exists() -> None:
    missing = sorted(name for name in LONGEST_FIRST if not (REPO / "tests" / name).is_file())
    assert missing == [], f"tests/conftest.py LONGEST_FIRST names files that do not exist: {missing}"
