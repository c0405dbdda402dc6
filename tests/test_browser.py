"""The operator's path in a real browser: Playwright driving Debian's Chromium against the
real app (builtin engine, cache under a temporary directory), every test at a laptop's
1366x768 and at a phone's 390x844. Assertions are on what is on screen: bounding boxes
inside the viewport, computed colours and their contrast, attributes, visible text.

``TTS_UPDATE_SCREENSHOT=1`` refreshes the README's screenshots (docs/screenshot.png and
docs/screenshot-phone.png); otherwise they are written under the test's temporary
directory, so a test run leaves the work tree clean."""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from conftest import REPO, serving

import webui
from lib.config import load_config
from lib.engines.tone import ToneEngine
from lib.errors import EngineError
from lib.request import TTSRequest
from lib.service import TTSService

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Locator, Page

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync",
]  # fmt: skip
VIEWPORTS = {"desktop": {"width": 1366, "height": 768}, "phone": {"width": 390, "height": 844}}

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# Contrast ratio (WCAG 2) of an element's text over the colour actually behind it: its
# own background, or the first ancestor's that is not transparent (over white).
_CONTRAST_JS = """
(el) => {
  const ctx = document.createElement("canvas").getContext("2d", { willReadFrequently: true });
  const parse = (c) => {  // any CSS colour (rgb, oklch, color(...)) as 0-255 RGB and alpha 0-1
    ctx.clearRect(0, 0, 1, 1);
    ctx.fillStyle = "rgba(0, 0, 0, 0)";
    ctx.fillStyle = c;
    ctx.fillRect(0, 0, 1, 1);
    const [r, g, b, a] = ctx.getImageData(0, 0, 1, 1).data;
    return { r, g, b, a: a / 255 };
  };
  const layers = [];
  for (let e = el; e; e = e.parentElement) {
    const c = parse(getComputedStyle(e).backgroundColor);
    if (c.a > 0) { layers.push(c); if (c.a >= 1) break; }
  }
  let bg = { r: 255, g: 255, b: 255 };
  for (const l of layers.reverse()) {
    bg = { r: l.r * l.a + bg.r * (1 - l.a), g: l.g * l.a + bg.g * (1 - l.a), b: l.b * l.a + bg.b * (1 - l.a) };
  }
  const f = parse(getComputedStyle(el).color);
  const fg = { r: f.r * f.a + bg.r * (1 - f.a), g: f.g * f.a + bg.g * (1 - f.a), b: f.b * f.a + bg.b * (1 - f.a) };
  const lum = (c) => {
    const ch = [c.r, c.g, c.b].map((v) => (v /= 255) <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4);
    return 0.2126 * ch[0] + 0.7152 * ch[1] + 0.0722 * ch[2];
  };
  const [hi, lo] = [lum(fg), lum(bg)].sort((a, b) => b - a);
  return (hi + 0.05) / (lo + 0.05);
}
"""


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def chromium() -> Path:
    if not CHROMIUM.is_file():
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is missing; .ci/run installs it with apt-get install chromium")
        pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium); CI runs this test")
    return CHROMIUM


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, TTSService]]:
    """The real app on the builtin engine (shared by the tests of this module)."""
    cache = tmp_path_factory.mktemp("cache")
    service = TTSService(load_config(env={}, overrides={"cache.dir": str(cache), "engine": "builtin",
                                                        "builtin.base": "espeak"}))  # fmt: skip
    try:
        with serving(webui.create_app(service), _port()) as url:
            yield url, service
    finally:
        service.close()


@pytest.fixture(scope="module")
def slow_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ToneEngine]]:
    """An engine that takes 2 s, to see the progress while it runs (and made to fail)."""
    config = load_config(env={}, overrides={"cache.dir": str(tmp_path_factory.mktemp("slow")), "engine": "tone"})
    engine = ToneEngine(delay=2.0)
    service = TTSService(config, engine=engine)
    try:
        with serving(webui.create_app(service), _port()) as url:
            yield url, engine
    finally:
        service.close()


@pytest.fixture
def slow_url(slow_app: tuple[str, ToneEngine]) -> str:
    return slow_app[0]


