"""The UI's look: a Gradio theme whose text and buttons reach WCAG AA contrast (4.5:1),
the little CSS no theme setting covers, and the page script Gradio has no component for.

Gradio's default theme puts white text on orange (2.8:1) and grey labels on white
(about 2.5:1); here every colour that carries text is set through the theme's own
variables, and the browser test measures the computed contrast.
"""

from __future__ import annotations

import gradio as gr

__all__ = ["CSS", "FORGET_PRESS", "JS", "LANG", "PLAY_RESULT", "SHOW_CONFIRM", "SHOW_RESULT", "theme"]

#: The page language: labels lead with Chinese (English follows each).
LANG = "zh-CN"


def theme() -> gr.themes.Base:
    """Blue primary (white on blue-700 is 6.7:1), dark grey labels (gray-600 on white
    is 7.6:1), red-700 stop buttons (6.5:1); dark mode keeps light text on dark fills."""
    return gr.themes.Default(primary_hue="blue", secondary_hue="blue", neutral_hue="gray").set(
        color_accent="*primary_700",
        color_accent_soft="*primary_50",
        body_text_color="*neutral_800",
        body_text_color_subdued="*neutral_600",
        block_label_text_color="*neutral_700",
        block_title_text_color="*neutral_700",
        block_info_text_color="*neutral_600",
        input_placeholder_color="*neutral_500",
        link_text_color="*primary_700",
        link_text_color_visited="*primary_800",
        link_text_color_hover="*primary_800",
        button_primary_background_fill="*primary_700",
        button_primary_background_fill_hover="*primary_800",
        button_primary_border_color="*primary_700",
        button_primary_text_color="white",
        button_secondary_text_color="*neutral_800",
        button_cancel_background_fill="#b91c1c",
        button_cancel_background_fill_hover="#991b1b",
        button_cancel_border_color="#b91c1c",
        button_cancel_text_color="white",
        checkbox_background_color_selected="*primary_700",
        checkbox_border_color_selected="*primary_700",
        slider_color="*primary_700",
        # dark mode
        body_text_color_subdued_dark="*neutral_300",
        block_label_text_color_dark="*neutral_200",
        block_title_text_color_dark="*neutral_200",
        block_info_text_color_dark="*neutral_300",
        link_text_color_dark="*primary_300",
        button_primary_background_fill_dark="*primary_700",
        button_primary_background_fill_hover_dark="*primary_600",
        button_primary_border_color_dark="*primary_700",
        button_cancel_background_fill_dark="#b91c1c",
        button_cancel_border_color_dark="#b91c1c",
    )


