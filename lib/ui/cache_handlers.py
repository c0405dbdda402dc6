"""The handlers of the Cache and Preload tabs: figures, plots and phrase tables over a
chosen window, the export, the admin actions (results as sentences), the preload."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import gradio as gr

from lib.batch.board import JobSummary
from lib.batch.export import export_phrases
from lib.batch.jobs import BatchJobs, ItemSpec
from lib.batch.preload import PreloadReport, make_missing, preload
from lib.batch.remote import list_jobs, phrase_items
from lib.compose.templates import load_templates
from lib.core.logtext import cut_fields
from lib.core.reports import ClearReport, EvictReport, SweepReport, VerifyReport
from lib.errors import TTSError
from lib.request.access import Action, allows
from lib.request.messages import explain, explain_note, scrub_paths
from lib.request.phrases import PhraseFileError, PhraseRules, expand, load_phrases
from lib.ui.base import HandlerBase
from lib.ui.plots import WINDOWS, hit_rate_plot, latency_plot, window_rate
from lib.ui.views import admin_sentence, made_html, stats_markdown, tag_choices, top_table, usage_markdown

__all__ = ["BATCH_HEADERS", "CacheHandlers", "batch_rows", "failure_lines"]

#: The columns of the Preload tab's batch jobs table (:func:`batch_rows`).
BATCH_HEADERS = ["任务 Job", "状态 Status", "进度 Progress", "完成 Done", "失败 Failed", "提交 Submitted (UTC)"]

_LOGGER = logging.getLogger(__name__)


class CacheHandlers(HandlerBase):
    """The Cache and Preload tabs."""

    def refresh_cache(
        self, window: int | None = None, token: str | None = None, request: gr.Request | None = None
    ) -> tuple[Any, ...]:
        """The Cache tab over ``window`` seconds; the phrase tables (users' texts) for the
        admin only (the page's admin sign-in)."""
        seconds = int(window if window is not None else WINDOWS[0][1])
        caller = self.caller(request, token)
        snap = self.service.dashboard.snapshot(top=50, caller=caller)  # grouped below: fewer rows
        samples = list(self.service.dashboard.stats.samples)
        now = time.time()
        label = next((name for name, s in WINDOWS if s == seconds), f"{seconds} s")
        rate, lookups = window_rate(samples, seconds, now)
        text = stats_markdown(snap, (label, rate, lookups))
        if "top_requested" not in snap:
            text += (
                "\n\n常用短语仅管理员可见（在页面顶部「管理员登录」中登录）The most requested phrases are shown to "
                "the admin only (sign in under Admin sign-in at the top of the page)."
            )
        if allows(caller, Action.KEYS):  # tenants' usage: the admin's (docs/tenants.md)
            text += "\n\n" + usage_markdown(self.service.tenants.usage())
        return (
            text, latency_plot(samples, seconds, now), hit_rate_plot(samples, seconds, now),
            top_table(snap.get("top_requested", [])), top_table(snap.get("top_missed", []), by="misses"),
        )  # fmt: skip

    def evict_choices(self) -> Any:
        """Model versions present in the cache, with counts; never pre-selected."""
        return gr.update(choices=tag_choices(self.service.dashboard.tags(), self.service.tag), value=None)

    def admin_clear(self, confirmed: bool, token: str, tag: str | None, request: gr.Request) -> tuple[str, bool]:
        return self._admin("clear", confirmed, token, tag, request)

    def admin_evict(self, confirmed: bool, token: str, tag: str | None, request: gr.Request) -> tuple[str, bool]:
        return self._admin("evict", confirmed, token, tag, request)

    def admin_sweep(self, confirmed: bool, token: str, tag: str | None, request: gr.Request) -> tuple[str, bool]:
        return self._admin("sweep", confirmed, token, tag, request)

    def admin_verify(self, confirmed: bool, token: str, tag: str | None, request: gr.Request) -> tuple[str, bool]:
        return self._admin("verify", confirmed, token, tag, request)

    def _admin(
        self, action: str, confirmed: bool, token: str, tag: str | None, request: gr.Request
    ) -> tuple[str, bool]:
        if not confirmed:
            self.fail(
                "admin", request,
                "请先勾选「我已确认」：此操作会影响所有用户的缓存 — tick 'I understand' first: this changes the "
                "cache for every user",
            )  # fmt: skip
        caller = self.caller(request, token)
        service = self.service
        done: ClearReport | EvictReport | SweepReport | VerifyReport
        try:
            if action == "clear":
                done = service.admin.clear(caller=caller)
            elif action == "evict":
                done = service.admin.evict(tag or "", caller=caller)
            elif action == "sweep":
                done = service.admin.sweep_expired(caller=caller)
            else:
                done = service.admin.verify(caller=caller)
        except TTSError as exc:
            self.fail("admin", request, explain(exc))
        _LOGGER.warning("admin action %s from the web UI: %s", action, cut_fields(done))
        return admin_sentence(action, done), False

    def make_missing(self, token: str, request: gr.Request) -> str:
        """*Make the missing ones*: the hot phrases and template pieces the Cache tab
        names as missing, made now (the admin's, by the page's admin sign-in)."""
        try:
            report = make_missing(self.service, caller=self.caller(request, token))
        except TTSError as exc:
            self.fail("make-missing", request, explain(exc))
        _LOGGER.warning("make missing from the web UI: %s", report.summary())
        figures = {"made": report.generated, "cached": report.cached, "failed": report.failed}
        return made_html(figures, [line.removeprefix("- ") for line in failure_lines(report)])

    def export_top(self, token: str, request: gr.Request) -> tuple[str | None, str]:
        """The top phrases as a phrase list; they are users' texts: the admin only."""
        try:
            document, notes = export_phrases(self.service, top=50, caller=self.caller(request, token))
        except TTSError as exc:
            self.fail("export", request, explain(exc))
        skipped = "".join(f"\n- {explain_note(n)}" for n in notes[:20])
        if not document["phrases"]:
            why = "\n\n跳过 Skipped:" + skipped if notes else ""
            return None, (
                "没有可导出的短语：请先在「合成」页合成几条短语（上传的录音需先在「音色」页保存为音色）。"
                "Nothing to export yet: synthesise some phrases first (save an uploaded recording as a voice "
                "in the Voices tab to export its phrases)." + why
            )
        data = (json.dumps(document, ensure_ascii=False, indent=2) + "\n").encode("utf-8")
        target = self.service.files.write("hot_phrases.json", data)
        n = len(document["phrases"])
        message = f"✔ 已导出 {n} 条短语 Exported {n} phrases."
        if notes:
            message += f"\n\n跳过 {len(notes)} 条 Skipped {len(notes)}:" + skipped
        return str(target), message

    def run_preload(
        self, upload: str | None, force: bool, token: str, request: gr.Request,
        progress: gr.Progress = gr.Progress(),  # noqa: B008 - Gradio injects it by this default
    ) -> str:  # fmt: skip
        """Run a phrase list through the cache; ``force`` (regenerate) needs the admin."""
        path = Path(upload) if upload else self.phrases_path
        paths = [upload] if upload else []
        # An uploaded list lives in Gradio's upload area, among other users' uploads: it
        # may use recordings in preload.prompt_dir only, never its own folder.
        rules = PhraseRules.from_config(self.service.config.preload, own_folder=not upload)
        try:
            requests = expand(load_phrases(path, rules))
            templates = load_templates(path, rules)
        except TTSError as exc:
            self.fail("preload", request, explain(exc, paths=paths))
        caller = self.caller(request, token)
        enable = bool(templates) and allows(caller, Action.TEMPLATES)
        total = len(requests) + sum(len(self.service.templates.pieces(t)) for t in templates)
        if total > rules.max_requests:
            self.fail("preload", request, explain(PhraseFileError(
                f"{path.name}: the list needs {total} requests with its templates' pieces, over the limit of "
                f"{rules.max_requests} (preload.max_requests); split it into several lists"
            )))  # fmt: skip
        progress((0, total), desc="预加载 Preloading", unit="phrases")

        def step(report: PreloadReport) -> None:
            progress((report.total, total), desc="预加载 Preloading", unit="phrases")

        try:
            report = preload(
                self.service, requests, workers=1, force=force, on_done=step, caller=caller, templates=templates
            )  # fmt: skip
            if enable:  # from now on this service composes answers from the list's templates too
                self.service.templates.add(templates, caller=caller)
        except TTSError as exc:
            self.fail("preload", request, explain(exc, paths=paths))
        self.service.cache.flush()  # every entry on disk before the Cache tab counts them (it refreshes next)
        head = (
            f"{'✔' if not report.failed else '⚠'} 预加载完成：共 {report.total} 条，生成 {report.generated} 条，"
            f"已缓存 {report.cached} 条，失败 {report.failed} 条。  \n`{report.summary()}`"
        )
        failures = failure_lines(report, paths)
        n = len(templates)
        if enable:
            notes = [f"{n} 个模板已启用 {n} template(s) active"]
        elif templates:
            # Not refused: the pieces are preloaded (as phrases are), but a template
            # changes the answers of every user, so only the admin may switch it on.
            notes = [
                f"{n} 个模板的片段已预加载，但模板未启用：模板会改变所有用户的结果，只有管理员（填写管理员令牌）或 "
                f"templates.file 可以启用。 {n} template(s) preloaded as pieces only, not enabled: templates change "
                "the answers of every user, so only the admin (with the admin token) or templates.file enables them."
            ]
        else:
            notes = []
        return "\n".join([head, *failures, *notes])

    def submit_batch(self, upload: str | None, token: str, request: gr.Request) -> tuple[str, list[list[Any]]]:
        """A phrase list (the upload, else the shipped one) as batch jobs (the admin):
        made in the background by every replica; their progress is the table."""
        path = Path(upload) if upload else self.phrases_path
        paths = [upload] if upload else []
        rules = PhraseRules.from_config(self.service.config.preload, own_folder=not upload)
        try:
            items, unsent = phrase_items(expand(load_phrases(path, rules)))
            jobs = BatchJobs.of(self.service)
            caller = self.caller(request, token)
            submitted = [
                jobs.submit([ItemSpec(dict(item)) for _, item in chunk], job_id=job_id, caller=caller)
                for job_id, chunk in list_jobs(items)
            ]
        except TTSError as exc:
            self.fail("batch", request, explain(exc, paths=paths))
        lines = [
            f"✔ 批量任务 `{summary['id']}`：{summary['total']} 条{'（已提交过 submitted before）' if not new else ''} "
            f"Batch job `{summary['id']}`: {summary['total']} items; its progress is in the table below."
            for summary, new in submitted
        ]
        lines += [f"- ⚠ `{entry}` 未提交 not sent: {scrub_paths(why, paths)}" for entry, why in unsent[:20]]
        if not submitted:
            lines.append("列表中没有可提交的短语 Nothing in the list could be sent.")
        return "\n".join(lines), self.batch_jobs()

    def batch_jobs(self) -> list[list[Any]]:
        """The newest batch jobs as the Preload tab's table rows."""
        return batch_rows(BatchJobs.of(self.service).listing(20))


def batch_rows(jobs: list[JobSummary]) -> list[list[Any]]:
    """Batch jobs as table rows: id, status, progress, made, failed, submitted (UTC)."""
    rows = []
    for job in jobs:
        finished = job["done"] + job["failed"]
        share = f" ({100 * finished // job['total']} %)" if job["total"] else ""
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(job["created"]))
        rows.append([job["id"], job["status"], f"{finished}/{job['total']}{share}", job["done"], job["failed"], when])
    return rows


def failure_lines(report: PreloadReport, paths: list[str] | None = None, most: int = 20) -> list[str]:
    """A preload's failures for an operator: each phrase by its text and voice, why in
    both languages, and its place in the list; the first ``most``."""
    lines = []
    for entry, message in report.failures[:most]:
        why = explain(TTSError(scrub_paths(message, paths or [])))
        lines.append(f"- {report.labels.get(entry, entry)} · `{entry}`: {why}")
    if len(report.failures) > most:
        lines.append(f"- … 另有 {len(report.failures) - most} 条失败 and {len(report.failures) - most} more failed")
    return lines