@pytest.fixture(scope="module")
def browser(chromium: Path) -> Iterator[Browser]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(chromium), args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(params=list(VIEWPORTS))
def viewport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def open_page(browser: Browser, viewport: str) -> Iterator[Callable[[str], Page]]:
    """Opens the app at ``url`` in a fresh browser context of the test's viewport."""
    contexts = []

    def open_(url: str) -> Page:
        context = browser.new_context(viewport=VIEWPORTS[viewport], locale="en-US")  # lang must not follow it
        contexts.append(context)
        page = context.new_page()
        page.goto(url)
        page.locator("#generate").wait_for(timeout=60_000)
        # The app's load script has run (no "networkidle": a session heartbeat stays open).
        page.wait_for_function("document.documentElement.lang === 'zh-CN'", timeout=30_000)
        page.wait_for_timeout(500)
        return page

    yield open_
    for context in contexts:
        context.close()


@pytest.fixture
def page(open_page: Callable[[str], Page], app: tuple[str, TTSService]) -> Page:
    return open_page(app[0])


# -- helpers --------------------------------------------------------------------------------


def in_view(page: Page, locator: Locator) -> bool:
    box = locator.bounding_box()
    size = page.viewport_size
    assert box is not None and size is not None
    return box["y"] >= 0 and box["y"] + box["height"] <= size["height"] and 0 <= box["x"] <= size["width"]


def contrast(locator: Locator) -> float:
    ratio: float = locator.evaluate(_CONTRAST_JS, timeout=10_000)
    return ratio


def open_tab(page: Page, name: str) -> None:
    """Click a tab; on a phone the last tabs are in Gradio's "More tabs" menu."""
    tab = page.get_by_role("tab", name=name)
    if tab.count() and tab.is_visible():
        tab.click()
    else:
        page.get_by_label("More tabs").click()
        page.locator(".overflow-dropdown button", has_text=name).click()


def badge(page: Page) -> Locator:
    return page.locator("#cache-badge-value")


def synthesise(page: Page) -> str:
    """Click Synthesise and wait for this request's badge; its HIT/MISS/BYPASS/COMPOSED."""
    from playwright.sync_api import expect

    # The last badge goes first, so that the wait below cannot see it (the request clears
    # it and draws its own).
    page.evaluate("document.querySelector('#cache-badge-value')?.remove()")
    page.locator("#generate").click()
    expect(badge(page)).to_have_attribute("data-cache", re.compile("HIT|MISS|BYPASS"), timeout=60_000)
    # Played live, the badge comes with the first sentence; the request ends with the
    # details of the whole (its last update), which a next step must not race.
    expect(page.locator("#result-details")).not_to_contain_text("生成中", timeout=60_000)
    return str(badge(page).get_attribute("data-cache"))


def scroll_button_to_bottom(page: Page) -> None:
    """Scroll as an operator who filled the form top to bottom: the Synthesise button at
    the bottom edge of the screen (on a phone, where it sits under the form)."""
    box = page.locator("#generate").bounding_box()
    size = page.viewport_size
    assert box is not None and size is not None
    page.mouse.wheel(0, box["y"] + box["height"] - size["height"] + 2)
    page.wait_for_timeout(300)


def no_toasts(page: Page) -> bool:
    return page.locator(".toast-body").count() == 0


# -- 1, 2: the result in view; fields per mode, sample text, steps, examples -----------------


def test_first_visit_hears_a_voice_with_result_and_badge_in_view(page: Page, viewport: str) -> None:
    from playwright.sync_api import expect

    assert page.locator("#mode input[value=preset]").is_checked()
    assert page.locator("#tts-text textarea").input_value().startswith("请A023号顾客")  # a sample to try
    expect(page.locator("#mode-steps")).to_contain_text("操作步骤 Steps")
    scroll_button_to_bottom(page)
    assert synthesise(page) in ("MISS", "HIT")
    expect(page.locator("#result-audio audio").first).to_be_attached()
    assert in_view(page, badge(page)), f"badge out of view at {viewport}"
    assert in_view(page, page.locator("#generate")), f"button out of view at {viewport}"
    assert in_view(page, page.locator("#result-audio")), f"result out of view at {viewport}"


