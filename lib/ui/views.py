"""What the web UI shows, as pure functions of the service's answers: the cache badge,
result details and notices, the dashboard's text and tables, admin results as
sentences, download names and the session's history. Tested directly, without a browser."""

from __future__ import annotations

import html
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from lib.pipeline.results import SynthesisResult
from lib.ui.shared_status import objects_markdown, status_markdown

__all__ = [
    "BADGE_COLOURS",
    "HistoryItem",
    "admin_sentence",
    "badge_html",
    "details_markdown",
    "download_name",
    "engine_title",
    "history_label",
    "lexicon_line",
    "made_html",
    "segments_line",
    "shown_cache",
    "stats_markdown",
    "style_notice",
    "tag_choices",
    "top_table",
    "usage_markdown",
    "versions_markdown",
    "voices_table",
]

#: Badge backgrounds; white text on each is at least 4.5:1 (WCAG AA), tested in the browser.
BADGE_COLOURS = {
    "HIT": "#15803d", "MISS": "#b45309", "BYPASS": "#475569", "COMPOSED": "#1d4ed8", "FAILED": "#b91c1c",
}  # fmt: skip
"""HIT green, MISS amber, BYPASS grey, COMPOSED blue (made from a template's cached pieces),
FAILED red (a live announcement that failed part-way)."""
_BADGE_WORDS = {
    "HIT": "命中缓存 Served from the cache",
    "MISS": "未命中，已合成并存入缓存 Not cached: synthesised now and stored",
    "BYPASS": "未使用缓存 Cache bypassed: synthesised, not stored",
    "COMPOSED": "由模板的缓存片段拼接 Composed from a template's cached pieces",
    "FAILED": (
        "合成中途失败：已播放的部分不完整，未存入缓存 Failed part-way: what played was incomplete; nothing was stored"
    ),
}
_MAKING_WORDS = {
    "MISS": "未命中，正在合成，边合成边播放；完成后存入缓存 Not cached: playing while it is made; stored when complete",
    "BYPASS": "未使用缓存，边合成边播放 Cache bypassed: playing while it is made, not stored",
}

#: One entry of the session's history (gr.State): path, label, cache result.
HistoryItem = dict[str, str]


_ENGINES = {
    "builtin": "内置引擎 Built-in engine ({base} + voice matching, offline)",
    "cosyvoice": "CosyVoice",
    "tone": "测试音引擎 Test tone engine",
}
#: The built-in engine's base voices as the header names them (``BuiltinEngine.base``).
_BASES = {"kokoro": "Kokoro-82M", "espeak": "espeak-ng"}


def engine_title(name: str, base: str = "espeak") -> str:
    """The engine as the page header names it (not its raw tag); for the built-in engine,
    the base voice that speaks (``base``: Kokoro-82M, or espeak-ng when Kokoro is not
    installed or its runtime check failed)."""
    return _ENGINES.get(name, name).replace("{base}", _BASES.get(base, base))


def shown_cache(result: SynthesisResult) -> str:
    """The badge of ``result``: its cache result, except that an answer composed from a
    template's pieces that were all in the cache is a HIT (of its pieces: no engine call;
    the API still says COMPOSED, since no entry is stored under its own key)."""
    if result.cache == "COMPOSED" and not result.info.get("segments_synthesised", 0):
        return "HIT"
    return result.cache


