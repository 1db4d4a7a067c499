"""The dashboard in a real headless Chromium (Debian's chromium and chromium-driver, installed
by scripts/ensure_chromium.sh when missing), started as `rmq-spark dashboard` on a store the
embedded broker wrote: the pages show the topics, a group's lag and a looked-up body, and a
screenshot of a page with data is a real PNG. The screenshot is also copied to
``build/test-artifacts/dashboard-overview.png`` in the checkout (build/ is gitignored): a
stable path for CI to publish as an artifact."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from dashboard_world import ACKED, PAYMENTS, World

pytestmark = pytest.mark.slow

_REPO = Path(__file__).resolve().parents[2]
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
ARTIFACTS = _REPO / "build" / "test-artifacts"  # CI publishes this folder


@pytest.fixture(scope="session")
def chromium() -> tuple[str, str]:
    """(chromium, chromedriver): installed from Debian's packages if missing. Fails (never
    skips) when they cannot be installed, with the script's output."""
    script = _REPO / "scripts" / "ensure_chromium.sh"
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        pytest.fail(f"{script} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    browser, driver = done.stdout.split()
    return browser, driver


@pytest.fixture
def dashboard_url(world: World) -> Iterator[str]:
    env = {**os.environ, "PYTHONPATH": str(_REPO)}
    command = [sys.executable, "-m", "rmq_spark.cli.main", "dashboard"]
    command += ["--store", str(world.root), "--listen", "127.0.0.1:0"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # "... serving STORE on http://127.0.0.1:PORT/"
        assert " on http://127.0.0.1:" in line, line
        yield line.rsplit(" on ", 1)[1].strip()
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture
def browser(chromium: tuple[str, str]) -> Iterator[object]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium[0]
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    options.add_argument("--window-size=1280,1000")
    driver = webdriver.Chrome(options=options, service=Service(executable_path=chromium[1]))
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def _wait_for(browser: object, css: str) -> list[object]:
    """The elements matching ``css`` once the page a click navigated to shows them (a click
    returns before the next page has loaded); bounded."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, 60).until(  # type: ignore[no-any-return]
        lambda driver: driver.find_elements(By.CSS_SELECTOR, css) or False
    )


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == _PNG_MAGIC and data[12:16] == b"IHDR", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_pages_show_topics_lag_and_a_looked_up_body(
    browser: object, dashboard_url: str, world: World, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver

    assert isinstance(browser, WebDriver)
    browser.get(dashboard_url)
    topics = browser.find_element(By.ID, "topics").text
    assert "orders" in topics and "payments" in topics
    assert browser.find_elements(By.CSS_SELECTOR, "svg.chart polyline")
    screenshot = tmp_path / "dashboard-overview.png"
    assert browser.save_screenshot(str(screenshot))
    width, height = _png_size(screenshot)
    assert width >= 800 and height >= 600 and screenshot.stat().st_size > 10_000
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(screenshot, ARTIFACTS / screenshot.name)

    browser.find_element(By.LINK_TEXT, "Consumer groups").click()
    lags = [cell.text for cell in _wait_for(browser, "#groups td.lag")]
    assert lags == [str(PAYMENTS - ACKED)]

    browser.find_element(By.LINK_TEXT, "Messages").click()
    field = browser.find_element(By.CSS_SELECTOR, "#by-id input[name=msg_id]")
    field.send_keys(world.msg_id)
    browser.find_element(By.CSS_SELECTOR, "#by-id button").click()
    bodies = [element.text for element in _wait_for(browser, "pre.body")]
    assert bodies == [world.body]

    browser.get(dashboard_url + "messages?msg_id=not-an-id")
    reason = browser.find_element(By.ID, "reason").text
    assert "offset msg id has 32 or 56 hex characters" in reason