#: Layout only (no theme variable exists for these): on wide screens the button and
#: the result stay in view while the operator scrolls the form; the error box is red;
#: a busy Synthesise/Convert button is grey and readable (Gradio fades disabled buttons
#: to half opacity: white on faded blue is about 2.5:1, under the 4.5:1 kept elsewhere).
CSS = """
/* Gradio's container has overflow: hidden, which makes it the scroll box that a sticky
   element sticks in (it never scrolls, so nothing stuck); clip cuts the same overflow
   without being a scroll box, and the result column sticks to the window. */
.gradio-container { overflow: clip !important; }
@media (min-width: 1000px) {
  #result-panel { position: sticky; top: 8px; align-self: flex-start; }
  /* The panel sticks only as far as the form's row goes: with a result and its details
     it is taller than the rest of the form below the Format field, and the row's end
     pushed it (and the button on top) up out of the screen. The button sticks inside
     the panel too, over the panel's top which is scrolled past. */
  #generate, #convert { position: sticky; top: 8px; z-index: 5; }
}
#result-message:has(.prose:empty) { display: none; }
/* A form error on a recording field: Gradio lays its red band over the field's label and
   upload area, with a clear button of its own beside the recording's (two "清除"). Here
   it sits above the field, in the flow, covering nothing, and the message goes with the
   next check (the list under the button says it too). */
#prompt-audio > [data-testid=status-tracker]:has(.validation-error),
#source-audio > [data-testid=status-tracker]:has(.validation-error) {
  position: static !important; height: auto; background: none; order: 2; }
#prompt-audio:has(> [data-testid=status-tracker] .validation-error),
#source-audio:has(> [data-testid=status-tracker] .validation-error) { display: flex; flex-direction: column; }
#prompt-audio:has(> [data-testid=status-tracker] .validation-error) > label[data-testid=block-label],
#source-audio:has(> [data-testid=status-tracker] .validation-error) > label[data-testid=block-label] {
  position: static; order: 1; align-self: flex-start; }
#prompt-audio:has(> [data-testid=status-tracker] .validation-error) > .audio-container,
#source-audio:has(> [data-testid=status-tracker] .validation-error) > .audio-container { order: 3; }
#prompt-audio .validation-error, #source-audio .validation-error { position: static !important; }
#prompt-audio .validation-error button, #source-audio .validation-error button { display: none; }
.ui-error { color: var(--error-text-color); background: var(--error-background-fill);
  border: 1px solid var(--error-border-color); border-radius: var(--radius-md); padding: 8px 12px; }
/* The seed and speed say their problem on their own line (the field's info, below), which
   only their own check changes: Gradio's message at the field is wiped by whichever event
   ends next, and would say it twice meanwhile. API clients still get it in the event's
   error. */
#seed > [data-testid=status-tracker]:has(.validation-error),
#speed > [data-testid=status-tracker]:has(.validation-error) { display: none !important; }
/* ... and the copy Gradio writes under the label of a text or number box: it came with the
   validator, after the error list of the press was scrolled into view, and on a phone it
   pushed that list (under the form) down out of the screen. */
#seed [data-testid=block-info] .validation-error, #speed [data-testid=block-info] .validation-error {
  display: none !important; }
/* A field's own problem line (the seed and speed as they are typed): the error colour. */
.field-error [data-testid=block-info], .field-error .info-text, .field-error span.info {
  color: var(--error-text-color) !important; font-weight: 600; }
/* The reading line under the text box: pinyin over each word; the lexicon's words marked. */
.reading-line { line-height: 2.4; font-size: 1rem; }
.reading-line rt { font-size: 0.7em; color: #334155; }
.reading-line ruby[data-source=lexicon] { background: #dbeafe; border-bottom: 2px solid #1d4ed8; }
.approved-badge { background: #047857; color: #fff; padding: 4px 12px; border-radius: 999px; font-weight: 700; }
.ui-notice { background: #fef3c7; color: #78350f; border-radius: var(--radius-md); padding: 8px 12px; }
/* Keyboard focus on radios and check boxes: Gradio removes their outline (a radio showed
   a faint ring, a check box none); a 3 px ring in the accent blue (6.7:1 on white). */
input[type=radio]:focus-visible, input[type=checkbox]:focus-visible {
  outline: 3px solid var(--color-accent) !important; outline-offset: 2px; }
/* Phrase tables: Gradio breaks words anywhere to fit its columns ("Cou|nt", "Mis|sed" on a
   phone); lines break between words only (the columns are wide enough for the longest
   word of the headers and of a voice name, webui.py). */
#top-requested .wrap, #top-missed .wrap { word-break: normal !important; overflow-wrap: normal !important; }
/* Every other table likewise (the needs-review and batch tables, the lexicon, the usage
   table of the Cache tab's figures, a Markdown table): a word stays whole, and a table
   wider than the screen scrolls sideways instead ("req|uests", "Phr|ase" on a phone). */
[role=grid] span.wrap { word-break: normal !important; overflow-wrap: normal !important; }
.prose table { display: block; max-width: 100%; overflow-x: auto; }
.prose table th, .prose table td { word-break: normal !important; overflow-wrap: normal !important; }
/* Gradio's "错误 Error" pill over a component whose event failed lay over the text of
   the message box it is drawn on (the lexicon's and the takes' last message, the result);
   the failure is said in both languages in the tab's message box (.ui-error) instead. */
[data-testid=status-tracker]:has(> span.error) { display: none !important; }
/* The live result's sentence count is itself a progress: never Gradio's timer over it
   (its tick's "0.0s" showed through once a run). */
#live-count > [data-testid=status-tracker] { display: none !important; }
.live-count { font-size: 0.9em; }
.cache-result { display: flex; gap: 10px; align-items: center; flex-wrap: wrap; }
/* The start-up preload's banner over the tabs: shown while it runs (or after, when phrases
   failed); its block takes no room while it has nothing to say. */
#preload-banner:not(:has(.preload-banner)) { display: none; }
#health-banner:not(:has(.health-banner)) { display: none; }
/* The button the page script presses when /healthz changes (lib/ui/health.py): never seen. */
#health-refresh { display: none !important; }
/* The button the page script presses when it refuses a file that is not audio (webui.py). */
#result-refused { display: none !important; }
.health-banner { background: #fee2e2; color: #7f1d1d; border: 1px solid #b91c1c; border-radius: var(--radius-md);
  padding: 8px 12px; }
.health-banner ul { margin: 4px 0 0 1.2em; }
.health-banner small { color: #7f1d1d; }
.preload-banner { border-radius: var(--radius-md); padding: 8px 12px; font-weight: 600; }
.preload-banner.info { background: #dbeafe; color: #1e3a8a; }
.preload-banner.warn { background: #fef3c7; color: #78350f; }
#generate:disabled, #convert:disabled, #run-preload:disabled { opacity: 1; filter: none; cursor: progress;
  background: var(--neutral-600); border-color: var(--neutral-600); color: white; }
"""