def badge_html(
    cache: str, *, live: bool = False, info: Mapping[str, Any] | None = None, approved: bool = False,
    making: bool = False, queued: Mapping[str, str] | None = None,
) -> str:  # fmt: skip
    """The HIT/MISS/BYPASS pill and what it means; empty before a result. ``live``: the
    result was played live (``data-live``: the page script does not play its file
    again). ``info``: the result's notes (a HIT composed from pieces says so). The empty
    ``first-sound`` span is filled by the page script with the time until the operator
    heard the result. ``approved``: the answer is the phrase's approved take (lib.takes),
    said as 已审核 Approved next to the pill. ``making``: still being made while it plays
    (not yet stored: the words say so); ``FAILED``: a live result that failed part-way.
    ``queued``: what the play queue's Add button takes from this result (``key``,
    ``stored``, ``text``, ``voice``; lib.ui.queue), as ``data-`` attributes."""
    if not cache:
        return ""
    colour = BADGE_COLOURS.get(cache, "#475569")
    words = (_MAKING_WORDS if making else _BADGE_WORDS).get(cache, "")
    pieces = int((info or {}).get("segments", 0))
    if cache == "HIT" and (info or {}).get("template"):
        words = f"命中缓存：由模板的 {pieces} 个缓存片段拼接 Served from the cache: {pieces} cached pieces joined"
    return (
        f'<div class="cache-result"><span class="cache-badge" id="cache-badge-value" data-cache="{html.escape(cache)}" '
        f'data-live="{int(live)}" '
        + "".join(f'data-{name}="{html.escape(value)}" ' for name, value in (queued or {}).items())
        + f'style="background:{colour};color:#fff;padding:4px 14px;border-radius:999px;font-weight:700">'
        f"{html.escape(cache)}</span> "
        + ('<span class="approved-badge" id="approved-badge">已审核 Approved</span> ' if approved else "")
        + f"<span>{html.escape(words)}</span> "
        '<span id="first-sound" class="first-sound" role="status"></span></div>'
    )


def details_markdown(result: SynthesisResult, file_name: str) -> str:
    """Key, time, audio and file of a result (the key first: tests and operators copy it)."""
    t = result.timings
    engine = f" (引擎 engine {t['engine']:.1f} ms)" if "engine" in t else ""
    lines = [
        f"**键 Key** `{result.key}`",
        f"**用时 Time** {t.get('total', 0):.1f} ms{engine}",
        f"**音频 Audio** {result.duration:.2f} s · {result.sample_rate} Hz · `{file_name}`",
    ]
    info = result.info
    extra = []
    if info.get("tier"):
        extra.append(f"来自 from {info['tier']}")
    if info.get("languages"):
        extra.append("语言 languages " + ", ".join(map(str, info["languages"])))
    if "segments" in info:
        extra.append(
            f"分句 segments {info['segments']} ({info.get('segments_reused', 0)} 复用 reused, "
            f"{info.get('segments_synthesised', 0)} 合成 synthesised)"
        )
    if info.get("style_words"):
        extra.append("风格 style " + ", ".join(map(str, info["style_words"])))
    if extra:
        lines.append("**说明 Notes** " + " · ".join(extra))
    return "  \n".join(lines)


def style_notice(info: Mapping[str, Any]) -> str:
    """A visible notice for style words the engine did not know ("" when none)."""
    ignored = [str(w) for w in info.get("ignored_style_words") or []]
    if not ignored:
        return ""
    words = "、".join(f"「{w}」" for w in ignored)
    return (
        f"⚠ **未识别的风格词已忽略 Unknown style words ignored**：{words}。"
        "可用 Known: slow 慢, fast 快, happy 开心, calm 平静, loud 大声… (README)"
    )


_NAME_CUT = re.compile(r"[^\w\-]+")  # what lib.audio.files would replace anyway, and punctuation


def download_name(voice: str, text: str, seed: int, key: str, fmt: str, style: str = "") -> str:
    """A file name that says what the file is: voice, start of the text, the style
    words when there are any, seed (and 6 digits of the key, so two different results
    never share a name)."""
    start = _NAME_CUT.sub("_", text.strip()).strip("_")[:20].strip("_") or "text"
    who = _NAME_CUT.sub("_", voice.strip()).strip("_")[:24] or "upload"
    how = _NAME_CUT.sub("_", style.strip()).strip("_")[:16].strip("_")
    return f"{who}_{start}_{how + '_' if how else ''}seed{seed}_{key[:6]}.{fmt}"


def history_label(cache: str, voice: str, text: str, seed: int, at: float | None = None) -> str:
    clock = time.strftime("%H:%M:%S", time.localtime(at if at is not None else time.time()))
    short = text if len(text) <= 24 else text[:23] + "…"
    return f"{clock} · {cache} · {voice or '上传 upload'} · seed {seed} · {short}"


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover


def _pct(rate: float) -> str:
    return f"{100 * rate:.1f} %"


def lexicon_line(lexicon: Mapping[str, Any] | None) -> str:
    """The lexicon's size and what its last change made stale: cached entries whose
    text holds the changed term, made again (in the new reading) when next asked."""
    if not lexicon:
        return ""
    line = f"**读音词典 Lexicon** {lexicon.get('entries', 0)} / {lexicon.get('limit', 0)} 条 entries"
    last = lexicon.get("last_change")
    if last:
        stale = last.get("stale")
        count = (
            "统计中 being counted" if stale is None
            else f"{stale} 条缓存已过时，下次请求时按新读音重新合成 cached entries are stale: made again in the new "
            "reading when next asked"
        )  # fmt: skip
        term = str(last.get("term", ""))
        line += f" · 最近修改 last change「{term}」{last.get('action', '')}: {count}"
    return line + "  "


def stats_markdown(snap: Mapping[str, Any], window: tuple[str, float, int] | None = None) -> str:
    """The dashboard's figures. User traffic and preload are apart: a preload's misses
    are the cache being filled, not users waiting. ``window`` is (label, hit rate,
    lookups) over the chosen window."""
    used, limit = snap["bytes"], snap["size_limit"]
    since, total = snap["since_start"], snap["total"]
    lines = [
        f"**条目 Entries** {snap['entries']} · **容量 Size** {_human_bytes(used)} / {_human_bytes(limit)} "
        f"({100 * used / limit:.1f} %)  ",
    ]
    if window is not None:
        label, rate, lookups = window
        shown = _pct(rate) if lookups else "—"
        lines.append(f"**命中率 Hit rate, {label}**: {shown} ({lookups} 次用户请求 user lookups)  ")
    lines += [
        f"**用户请求 User requests** (本次启动 since start): {since['hits']} 命中 hits, {since['misses']} 未命中 "
        f"misses ({_pct(snap['hit_rate'])} hit rate), {since['bypasses']} 绕过 bypasses, {since['errors']} "
        f"错误 errors; 累计 in total: {total['hits']} hits, {total['misses']} misses "
        f"({_pct(snap['hit_rate_total'])})  ",
        f"**预加载 Preload** (counted apart 单独统计): {since.get('preload_misses', 0)} 生成 generated, "
        f"{since.get('preload_hits', 0)} 已缓存 already cached, {since.get('preload_errors', 0)} 失败 failed "
        f"since start; 累计 in total {total.get('preload_misses', 0)} generated  ",
        f"**节省引擎时间 Engine time saved by hits**: {snap.get('engine_seconds_saved', 0.0):.1f} s since start, "
        f"{snap.get('engine_seconds_saved_last_hour', 0.0):.1f} s in the last hour, "
        f"{snap.get('engine_seconds_saved_total', 0.0):.1f} s in total · "
        f"引擎调用 engine calls {since['engine_calls']}  ",
        segments_line(since),
        f"**模型版本 Model version** `{snap['tag']}`  ",
        versions_markdown(snap.get("model_versions") or []),
    ]
    lexicon = lexicon_line(snap.get("lexicon"))
    if lexicon:
        lines.append(lexicon)
    if not snap.get("cache_available", True):
        lines.append(f"\n**缓存不可用 Cache unavailable** (serving without it): {snap.get('cache_error')}")
    shared = status_markdown(snap.get("shared"))
    if shared:
        lines.append("\n" + shared)
    objects = objects_markdown(snap.get("objects"))
    if objects:
        lines.append("\n" + objects)
    return "\n".join(lines)


