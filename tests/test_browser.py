"""The operator's path in a real browser: Playwright driving Debian's Chromium against the
real app (builtin engine, cache under a temporary directory), every test at a laptop's
1366x768 and at a phone's 390x844. Assertions are on what is on screen: bounding boxes
inside the viewport, computed colours and their contrast, attributes, visible text.

``TTS_UPDATE_SCREENSHOT=1`` refreshes the README's screenshots (docs/screenshot.png and
docs/screenshot-phone.png); otherwise they are written under the test's temporary
directory, so a test run leaves the work tree clean."""

from __future__ import annotations

import io
import json
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from conftest import REPO, serving
from server_process import NO_ANONYMOUS_LIMITS
from test_webui import missing_list_overrides

import webui
from lib.config import load_config
from lib.engines.tone import ToneEngine
from lib.errors import EngineError
from lib.pipeline.service import TTSService
from lib.request.access import LOCAL
from lib.request.types import TTSRequest

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


def chromium_path() -> Path:
    """The system's Chromium; a test that needs it is skipped where it is missing, and
    fails in CI (``CI`` set), where .ci/run installs it."""
    if not CHROMIUM.is_file():
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is missing; .ci/run installs it with apt-get install chromium")
        pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium); CI runs this test")
    return CHROMIUM


@pytest.fixture(scope="module")
def chromium() -> Path:
    return chromium_path()


def web_ui(service: TTSService) -> Iterator[str]:
    """``service`` behind the real web UI on a free port: its URL; the service closed after."""
    try:
        with serving(webui.create_app(service), _port()) as url:
            yield url
    finally:
        service.close()


def espeak_ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, TTSService]]:
    """The real app on the builtin engine's espeak base with a fresh cache and lexicon: its
    URL and service."""
    cache = tmp_path_factory.mktemp("cache")
    overrides = {
        "cache.dir": str(cache), "engine": "builtin", "builtin.base": "espeak",
        "readings.lexicon": str(cache.parent / "lexicon.json"),  # a lexicon test edits it
    }  # fmt: skip
    service = TTSService(load_config(env={}, overrides=overrides))
    for url in web_ui(service):
        yield url, service


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, TTSService]]:
    """The real app on the builtin engine (shared by the tests of this module)."""
    yield from espeak_ui(tmp_path_factory)


def tone_ui(
    tmp_path_factory: pytest.TempPathFactory, name: str, engine: ToneEngine
) -> Iterator[tuple[str, ToneEngine]]:
    """The web UI on ``engine`` (a tone engine of some pace) with a fresh cache: its URL and the engine."""
    config = load_config(env={}, overrides={"cache.dir": str(tmp_path_factory.mktemp(name)), "engine": "tone"})
    for url in web_ui(TTSService(config, engine=engine)):
        yield url, engine


@pytest.fixture(scope="module")
def slow_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ToneEngine]]:
    """An engine that takes 2 s, to see the progress while it runs (and made to fail)."""
    yield from tone_ui(tmp_path_factory, "slow", ToneEngine(delay=2.0))


@pytest.fixture
def slow_url(slow_app: tuple[str, ToneEngine]) -> str:
    return slow_app[0]