#: Runs once when the page has loaded. Gradio sets ``<html lang>`` from the browser's
#: language (``en`` for most); the page is Chinese first (the served HTML says so too:
#: lib.ui.page). Ctrl+Enter (Cmd+Enter on a Mac) presses Synthesise (Convert in convert
#: mode): Gradio's text boxes submit on Shift+Enter only, and Gradio has no
#: keyboard-shortcut component. A work-around for Gradio 6.31's dropdown: its key
#: handler runs after a tick and reopens the list after the Tab key has moved the focus
#: away, so a list would stay open over the next fields; when the focus lands elsewhere,
#: an open list whose input lost the focus gets the blur it missed. The time from a
#: press to the first sound of its result, as the operator hears it, is written next to
#: the badge (``#first-sound``). And a file that is not audio, chosen or dropped on a
#: recording field, is refused here in both languages (Gradio would answer with an
#: English pop-up listing MIME types): the tab's message box says what to upload, and
#: the last result goes (``#result-refused``). A press of Synthesise, Convert or an
#: example stops the result playing at once. The result's error box is scrolled into
#: view when an error appears in it, and kept there while the page above it settles.
#: One player plays at a time: one that starts stops the others. The audio players'
#: controls are labelled in both languages (Gradio's are English, or the browser's).
JS = f"""
() => {{
  document.documentElement.lang = "{LANG}";
  document.addEventListener("focusin", () => {{
    setTimeout(() => {{
      for (const input of document.querySelectorAll('input[role="combobox"][aria-expanded="true"]')) {{
        if (input !== document.activeElement) input.dispatchEvent(new FocusEvent("blur"));
      }}
    }}, 50);
  }});
  document.addEventListener("keydown", (event) => {{
    if (event.key !== "Enter" || !(event.ctrlKey || event.metaKey)) return;
    const button = [...document.querySelectorAll("#generate, #convert")].find((b) => b.offsetParent !== null);
    if (button && !button.disabled) {{
      event.preventDefault();
      button.click();
    }}
  }});
  // The last result stops at the press itself. The request's first step pauses it too
  // (SHOW_RESULT), but Gradio runs that script after dispatching the event: 0.1-0.5 s
  // later on a busy machine, while the old result played on. A disabled (busy) button
  // fires no click.
  document.addEventListener("click", (event) => {{
    if (!event.target.closest || !event.target.closest("#generate, #convert, #examples button")) return;
    document.querySelectorAll("#result-audio audio, #live-audio audio").forEach((a) => a.pause());
  }}, true);
  // One player at a time: a player that starts (a take compared with another, a voice's
  // sample, an earlier result) stops every other one.
  document.addEventListener("play", (event) => {{
    const started = event.target;
    if (!(started instanceof HTMLMediaElement)) return;
    document.querySelectorAll("audio, video").forEach((m) => {{ if (m !== started && !m.paused) m.pause(); }});
  }}, true);
  document.addEventListener("playing", (event) => {{
    const at = window.ttsPressedAt;
    const player = event.target.closest && event.target.closest("#result-audio, #live-audio");
    if (at == null || !player) return;
    window.ttsPressedAt = null;
    const seconds = ((performance.now() - at) / 1000).toFixed(2);
    const shown = document.querySelector("#first-sound");
    if (shown) shown.textContent = `· 按下后 ${{seconds}} 秒开始播放 heard ${{seconds}} s after the press`;
  }}, true);
  const fields = {{
    "prompt-audio": ["参考音频 Prompt audio", "result-message"],
    "source-audio": ["源录音 Source recording", "result-message"],
    "voice-audio": ["要保存的声音 Voice to save", "voice-message"],
  }};
  const audio = /\\.(wav|wave|mp3|flac|ogg|oga|opus|m4a|aac|webm|amr|aif|aiff|wma|mp4)$/i;
  const notAudio = (file) => !(file.type || "").startsWith("audio/") && !audio.test(file.name);
  const refuse = (event, files) => {{
    const field = event.target.closest && event.target.closest("#prompt-audio, #source-audio, #voice-audio");
    const bad = field && [...(files || [])].find(notAudio);
    if (!bad) return;
    event.stopImmediatePropagation();
    event.preventDefault();
    if (event.target.value) event.target.value = "";
    const [label, box] = fields[field.id];
    const text = `${{label}}：「${{bad.name}}」不是音频文件，请上传 WAV、FLAC、OGG 或 MP3 录音 — ` +
      `${{bad.name}} is not an audio file; upload a WAV, FLAC, OGG or MP3 recording`;
    const target = document.querySelector(`#${{box}} .prose`) || document.querySelector(`#${{box}}`);
    if (target) {{
      const div = document.createElement("div");
      div.className = "ui-error";
      div.setAttribute("role", "alert");
      div.textContent = "✖ " + text;
      target.replaceChildren(div);
    }}
    // The last result goes (it is not left beside the error): webui's hidden button.
    if (box === "result-message") document.querySelector("#result-refused")?.click();
  }};
  document.addEventListener("change", (event) => refuse(event, event.target.files), true);
  document.addEventListener("drop", (event) => refuse(event, event.dataTransfer && event.dataTransfer.files), true);
  // The audio players' controls in both languages: Gradio labels its waveform player's
  // buttons in English ("Skip backwards by 0.24322900000000003 seconds"), play, pause and
  // download in the browser's language only. Labels are rewritten as they appear or change.
  const seconds = (s) => String(Math.round(parseFloat(s) * 100) / 100);
  const labels = [
    [/^(?:Adjust volume)$/, () => "音量 Volume"],
    [/^Adjust playback speed to ([\\d.]+)x$/, (m) => `播放速度 ${{m[1]}}x Playback speed ${{m[1]}}x`],
    [/^Skip backwards by ([\\d.]+) seconds$/, (m) => `后退 ${{seconds(m[1])}} 秒 Back ${{seconds(m[1])}} s`],
    [/^Skip forward by ([\\d.]+) seconds$/, (m) => `前进 ${{seconds(m[1])}} 秒 Forward ${{seconds(m[1])}} s`],
    [/^(?:Play|播放)$/, () => "播放 Play"],
    [/^(?:Pause|暂停)$/, () => "暂停 Pause"],
    [/^(?:Download|下载)$/, () => "下载 Download"],
    [/^(?:Reset audio)$/, () => "复原 Reset"],
    [/^(?:Trim audio to selection)$/, () => "裁剪到所选 Trim to selection"],
    [/^(?:High volume)$/, () => "高音量 High volume"],
    [/^(?:Low volume)$/, () => "低音量 Low volume"],
    [/^(?:Muted volume)$/, () => "静音 Muted"],
  ];
  const bilingual = (text) => {{
    for (const [pattern, make] of labels) {{
      const m = pattern.exec(text);
      if (m) return make(m);
    }}
    return null;
  }};
  const relabel = (el) => {{
    for (const name of ["aria-label", "title"]) {{
      const text = el.getAttribute(name);
      const both = text && bilingual(text);
      if (both && both !== text) el.setAttribute(name, both);
    }}
    if (el.tagName === "title") {{  // an icon's tooltip (the volume)
      const both = bilingual(el.textContent || "");
      if (both && both !== el.textContent) el.textContent = both;
    }}
  }};
  const relabelAll = (root) => {{
    if (!(root instanceof Element)) return;
    if (root.matches("[aria-label], [title], title")) relabel(root);
    root.querySelectorAll("[aria-label], [title], title").forEach(relabel);
  }};
  relabelAll(document.body);
  new MutationObserver((records) => {{
    for (const r of records) {{
      if (r.type === "attributes") relabel(r.target);
      else r.addedNodes.forEach(relabelAll);
    }}
  }}).observe(document.body, {{
    childList: true, subtree: true, attributes: true, attributeFilter: ["aria-label", "title"],
  }});
  // A refused press's errors come into view when they appear, wherever the page was: the
  // press scrolled the result panel up before the last result cleared, and the page
  // below it moved again meanwhile (on a phone the errors were left under the fold).
  // The page may still change above them after that (a field's own problem line comes
  // when its check answers, later on a busy machine): until the operator scrolls, types
  // or clicks, they are brought back into view whenever the page's height changes.
  const messages = document.querySelector("#result-message");
  if (messages) {{
    let kept = null;
    const inView = (e) => {{
      const box = e.getBoundingClientRect();
      return box.top >= 0 && box.bottom <= window.innerHeight;
    }};
    for (const kind of ["wheel", "touchmove", "keydown", "mousedown"]) {{
      addEventListener(kind, () => {{ kept = null; }}, {{ capture: true, passive: true }});
    }}
    new MutationObserver(() => {{
      const error = messages.querySelector(".ui-error");
      if (!error || error.dataset.shown) return;
      error.dataset.shown = "1";
      kept = error;
      requestAnimationFrame(() => error.scrollIntoView({{ block: "nearest" }}));
    }}).observe(messages, {{ childList: true, subtree: true }});
    new ResizeObserver(() => {{
      if (kept && !kept.isConnected) kept = null;
      if (kept && !inView(kept)) kept.scrollIntoView({{ block: "nearest" }});
    }}).observe(document.body);
  }}
}}
"""

