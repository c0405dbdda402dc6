"""The play queue of the Synthesise tab: announcements an operator replays all day, in
order, each a number of times and with an optional chime before it.

The queue lives in the browser, not on the server: it is the page's (``localStorage``
under :data:`STORAGE_KEY`), so it survives a reload and needs no account or state on a
replica. An item names its audio by a stable URL, ``/api/audio/<key>.wav``: a cached
result is immutable under its key, so the URL stays valid while the entry is kept. A
result that is not stored under its key (use-cache off, or an answer composed of template
pieces) is queued by the result player's file, which the server keeps for a while only.
An item whose audio is gone (404) is marked and skipped when its turn comes, never a
stuck queue.

One ``<audio id="queue-audio">`` plays every item (the page's other players stop when it
starts, and a player that starts stops the queue: one player at a time on the page). The
chime is two tones made in the browser (WebAudio), no file. Keys: Space plays or stops
the queue (the result player when the queue is empty) when the focus is not in a field or
on a button, Esc stops any playback.
"""

from __future__ import annotations

import gradio as gr

__all__ = ["CHIME_MS", "GAP_MS", "MAX_REPEAT", "QUEUE_JS", "STORAGE_KEY", "queue_add_row", "queue_panel"]

MAX_REPEAT = 20
"""Plays of one item per turn at most (an announcement said 20 times is a lot already)."""
GAP_MS = 600
"""Silence between two plays (of one item, or of two items): the phrases do not run together."""
CHIME_MS = 700
"""The two-tone chime before an item, with its fade."""
STORAGE_KEY = "tts-play-queue-v1"
"""The browser's ``localStorage`` key of the queue (a JSON list of items)."""

#: The queue's list and buttons; the page script (:data:`QUEUE_JS`) draws the items.
_PANEL = """
<div class="queue-box">
  <ol class="queue-list" aria-label="播放队列 Play queue"></ol>
  <p class="queue-empty">队列为空：合成后按「加入队列」。 The queue is empty: synthesise, then press Add to queue.</p>
  <div class="queue-buttons">
    <button type="button" class="queue-play" data-queue="play">▶ 播放队列 Play queue</button>
    <button type="button" class="queue-stop" data-queue="stop">■ 停止 Stop</button>
    <button type="button" class="queue-clear" data-queue="clear">清空 Clear</button>
  </div>
  <p class="queue-status" role="status" aria-live="polite"></p>
  <p class="queue-keys">空格 Space：播放/停止 play/stop · Esc：停止 stop</p>
</div>
"""

_CSS = """
.queue-list { list-style: none; margin: 0; padding: 0; }
.queue-item { display: flex; flex-wrap: wrap; gap: 6px 10px; align-items: center; padding: 6px 8px;
  border: 1px solid var(--border-color-primary); border-radius: var(--radius-md); margin-bottom: 6px; }
.queue-item.queue-playing { background: #dbeafe; border-color: #1d4ed8; box-shadow: inset 4px 0 0 #1d4ed8; }
.queue-item.queue-gone .queue-text { text-decoration: line-through; color: #475569; }
.queue-text { flex: 1 1 12em; min-width: 0; overflow-wrap: anywhere; }
.queue-voice, .queue-note { color: #334155; font-size: 0.9em; }
.queue-note { color: #7f1d1d; flex-basis: 100%; }
.queue-item input[type=number] { width: 4.2em; padding: 2px 4px; border: 1px solid var(--border-color-primary);
  border-radius: var(--radius-sm); }
.queue-item button, .queue-buttons button { border: 1px solid var(--border-color-primary); border-radius:
  var(--radius-md); padding: 4px 10px; background: var(--button-secondary-background-fill);
  color: var(--button-secondary-text-color); min-width: 2.2em; }
.queue-buttons { display: flex; flex-wrap: wrap; gap: 8px; margin-top: 6px; }
.queue-buttons .queue-play { background: var(--button-primary-background-fill);
  color: var(--button-primary-text-color); border-color: var(--button-primary-background-fill); font-weight: 600; }
.queue-empty, .queue-keys { color: #334155; margin: 4px 0; }
.queue-box:has(.queue-item) .queue-empty { display: none; }
.queue-status:empty { display: none; }
.queue-status { margin: 6px 0 0; font-weight: 600; }
"""