def test_progress_is_in_view_while_it_runs(open_page: Callable[[str], Page], slow_url: str, viewport: str) -> None:
    from playwright.sync_api import expect

    page = open_page(slow_url)
    page.locator("#tts-text textarea").fill(f"进度条 {viewport}")
    scroll_button_to_bottom(page)
    page.locator("#generate").click()
    progress = page.locator("#result-audio [data-testid=status-tracker]")
    expect(progress).to_contain_text("合成中 Synthesising", timeout=10_000)
    assert in_view(page, progress), f"progress out of view at {viewport}"
    expect(badge(page)).to_have_attribute("data-cache", "MISS", timeout=30_000)
    assert in_view(page, badge(page))



def test_the_button_is_busy_while_a_request_runs_and_ready_after_any_end(
    open_page: Callable[[str], Page], slow_app: tuple[str, ToneEngine], viewport: str
) -> None:
    """A second click while a request runs used to be dropped without a sign (Gradio runs
    one event of a button at a time): the button now says it is busy, and is ready again
    after a result, a form error or an engine failure."""
    from playwright.sync_api import expect

    url, engine = slow_app
    page = open_page(url)
    button = page.locator("#generate")
    calls = engine.calls
    page.locator("#tts-text textarea").fill(f"忙碌 {viewport}")
    button.click()
    expect(button).to_be_disabled(timeout=5_000)
    expect(button).to_have_text("合成中… Synthesising…")
    page.wait_for_timeout(500)  # past Gradio's fade-out transition of disabled buttons (the engine takes 2 s)
    assert button.is_disabled()
    faded = button.evaluate("e => [getComputedStyle(e).opacity, getComputedStyle(e).filter]")
    assert faded == ["1", "none"], f"the busy button is faded: {faded}"  # readable while busy
    assert button.evaluate(_CONTRAST_JS) >= 4.5
    expect(badge(page)).to_have_attribute("data-cache", "MISS", timeout=30_000)
    expect(button).to_be_enabled(timeout=10_000)
    expect(button).to_have_text("合成 Synthesise")
    assert engine.calls == calls + 1
    page.locator("#seed input").fill("1.5")  # refused by the form: never busy
    button.click()
    expect(page.locator("#result-message .ui-error")).to_contain_text("随机种子 Seed")
    expect(button).to_be_enabled()
    page.locator("#seed input").fill("0")
    engine.fail = EngineError("the engine broke down")
    try:
        page.locator("#tts-text textarea").fill(f"失败 {viewport}")
        button.click()
        expect(button).to_be_disabled(timeout=5_000)
        expect(page.locator("#result-message .ui-error")).to_contain_text("the engine broke down", timeout=30_000)
        expect(button).to_be_enabled(timeout=10_000)
        expect(button).to_have_text("合成 Synthesise")
    finally:
        engine.fail = None


def test_a_new_request_clears_the_result_and_errors_show_in_place(page: Page, viewport: str) -> None:
    from playwright.sync_api import expect

    synthesise(page)
    page.locator("#seed input").fill("1.5")  # shown as typed: must not be used as 2
    page.locator("#speed input").fill("5")  # the API refuses 5: so does the form
    page.locator("#generate").click()
    message = page.locator("#result-message .ui-error")
    expect(message).to_contain_text("随机种子 Seed：须为 0 到 4294967295 的整数")
    expect(message).to_contain_text("语速 Speed：5 超出范围，请填 0.25 到 4.0")
    expect(badge(page)).to_have_count(0)  # the last result is gone, not left under the error
    expect(page.locator("#result-audio audio")).to_have_count(0)
    expect(page.locator("#seed")).to_contain_text("must be a whole number from 0 to 4294967295, got 1.5")
    expect(page.locator("#speed")).to_contain_text("5 is out of range; use 0.25 to 4.0")
    assert in_view(page, message), f"error out of view at {viewport}"
    assert no_toasts(page)
    assert page.locator("#seed input").input_value() == "1.5"
    page.locator("#seed input").fill("2")
    page.locator("#speed input").fill("1.25")
    synthesise(page)
    expect(message).to_have_count(0)


