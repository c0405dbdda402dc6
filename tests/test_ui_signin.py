"""The page's one admin sign-in (lib/ui/signin.py) and the Cache tab's lexicon line."""

from __future__ import annotations

from lib.request.access import AccessPolicy
from lib.ui.signin import signin_status
from lib.ui.views import lexicon_line


def test_the_sign_in_says_whether_the_token_makes_the_admin() -> None:
    policy = AccessPolicy("TTS_ADMIN_TOKEN", token="s3cret")
    assert "Signed in as the admin" in signin_status(policy, "s3cret", "10.0.0.5")
    assert "Wrong token" in signin_status(policy, "nope", "127.0.0.1")  # a token is a token, wherever from
    assert signin_status(policy, "", "127.0.0.1") == ""
    open_policy = AccessPolicy("TTS_ADMIN_TOKEN", token="")
    here = signin_status(open_policy, "", "127.0.0.1")
    assert "No admin token is set (TTS_ADMIN_TOKEN)" in here and "elsewhere" not in here
    assert "callers from elsewhere are not" in signin_status(open_policy, "", "10.0.0.5")


def test_the_lexicon_line_says_what_its_last_change_made_stale() -> None:
    change = {"term": "六安", "action": "added", "stale": 12}
    line = lexicon_line({"entries": 3, "limit": 500, "last_change": change})
    assert "3 / 500" in line and "「六安」added" in line and "12 条缓存已过时" in line and "when next asked" in line
    assert "being counted" in lexicon_line({"entries": 3, "limit": 500, "last_change": {**change, "stale": None}})
    assert lexicon_line(None) == "" and "last change" not in lexicon_line({"entries": 0, "limit": 500})