def segments_line(since: Mapping[str, Any]) -> str:
    """Segments reused and synthesised, composed answers, streams and their mean time to
    first audio on the server, since start (labelled so: the operator hears it later, by
    the browser's own buffering; the UI shows that time next to each result's badge)."""
    streams = int(since.get("streams", 0))
    mean = since.get("first_audio_ms", 0) / streams if streams else 0
    first = (
        f", 首段音频在服务器端就绪平均 {mean:.0f} ms first audio ready on the server after {mean:.0f} ms "
        "(服务器时间，不含浏览器缓冲 server time: the browser plays it later)"
        if streams
        else ""
    )
    return (
        f"**分句 Segments**: {since.get('segments_reused', 0)} 复用 reused, "
        f"{since.get('segments_synthesised', 0)} 合成 synthesised; **模板拼接 Composed**: {since.get('composed', 0)}; "
        f"**流式 Streamed**: {streams}{first}  "
    )


def versions_markdown(rows: Sequence[Mapping[str, Any]]) -> str:
    """One line per model version in the cache: how many hot phrases and template pieces
    it already holds (rows of :meth:`lib.ops.upgrade.Readiness.versions`), so that before
    switching to a new model the operator sees whether it is warm. The serving version is
    marked; what it lacks is named (the first few, by text and voice), with the button
    that makes it."""
    if not rows:
        return ""
    lines = ["\n**热门短语就绪 Hot phrases ready, per model version**:"]
    for r in rows:
        serving = " **（当前 serving）**" if r.get("serving") else ""
        ready, total = int(r.get("hot_ready", 0)), int(r.get("hot_total", 0))
        figures = f"就绪 ready {ready}/{total}" if total else "无热门短语列表 no hot-phrase list (templates.file)"
        pieces_ready, pieces = int(r.get("pieces_ready", 0)), int(r.get("pieces_total", 0))
        if pieces:
            figures += f" · 模板片段 template pieces {pieces_ready}/{pieces}"
        lines.append(f"- `{r['tag']}`{serving}: {figures} · {_entries(int(r.get('entries', 0)))}")
        named = [str(m) for m in r.get("hot_missing") or []] + [str(m) for m in r.get("pieces_missing") or []]
        lacking = (total - ready) + (pieces - pieces_ready)
        if named and r.get("serving"):
            named = named[:MISSING_NAMED]
            more = lacking - len(named)
            listed = "、".join(named) + (f" 等另 {more} 条 and {more} more" if more > 0 else "")
            lines.append(
                f"  - 缺 missing: {listed}. 管理员可按下方「生成缺少的 Make the missing ones」补齐（已缓存的会跳过）"
                "; the admin can press Make the missing ones below (what is cached is skipped); until then each "
                "is made when asked for."
            )
    return "\n".join(lines)


#: Missing hot phrases and pieces named in the serving version's line (the rest are counted).
MISSING_NAMED = 5


def made_html(report: Mapping[str, Any], failures: Sequence[str]) -> str:
    """The result of *Make the missing ones* (``POST /api/cache/make-missing``'s
    figures) as one line, and each failure (phrase text and voice, why) under it."""
    made, cached, failed = int(report["made"]), int(report["cached"]), int(report["failed"])
    if not made and not failed:
        line = f"✔ 没有缺少的：{cached} 条都已缓存。Nothing was missing: all {cached} are cached."
    else:
        line = (
            f"{'⚠' if failed else '✔'} 已生成 {made} 条，已缓存 {cached} 条，失败 {failed} 条。"
            f"Made {made}, {cached} already cached, {failed} failed."
        )
    items = "".join(f"<li>{html.escape(f)}</li>" for f in failures)
    return f'<div class="made-missing">{html.escape(line)}{f"<ul>{items}</ul>" if items else ""}</div>'


_TOP_COLUMNS = ["次数 Count", "未命中 Missed", "文本 Text", "音色 Voice"]