#: Runs in the browser as a request starts (the ``js`` of its first step), with the
#: form's values, which it hands on unchanged. It numbers the press (a result plays only
#: for the press that asked for it) and notes its time (for ``#first-sound``). When the
#: result panel is out of view (a phone, where it sits under the form), it is scrolled
#: to the top of the screen, so the button, the progress and the badge are in view.
#: Gradio's own ``scroll_to_output`` does nothing in 6.31 (its front end never passes
#: the flag to the status tracker).
SHOW_RESULT = """
(...values) => {
  window.ttsPress = (window.ttsPress || 0) + 1;
  window.ttsPressedAt = performance.now();
  // The last result stops at the press, not when the server's clearing arrives (on a
  // busy machine that came 0.2-0.5 s later, and the old result played on meanwhile).
  document.querySelectorAll("#result-audio audio, #live-audio audio").forEach((a) => a.pause());
  const panel = document.querySelector("#result-panel");
  if (panel) {
    const top = panel.getBoundingClientRect().top;
    if (top < 0 || top > window.innerHeight * 0.6) panel.scrollIntoView({ block: "start" });
  }
  return values;
}
"""

#: Runs in the browser after a request's result is shown: plays the result file once,
#: from its start, unless it was heard live already (the badge's ``data-live``) or a
#: newer press came meanwhile. The element is the browser's own ``<audio>`` of
#: ``#result-audio``; its source was removed when the request began, so the first
#: source seen is this result's.
PLAY_RESULT = """
() => {
  const press = window.ttsPress || 0;
  const badge = document.querySelector("#cache-badge-value");
  if (!badge || badge.dataset.live === "1") return;
  const until = performance.now() + 15000;
  const play = () => {
    if ((window.ttsPress || 0) !== press) return;
    const audio = document.querySelector("#result-audio audio");
    if (audio && audio.getAttribute("src")) {
      audio.currentTime = 0;
      audio.play().catch(() => {});
      return;
    }
    if (performance.now() < until) setTimeout(play, 50);
  };
  play();
}
"""

#: Runs in the browser when the operator switches mode: the last press no longer has a
#: result to play (a result still on its way is discarded).
FORGET_PRESS = """
(...values) => {
  window.ttsPress = (window.ttsPress || 0) + 1;
  window.ttsPressedAt = null;
  document.querySelectorAll("#result-audio audio, #live-audio audio").forEach((a) => a.pause());
  return values;
}
"""

#: Runs in the browser after Delete… is pressed in the Voices tab: the confirmation (or
#: the refusal) is brought into view; it appears under the list of voices, often below
#: the fold.
SHOW_CONFIRM = """
() => {
  setTimeout(() => {
    const shown = [...document.querySelectorAll("#delete-confirm, #voice-message .ui-error")]
      .find((e) => e.offsetParent !== null);
    if (shown) shown.scrollIntoView({ block: "nearest" });
  }, 50);
}
"""