def test_fields_follow_the_mode_with_steps_and_notes(page: Page) -> None:
    from playwright.sync_api import expect

    audio, transcript, voice = page.locator("#prompt-audio"), page.locator("#prompt-text"), page.locator("#voice")
    expect(audio).to_be_hidden()
    expect(transcript).to_be_hidden()
    expect(voice.locator("input")).to_have_value("zh-female（预置 preset）")
    page.locator("#mode input[value=zero_shot]").check()
    expect(audio).to_be_visible()
    expect(transcript).to_be_visible()
    expect(voice.locator("input")).to_have_value("")  # a preset cannot be cloned: not kept
    expect(page.locator("#mode-steps")).to_contain_text("逐字填写参考音频文本")
    transcript.locator("textarea").fill("一段文本")
    page.locator("#mode input[value=cross_lingual]").check()
    expect(transcript).to_be_hidden()
    expect(page.locator("#mode-steps")).to_contain_text("参考音频文本在此模式下不使用 The prompt transcript")
    page.locator("#mode input[value=instruct]").check()
    expect(page.locator("#style")).to_contain_text("必填 required")
    page.locator("#mode input[value=preset]").check()
    expect(audio).to_be_hidden()
    expect(voice.locator("input")).to_have_value("zh-female（预置 preset）")


def test_an_example_plays_in_one_click(page: Page, viewport: str) -> None:
    from playwright.sync_api import expect

    example = page.locator("#examples button").nth(2)
    assert "en-female" in example.inner_text()
    example.click()
    expect(badge(page)).to_have_attribute("data-cache", re.compile("HIT|MISS"), timeout=60_000)
    expect(page.locator("#tts-text textarea")).to_have_value(re.compile("^The train is now arriving"))
    expect(page.locator("#voice input")).to_have_value("en-female（预置 preset）")
    assert in_view(page, badge(page)), f"badge out of view at {viewport}"


# -- 3: checked where typed ----------------------------------------------------------------


def test_seed_and_speed_are_checked_where_typed(page: Page) -> None:
    from playwright.sync_api import expect

    seed, speed = page.locator("#seed"), page.locator("#speed")
    seed.locator("input").fill("1.5")
    expect(seed).to_contain_text("随机种子 Seed：须为 0 到 4294967295 的整数")  # before any click
    speed.locator("input").fill("5")
    expect(speed).to_contain_text("语速 Speed：5 超出范围")
    seed.locator("input").fill("2")
    expect(seed).not_to_contain_text("须为")
    expect(speed).to_contain_text("语速 Speed：5 超出范围")
    assert no_toasts(page)


# -- 4: admin ------------------------------------------------------------------------------


def test_admin_form_is_never_covered_and_evict_lists_versions_present(
    page: Page, app: tuple[str, TTSService]
) -> None:
    from playwright.sync_api import expect

    service = app[1]
    synthesise(page)
    service.cache.flush()
    open_tab(page, "缓存 Cache")
    page.locator("#admin").get_by_text("管理 Admin").click()
    page.locator("#admin-clear").click()
    result = page.locator("#admin-result")
    expect(result).to_contain_text("请先勾选「我已确认」")
    assert no_toasts(page)
    confirm = page.locator("#admin-confirm input")
    confirm.scroll_into_view_if_needed()
    box = confirm.bounding_box()
    assert box is not None
    on_top = page.evaluate(
        "([x, y]) => { const e = document.elementFromPoint(x, y);"
        " return e.closest('#admin-confirm') !== null && e.closest('[data-testid=status-tracker]') === null; }",
        [box["x"] + box["width"] / 2, box["y"] + box["height"] / 2],
    )
    assert on_top, "the confirmation box is covered"
    tag = page.locator("#evict-tag input")
    expect(tag).to_have_value("")  # never pre-filled
    tag.click()
    options = page.get_by_role("option")
    expect(options.first).to_contain_text(f"{service.tag} — ")
    expect(options.first).to_contain_text("条 entries（当前 current model）")
    tag.press("ArrowDown")
    tag.press("Enter")
    confirm.check()
    page.locator("#admin-evict").click()
    expect(result).to_contain_text(re.compile(rf"Removed \d+ entr(y|ies) of model version `{re.escape(service.tag)}`"))
    expect(confirm).not_to_be_checked()
    assert "{" not in result.inner_text()


# -- 5: voices -----------------------------------------------------------------------------


