"""The operator's path in a real browser: Playwright driving Debian's Chromium against the
real app (builtin engine, cache under ``tmp_path``). Uploads a real prompt, generates,
sees MISS then HIT, and saves ``docs/screenshot.png`` for the README."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO, serving

import webui
from lib.config import load_config
from lib.service import TTSService

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync",
]  # fmt: skip

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture
def chromium() -> Path:
    if not CHROMIUM.is_file():
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is missing; .ci/run installs it with apt-get install chromium")
        pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium); CI runs this test")
    return CHROMIUM


@pytest.fixture
def app_url(tmp_path: Path, free_port: int) -> Iterator[str]:
    service = TTSService(load_config(env={}, overrides={"cache.dir": str(tmp_path / "cache"), "engine": "builtin"}))
    try:
        with serving(webui.create_app(service), free_port) as url:
            yield url
    finally:
        service.close()


def test_upload_generate_miss_then_hit_and_screenshot(
    chromium: Path, app_url: str, testdata_dir: Path, tmp_path: Path
) -> None:
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(chromium), args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.goto(app_url, wait_until="networkidle")
            page.locator("#prompt-audio input[type=file]").set_input_files(str(testdata_dir / "zh_female_prompt.wav"))
            page.locator("#prompt-text textarea").fill("希望你以后能够做的比我还好呦。")
            page.locator("#tts-text textarea").fill("请A023号顾客到3号窗口办理业务。")
            badge = page.locator("#cache-badge-value")

            page.locator("#generate").click()
            expect(badge).to_have_attribute("data-cache", "MISS", timeout=60_000)
            expect(page.locator("#result-details")).to_contain_text("Key", timeout=10_000)
            first_key = page.locator("#result-details code").first.inner_text()

            page.locator("#generate").click()
            expect(badge).to_have_attribute("data-cache", "HIT", timeout=60_000)
            assert page.locator("#result-details code").first.inner_text() == first_key
            assert len(first_key) == 32
            expect(badge).to_be_visible()
            background = badge.evaluate("el => getComputedStyle(el).backgroundColor")
            assert background == "rgb(21, 128, 61)"  # green for HIT

            # The committed README screenshot is refreshed only on request, so that a
            # test run leaves the work tree clean: TTS_UPDATE_SCREENSHOT=1 ./run.sh test
            refresh = os.environ.get("TTS_UPDATE_SCREENSHOT") == "1"
            shot = REPO / "docs" / "screenshot.png" if refresh else tmp_path / "screenshot.png"
            shot.parent.mkdir(exist_ok=True)
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 10_000

            page.get_by_role("tab", name="缓存 Cache").click()
            stats = page.locator("#cache-stats")
            expect(stats).to_contain_text("Entries 条目: 1", timeout=20_000)
            expect(stats).to_contain_text("1 hits, 1 misses")
        finally:
            browser.close()
