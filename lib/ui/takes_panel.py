"""Takes in the UI (issue 22): 试听多个版本 Try takes next to Synthesise renders N takes of
the form's phrase under distinct seeds (chosen by the backend) and shows them side by
side, each with 采用 Approve (the admin); the Cache tab lists the approvals made by
another model than the serving one (待复核 needs review) and renders takes of one on the
serving model, to listen and approve again.

Every take comes from ``service.takes.render`` (each an ordinary cache entry); approving
calls ``service.takes.approve`` with the caller the admin token box decides.
"""

from __future__ import annotations

import logging
from typing import Any

import gradio as gr

from lib.core.logtext import cut_text
from lib.errors import TTSError, ValidationError
from lib.pipeline.results import SynthesisResult
from lib.request.messages import explain
from lib.request.types import TTSRequest
from lib.ui.base import HandlerBase
from lib.ui.forms import SynthesisForm
from lib.ui.views import download_name

__all__ = ["MAX_UI_TAKES", "REVIEW_HEADERS", "TakeShown", "TakesPanel", "review_section", "takes_section"]

_LOGGER = logging.getLogger(__name__)

MAX_UI_TAKES = 4
"""Players side by side (the API renders up to 8)."""

TakeShown = list[Any]
"""One take shown side by side: ``[its cache key, its seed]`` (a list: Gradio's state)."""

REVIEW_HEADERS = ["短语 Phrase", "音色 Voice", "种子 Seed", "模型版本 Model version", "审核人 Who", "时间 When"]


