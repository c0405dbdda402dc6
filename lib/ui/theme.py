"""The UI's look: a Gradio theme whose text and buttons reach WCAG AA contrast (4.5:1),
the little CSS no theme setting covers, and the page script Gradio has no component for.

Gradio's default theme puts white text on orange (2.8:1) and grey labels on white
(about 2.5:1); here every colour that carries text is set through the theme's own
variables, and the browser test measures the computed contrast.
"""

from __future__ import annotations

import gradio as gr

__all__ = ["CSS", "JS", "LANG", "PLAY_RESULT", "SHOW_RESULT", "theme"]

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
@media (min-width: 1000px) {
  #result-panel { position: sticky; top: 8px; align-self: flex-start; }
}
#result-message:has(.prose:empty) { display: none; }
.ui-error { color: var(--error-text-color); background: var(--error-background-fill);
  border: 1px solid var(--error-border-color); border-radius: var(--radius-md); padding: 8px 12px; }
.ui-notice { background: #fef3c7; color: #78350f; border-radius: var(--radius-md); padding: 8px 12px; }
.cache-result { display: flex; gap: 10px; align-items: center; flex-wrap: wrap; }
#generate:disabled, #convert:disabled { opacity: 1; filter: none; cursor: progress;
  background: var(--neutral-600); border-color: var(--neutral-600); color: white; }
"""

#: Runs once when the page has loaded. Gradio sets ``<html lang>`` from the browser's
#: language (``en`` for most); the page is Chinese first (the served HTML says so too:
#: lib.ui.page). Ctrl+Enter (Cmd+Enter on a Mac) presses Synthesise (Convert in convert
#: mode): Gradio's text boxes submit on Shift+Enter only, and Gradio has no
#: keyboard-shortcut component. A work-around for Gradio 6.31's dropdown: its key
#: handler runs after a tick and reopens the list after the Tab key has moved the focus
#: away, so a list would stay open over the next fields; when the focus lands elsewhere,
#: an open list whose input lost the focus gets the blur it missed. And the time from a
#: press to the first sound of its result, as the operator hears it, is written next to
#: the badge (``#first-sound``).
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
  document.addEventListener("playing", (event) => {{
    const at = window.ttsPressedAt;
    const player = event.target.closest && event.target.closest("#result-audio, #live-audio");
    if (at == null || !player) return;
    window.ttsPressedAt = null;
    const seconds = ((performance.now() - at) / 1000).toFixed(2);
    const shown = document.querySelector("#first-sound");
    if (shown) shown.textContent = `· 按下后 ${{seconds}} 秒开始播放 heard ${{seconds}} s after the press`;
  }}, true);
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