def queue_add_row() -> None:
    """Under the result: the repeat count, the chime toggle and 加入队列 Add to queue,
    which queues the result shown (in the browser: nothing is sent to the server)."""
    with gr.Row(elem_id="queue-add-row", equal_height=True):
        repeat = gr.Number(
            value=1, minimum=1, maximum=MAX_REPEAT, step=1, precision=0, label=f"重复 Repeat (1–{MAX_REPEAT})",
            elem_id="queue-repeat", scale=1, min_width=110,
        )  # fmt: skip
        chime = gr.Checkbox(False, label="先播提示音 Chime first", elem_id="queue-chime", scale=1, min_width=120)
        add = gr.Button("加入队列 Add to queue", elem_id="queue-add", scale=2, min_width=150)
    add.click(
        None, inputs=[repeat, chime], js="(repeat, chime) => { window.ttsQueue?.add(repeat, chime); return []; }",
        queue=False, show_progress="hidden", api_visibility="private",
    )  # fmt: skip


def queue_panel() -> None:
    """The 播放队列 Queue accordion: the items in order, each editable, and Play queue,
    Stop and Clear (drawn and run by :data:`QUEUE_JS`)."""
    with gr.Accordion("播放队列 Queue", elem_id="queue-panel", open=True):
        gr.HTML(_PANEL, css_template=_CSS, js_on_load=None, elem_id="play-queue")