class TakesPanel:
    """The handlers of Try takes, Approve and the needs-review list, over one UI's
    handlers (their service, callers and in-place errors)."""

    def __init__(self, h: HandlerBase) -> None:
        self.h = h
        self.service = h.service

    def _render(self, req: TTSRequest, n: Any, channel: str, request: gr.Request | None) -> tuple[Any, ...]:
        service = self.service
        made: list[SynthesisResult] = []

        def serve(r: Any) -> SynthesisResult:
            result = service.synthesise(r)
            made.append(result)
            return result

        try:
            count = int(n) if n is not None else 3
            if not 2 <= count <= MAX_UI_TAKES:
                raise ValidationError(f"n: {count} takes is out of range; ask for 2 to {MAX_UI_TAKES} here")
            with self.h.charged(request):
                takes = service.takes.render(req, service.resolve, serve, n=count)
        except (TTSError, ValueError) as exc:
            self.h.fail(channel, request, explain(exc) if isinstance(exc, TTSError) else str(exc))
        players = []
        for i in range(MAX_UI_TAKES):
            if i >= len(takes):
                players.append(gr.update(value=None, visible=False))
                continue
            take, result = takes[i], made[i]
            name = download_name(req.voice or "", req.text, take.seed, take.key, "wav", req.style)
            path = service.files.write(name, result.wav)
            label = f"版本 Take {i + 1} · 种子 seed {take.seed} · {take.duration:.2f} s · {take.cache}"
            players.append(gr.update(value=str(path), label=label, visible=True))
        shown: list[TakeShown] = [[t.key, t.seed] for t in takes]
        message = (
            f"已生成 {len(takes)} 个版本，请试听后采用一个 {len(takes)} takes rendered: listen, then approve one "
            "(the admin). 采用后，种子留空的请求得到该版本 Once approved, requests that name no seed get it."
        )
        return (message, *players, *self._marks(shown), shown)

    def _marks(self, shown: list[TakeShown]) -> list[Any]:
        """The Approve buttons under the takes ``shown``, the approved one marked
        (✔ 已采用 Approved), and the Withdraw button, shown while one of them is approved."""
        approved = False
        buttons = []
        for i in range(MAX_UI_TAKES):
            if i >= len(shown):
                buttons.append(gr.update(visible=False))
                continue
            key, seed = shown[i]
            if self.service.takes.book.by_key(str(key)) is not None:
                approved = True
                buttons.append(gr.update(visible=True, value=f"✔ 已采用 Approved (seed {seed})", variant="primary"))
            else:
                buttons.append(gr.update(visible=True, value=f"采用 Approve (seed {seed})", variant="secondary"))
        return [*buttons, gr.update(visible=approved)]

    def render(
        self, n: Any, mode: str, prompt_audio: str | None, voice: str | None, prompt_text: str, text: str,
        style: str, seed: Any, speed: Any, fmt: str, use_cache: bool, request: gr.Request,
    ) -> tuple[Any, ...]:  # fmt: skip
        """N takes of the form's phrase (the form's seed, if any, is the first; else 0).
        Outputs: message, the players, the Approve buttons, the takes' keys (state)."""
        try:
            req = SynthesisForm(
                mode, prompt_audio, voice, prompt_text, text, style, seed, speed, fmt, use_cache
            ).request()
        except TTSError as exc:
            self.h.fail("takes", request, explain(exc, paths=[prompt_audio]))
        return self._render(req, n, "takes", request)

    def approver(self, index: int, channel: str) -> Any:
        """The handler of the Approve button under take ``index``. Outputs: the message,
        the Approve buttons (the approved one marked), the Withdraw button."""

        def approve(shown: list[TakeShown] | None, token: str, request: gr.Request) -> tuple[Any, ...]:
            if not shown or index >= len(shown):
                self.h.fail(channel, request, "没有可采用的版本 No take to approve: press Try takes first")
            try:
                approval = self.service.takes.approve(str(shown[index][0]), caller=self.h.caller(request, token))
            except TTSError as exc:
                self.h.fail(channel, request, explain(exc))
            _LOGGER.info("take %s approved from the web UI for %r", approval.key, cut_text(approval.text))
            message = (
                f"✔ 已采用 Approved: 版本 take {index + 1}, seed {approval.seed}（{approval.duration:.2f} s）。"
                "种子留空的请求从此得到这个版本 Requests that name no seed (the seed field left empty) now get "
                "this take."
            )
            return (message, *self._marks(shown))

        return approve

    def withdrawer(self, channel: str) -> Any:
        """The handler of Withdraw: the approval of the shown takes' phrase is withdrawn
        (requests that name no seed get the default seed's render again). Outputs: as
        :meth:`approver`'s."""

        def withdraw(shown: list[TakeShown] | None, token: str, request: gr.Request) -> tuple[Any, ...]:
            approved = [str(key) for key, _ in shown or [] if self.service.takes.book.by_key(str(key)) is not None]
            if not shown or not approved:
                self.h.fail(channel, request, "这些版本都未被采用 None of these takes is approved: nothing to withdraw")
            try:
                approval = self.service.takes.withdraw(approved[0], caller=self.h.caller(request, token))
            except TTSError as exc:
                self.h.fail(channel, request, explain(exc))
            _LOGGER.info("approval of take %s withdrawn from the web UI", approval.key)
            message = (
                f"已撤销采用 Withdrawn: seed {approval.seed}。种子留空的请求重新得到默认版本 Requests that name no "
                "seed get the default seed's render again."
            )
            return (message, *self._marks(shown))

        return withdraw

    # -- the Cache tab: approvals made by another model -------------------------------------

    def review(self) -> tuple[list[list[str]], Any]:
        """The approvals that need review, and the list to pick one from."""
        rows = [a for a in self.service.takes.listing() if a["needs_review"]]
        table = [
            [str(a["phrase"]), str(a["voice"]), str(a["seed"]), str(a["model_version"]), str(a["who"]), str(a["when"])]
            for a in rows
        ]
        choices = [(f"{cut_text(str(a['phrase']))} · {a['voice']} · seed {a['seed']}", str(a["key"])) for a in rows]
        return table, gr.update(choices=choices, value=None)

    def render_review(self, key: str | None, n: Any, request: gr.Request) -> tuple[Any, ...]:
        """Takes of the chosen approval's phrase on the serving model."""
        approval = self.service.takes.book.by_key(key or "")
        if approval is None:
            self.h.fail("review", request, "请先选择一条待复核的短语 Pick a phrase that needs review first")
        if not approval.voice:
            self.h.fail(
                "review", request,
                "此短语用上传的录音合成，无法重新生成 This phrase was made from an uploaded recording: render its "
                "takes from the Synthesise tab with the same recording",
            )  # fmt: skip
        req = TTSRequest(text=approval.text, voice=approval.voice, style=approval.style, speed=approval.speed)
        return self._render(req, n, "review", request)


def _players(elem: str) -> tuple[list[gr.Audio], list[gr.Button]]:
    players, buttons = [], []
    with gr.Row(elem_id=f"{elem}-row"):
        for i in range(MAX_UI_TAKES):
            with gr.Column(min_width=200):
                players.append(
                    gr.Audio(
                        type="filepath", interactive=False, visible=False, elem_id=f"{elem}-{i}", buttons=["download"]
                    )
                )
                buttons.append(gr.Button("采用 Approve", visible=False, elem_id=f"{elem}-approve-{i}", size="sm"))
    return players, buttons


def _wire(
    panel: TakesPanel, channel: str, trigger: Any, run: Any, inputs: list[Any], token: gr.Textbox, elem: str,
    area: Any = None,
) -> Any:  # fmt: skip
    """Message, players and Approve buttons of one takes area; ``trigger`` runs ``run``
    (and first shows ``area``, hidden until then)."""
    message = gr.Markdown(elem_id=f"{elem}-message")
    failure = gr.HTML(elem_id=f"{elem}-error", js_on_load=None)
    keys = gr.State([])
    players, buttons = _players(elem)
    withdraw = gr.Button("撤销采用 Withdraw approval", visible=False, elem_id=f"{elem}-withdraw", size="sm")
    marks = [*buttons, withdraw]
    if area is None:
        first = trigger(lambda: "", outputs=failure, queue=False, api_visibility="private")
    else:
        first = trigger(
            lambda: ("", gr.update(visible=True)), outputs=[failure, area], queue=False, api_visibility="private"
        )
    rendered = first.then(
        run, inputs=inputs, outputs=[message, *players, *marks, keys], show_progress_on=[message],
        api_name=None, api_visibility="private", concurrency_limit=2,
    )  # fmt: skip
    rendered.failure(panel.h.failure_view(channel), outputs=failure, api_visibility="private")
    actions = [(button, panel.approver(i, channel)) for i, button in enumerate(buttons)]
    for button, action in [*actions, (withdraw, panel.withdrawer(channel))]:
        done = button.click(lambda: "", outputs=failure, queue=False, api_visibility="private").then(
            action, inputs=[keys, token], outputs=[message, *marks], api_visibility="private"
        )
        done.failure(panel.h.failure_view(channel), outputs=failure, api_visibility="private")
    return rendered


def takes_section(panel: TakesPanel, button: gr.Button, count: gr.Slider, form: list[Any], token: gr.Textbox) -> None:
    """The Synthesise tab's takes area (under the form and result): ``button`` renders
    ``count`` takes of ``form``."""
    # Hidden until the first press: the page under the form stays as short as it was (the
    # result column sticks beside the form only as far as the form's row goes).
    with gr.Accordion("试听多个版本 Takes", open=True, elem_id="takes", visible=False) as area:
        _wire(panel, "takes", button.click, panel.render, [count, *form], token, "takes", area)


def review_section(panel: TakesPanel, token: gr.Textbox, tab: Any) -> None:
    """The Cache tab's 待复核 Needs review list (approvals made by another model than the
    serving one), with takes of the chosen phrase on the serving model."""
    with gr.Accordion("待复核 Needs review（模型已更新 the model changed since approval）", elem_id="review"):
        table = gr.Dataframe(headers=REVIEW_HEADERS, interactive=False, elem_id="review-table", wrap=True)
        with gr.Row():
            pick = gr.Dropdown([], value=None, label="短语 Phrase", elem_id="review-pick", scale=3)
            count = gr.Slider(2, MAX_UI_TAKES, value=3, step=1, label="版本数 Takes", elem_id="review-n", scale=1)
            run = gr.Button("用当前模型试听 Render takes on the serving model", elem_id="review-render", scale=2)
        _wire(panel, "review", run.click, panel.render_review, [pick, count], token, "review")
    tab.select(panel.review, outputs=[table, pick], api_visibility="private", show_progress="hidden")