def test_voices_tab_saves_plays_and_deletes_with_confirmation(page: Page, viewport: str, testdata_dir: Path) -> None:
    from playwright.sync_api import expect

    name = f"desk-{viewport}"
    page.locator("#voice input").fill("zh-male")
    page.locator("#voice input").press("Enter")
    open_tab(page, "音色 Voices")
    page.locator("#voice-audio input[type=file]").set_input_files(str(testdata_dir / "male_prompt.wav"))
    page.locator("#voice-name textarea").fill(name)
    message = page.locator("#voice-message")
    page.locator("#save-voice").click()
    expect(message).to_contain_text(f"已保存音色「{name}」")
    page.locator("#save-voice").click()
    expect(message).to_contain_text(f"「{name}」已被使用")  # refused, not overwritten
    row = page.locator(".voice-row", has_text=name)
    expect(row).to_have_count(1)
    row.get_by_role("button", name="▶ 试听 Play").click()
    expect(page.locator("#voice-sample audio").first).to_be_attached(timeout=30_000)
    expect(page.locator(".voice-row").first.get_by_role("button", name="▶ 试听 Play")).to_be_visible()
    pick = page.locator("#delete-pick input")
    pick.click()
    expect(page.get_by_role("option").first).to_be_visible()
    expect(page.get_by_role("option", name="zh-female")).to_have_count(0)  # presets cannot be deleted
    pick.fill(name)
    pick.press("Enter")
    page.locator("#delete-voice").click()
    expect(page.locator("#delete-question")).to_contain_text(f"确定删除音色「{name}」？")
    expect(row).to_have_count(1)  # nothing deleted before the confirmation
    page.locator("#confirm-delete").click()
    expect(message).to_contain_text(f"已删除音色「{name}」")
    expect(row).to_have_count(0)
    open_tab(page, "合成 Synthesise")
    expect(page.locator("#voice input")).to_have_value("zh-male（预置 preset）")  # another voice's delete keeps it


# -- 6: style words ------------------------------------------------------------------------


def test_unknown_style_words_are_a_notice_next_to_the_result(page: Page, viewport: str) -> None:
    from playwright.sync_api import expect

    page.locator("#mode input[value=instruct]").check()
    page.locator("#style textarea").fill(f"slow, grumpy {viewport}")
    synthesise(page)
    notice = page.locator("#style-notice")
    expect(notice).to_contain_text("未识别的风格词已忽略 Unknown style words ignored")
    expect(notice).to_contain_text("「grumpy」")
    assert in_view(page, notice), f"notice out of view at {viewport}: {notice.bounding_box()}"
    page.locator("#style textarea").fill("slow")
    synthesise(page)
    expect(notice).to_be_hidden()


# -- 8: dashboard --------------------------------------------------------------------------


def test_dashboard_shows_preload_apart_grouped_phrases_and_a_window(page: Page, app: tuple[str, TTSService]) -> None:
    from playwright.sync_api import expect

    service = app[1]
    for seed in (0, 1, 0, 1, 0, 1):  # one phrase, two settings: one row in the table
        service.synthesise(TTSRequest(text="下一站，人民广场。", voice="zh-female", seed=seed))
    service.synthesise(TTSRequest(text="欢迎光临！", voice="zh-male", origin="preload"))
    open_tab(page, "缓存 Cache")
    stats = page.locator("#cache-stats")
    expect(stats).to_contain_text(re.compile(r"预加载 Preload \(counted apart 单独统计\): [1-9]\d* 生成 generated"))
    expect(stats).to_contain_text("节省引擎时间 Engine time saved by hits")
    expect(stats).to_contain_text("命中率 Hit rate, 最近 15 分钟 Last 15 min")
    rows = page.locator("#top-requested [role=row]", has_text="下一站，人民广场。")
    expect(rows).to_have_count(1)
    expect(rows.first.locator("[role=gridcell]").first).to_have_text(re.compile(r"^\s*([6-9]|\d\d+)\s*$"))
    expect(page.locator("#top-requested [role=row]", has_text="欢迎光临！")).to_have_count(0)  # preload is not traffic
    for plot in ("#latency-plot", "#hit-rate-plot"):  # drawn at the width of its column (re-drawn every 10 s)
        drawn = "(sel) => { const b = document.querySelector(sel + ' canvas')?.getBoundingClientRect();"
        page.wait_for_function(drawn + " return !!b && b.width > 200 && b.height > 150; }", arg=plot, timeout=15_000)
    window = page.locator("#window input")
    window.click()
    page.get_by_role("option", name="全部 All kept samples").click()
    expect(stats).to_contain_text("命中率 Hit rate, 全部 All kept samples")