def launched(chromium: Path, *extra: str) -> Iterator[Browser]:
    """Headless Chromium (:data:`ARGS` and ``extra``), closed after use."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(chromium), args=[*ARGS, *extra])
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="module")
def browser(chromium: Path) -> Iterator[Browser]:
    yield from launched(chromium)


@pytest.fixture(params=list(VIEWPORTS))
def viewport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def opening(browser: Browser, viewport: str, init_script: str | None = None) -> Iterator[Callable[[str], Page]]:
    """Opens the app at ``url`` in a fresh browser context of ``viewport`` (with
    ``init_script`` run before the page's own), ready; the contexts closed after use."""
    contexts = []

    def open_(url: str) -> Page:
        context = browser.new_context(viewport=VIEWPORTS[viewport], locale="en-US")  # lang must not follow it
        contexts.append(context)
        if init_script is not None:
            context.add_init_script(init_script)
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
def open_page(browser: Browser, viewport: str) -> Iterator[Callable[[str], Page]]:
    """Opens the app at ``url`` in a fresh browser context of the test's viewport."""
    yield from opening(browser, viewport)


@pytest.fixture
def page(open_page: Callable[[str], Page], app: tuple[str, TTSService]) -> Page:
    return open_page(app[0])


# -- helpers --------------------------------------------------------------------------------


def in_view(page: Page, locator: Locator, timeout: float = 15_000) -> bool:
    """Whether ``locator`` is (or comes, within ``timeout`` ms: a smooth scroll or a
    re-layout under load) wholly inside the viewport, as the operator sees it. Within a
    pixel: an element scrolled to the top edge sits at a fraction of a pixel above it when
    the layout above it has fractional heights (-0.36 px on a phone once)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(
            """(e) => { const b = e.getBoundingClientRect();
              return b.top >= -1 && b.bottom <= window.innerHeight + 1 && b.left >= -1
                && b.left <= window.innerWidth; }""",
            arg=locator.element_handle(timeout=timeout),
            timeout=timeout,
            polling=100,
        )
    except PlaywrightTimeout:
        return False
    return True


def contrast(locator: Locator) -> float:
    """The element's contrast ratio once no refresh of its component is pending (Gradio
    draws a pending component's text subdued until its update arrives) and the reading
    is steady: two readings 150 ms apart agree (a refresh redraws the figures; one
    reading under load caught them mid-redraw at 1.0)."""
    deadline = time.monotonic() + 30
    last: float | None = None
    while True:
        ratio: float | None = locator.evaluate(
            f"(el) => el.closest('.pending') ? null : ({_CONTRAST_JS})(el)", timeout=10_000
        )
        if ratio is not None and last is not None and abs(ratio - last) < 0.01:
            return ratio
        if time.monotonic() > deadline:
            return ratio if ratio is not None else 0.0
        last = ratio
        locator.page.wait_for_timeout(150)


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


def add_lexicon_entry(page: Page, term: str, reading: str) -> None:
    """Type an entry into the 读音 Readings panel (open) and press Add."""
    page.locator("#lexicon-term textarea").fill(term)
    page.locator("#lexicon-reading textarea").fill(reading)
    page.locator("#lexicon-add").click()


def sign_in(page: Page, token: str, said: str) -> None:
    """Type ``token`` into the page's Admin sign-in (open), press Sign in, wait for ``said``."""
    from playwright.sync_api import expect

    page.locator("#admin-token input").fill(token)
    page.locator("#signin").click()
    expect(page.locator("#signin-status")).to_contain_text(said)


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
    # the time the operator heard it, measured in this browser from the press
    expect(page.locator("#first-sound")).to_contain_text(re.compile(r"heard \d+\.\d\d s after the press"))


def test_the_result_column_stays_in_view_while_the_form_scrolls(page: Page, viewport: str) -> None:
    """At 1366x768 the button, the badge and the player stick beside the form scrolled to
    its last fields (an ancestor's overflow: hidden kept them from sticking). On a phone
    the result sits under the button and is scrolled to on a press (the first test)."""
    from playwright.sync_api import expect

    if viewport == "phone":
        pytest.skip("one column on a phone: the result is scrolled into view on a press instead")
    # Scrolled until the form's last fields are at the bottom edge of the screen (not to
    # the bottom of the page: the play queue and the recent results follow the form, and
    # past the form's end the column goes with it, as any sticky element does).
    page.locator("#use-cache").scroll_into_view_if_needed()
    box, size = page.locator("#use-cache").bounding_box(), page.viewport_size
    assert box is not None and size is not None
    page.mouse.wheel(0, box["y"] + box["height"] - size["height"] + 2)
    page.wait_for_timeout(300)
    assert page.evaluate("window.scrollY") > 200
    assert in_view(page, page.locator("#generate")), "the button scrolled away with the form"
    page.locator("#speed input").press("Control+Enter")  # pressed without scrolling back
    expect(badge(page)).to_have_attribute("data-cache", re.compile("HIT|MISS"), timeout=60_000)
    expect(page.locator("#result-details")).to_contain_text("键 Key")
    for shown in ("#generate", "#cache-badge-value", "#result-audio", "#use-cache"):
        assert in_view(page, page.locator(shown)), f"{shown} out of view"


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
    # Said once at each field: Gradio's second copy under the label came with the press's
    # validator, after the list was scrolled into view, and pushed it off a loaded phone.
    for field, said in (("#seed", "got 1.5"), ("#speed", "5 is out of range")):
        text = page.locator(field).inner_text()
        assert text.count(said) == 1, f"{field} says it {text.count(said)} times at {viewport}: {text!r}"
    # The page growing above the list later (a field's line answered late on a busy
    # machine, where the browser's scroll anchoring does not make up for it) brings it
    # back into view: the app keeps it there until the operator scrolls.
    page.evaluate(
        """() => { document.scrollingElement.style.overflowAnchor = "none";
          const late = document.createElement("div");
          late.style.height = "900px";
          document.querySelector("#speed").append(late); }"""
    )
    assert in_view(page, message), f"error pushed out of view at {viewport}"
    assert no_toasts(page)
    assert page.locator("#seed input").input_value() == "1.5"
    page.locator("#seed input").fill("2")
    page.locator("#speed input").fill("1.25")
    synthesise(page)
    expect(message).to_have_count(0)


class _HeldTone(ToneEngine):
    """The tone engine; the text :attr:`held` waits for :attr:`release`."""

    def __init__(self, held: str) -> None:
        super().__init__()
        self.held, self.release, self.reached = held, threading.Event(), threading.Event()

    def synthesise(self, text: str, *args: Any, **kwargs: Any) -> Any:
        if text == self.held:
            self.reached.set()
            self.release.wait(60)
        return super().synthesise(text, *args, **kwargs)


def test_the_startup_preload_shows_its_progress_while_the_app_serves(
    open_page: Callable[[str], Page], viewport: str, tmp_path: Path
) -> None:
    """``./run.sh``'s start-up preload (``webui.py --preload``) runs behind a served UI:
    a banner over the tabs says how far it is and that the app can be used, a press is
    answered meanwhile, and when the preload ends the banner goes and the Preload tab
    says what it did."""
    from playwright.sync_api import expect

    from lib.batch.background import BackgroundPreload

    phrases = tmp_path / "hot.json"
    listed = [{"text": f"预加载第{i}句", "voice": "low"} for i in range(1, 4)]
    phrases.write_text(json.dumps({"voices": {"low": {"preset": "tone-low"}}, "phrases": listed}), encoding="utf-8")
    engine = _HeldTone(held="预加载第1句")
    config = load_config(env={}, overrides={"cache.dir": str(tmp_path / "cache"), "engine": "tone"})
    service = TTSService(config, engine=engine)
    preload = BackgroundPreload(service, phrases, out=io.StringIO())
    try:
        with serving(webui.create_app(service, phrases_path=phrases, preload=preload), _port()) as url:
            preload.start()
            assert engine.reached.wait(30)
            page = open_page(url)
            banner = page.locator("#preload-banner .preload-banner")
            expect(banner).to_contain_text("0/3")
            expect(banner).to_contain_text("You can work now")
            assert in_view(page, banner), f"the preload banner is out of view at {viewport}"
            assert synthesise(page) == "MISS"  # served while the preload stands on its first phrase
            engine.release.set()
            expect(banner).to_have_count(0, timeout=30_000)  # done, nothing failed: gone
            open_tab(page, "预加载 Preload")
            expect(page.locator("#preload-startup")).to_contain_text("done: 3")
    finally:
        engine.release.set()
        preload.stop()
        service.close()


def test_the_header_names_the_base_and_a_degraded_engine_is_a_banner_until_it_recovers(
    open_page: Callable[[str], Page], page: Page, viewport: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The header names the base voice that speaks (the module's app: espeak-ng); while
    ``/healthz`` is degraded a banner over the tabs says why in operators' words, and it
    goes when the engine recovers (the page reads the health again by itself)."""
    from playwright.sync_api import expect

    import lib.ui.health

    expect(page.locator("#page-header")).to_contain_text("espeak-ng")
    expect(page.locator("#health-banner .health-banner")).to_have_count(0)
    monkeypatch.setattr(lib.ui.health, "HEALTH_SECONDS", 1.0)  # read by the page built below
    engine = ToneEngine()
    config = load_config(env={}, overrides={"cache.dir": str(tmp_path / "cache"), "engine": "tone"})
    service = TTSService(config, engine=engine)
    try:
        with serving(webui.create_app(service), _port()) as url:
            engine.fail = RuntimeError("out of memory")
            for i in range(3):
                with pytest.raises(EngineError):
                    service.synthesise(TTSRequest(text=f"text {i}", voice="tone-low"))
            sick = open_page(url)
            banner = sick.locator("#health-banner .health-banner")
            expect(banner).to_contain_text("The voice engine is failing")
            expect(banner).to_contain_text("语音引擎出错")
            assert in_view(sick, banner), f"the health banner is out of view at {viewport}"
            engine.fail = None
            service.synthesise(TTSRequest(text="text 4", voice="tone-low"))
            expect(banner).to_have_count(0, timeout=20_000)
    finally:
        service.close()


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


def test_every_example_plays_in_one_click_and_is_a_hit_after_the_shipped_preload(
    page: Page, viewport: str, app: tuple[str, TTSService]
) -> None:
    """The examples are phrases of hot_phrases.json asked for as listed: after its
    preload (./run.sh runs it before the UI starts) each click is a hit."""
    from playwright.sync_api import expect

    from lib.batch.preload import preload
    from lib.compose.templates import load_templates
    from lib.request.phrases import expand, load_phrases

    service = app[1]
    shipped = REPO / "hot_phrases.json"
    report = preload(service, expand(load_phrases(shipped)), templates=load_templates(shipped), caller=LOCAL)
    assert report.failed == 0
    examples = page.locator("#examples button")
    expect(examples).to_have_count(7)
    assert "en-female" in examples.nth(2).inner_text()
    for i in range(7):
        page.evaluate("document.querySelector('#cache-badge-value')?.remove()")
        examples.nth(i).click()
        expect(badge(page)).to_have_attribute("data-cache", "HIT", timeout=60_000)
        assert in_view(page, badge(page)), f"badge out of view at {viewport}"
        expect(page.locator("#result-details")).to_contain_text("键 Key")
        expect(page.locator("#generate")).to_be_enabled()
    expect(page.locator("#tts-text textarea")).to_have_value("Please mind the gap between the train and the platform.")
    expect(page.locator("#voice input")).to_have_value("en-female（预置 preset）")
    expect(page.locator("#style textarea")).to_have_value("slow, calm")


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


def test_admin_form_is_never_covered_and_evict_lists_versions_present(page: Page, app: tuple[str, TTSService]) -> None:
    from playwright.sync_api import expect

    service = app[1]
    synthesise(page)
    service.cache.flush()
    open_tab(page, "缓存 Cache")
    page.locator("#admin").get_by_text("管理 Admin").click()
    page.locator("#admin-clear").click()
    result = page.locator("#admin-result")
    expect(result).to_contain_text("请先勾选「我已确认」", timeout=30_000)  # queued behind a refresh
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
    expect(message).to_contain_text(f"已保存音色「{name}」", timeout=30_000)  # a voice analysed on a loaded machine
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
    pick.press("Escape")
    for refused, why in (("zh-female", "presets cannot be deleted"), ("nobody-here", "no saved voice named")):
        pick.fill(refused)  # typed: the list takes any name
        pick.press("Enter")
        page.locator("#delete-voice").click()
        expect(message).to_contain_text(why)  # refused at once, never asked "cannot be undone?"
        expect(page.locator("#delete-confirm")).to_be_hidden()
        assert in_view(page, message), f"the refusal is out of view at {viewport}"
    pick.fill(name)
    pick.press("Enter")
    page.locator("#delete-voice").click()
    expect(page.locator("#delete-question")).to_contain_text(f"确定删除音色「{name}」？")
    page.wait_for_timeout(400)  # scrolled to
    assert in_view(page, page.locator("#confirm-delete")), f"the confirmation is below the fold at {viewport}"
    expect(row).to_have_count(1)  # nothing deleted before the confirmation
    page.locator("#confirm-delete").click()
    expect(message).to_contain_text(f"已删除音色「{name}」")
    expect(row).to_have_count(0)
    open_tab(page, "合成 Synthesise")
    expect(page.locator("#voice input")).to_have_value("zh-male（预置 preset）")  # another voice's delete keeps it
    # Deleting the voice chosen in the Synthesise tab takes it out of the form too.
    open_tab(page, "音色 Voices")
    page.locator("#voice-name textarea").fill(name)  # the recording is still in its field
    page.locator("#save-voice").click()
    expect(message).to_contain_text(f"已保存音色「{name}」", timeout=30_000)  # a voice analysed on a loaded machine
    open_tab(page, "合成 Synthesise")
    page.locator("#voice input").fill(name)
    page.locator("#voice input").press("Enter")
    expect(page.locator("#voice input")).to_have_value(re.compile(name))
    open_tab(page, "音色 Voices")
    pick.fill(name)
    pick.press("Enter")
    page.locator("#delete-voice").click()
    page.locator("#confirm-delete").click()
    expect(message).to_contain_text(f"已删除音色「{name}」")
    open_tab(page, "合成 Synthesise")
    expect(page.locator("#voice input")).to_have_value("zh-female（预置 preset）")  # not the stale name


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
    service.synthesise(TTSRequest(text="只在预加载里的短语。", voice="zh-male", origin="preload"))
    open_tab(page, "缓存 Cache")
    stats = page.locator("#cache-stats")
    expect(stats).to_contain_text(re.compile(r"预加载 Preload \(counted apart 单独统计\): [1-9]\d* 生成 generated"))
    expect(stats).to_contain_text("节省引擎时间 Engine time saved by hits")
    expect(stats).to_contain_text("命中率 Hit rate, 最近 15 分钟 Last 15 min")
    rows = page.locator("#top-requested [role=row]", has_text="下一站，人民广场。")
    expect(rows).to_have_count(1)
    expect(rows.first.locator("[role=gridcell]").first).to_have_text(re.compile(r"^\s*([6-9]|\d\d+)\s*$"))
    expect(page.locator("#top-requested [role=row]", has_text="只在预加载里的短语")).to_have_count(0)  # not traffic
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
    page.wait_for_timeout(1000)  # the refresh's fade is over (and contrast() waits out a pending one)
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
    page.locator("#mode input[value=instruct]").check()
    page.locator("#style textarea").fill("loud")
    synthesise(page)  # the style is in the name: three styles of one text are three names
    styled = re.compile(rf"^zh-female_请到3号窗口_{viewport}_loud_seed4_[0-9a-f]{{6}}\.wav$")
    expect(page.locator("#result-audio a[download]")).to_have_attribute("download", styled)
    page.locator("#mode input[value=preset]").check()
    expect(page.locator("#history-1")).to_contain_text(f"zh-female · seed 4 · 请到3号窗口 {viewport}")
    expect(page.locator("#history-2")).to_contain_text("seed 3")
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
    expect(page.locator("#live-audio")).to_be_hidden()  # shown only while a long miss plays live
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


# -- issue 23: preload, mode switches, recordings, focus, tables ---------------------------------


def test_run_preload_is_busy_with_a_visible_progress_bar_and_the_figures_follow(
    open_page: Callable[[str], Page], slow_app: tuple[str, ToneEngine], viewport: str, tmp_path: Path
) -> None:
    """The progress bar was clipped inside a 0-px box and the button never busy (a second
    click was dropped unseen); the Cache tab shows what the preload did."""
    from playwright.sync_api import expect

    url, _ = slow_app
    page = open_page(url)
    listed = tmp_path / "list.json"
    phrases = [{"text": f"预加载 {viewport} {i}", "voice": "low"} for i in range(3)]  # 2 s each
    listed.write_text(json.dumps({"voices": {"low": "tone-low"}, "phrases": phrases}), encoding="utf-8")
    open_tab(page, "预加载 Preload")
    page.locator("#preload-file input[type=file]").set_input_files(str(listed))
    page.wait_for_timeout(1000)
    button = page.locator("#run-preload")
    button.click()
    expect(button).to_be_disabled(timeout=5_000)
    expect(button).to_have_text("预加载中… Preloading…")
    progress = page.locator("#preload-result [data-testid=status-tracker]")
    expect(progress).to_contain_text("预加载 Preloading", timeout=10_000)
    box = progress.bounding_box()
    assert box is not None and box["height"] >= 40, f"the progress bar is clipped: {box}"
    assert in_view(page, progress), f"progress out of view at {viewport}"
    assert button.evaluate(_CONTRAST_JS) >= 4.5  # busy and readable
    result = page.locator("#preload-result")
    expect(result).to_contain_text("preload: 3 phrases, 3 generated", timeout=60_000)
    expect(button).to_be_enabled(timeout=10_000)
    expect(button).to_have_text("开始预加载 Run preload")
    open_tab(page, "缓存 Cache")
    expect(page.locator("#cache-stats")).to_contain_text(re.compile(r"Preload\*?\*? \(counted apart 单独统计\): [3-9]"))


def test_a_mode_switch_clears_the_errors_of_the_form_left_and_discards_its_running_request(
    open_page: Callable[[str], Page], slow_app: tuple[str, ToneEngine], viewport: str, testdata_dir: Path
) -> None:
    from playwright.sync_api import expect

    url, engine = slow_app
    page = open_page(url)
    seed, speed, box = page.locator("#seed"), page.locator("#speed"), page.locator("#result-message")
    page.locator("#seed input").fill("1.5")
    expect(seed).to_contain_text("须为 0 到 4294967295 的整数")
    page.locator("#speed input").fill("5")
    expect(speed).to_contain_text("超出范围")
    expect(seed).to_contain_text("须为 0 到 4294967295 的整数")  # another field's error leaves it
    page.locator("#tts-text textarea").fill("")
    page.locator("#generate").click()  # a third field errs: the seed's message stays
    expect(box.locator(".ui-error")).to_contain_text("合成文本 Text to speak")
    expect(seed).to_contain_text("须为 0 到 4294967295 的整数")
    expect(speed).to_contain_text("超出范围")
    page.locator("#mode input[value=zero_shot]").check()
    expect(box.locator(".ui-error")).to_have_count(0)
    expect(seed).to_contain_text("须为 0 到 4294967295 的整数")  # still wrong in this mode: still said
    page.locator("#seed input").fill("0")
    page.locator("#speed input").fill("1")
    page.locator("#tts-text textarea").fill(f"模式 {viewport}")
    expect(seed).not_to_contain_text("须为")
    page.locator("#generate").click()
    expect(box.locator(".ui-error")).to_contain_text("参考音频 Prompt audio")
    # The recording field's message sits under its label, above the upload area: it
    # covers neither, and adds no second clear button.
    audio = page.locator("#prompt-audio")
    expect(audio.locator(".validation-error")).to_contain_text("参考音频 Prompt audio")
    label = audio.locator("label[data-testid=block-label]")
    band = audio.locator(".validation-error").bounding_box()
    label_box, upload = label.bounding_box(), audio.locator(".audio-container").bounding_box()
    assert band and label_box and upload
    assert label_box["y"] + label_box["height"] <= band["y"] + 1 and band["y"] + band["height"] <= upload["y"] + 1
    assert audio.locator(".validation-error button:visible").count() == 0
    page.locator("#seed input").fill("1.5")
    expect(seed).to_contain_text("须为")
    page.locator("#mode input[value=preset]").check()
    expect(box.locator(".ui-error")).to_have_count(0)  # it named a field this mode does not have
    expect(seed).to_contain_text("须为 0 到 4294967295 的整数")  # still wrong: still said
    page.locator("#seed input").fill("0")
    expect(seed).not_to_contain_text("须为")
    # A conversion still running when the mode changes is discarded, and the buttons ready.
    calls = engine.calls
    page.locator("#mode input[value=convert]").check()
    page.locator("#source-audio input[type=file]").set_input_files(str(testdata_dir / "zh_female_prompt.wav"))
    expect(page.locator("#source-audio audio, #source-audio canvas").first).to_be_attached(timeout=30_000)
    page.locator("#seed input").fill(str(len(viewport) + 7))  # a miss: the engine takes 2 s
    page.locator("#convert").click()
    expect(page.locator("#convert")).to_be_disabled(timeout=5_000)
    page.locator("#mode input[value=preset]").check()
    expect(page.locator("#generate")).to_be_enabled()
    page.wait_for_timeout(3500)  # past the conversion's end
    assert engine.calls == calls + 1  # it ran (and is cached) ...
    expect(badge(page)).to_have_count(0)  # ... but its result does not land under the Preset form
    expect(page.locator("#result-audio audio")).to_have_count(0)
    assert no_toasts(page)


def test_a_file_that_is_not_audio_is_refused_in_both_languages(page: Page, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    text = tmp_path / "prompt.txt"
    text.write_text("not a recording", encoding="utf-8")
    page.locator("#mode input[value=zero_shot]").check()
    page.locator("#prompt-audio input[type=file]").set_input_files(str(text))
    message = page.locator("#result-message .ui-error")
    expect(message).to_contain_text("参考音频 Prompt audio：「prompt.txt」不是音频文件")
    expect(message).to_contain_text("prompt.txt is not an audio file; upload a WAV, FLAC, OGG or MP3 recording")
    page.wait_for_timeout(500)
    assert no_toasts(page)  # Gradio's English pop-up listing MIME types did not come


def test_keyboard_focus_is_visible_on_radios_and_the_checkbox(page: Page) -> None:
    ring = (
        "() => { const e = document.activeElement, s = getComputedStyle(e);"
        " return [e.type, s.outlineStyle, parseFloat(s.outlineWidth), s.outlineColor]; }"
    )
    page.locator("#mode input[value=preset]").focus()
    page.keyboard.press("ArrowRight")  # the keyboard moves the focus: :focus-visible
    kind, style, width, colour = page.evaluate(ring)
    assert (kind, style) == ("radio", "solid") and width >= 2, (kind, style, width)
    page.locator("#format input").focus()
    page.keyboard.press("Tab")
    kind, style, width, colour = page.evaluate(ring)
    assert (kind, style) == ("checkbox", "solid") and width >= 2, (kind, style, width)
    swatch = page.evaluate(
        "(c) => { const d = document.createElement('div'); d.style.color = c; d.style.background = 'white';"
        " document.body.append(d); return d.id = 'focus-swatch'; }",
        colour,
    )
    assert contrast(page.locator(f"#{swatch}")) >= 3.0  # a ring that stands out from the page (WCAG 1.4.11)


def test_tables_break_lines_between_words_only(page: Page, app: tuple[str, TTSService], viewport: str) -> None:
    """Every table of the Cache tab (the phrase tables, the usage table of the figures, the
    needs-review table) keeps its words whole: on a phone Gradio broke them anywhere
    ("req|uests", "Phr|ase"); a table wider than the screen scrolls sideways instead."""
    from playwright.sync_api import expect

    service = app[1]
    for text, voice in (
        ("下一站，人民广场。请从左侧车门下车。", "zh-female"),
        ("Doors will open on the left.", "en-female"),
    ):
        service.synthesise(TTSRequest(text=text, voice=voice, seed=len(viewport)))
    open_tab(page, "缓存 Cache")
    table = page.locator("#top-requested")
    expect(table.locator("[role=gridcell]", has_text="Doors will open on the left.")).to_be_visible(timeout=15_000)
    expect(page.locator("#cache-stats table")).to_contain_text("请求 requests")  # the usage table
    expect(page.locator("#review-table th").first).to_be_visible()
    split = page.evaluate(
        """() => {
          const broken = [];
          const tables = "#top-requested, #top-missed, #review-table, #cache-stats table";
          for (const cell of document.querySelectorAll(
              `:is(${tables}) :is(th .header, [role=gridcell], th, td)`)) {
            const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
            for (let n = walker.nextNode(); n; n = walker.nextNode()) {
              for (const m of n.textContent.matchAll(/[A-Za-z0-9'-]+/g)) {
                const r = document.createRange();
                r.setStart(n, m.index);
                r.setEnd(n, m.index + m[0].length);
                const tops = new Set([...r.getClientRects()].map((b) => Math.round(b.top)));
                if (tops.size > 1 && !m[0].includes("-")) broken.push(m[0]);
              }
            }
          }
          for (const th of document.querySelectorAll(`:is(${tables}) th`)) {  // a word wider than its column is cut off
            const edge = th.getBoundingClientRect().right;
            for (const span of th.querySelectorAll(".header")) {
              if (span.getBoundingClientRect().right > edge + 1) broken.push("clipped " + span.textContent);
            }
          }
          return broken;
        }"""
    )
    assert split == [], f"words broken or clipped at {viewport}: {split}"
    # What does not fit scrolls sideways inside the page: the page itself does not.
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1"), f"page wider at {viewport}"


def test_a_failed_action_leaves_its_message_readable(page: Page, viewport: str) -> None:
    """Gradio draws a "错误 Error" pill over a component whose event failed: over the
    lexicon's last message ("已保存 Saved ...") it hid words of it. The failure is said in
    the panel's error box instead, and no text of either box is covered."""
    from playwright.sync_api import expect

    page.locator("#readings .label-wrap").first.click()
    term = "测试词"
    add_lexicon_entry(page, term, "ce4 shi4 ci2")
    saved = page.locator("#lexicon-message")
    expect(saved).to_contain_text("已保存 Saved")
    add_lexicon_entry(page, term, "")  # refused: no reading
    error = page.locator("#lexicon-error .ui-error")
    expect(error).to_contain_text("the reading is empty")
    expect(saved).to_contain_text("已保存 Saved")
    saved.scroll_into_view_if_needed()
    pill = page.locator("#lexicon-message [data-testid=status-tracker] span.error")
    expect(pill).to_be_attached()  # Gradio's pill of the failed event is there (in the browser's language) ...
    covered = page.evaluate(
        """() => {
          const covered = [];
          for (const box of document.querySelectorAll("#lexicon-message .prose, #lexicon-error .ui-error")) {
            const walker = document.createTreeWalker(box, NodeFilter.SHOW_TEXT);
            for (let n = walker.nextNode(); n; n = walker.nextNode()) {
              for (const m of n.textContent.matchAll(/\\S+/g)) {
                const r = document.createRange();
                r.setStart(n, m.index);
                r.setEnd(n, m.index + m[0].length);
                for (const b of r.getClientRects()) {
                  const top = document.elementFromPoint(b.left + b.width / 2, b.top + b.height / 2);
                  if (top && !box.contains(top)) covered.push(m[0] + " under " + (top.className || top.tagName));
                }
              }
            }
          }
          return covered;
        }"""
    )
    assert covered == [], f"text covered at {viewport}: {covered}"
    expect(pill).to_be_hidden()  # ... and not shown


def test_a_refused_upload_takes_the_last_result_away(
    page: Page, viewport: str, testdata_dir: Path, tmp_path: Path
) -> None:
    """A file that is not audio, chosen for the target voice after a conversion, is
    refused in place; the last result (player, badge, details) goes, not left beside the
    error as if it belonged to the new recording."""
    from playwright.sync_api import expect

    page.locator("#mode input[value=convert]").check()
    page.locator("#seed input").fill(str(len(viewport) + 7))
    page.locator("#source-audio input[type=file]").set_input_files(str(testdata_dir / "zh_female_prompt.wav"))
    expect(page.locator("#source-audio audio, #source-audio canvas").first).to_be_attached(timeout=30_000)
    page.locator("#convert").click()
    expect(badge(page)).to_have_attribute("data-cache", re.compile("HIT|MISS"), timeout=60_000)
    expect(page.locator("#result-details")).to_contain_text("键 Key")
    text = tmp_path / "voice.txt"
    text.write_text("not a recording", encoding="utf-8")
    page.locator("#prompt-audio input[type=file]").set_input_files(str(text))
    expect(page.locator("#result-message .ui-error")).to_contain_text("「voice.txt」不是音频文件")
    expect(badge(page)).to_have_count(0)
    expect(page.locator("#result-audio audio")).to_have_count(0)
    expect(page.locator("#result-details")).not_to_contain_text("键 Key")
    expect(page.locator("#result-message .ui-error")).to_contain_text("voice.txt is not an audio file")  # kept
    assert in_view(page, page.locator("#result-message .ui-error")), f"error out of view at {viewport}"


def test_the_audio_players_controls_are_labelled_in_both_languages(page: Page, viewport: str) -> None:
    """Gradio labels its player's buttons in English ("Skip backwards by
    0.24322900000000003 seconds", "Adjust volume"), play and download in the browser's
    language only: every control of a player says what it does in Chinese and English."""
    from playwright.sync_api import expect

    synthesise(page)
    player = page.locator("#history-0")
    controls = player.locator("[data-testid=waveform-controls] button[aria-label]")
    expect(controls.first).to_be_attached(timeout=15_000)
    expect(player.locator("button.play-pause-button")).to_have_attribute("aria-label", "播放 Play")
    labels = [*controls.evaluate_all("bs => bs.map((b) => b.getAttribute('aria-label'))")]
    labels += player.locator("[data-testid=waveform-controls] title").evaluate_all("ts => ts.map((t) => t.textContent)")
    labels += page.locator("#result-audio button[aria-label]").evaluate_all(
        "bs => bs.map((b) => b.getAttribute('aria-label'))"
    )
    assert len(labels) >= 6, labels
    for label in labels:
        assert re.search(r"[\u4e00-\u9fff]", label) and re.search(r"[A-Za-z]{2}", label), f"{label!r} at {viewport}"
    assert not any(re.search(r"\d\.\d{3}", label) for label in labels), labels  # 0.24, not 0.24322900000000003
    player.locator("button.play-pause-button").click()
    expect(player.locator("button.play-pause-button")).to_have_attribute("aria-label", "暂停 Pause")  # as it changes


@pytest.mark.parametrize("viewport", ["desktop"])
def test_the_button_stays_in_view_at_the_format_field(page: Page) -> None:
    """At 1366x768, with a result and its details shown, the result column is taller than
    the form below the Format field: the form's row end pushed it up, and the Synthesise
    button three quarters out of the screen. The button sticks on its own."""
    synthesise(page)
    page.locator("#format").scroll_into_view_if_needed()
    assert in_view(page, page.locator("#format"))
    assert page.evaluate("window.scrollY") > 200
    assert in_view(page, page.locator("#generate")), page.locator("#generate").bounding_box()


# -- readings and takes (desktop only: the layout is the form's, tested above) --------------


@pytest.mark.parametrize("viewport", ["desktop"])
def test_reading_line_follows_the_text_and_a_lexicon_entry(page: Page, app: tuple[str, TTSService]) -> None:
    from playwright.sync_api import expect

    line = page.locator("#reading-line")
    page.locator("#tts-text textarea").fill("欢迎光临六安")
    expect(line).to_contain_text("huan1 ying2")  # as typed: the front end's reading
    expect(line.locator("ruby[data-source=shipped]")).to_contain_text("lu4 an1")
    page.locator("#readings .label-wrap").first.click()
    add_lexicon_entry(page, "光临", "guang3 lin4")
    expect(page.locator("#lexicon-message")).to_contain_text("已保存 Saved")
    expect(line.locator("ruby[data-source=lexicon]")).to_contain_text("guang3 lin4")
    expect(page.locator("#lexicon-table")).to_contain_text("guang3 lin4")
    app[1].readings.remove("光临", caller=LOCAL)  # the module's other tests read the shipped lexicon


@pytest.mark.parametrize("viewport", ["desktop"])
def test_one_admin_sign_in_serves_every_admin_action_until_sign_out(
    open_page: Callable[[str], Page], tmp_path: Path
) -> None:
    """With an admin token set, the operator signs in once at the top of the page: a
    wrong token is said to be wrong; the right one is used by the lexicon (Synthesise
    tab) and the Cache tab's admin-only tables without being typed again; Sign out
    clears it, and the next admin action is refused."""
    from playwright.sync_api import expect

    overrides = {"cache.dir": str(tmp_path / "cache"), "engine": "tone", "readings.lexicon": str(tmp_path / "lex.json")}
    service = TTSService(load_config(env=NO_ANONYMOUS_LIMITS, overrides=overrides), admin_token="s3cret-ui")
    try:
        with serving(webui.create_app(service), _port()) as url:
            page = open_page(url)
            page.locator("#admin-signin .label-wrap").first.click()
            expect(page.locator("#admin-token")).to_have_count(1)  # one box for the whole page
            assert page.locator("input[type=password]").count() == 1
            box = page.locator("#admin-token input")
            sign_in(page, "not-it", "Wrong token")
            sign_in(page, "s3cret-ui", "Signed in as the admin")
            page.locator("#readings .label-wrap").first.click()
            add_lexicon_entry(page, "光临", "guang3 lin4")
            expect(page.locator("#lexicon-message")).to_contain_text("已保存 Saved")
            open_tab(page, "缓存 Cache")
            page.locator("#refresh").click()
            expect(page.locator("#cache-stats")).not_to_contain_text("shown to the admin only")
            expect(page.locator("#cache-stats")).to_contain_text("读音词典 Lexicon 1 /")
            open_tab(page, "合成 Synthesise")
            page.locator("#signout").click()
            expect(box).to_have_value("")
            expect(page.locator("#signin-status")).to_contain_text("Signed out")
            add_lexicon_entry(page, "欢迎", "huan1 ying2")
            expect(page.locator("#lexicon-error")).to_contain_text("Admin sign-in at the top of the web UI")
    finally:
        service.close()


def test_the_cache_tab_names_what_is_missing_and_the_admin_makes_it(
    open_page: Callable[[str], Page], tmp_path: Path
) -> None:
    """The Cache tab's line counts the hot phrases and template pieces ready and names
    the missing ones; *Make the missing ones* is refused without the page's admin
    sign-in and, signed in, makes them: the line then says all are ready."""
    from playwright.sync_api import expect

    overrides = missing_list_overrides(tmp_path)
    service = TTSService(load_config(env=NO_ANONYMOUS_LIMITS, overrides=overrides), admin_token="s3cret-ui")
    try:
        with serving(webui.create_app(service), _port()) as url:
            page = open_page(url)
            open_tab(page, "缓存 Cache")
            stats, result = page.locator("#cache-stats"), page.locator("#make-missing-result")
            expect(stats).to_contain_text("就绪 ready 0/1 · 模板片段 template pieces 0/4")
            expect(stats).to_contain_text("「欢迎光临」（tone-low）")
            page.locator("#make-missing").click()
            expect(result).to_contain_text("Admin sign-in at the top of the web UI")
            open_tab(page, "合成 Synthesise")
            page.locator("#admin-signin .label-wrap").first.click()
            sign_in(page, "s3cret-ui", "Signed in as the admin")
            open_tab(page, "缓存 Cache")
            page.locator("#make-missing").click()
            expect(result).to_contain_text("Made 5, 0 already cached, 0 failed")
            assert in_view(page, result)
            expect(stats).to_contain_text("就绪 ready 1/1 · 模板片段 template pieces 4/4")
            expect(stats).not_to_contain_text("缺 missing")
    finally:
        service.close()


@pytest.mark.parametrize("viewport", ["desktop"])
def test_try_takes_shows_n_players_and_approve_makes_the_next_press_approved(page: Page) -> None:
    from playwright.sync_api import expect

    assert page.locator("#seed input").input_value() == ""  # the default names no seed
    page.locator("#tts-text textarea").fill("请到二号窗口取号")
    page.locator("#try-takes").click()
    for i in range(3):  # the default N
        expect(page.locator(f"#takes-{i}")).to_contain_text(f"种子 seed {i} ·", timeout=60_000)
    expect(page.locator("#takes-3")).to_have_count(0)  # hidden: not rendered
    expect(page.locator("#takes-withdraw")).to_have_count(0)  # nothing approved yet
    # Compared one at a time: a take that starts playing stops the one playing.
    page.evaluate("() => { document.querySelector('#takes-0 audio').play().catch(() => {}); }")
    page.wait_for_function("!document.querySelector('#takes-0 audio').paused", timeout=10_000)
    page.evaluate("() => { document.querySelector('#takes-1 audio').play().catch(() => {}); }")
    page.wait_for_function(
        "document.querySelector('#takes-0 audio').paused && !document.querySelector('#takes-1 audio').paused",
        timeout=10_000,
    )
    page.locator("#takes-approve-1").click()
    expect(page.locator("#takes-message")).to_contain_text("已采用 Approved: 版本 take 2, seed 1")
    expect(page.locator("#takes-approve-1")).to_have_text("✔ 已采用 Approved (seed 1)")  # the chosen take marked
    expect(page.locator("#takes-approve-0")).to_have_text("采用 Approve (seed 0)")
    assert synthesise(page) == "HIT"  # the seed field left empty: the approved take
    expect(page.locator("#approved-badge")).to_have_text("已审核 Approved")
    expect(page.locator("#result-details")).to_contain_text("_seed1_")  # its file is named by its own seed
    page.locator("#takes-withdraw").click()
    expect(page.locator("#takes-message")).to_contain_text("已撤销采用 Withdrawn: seed 1")
    expect(page.locator("#takes-approve-1")).to_have_text("采用 Approve (seed 1)")
    expect(page.locator("#takes-withdraw")).to_have_count(0)
    synthesise(page)
    expect(page.locator("#approved-badge")).to_have_count(0)  # the default seed's render again


# -- the play queue (issue 34, item 9) --------------------------------------------------------

# Notes what the queue's player does: each play and end with its source, and each status
# line (the chime says so); installed again after a reload.
_QUEUE_EARS = """
() => {
  window.__heard = [];
  for (const type of ["play", "ended"]) {
    document.addEventListener(type, (e) => {
      if (e.target.id === "queue-audio") window.__heard.push([type, e.target.getAttribute("src")]);
    }, true);
  }
  const status = document.querySelector("#play-queue .queue-status");
  new MutationObserver(() => window.__heard.push(["status", status.textContent]))
    .observe(status, { childList: true, characterData: true, subtree: true });
}
"""


def queue_audio(page: Page) -> dict[str, Any]:
    state: dict[str, Any] = page.evaluate(
        "() => { const a = document.querySelector('#queue-audio');"
        " return { paused: a.paused, time: a.currentTime, src: a.getAttribute('src') }; }"
    )
    return state


def add_result_to_queue(page: Page, text: str, *, repeat: int = 1, chime: bool = False) -> str:
    """Synthesise ``text`` and queue its result; the result's key."""
    from playwright.sync_api import expect

    page.locator("#tts-text textarea").fill(text)
    synthesise(page)
    key = str(badge(page).get_attribute("data-key"))
    page.locator("#queue-repeat input").fill(str(repeat))
    if page.locator("#queue-chime input").is_checked() != chime:
        page.locator("#queue-chime input").click()
    count = page.locator("#play-queue .queue-item").count()
    page.locator("#queue-add").click()
    expect(page.locator("#play-queue .queue-item")).to_have_count(count + 1)
    return key


def test_the_play_queue_survives_a_reload_plays_in_order_with_repeats_and_chime_and_stops_on_keys(
    page: Page, viewport: str
) -> None:
    """Two phrases queued (the second twice, with a chime), the page reloaded: the queue is
    still there, and Play queue plays the first once, the chime, then the second twice, each
    by its stable /api/audio URL in the one queue player; an item whose audio is gone (404)
    is marked and skipped. Esc stops it; Space (focus not in a field) plays and stops it."""
    from playwright.sync_api import expect

    status = page.locator("#play-queue .queue-status")
    page.locator("#queue-add").click()  # nothing to add yet: it says so
    expect(status).to_contain_text("Synthesise first")
    first = add_result_to_queue(page, f"请一号顾客到窗口 {viewport}")
    page.locator("#queue-repeat input").fill("21")  # over the limit: refused, nothing added
    page.locator("#queue-add").click()
    expect(status).to_contain_text("a whole number from 1 to 20")
    expect(page.locator("#play-queue .queue-item")).to_have_count(1)
    second = add_result_to_queue(page, f"请二号顾客到窗口 {viewport}", repeat=2, chime=True)
    # An item whose audio is gone (evicted since it was queued): its key has no entry.
    gone = "0" * 32
    page.evaluate(
        """([key, gone]) => { const items = JSON.parse(localStorage.getItem(key));
          items.splice(1, 0, { ...items[0], id: "gone-1", url: `/api/audio/${gone}.wav`, text: "已清理 evicted" });
          localStorage.setItem(key, JSON.stringify(items)); }""",
        ["tts-play-queue-v1", gone],
    )
    page.reload()
    page.locator("#generate").wait_for(timeout=60_000)
    items = page.locator("#play-queue .queue-item")
    expect(items).to_have_count(3, timeout=30_000)  # kept by the browser
    expect(items.nth(0)).to_contain_text(f"请一号顾客到窗口 {viewport}")
    expect(items.nth(2)).to_contain_text(f"请二号顾客到窗口 {viewport}")
    expect(items.nth(2).locator("[data-edit=repeat]")).to_have_value("2")
    expect(items.nth(2).locator("[data-edit=chime]")).to_be_checked()
    expect(items.nth(0).locator("[data-edit=chime]")).not_to_be_checked()
    page.evaluate(_QUEUE_EARS)

    page.locator("#play-queue [data-queue=play]").click()
    expect(items.nth(2)).to_have_class(re.compile("queue-playing"), timeout=60_000)  # the item playing is marked
    expect(page.locator("#play-queue .queue-status")).to_contain_text("Queue played", timeout=60_000)
    heard = page.evaluate("window.__heard")
    one, two = f"/api/audio/{first}.wav", f"/api/audio/{second}.wav"
    played = [
        (kind, src) if kind != "status" else ("chime", "") for kind, src in heard if kind != "status" or "Chime" in src
    ]
    # Before the first play no chime; the gone item's failed load plays nothing.
    assert [e for e in played if e[1] != f"/api/audio/{gone}.wav"] == [
        ("play", one),
        ("ended", one),
        ("chime", ""),
        ("play", two),
        ("ended", two),
        ("play", two),
        ("ended", two),
    ], heard
    expect(items.nth(1)).to_have_class(re.compile("queue-gone"))
    expect(items.nth(1)).to_contain_text("404")
    expect(page.locator("#play-queue .queue-playing")).to_have_count(0)

    # Esc stops it: paused, and it stays where it stopped.
    page.locator("#play-queue [data-queue=play]").click()
    page.wait_for_function(
        "() => { const a = document.querySelector('#queue-audio'); return !a.paused && a.currentTime > 0.2; }",
        timeout=60_000, polling=50,
    )  # fmt: skip
    page.keyboard.press("Escape")
    expect(page.locator("#play-queue .queue-status")).to_contain_text("Stopped")
    stopped = queue_audio(page)
    assert stopped["paused"] and stopped["src"] == one
    page.wait_for_timeout(600)
    assert queue_audio(page)["time"] == stopped["time"]  # not advancing
    expect(page.locator("#play-queue .queue-playing")).to_have_count(0)

    # Space, with the focus on no field: plays the queue (stopping the result player: one
    # player at a time), and stops it.
    result_paused = "() => document.querySelector('#result-audio audio').paused"
    synthesise(page)  # a result in the result player (none since the reload)
    page.evaluate("() => document.querySelector('#result-audio audio').play()")
    page.wait_for_function(f"!({result_paused})()", timeout=30_000, polling=50)
    page.evaluate("() => document.activeElement && document.activeElement.blur()")
    page.keyboard.press(" ")
    page.wait_for_function("() => !document.querySelector('#queue-audio').paused", timeout=60_000, polling=50)
    expect(items.nth(0)).to_have_class(re.compile("queue-playing"))
    page.wait_for_function(result_paused, timeout=10_000, polling=50)
    page.keyboard.press(" ")
    expect(page.locator("#play-queue .queue-status")).to_contain_text("Stopped")
    assert queue_audio(page)["paused"]
    # Another player that starts stops the queue.
    page.locator("#play-queue [data-queue=play]").click()
    page.wait_for_function("() => !document.querySelector('#queue-audio').paused", timeout=60_000, polling=50)
    page.evaluate("() => document.querySelector('#result-audio audio').play()")
    expect(page.locator("#play-queue .queue-status")).to_contain_text("Stopped", timeout=30_000)
    assert queue_audio(page)["paused"]
    page.keyboard.press("Escape")
    page.wait_for_function(result_paused, timeout=10_000, polling=50)
    # In the text box Space types a space: the queue does not start.
    text = page.locator("#tts-text textarea")
    text.fill("空格")
    text.press(" ")
    expect(text).to_have_value("空格 ")
    page.wait_for_timeout(300)
    assert queue_audio(page)["paused"]

    # Reordered, removed and edited in place: kept as changed across a reload.
    items.nth(0).locator("[data-queue=down]").click()
    expect(items.nth(1)).to_contain_text(f"请一号顾客到窗口 {viewport}")
    items.nth(0).locator("[data-queue=remove]").click()  # the gone one
    expect(items).to_have_count(2)
    items.nth(1).locator("[data-edit=repeat]").fill("3")
    items.nth(1).locator("[data-edit=repeat]").press("Tab")
    page.reload()
    page.locator("#generate").wait_for(timeout=60_000)
    expect(items).to_have_count(2, timeout=30_000)
    expect(items.nth(0)).to_contain_text(f"请一号顾客到窗口 {viewport}")
    expect(items.nth(1).locator("[data-edit=repeat]")).to_have_value("3")

    # Clear empties it, for good (a reload finds it empty).
    page.locator("#play-queue [data-queue=clear]").click()
    expect(items).to_have_count(0)
    page.reload()
    page.locator("#generate").wait_for(timeout=60_000)
    page.wait_for_function("() => window.ttsQueue !== undefined", timeout=30_000)
    expect(page.locator("#play-queue .queue-empty")).to_be_visible()
    expect(items).to_have_count(0)
    # With the queue empty, Space plays and pauses the result player.
    synthesise(page)
    page.wait_for_function(result_paused, timeout=60_000, polling=50)  # the result's own play is over
    page.evaluate("() => document.activeElement && document.activeElement.blur()")
    page.keyboard.press(" ")
    page.wait_for_function(f"!({result_paused})()", timeout=30_000, polling=50)
    page.keyboard.press(" ")
    page.wait_for_function(result_paused, timeout=10_000, polling=50)


# -- the README's screenshots ----------------------------------------------------------------


def test_screenshot_after_a_hit(page: Page, viewport: str, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    synthesise(page)
    assert synthesise(page) == "HIT"
    expect(badge(page)).to_have_css("background-color", "rgb(21, 128, 61)")  # green for HIT
    # The player shows the file's length once it has read it (the browser's own controls:
    # their time display follows the element's duration). On a busy 2-core machine that
    # took more than 5 s (CI): waited for as long as a result may take, never slept.
    page.wait_for_function(
        "() => { const a = document.querySelector('#result-audio audio');"
        " return a !== null && a.readyState >= 1 && a.duration > 1; }",
        timeout=60_000,
        polling=100,
    )
    name = "screenshot.png" if viewport == "desktop" else "screenshot-phone.png"
    # The committed README screenshots are refreshed only on request, so that a test run
    # leaves the work tree clean: TTS_UPDATE_SCREENSHOT=1 ./run.sh test
    shot = REPO / "docs" / name if os.environ.get("TTS_UPDATE_SCREENSHOT") == "1" else tmp_path / name
    shot.parent.mkdir(exist_ok=True)
    page.mouse.move(0, 0)
    page.screenshot(path=str(shot))
    assert shot.stat().st_size > 10_000


def test_the_preload_tab_lists_batch_jobs_and_follows_their_progress(
    open_page: Callable[[str], Page], viewport: str, tmp_path: Path
) -> None:
    """The Preload tab's batch jobs table (docs/batch.md) shows a job submitted meanwhile
    (``POST /api/batch`` or another replica) and follows it to its end by itself."""
    from playwright.sync_api import expect

    from lib.batch.jobs import BatchJobs, ItemSpec

    engine = _HeldTone(held="批量第1句")
    config = load_config(env={}, overrides={"cache.dir": str(tmp_path / "cache"), "engine": "tone"})
    service = TTSService(config, engine=engine)
    try:
        with serving(webui.create_app(service), _port()) as url:
            page = open_page(url)
            open_tab(page, "预加载 Preload")
            specs = [ItemSpec({"text": f"批量第{i}句", "voice": "tone-low"}) for i in (1, 2)]
            BatchJobs.of(service).submit(specs, job_id="release-9", caller=LOCAL)
            assert engine.reached.wait(30)
            table = page.locator("#batch-jobs")
            expect(table).to_contain_text("release-9", timeout=15_000)  # the table refreshes itself
            expect(table).to_contain_text("running")
            engine.release.set()
            expect(table).to_contain_text("2/2 (100 %)", timeout=30_000)
    finally:
        engine.release.set()
        service.close()