def top_table(rows: Sequence[Mapping[str, Any]], by: str = "count") -> pd.DataFrame:
    """Top phrases grouped by text and voice name, the largest ``by`` (``count``: most
    requested, ``misses``: most missed) first (the statistics count each seed, style and
    speed apart; here they are added up)."""
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        voice = str(r.get("voice") or "") or "上传的录音 uploaded recording"
        g = groups.setdefault((str(r.get("text", "")), voice), {"count": 0, "misses": 0})
        g["count"] += int(r.get("count", 0))
        g["misses"] += int(r.get("misses", 0))
    ordered = sorted(groups.items(), key=lambda kv: (-kv[1][by], -kv[1]["count"], kv[0]))
    data = [(g["count"], g["misses"], text, voice) for (text, voice), g in ordered]
    return pd.DataFrame(data, columns=_TOP_COLUMNS)


def usage_markdown(rows: Sequence[Mapping[str, Any]]) -> str:
    """The tenants' usage (``GET /api/usage``) as a table for the admin."""
    if not rows:
        return ""
    lines = [
        "**租户用量 Usage by tenant**",
        "",
        "| 租户 tenant | 请求 requests | 命中 hits | 未命中 misses | 合成字数 chars "
        "| 引擎 engine s | 节省 saved s | 音频 audio s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        name = "匿名 anonymous" if r["name"] == "anonymous" else str(r["name"])
        lines.append(
            f"| {name} | {r['requests']} | {r['hits']} | {r['misses']} | {r['synth_chars']} | "
            f"{float(r['engine_seconds']):.1f} | {float(r['engine_seconds_saved']):.1f} | "
            f"{float(r['audio_seconds']):.1f} |"
        )
    return "\n".join(lines)


def tag_choices(tags: Sequence[tuple[str, int]], current: str) -> list[tuple[str, str]]:
    """Evict choices: each model version in the cache with its entry count."""
    return [
        (f"{tag} — {count} 条 entries" + ("（当前 current model）" if tag == current else ""), tag)
        for tag, count in tags
    ]


def _entries(n: int) -> str:
    return f"{n} entry" if n == 1 else f"{n} entries"


def admin_sentence(action: str, done: Mapping[str, Any]) -> str:
    """An admin action's result as a sentence."""
    if action == "clear":
        n, shared = done["removed"], done.get("shared_removed") or 0
        both = f"，共享缓存 {shared} 条" if shared else ""
        also = f" and {shared} from the shared tier" if shared else ""
        return f"✔ 已清空缓存：删除 {n} 条{both}。Cleared the cache: {_entries(n)} removed{also}."
    if action == "evict" and not done["removed"]:
        return (
            f"⚠ 未删除任何条目：缓存中没有模型版本 `{done['tag']}` 的条目（请从列表中选择）。"
            f"Nothing removed: the cache holds no entries of model version `{done['tag']}` (pick one from the list)."
        )
    if action == "evict":
        return (
            f"✔ 已删除模型版本 `{done['tag']}` 的 {done['removed']} 条缓存。"
            f"Removed {_entries(done['removed'])} of model version `{done['tag']}`."
        )
    if action == "sweep":
        n = done["expired_removed"]
        return f"✔ 已清理 {n} 条过期缓存。Removed {n} expired {'entry' if n == 1 else 'entries'}."
    if not done.get("available", True):
        return "⚠ 缓存目录不可用，未能校验。The cache store is unavailable; nothing was checked."
    repairs = done.get("repairs") or []
    fixed = f"；修复 {len(repairs)} 处 ({len(repairs)} store repairs: {'; '.join(repairs[:3])})" if repairs else ""
    bad = int(done.get("implausible_removed", 0))
    return (
        f"✔ 已校验 {done['checked']} 条，删除损坏 {done['corrupt_removed']} 条、声音与文字不符 {bad} 条{fixed}。"
        f"Checked {_entries(done['checked'])}, removed {done['corrupt_removed']} corrupt and {bad} whose audio "
        "cannot be their text."
    )


def voices_table(voices: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    kinds = {"preset": "预置 preset", "saved": "已存 saved"}
    rows = [
        (v["name"], kinds.get(str(v["kind"]), v["kind"]), v.get("seconds", ""), v.get("prompt_text", ""))
        for v in voices
    ]
    return pd.DataFrame(rows, columns=["名称 Name", "类型 Kind", "时长 Seconds", "文本 Transcript"])