# -- 9: contrast, language, keyboard -----------------------------------------------------------


def test_contrast_language_and_keyboard(page: Page, viewport: str) -> None:
    from playwright.sync_api import expect

    assert page.evaluate("document.documentElement.lang") == "zh-CN"
    synthesise(page)
    synth_tab = {
        "Synthesise button": "#generate",
        "selected tab": "button[role=tab][aria-selected=true]",
        "other tab": "button[role=tab][aria-selected=false]",
        "field label": "#seed [data-testid=block-info]",
        "field info": "#tts-text .info-text",
        "radio label": "#mode label span",
        "checkbox label": "#use-cache .label-text",
        "secondary button": "#dice",
        "example": "#examples button",
        "steps": "#mode-steps p",
        "HIT/MISS badge": "#cache-badge-value",
        "badge words": "#cache-badge .cache-result > span:last-child",
        "result details": "#result-details p",
        "audio label": "#result-audio [data-testid=block-label]",
    }
    ratios = {name: contrast(page.locator(sel).first) for name, sel in synth_tab.items()}
    open_tab(page, "音色 Voices")
    voices_tab = {"stop button": "#delete-voice", "primary button": "#save-voice", "voice row": ".voice-row p"}
    ratios |= {name: contrast(page.locator(sel).first) for name, sel in voices_tab.items()}
    open_tab(page, "缓存 Cache")
    expect(page.locator("#cache-stats")).to_contain_text("条目 Entries")
    expect(page.locator("#top-requested [role=gridcell]").first).to_be_visible()
    page.wait_for_timeout(1000)  # the refresh's fade is over
    cache_tab = {
        "figures": "#cache-stats p", "table cell": "#top-requested [role=gridcell]", "plot label": "#latency-plot label"
    }  # fmt: skip
    ratios |= {name: contrast(page.locator(sel).first) for name, sel in cache_tab.items()}
    low = {name: round(r, 2) for name, r in ratios.items() if r < 4.5}
    assert not low, f"below 4.5:1 at {viewport}: {low}"
    assert len(ratios) == len(synth_tab) + len(voices_tab) + len(cache_tab)
    open_tab(page, "合成 Synthesise")
    # Keyboard: a dropdown opened by the Tab key closes when the Tab key leaves it, and
    # one chosen with the arrow keys and Enter takes the choice and closes.
    voice = page.locator("#voice input")
    voice.focus()
    expect(voice).to_have_attribute("aria-expanded", "true")
    page.keyboard.press("Tab")
    expect(voice).to_have_attribute("aria-expanded", "false")
    expect(page.get_by_role("listbox")).to_have_count(0)
    page.keyboard.press("Shift+Tab")
    expect(voice).to_be_focused()
    page.keyboard.press("ArrowDown")
    page.keyboard.press("Enter")
    expect(voice).not_to_have_value("zh-female（预置 preset）")
    page.keyboard.press("Tab")
    page.wait_for_timeout(300)
    expect(voice).to_have_attribute("aria-expanded", "false")
    expect(page.get_by_role("listbox")).to_have_count(0)
    # Ctrl+Enter synthesises from the text box.
    text = page.locator("#tts-text textarea")
    text.fill(f"快捷键 {viewport}")
    text.press("Control+Enter")
    expect(page.locator("#result-details")).to_contain_text(f"快捷键_{viewport}")


# -- 10: download names, history -------------------------------------------------------------


def test_download_names_and_the_session_history(page: Page, viewport: str) -> None:
    from playwright.sync_api import expect

    page.locator("#tts-text textarea").fill(f"请到3号窗口 {viewport}")
    for seed in (3, 4):
        page.locator("#seed input").fill(str(seed))
        synthesise(page)
        link = page.locator("#result-audio a[download]")
        name = re.compile(rf"^zh-female_请到3号窗口_{viewport}_seed{seed}_[0-9a-f]{{6}}\.wav$")
        expect(link).to_have_attribute("download", name)
    expect(page.locator("#history-0")).to_contain_text(f"zh-female · seed 4 · 请到3号窗口 {viewport}")
    expect(page.locator("#history-1")).to_contain_text("seed 3")
    expect(page.locator("#history-1 [aria-label*=Play], #history-1 button").first).to_be_visible()
    assert page.locator("[id^=history-] audio").count() >= 2


