"""One admin sign-in per page: the token typed once, in one box over the tabs, and used by
every admin action (replacing or deleting a voice, the lexicon, approving a take, a
forced preload, the Cache tab's actions and tables), until 退出 Sign out clears it or
the page is closed. The token matters only when the server has one
(``server.admin_token_env``); without it callers on this machine are the admin.
"""

from __future__ import annotations

import gradio as gr

from lib.request.access import AccessPolicy
from lib.ui.base import HandlerBase

__all__ = ["signin_section", "signin_status"]


def signin_status(access: AccessPolicy, token: str, client_host: str | None) -> str:
    """What the sign-in says for ``token`` from ``client_host``."""
    caller = access.caller(origin="ui", client_host=client_host, token=token)
    if not caller.token_configured:
        return (
            f"未设置管理员令牌（{caller.token_env}）：本机访问即为管理员 No admin token is set "
            f"({caller.token_env}): callers on this machine are the admin"
            + ("" if caller.admin else "；其他机器不是 callers from elsewhere are not")
        )
    if not token:
        return ""
    if caller.admin:
        return "✔ 已登录为管理员，关闭页面或退出前有效 Signed in as the admin until you sign out or close the page"
    return "✖ 令牌不正确 Wrong token: type the admin token again"


def signin_section(h: HandlerBase) -> gr.Textbox:
    """The sign-in over the tabs (an accordion, closed); returns the token box every
    admin action reads."""
    env = h.service.config.server.admin_token_env
    with gr.Accordion("管理员登录 Admin sign-in", open=False, elem_id="admin-signin"):
        with gr.Row(equal_height=False):  # the buttons at their own height, not the box's
            token = gr.Textbox(
                label=f"管理员令牌 Admin token (only when {env} is set)", type="password", elem_id="admin-token",
                scale=3,
            )  # fmt: skip
            signin = gr.Button("登录 Sign in", variant="primary", elem_id="signin", scale=1, size="sm")
            signout = gr.Button("退出 Sign out", elem_id="signout", scale=1, size="sm")
        status = gr.Markdown(elem_id="signin-status")

    def check(value: str, request: gr.Request) -> str:
        host = request.client.host if request is not None and request.client else None
        return signin_status(h.service.access, value or "", host)

    for event in (signin.click, token.submit):
        event(check, inputs=token, outputs=status, api_visibility="private", queue=False)
    signout.click(
        lambda: ("", "已退出 Signed out: admin actions need the token again"), outputs=[token, status],
        api_visibility="private", queue=False,
    )  # fmt: skip
    return token