#: The page script of the queue (run once on page load): keeps the queue in
#: ``localStorage``, draws it in ``#play-queue``, plays it in ``#queue-audio``, and
#: answers Space and Esc. ``window.ttsQueue`` is what the Add button calls.
QUEUE_JS = (
    """
() => {
  if (window.ttsQueue) return;
  const KEY = "STORAGE_KEY", MAX = MAX_REPEAT, GAP = GAP_MS, CHIME = CHIME_MS;
  const clampRepeat = (n) => Math.min(MAX, Math.max(1, Math.round(Number(n)) || 1));
  const valid = (it) => it && typeof it.url === "string" && typeof it.id === "string";
  const load = () => {
    try {
      const stored = JSON.parse(localStorage.getItem(KEY) || "[]");
      return Array.isArray(stored) ? stored.filter(valid) : [];
    } catch (e) { return []; }
  };
  let items = load();
  const save = () => { try { localStorage.setItem(KEY, JSON.stringify(items)); } catch (e) {} };
  // The one player of the queue, outside Gradio's components (which may be redrawn).
  const audio = document.createElement("audio");
  audio.id = "queue-audio";
  audio.preload = "auto";
  audio.hidden = true;
  document.body.appendChild(audio);
  let run = 0, running = false, playingId = null, status = "", chimeCtx = null;
  const box = () => document.querySelector("#play-queue .queue-box");
  const say = (text) => {
    status = text;
    const line = box()?.querySelector(".queue-status");
    if (line) line.textContent = text;
  };
  const entities = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
  const esc = (s) => String(s).replace(/[&<>"']/g, (c) => entities[c]);
  const draw = () => {
    const root = box();
    if (!root) return;
    root.dataset.drawn = "1";
    root.querySelector(".queue-list").innerHTML = items.map((it, i) => {
      const short = it.text.length > 40 ? it.text.slice(0, 40) + "…" : it.text;
      const cls = ["queue-item", it.id === playingId ? "queue-playing" : "", it.gone ? "queue-gone" : ""].join(" ");
      const gone = it.gone ? `<span class="queue-note">${esc(it.gone)}</span>` : "";
      return `<li class="${cls}" data-id="${esc(it.id)}" ${it.id === playingId ? 'aria-current="true"' : ""}>` +
        `<span class="queue-text" title="${esc(it.text)}">${i + 1}. ${esc(short)}</span>` +
        `<span class="queue-voice">${esc(it.voice || "")}</span>` +
        `<label>×<input type="number" min="1" max="${MAX}" step="1" value="${it.repeat}" data-edit="repeat" ` +
        `aria-label="重复次数 Repeat count"></label>` +
        `<label><input type="checkbox" data-edit="chime" ${it.chime ? "checked" : ""}> 提示音 Chime</label>` +
        `<button type="button" data-queue="up" aria-label="上移 Move up" ${i === 0 ? "disabled" : ""}>↑</button>` +
        `<button type="button" data-queue="down" aria-label="下移 Move down" ` +
        `${i === items.length - 1 ? "disabled" : ""}>↓</button>` +
        `<button type="button" data-queue="remove" aria-label="移除 Remove">✕</button>${gone}</li>`;
    }).join("");
    root.querySelector(".queue-status").textContent = status;
  };
  // Gradio may draw the panel again (a tab switch): draw the items into a new one.
  new MutationObserver(() => { const root = box(); if (root && !root.dataset.drawn) draw(); })
    .observe(document.body, { childList: true, subtree: true });
  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
  // One play of url from its start: "ended", "error" (it could not be read) or "stopped"
  // (paused by Stop, Esc, or another player that started: one player at a time).
  const playOnce = (url) => new Promise((resolve) => {
    let settled = false;
    const done = (how) => {
      if (settled) return;
      settled = true;
      audio.removeEventListener("ended", ended);
      audio.removeEventListener("error", failed);
      audio.removeEventListener("pause", paused);
      resolve(how);
    };
    const ended = () => done("ended");
    const failed = () => done("error");
    const paused = () => { if (!audio.ended) done("stopped"); };
    audio.addEventListener("ended", ended);
    audio.addEventListener("error", failed);
    audio.addEventListener("pause", paused);
    if (audio.getAttribute("src") !== url) audio.src = url;
    audio.currentTime = 0;
    audio.play().catch((e) => done(e && e.name === "NotSupportedError" ? "error" : "stopped"));
  });
  const chime = () => {
    try {
      chimeCtx = chimeCtx || new (window.AudioContext || window.webkitAudioContext)();
      chimeCtx.resume();
      const t = chimeCtx.currentTime + 0.02;
      [[880, 0], [660, 0.3]].forEach(([freq, at]) => {
        const osc = chimeCtx.createOscillator(), gain = chimeCtx.createGain();
        osc.frequency.value = freq;
        gain.gain.setValueAtTime(0.0001, t + at);
        gain.gain.exponentialRampToValueAtTime(0.35, t + at + 0.02);
        gain.gain.exponentialRampToValueAtTime(0.0001, t + at + 0.28);
        osc.connect(gain).connect(chimeCtx.destination);
        osc.start(t + at);
        osc.stop(t + at + 0.3);
      });
    } catch (e) {}
    return sleep(CHIME);  // the queue goes on after the chime's time, heard or not
  };
  const gone = async (item) => {
    let why = "无法播放，已跳过 Could not be played: skipped";
    try {
      const r = await fetch(item.url, { method: "HEAD", cache: "no-store" });
      if (r.status === 404) {
        why = "音频已不存在（可能已清理），已跳过；请重新合成 Audio gone (404): skipped; synthesise it again";
      }
    } catch (e) {}
    item.gone = why;
    save();
  };
  const finish = (text) => { running = false; playingId = null; say(text); draw(); };
  const play = async () => {
    const mine = ++run;
    running = true;
    let index = 0;
    while (mine === run && index < items.length) {
      const item = items[index];
      playingId = item.id;
      if (item.gone) { delete item.gone; save(); }
      draw();
      const where = `${index + 1}/${items.length}`;
      if (item.chime) {
        say(`▶ ${where} · 提示音 Chime`);
        await chime();
        if (mine !== run) return;
      }
      for (let n = 1; n <= clampRepeat(item.repeat); n++) {
        say(`▶ ${where} · 第 ${n}/${clampRepeat(item.repeat)} 遍 play ${n} of ${clampRepeat(item.repeat)}`);
        const how = await playOnce(item.url);
        if (mine !== run) return;
        if (how === "stopped") { run++; finish("■ 已停止 Stopped"); return; }
        if (how === "error") { await gone(item); break; }
        if (n < clampRepeat(item.repeat)) { await sleep(GAP); if (mine !== run) return; }
      }
      const at = items.findIndex((it) => it.id === item.id);
      index = (at >= 0 ? at : index - 1) + 1;
      if (index < items.length) { await sleep(GAP); if (mine !== run) return; }
    }
    if (mine === run) finish(items.length ? "✔ 队列播放完毕 Queue played" : "");
  };
  const stop = (text) => {
    const was = running;
    run++;
    if (!audio.paused) audio.pause();
    if (chimeCtx && chimeCtx.state === "running") chimeCtx.suspend().catch(() => {});
    if (was) finish(text || "■ 已停止 Stopped");
  };
  const add = (repeat, chimeFirst) => {
    const badge = document.querySelector("#cache-badge-value");
    const player = document.querySelector("#result-audio audio");
    const file = player && player.getAttribute("src");
    if (!badge || !badge.dataset.key || !file) {
      say("✖ 先合成，再加入队列 Synthesise first, then add the result to the queue");
      return;
    }
    const n = Number(repeat);
    if (!Number.isInteger(n) || n < 1 || n > MAX) {
      say(`✖ 重复次数 Repeat：1–${MAX} 的整数 a whole number from 1 to ${MAX}`);
      return;
    }
    // A stored result by its key (immutable, valid after a restart); else the player's file.
    const stored = badge.dataset.stored === "1";
    const url = stored ? `/api/audio/${badge.dataset.key}.wav` : new URL(file, location.href).href;
    items.push({
      id: `${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`, url,
      text: badge.dataset.text || "", voice: badge.dataset.voice || "", repeat: n, chime: Boolean(chimeFirst),
      key: badge.dataset.key,
    });
    save();
    say(`✔ 已加入队列 Added to the queue (${items.length})` +
      (stored ? "" : " · 未缓存的结果：服务器只暂存其文件 not cached: the server keeps its file for a while only"));
    draw();
  };
  document.addEventListener("click", (event) => {
    const button = event.target.closest && event.target.closest("#play-queue [data-queue]");
    if (!button) return;
    const action = button.dataset.queue;
    const li = button.closest(".queue-item");
    const at = li ? items.findIndex((it) => it.id === li.dataset.id) : -1;
    if (action === "play") { stop(""); play(); return; }
    if (action === "stop") { stop(); return; }
    if (action === "clear") { stop(""); items = []; save(); say(""); draw(); return; }
    if (at < 0) return;
    if (action === "remove") {
      if (items[at].id === playingId) stop();
      items.splice(at, 1);
    } else {
      const to = action === "up" ? at - 1 : at + 1;
      if (to < 0 || to >= items.length) return;
      [items[at], items[to]] = [items[to], items[at]];
    }
    save();
    draw();
  });
  document.addEventListener("change", (event) => {
    const field = event.target.closest && event.target.closest("#play-queue [data-edit]");
    const li = field && field.closest(".queue-item");
    const item = li && items.find((it) => it.id === li.dataset.id);
    if (!item) return;
    if (field.dataset.edit === "repeat") {
      item.repeat = clampRepeat(field.value);
      field.value = item.repeat;
    } else {
      item.chime = field.checked;
    }
    save();
  });
  // Space: play or stop the queue (the result player when the queue is empty), unless
  // the focus is where Space types or presses something. Esc: stop whatever plays.
  const pressable = "input, textarea, select, button, a[href], [contenteditable=''], [contenteditable=true], " +
    "[role=slider], [role=button], [role=tab], [role=radio], [role=checkbox], [role=option], [role=combobox]";
  const typing = (el) => el && el.closest && el.closest(pressable);
  document.addEventListener("keydown", (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey || event.isComposing) return;
    if (event.key === "Escape") {
      stop();
      document.querySelectorAll("audio, video").forEach((m) => { if (!m.paused) m.pause(); });
      return;
    }
    if (event.key !== " " || event.repeat || typing(event.target)) return;
    event.preventDefault();
    if (items.length) {
      if (running) stop(); else play();
      return;
    }
    const result = document.querySelector("#result-audio audio");
    if (!result || !result.getAttribute("src")) return;
    if (result.paused) result.play().catch(() => {}); else result.pause();
  });
  window.ttsQueue = { add, play, stop, items: () => items.slice() };
  draw();
}
""".replace("STORAGE_KEY", STORAGE_KEY)
    .replace("MAX_REPEAT", str(MAX_REPEAT))
    .replace("GAP_MS", str(GAP_MS))
    .replace("CHIME_MS", str(CHIME_MS))
)