# -- 11: convert mode (issue 12) ------------------------------------------------------------


def test_convert_mode_takes_a_source_recording_and_plays_the_result(
    page: Page, viewport: str, testdata_dir: Path
) -> None:
    """变声 Convert: the source recording replaces the text (and the Convert button the
    Synthesise one); the target is the preset kept in the list; the result plays with its
    badge, and Ctrl+Enter converts again (a hit). Back in preset mode all is as before."""
    from playwright.sync_api import expect

    source, text = page.locator("#source-audio"), page.locator("#tts-text")
    expect(source).to_be_hidden()
    expect(page.locator("#convert")).to_be_hidden()
    page.locator("#mode input[value=convert]").check()
    expect(source).to_be_visible()
    expect(text).to_be_hidden()
    for hidden in ("#prompt-text", "#style", "#generate", "#live-audio"):  # a conversion is not played live
        expect(page.locator(hidden)).to_be_hidden()
    expect(page.locator("#prompt-audio")).to_contain_text("目标音色录音 Target voice recording")
    expect(page.locator("#voice input")).to_have_value("zh-female（预置 preset）")  # a preset is a target
    expect(page.locator("#mode-steps")).to_contain_text("上传或录制要变声的源录音")
    page.locator("#seed input").fill(str(len(viewport)))  # a key of this viewport's own
    page.locator("#source-audio input[type=file]").set_input_files(str(testdata_dir / "zh_female_prompt.wav"))
    expect(source.locator("audio, canvas, [data-testid=waveform-controls]").first).to_be_attached(timeout=30_000)
    page.evaluate("document.querySelector('#cache-badge-value')?.remove()")
    page.locator("#convert").click()
    expect(badge(page)).to_have_attribute("data-cache", "MISS", timeout=60_000)
    expect(page.locator("#result-audio audio").first).to_be_attached()
    expect(page.locator("#result-details")).to_contain_text("键 Key")
    expect(page.locator("#convert")).to_be_enabled()
    expect(page.locator("#convert")).to_have_text("变声 Convert")  # ready again after its run
    assert in_view(page, badge(page)), f"badge out of view at {viewport}"
    assert no_toasts(page)
    page.evaluate("document.querySelector('#cache-badge-value')?.remove()")
    page.locator("#speed input").press("Control+Enter")
    expect(badge(page)).to_have_attribute("data-cache", "HIT", timeout=60_000)
    expect(page.locator("#history-0")).to_contain_text("HIT · zh-female · seed")
    page.locator("#mode input[value=preset]").check()
    expect(source).to_be_hidden()
    expect(text).to_be_visible()
    expect(page.locator("#generate")).to_be_visible()
    expect(page.locator("#live-audio")).to_be_visible()
    expect(page.locator("#convert")).to_be_hidden()


def test_convert_without_a_source_says_so_in_place(page: Page) -> None:
    from playwright.sync_api import expect

    page.locator("#mode input[value=convert]").check()
    page.locator("#convert").click()
    message = page.locator("#result-message .ui-error")
    expect(message).to_contain_text("源录音 Source recording：请上传或录制要变声的源录音")
    expect(page.locator("#source-audio")).to_contain_text("upload or record the recording to convert")
    expect(badge(page)).to_have_count(0)
    assert no_toasts(page)


# -- the README's screenshots ----------------------------------------------------------------


def test_screenshot_after_a_hit(page: Page, viewport: str, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    synthesise(page)
    assert synthesise(page) == "HIT"
    expect(badge(page)).to_have_css("background-color", "rgb(21, 128, 61)")  # green for HIT
    expect(page.locator("#result-audio #duration")).not_to_have_text("0:00")  # the waveform is drawn
    name = "screenshot.png" if viewport == "desktop" else "screenshot-phone.png"
    # The committed README screenshots are refreshed only on request, so that a test run
    # leaves the work tree clean: TTS_UPDATE_SCREENSHOT=1 ./run.sh test
    shot = REPO / "docs" / name if os.environ.get("TTS_UPDATE_SCREENSHOT") == "1" else tmp_path / name
    shot.parent.mkdir(exist_ok=True)
    page.mouse.move(0, 0)
    page.screenshot(path=str(shot))
    assert shot.stat().st_size > 10_000

