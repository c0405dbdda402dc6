"""The served page says its language: ``<html lang="zh-CN">`` from the first byte.

Gradio's page template says ``lang="en"``, and its script later sets the language the
browser asks for; the page script (:data:`lib.ui.theme.JS`) sets it to Chinese, but only
once it runs. Until then, and for any tool that reads the HTML (a screen reader's first
pass, a crawler, a test), the page claims to be English. :class:`PageLanguage` rewrites
the attribute in the HTML responses of the UI (nothing else is buffered: audio, streams
and JSON pass through untouched).
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["PageLanguage"]

_LOGGER = logging.getLogger(__name__)

Scope = dict[str, Any]
Message = dict[str, Any]


class PageLanguage:
    """ASGI middleware: ``lang="en"`` of the ``<html>`` tag becomes ``lang="{lang}"`` in
    ``text/html`` responses."""

    def __init__(self, app: Any, lang: str) -> None:
        self.app = app
        self._from = b'lang="en"'
        self._to = f'lang="{lang}"'.encode()

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") != "GET":
            await self.app(scope, receive, send)
            return
        start: Message | None = None
        body: list[bytes] = []

        async def rewrite(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                headers = dict(message.get("headers") or [])
                if headers.get(b"content-type", b"").startswith(b"text/html"):
                    start = message  # held until the whole page is here
                    return
                await send(message)
                return
            if start is None or message["type"] != "http.response.body":
                await send(message)
                return
            body.append(message.get("body", b""))
            if message.get("more_body"):
                return
            page = b"".join(body)
            head, sep, rest = page.partition(b"<html")
            if sep:
                tag, close, tail = rest.partition(b">")
                page = head + sep + tag.replace(self._from, self._to, 1) + close + tail
            kept = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
            await send({**start, "headers": [*kept, (b"content-length", str(len(page)).encode())]})
            await send({"type": "http.response.body", "body": page})

        await self.app(scope, receive, rewrite)
