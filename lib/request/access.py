"""Who may do what: one access policy for every caller (web UI, HTTP API, preload).

The boundaries only say who is calling (:meth:`AccessPolicy.caller`: the admin token
the client sent, if any, and its address); the service decides with :meth:`check`.

The rule:

- anyone may synthesise, preload a phrase list and save a voice under a *new* name;
- replacing or deleting a saved voice, ``force`` (regenerating cached entries),
  enabling an uploaded list's templates (they change other users' answers), changing
  the pronunciation lexicon (it changes every voice's readings), and the admin actions
  (clear, evict, sweep, verify), approving or withdrawing a phrase's approved take
  (it changes what every unseeded request of the phrase is answered) and submitting
  or cancelling a batch job (it spends the engine on a whole list) need the admin;
- making, listing and revoking API keys (``/api/keys``) and every tenant's usage need
  the admin (a tenant reads its own usage with its key);
- statistics that contain user texts, and the transcripts of saved voices, are
  admin-only; everyone else sees counts, sizes and hit rates, and voice names.

The admin is a caller with the token (``Authorization: Bearer <token>``, or the UI's
token field) when one is configured (``server.admin_token_env``, default
``TTS_ADMIN_TOKEN``), or, when none is, a caller on this machine's loopback interface.
Code running in the service's own process (``preload_cache.py``, ``webui.py
--clear-cache``, tests) is :data:`LOCAL`: it already has the files the policy guards.
"""

from __future__ import annotations

import enum
import hmac
import ipaddress
import os
from dataclasses import dataclass

from lib.config import AppConfig
from lib.errors import ForbiddenError, UnauthorizedError

__all__ = ["ANYONE", "LOCAL", "AccessPolicy", "Action", "Caller", "allows", "check", "is_loopback"]


class Action(enum.Enum):
    SYNTHESISE = "synthesise"
    SAVE_VOICE = "save a new voice"
    PRELOAD = "preload a phrase list"
    REPLACE_VOICE = "replace a saved voice"
    DELETE_VOICE = "delete a saved voice"
    FORCE = "regenerate cached phrases (force)"
    TEMPLATES = "enable a phrase list's templates for every request"
    ADMIN = "clear, evict, sweep or verify the cache"
    READ_TEXTS = "read users' texts (in the statistics, the voices' transcripts)"
    LEXICON = "change the pronunciation lexicon"
    APPROVE = "approve or withdraw the approved take of a phrase"
    KEYS = "make, list or revoke API keys, and read every tenant's usage"
    BATCH = "submit or cancel a batch job (POST /api/batch)"
    MAKE_MISSING = "make the hot phrases and template pieces the cache lacks (POST /api/cache/make-missing)"


#: Actions open to every caller.
_OPEN = frozenset({Action.SYNTHESISE, Action.SAVE_VOICE, Action.PRELOAD})


@dataclass(frozen=True)
class Caller:
    """Who is asking. ``admin`` is decided by :meth:`AccessPolicy.caller`."""

    admin: bool
    origin: str = "local"
    """``http``, ``ui`` or ``local``."""
    token_given: bool = False
    """Whether a token was sent (a wrong token is 403, a missing one 401)."""
    token_configured: bool = False
    """Whether the server has an admin token (for the message of a refusal)."""
    token_env: str = "TTS_ADMIN_TOKEN"
    bad_scheme: bool = False
    """An ``Authorization`` header was sent without the ``Bearer`` scheme (a bare
    token): never taken as the admin, and a refusal says how to send it."""
    host: str = ""
    """The client's address, when it came over the network."""

    @property
    def who(self) -> str:
        """Who this is, in words, for records (an approval's ``who``)."""
        role = "admin" if self.admin else "user"
        return f"{role} ({self.origin} {self.host})" if self.host else f"{role} ({self.origin})"


#: In-process callers: preload_cache.py, the command line, tests. Passed explicitly:
#: every permission-checked method takes its caller as a required keyword, so a call
#: site that forgets it fails to run rather than getting the admin's rights.
LOCAL = Caller(admin=True, origin="local")
#: Whoever is asking, with no rights beyond everyone's (e.g. the voice names a page
#: lists before anyone has identified themselves).
ANYONE = Caller(admin=False, origin="local")


_FROM_ENV = object()


class AccessPolicy:
    """The rule above. The token is read from the environment variable ``token_env``
    at each check (so it can be rotated without a restart), unless one is given."""

    def __init__(self, token_env: str = "TTS_ADMIN_TOKEN", token: object = _FROM_ENV) -> None:
        self.token_env = token_env
        self._fixed = None if token is _FROM_ENV else (str(token) if token else "")

    @classmethod
    def from_config(cls, config: AppConfig) -> AccessPolicy:
        return cls(config.server.admin_token_env)

    @property
    def token(self) -> str | None:
        token = os.environ.get(self.token_env, "") if self._fixed is None else self._fixed
        return token or None

    def caller(self, *, origin: str, client_host: str | None, token: str | None, bad_scheme: bool = False) -> Caller:
        """The caller behind a request from ``client_host`` that sent ``token``
        (``bad_scheme``: an Authorization header without ``Bearer`` came instead)."""
        token = token or None
        expected = self.token
        if expected is not None:
            admin = token is not None and hmac.compare_digest(token.encode(), expected.encode())
        else:
            admin = is_loopback(client_host or "")
        return Caller(
            admin, origin, token is not None, expected is not None, self.token_env, bad_scheme, client_host or ""
        )


def allows(caller: Caller, action: Action) -> bool:
    """Whether ``caller`` may do ``action``."""
    return action in _OPEN or caller.admin


def check(caller: Caller, action: Action) -> None:
    """Raise :class:`UnauthorizedError` (401) or :class:`ForbiddenError` (403)
    unless ``caller`` may do ``action``."""
    if allows(caller, action):
        return
    what = action.value
    if caller.bad_scheme:
        raise UnauthorizedError(
            f"only the admin may {what}, and the Authorization header is not a bearer token: "
            "send it as 'Authorization: Bearer <token>' (add 'Bearer ' before the token)"
        )
    if not caller.token_configured:
        raise ForbiddenError(
            f"only the admin may {what}: from another machine that needs an admin token; "
            f"set {caller.token_env} on the server and send it"
        )
    if caller.token_given:
        raise ForbiddenError(f"the admin token is wrong; to {what}, give the value of {caller.token_env}")
    raise UnauthorizedError(
        f"only the admin may {what}: send the admin token ('Authorization: Bearer <token>' over HTTP, "
        "Admin sign-in at the top of the web UI)"
    )


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a client address) is on this machine's loopback."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback
