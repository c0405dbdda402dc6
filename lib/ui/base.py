"""What every handler of the web UI shares: who is calling, and errors shown in place.

A handler that fails raises ``gr.Error`` with ``visible=False`` -- API clients still get
the error and its message, and no pop-up piles up over the form or covers it -- after
remembering the bilingual message for its session; the event's ``.failure`` step shows
it in the tab's message box (:meth:`HandlerBase.failure_view`).

Who the caller is (admin or not) is decided by the service's access policy from the
client's address and the admin token typed in the form (:mod:`lib.request.access`).
"""

from __future__ import annotations

import contextlib
import html
import logging
import shutil
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

import gradio as gr

from lib.errors import TTSError
from lib.pipeline.service import TTSService
from lib.request.access import Caller
from lib.request.messages import UIMessage
from lib.request.phrases import PhraseRequest, expand, load_phrases
from lib.tenants import acting

__all__ = ["HandlerBase", "error_html", "live_playback_available"]

_LOGGER = logging.getLogger(__name__)

_REMEMBERED = 512  # failed events whose message waits for its .failure step


def live_playback_available() -> bool:
    """Gradio's streaming audio output encodes with the ffmpeg program."""
    return shutil.which("ffmpeg") is not None


def error_html(text: str | list[str]) -> str:
    """An alert box: one message, or a heading and a list of them."""
    if not text:
        return ""
    if isinstance(text, str):
        return f'<div class="ui-error" role="alert">✖ {html.escape(text)}</div>'
    head, *items = text
    lines = "".join(f"<li>{html.escape(item)}</li>" for item in items)
    return f'<div class="ui-error" role="alert">✖ {html.escape(head)}<ul>{lines}</ul></div>'


class HandlerBase:
    """The service, the caller of a request, and the messages of failed events."""

    def __init__(self, service: TTSService, phrases_path: Path) -> None:
        self.service = service
        self.phrases_path = phrases_path
        self.live_player = live_playback_available()
        """Whether the Synthesise tab has a live player (else a notice in its place)."""
        self._errors: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._forms: OrderedDict[str, int] = OrderedDict()
        """Per session: how many times the operator switched mode (a result asked for
        under an earlier mode is discarded: its form is gone)."""
        self._presses: OrderedDict[str, tuple[int, str]] = OrderedDict()
        """Per session: the form (switch count) and mode of the last press."""
        self._lock = threading.Lock()

    def shipped_phrases(self) -> list[PhraseRequest]:
        """The requests of the shipped phrase list (the examples are taken from it);
        none when it cannot be read (the examples then use sample texts)."""
        try:
            return expand(load_phrases(self.phrases_path))
        except TTSError as exc:
            _LOGGER.warning("no examples from %s: %s", self.phrases_path.name, exc)
            return []

    def caller(self, request: gr.Request | None, token: str | None = None) -> Caller:
        host = request.client.host if request is not None and request.client else None
        return self.service.access.caller(origin="ui", client_host=host, token=token)

    @contextlib.contextmanager
    def charged(self, request: gr.Request | None) -> Iterator[None]:
        """Run a synthesis of the page as its caller (docs/tenants.md): the admin (a
        loopback page while no admin token is set) unlimited, anyone else as an anonymous
        caller from the page's address, under the same limits as over HTTP (the page's own
        Gradio API is callable by any program). Raises the 429's :class:`RateLimitedError`."""
        if request is None or self.caller(request).admin:
            yield
            return
        host = request.client.host if request.client else None
        account = self.service.tenants.account(None, host)
        self.service.tenants.admit_request(account)
        with acting(account):
            yield

    # -- the form a result belongs to ---------------------------------------------------

    def form_generation(self, request: gr.Request | None) -> int:
        """The session's mode-switch count now."""
        session = getattr(request, "session_hash", None) or ""
        with self._lock:
            return self._forms.get(session, 0)

    def pressed(self, mode: str, request: gr.Request) -> None:
        """A request was asked for (its first step, at the press) in ``mode``: the form it
        belongs to is the one shown now, whenever its queued run starts."""
        session = getattr(request, "session_hash", None) or ""
        with self._lock:
            self._presses[session] = (self._forms.get(session, 0), mode)
            self._presses.move_to_end(session)
            while len(self._presses) > _REMEMBERED:
                self._presses.popitem(last=False)

    def press_generation(self, request: gr.Request | None) -> int:
        """The form of the session's last press (the current one for an API call,
        which has no press)."""
        session = getattr(request, "session_hash", None) or ""
        with self._lock:
            press = self._presses.get(session)
            return press[0] if press is not None else self._forms.get(session, 0)

    def switch_form(self, mode: str, request: gr.Request | None) -> None:
        """The operator switched to ``mode``: results of requests started before are
        discarded. The browser sends the switch and a press that follows it at once as
        two calls that may arrive in either order: a press already made in ``mode`` on
        the form before this one was made after the switch, and keeps its result."""
        session = getattr(request, "session_hash", None) or ""
        with self._lock:
            before = self._forms.get(session, 0)
            self._forms[session] = before + 1
            self._forms.move_to_end(session)
            while len(self._forms) > _REMEMBERED:
                self._forms.popitem(last=False)
            if self._presses.get(session) == (before, mode):
                self._presses[session] = (before + 1, mode)

    # -- errors --------------------------------------------------------------------------

    def fail(self, channel: str, request: gr.Request | None, message: UIMessage | str) -> NoReturn:
        """Remember ``message`` for this session's ``channel`` and raise it, unseen, to
        Gradio (the failure step shows it in place)."""
        text = str(message)
        session = getattr(request, "session_hash", None) or ""
        with self._lock:
            self._errors[(session, channel)] = text
            self._errors.move_to_end((session, channel))
            while len(self._errors) > _REMEMBERED:
                self._errors.popitem(last=False)
        raise gr.Error(text, visible=False, print_exception=False)

    def failure_view(self, channel: str) -> Callable[[gr.Request], str]:
        """The ``.failure`` step of a ``channel`` event: its message as an alert box."""

        def show(request: gr.Request) -> str:
            session = getattr(request, "session_hash", None) or ""
            with self._lock:
                text = self._errors.pop((session, channel), "")
            return error_html(text)

        return show
