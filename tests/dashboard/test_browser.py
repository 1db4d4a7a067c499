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
from collections.abc import Callable, Iterator
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
def start_dashboard() -> Iterator[Callable[..., str]]:
    """``start_dashboard(store, *options)``: `rmq-spark dashboard` serving ``store``; its URL.
    Every one started is stopped at the end."""
    started: list[subprocess.Popen[str]] = []

    def start(store: Path, *options: str) -> str:
        env = {**os.environ, "PYTHONPATH": str(_REPO)}
        command = [sys.executable, "-m", "rmq_spark.cli.main", "dashboard"]
        command += ["--store", str(store), "--listen", "127.0.0.1:0", *options]
        process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
        started.append(process)
        assert process.stdout is not None
        line = process.stdout.readline()  # "... serving STORE on http://127.0.0.1:PORT/"
        assert " on http://127.0.0.1:" in line, line
        return line.rsplit(" on ", 1)[1].strip()

    yield start
    for process in started:
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture
def dashboard_url(world: World, start_dashboard: Callable[..., str]) -> str:
    return start_dashboard(world.root)


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


def _replaced(page: object) -> object:
    """A wait condition: ``page`` (an element) left the document. Chrome reports a node of a
    page being replaced either as stale or as "Node with given id does not belong to the
    document" (an unknown error, not ``StaleElementReferenceException``): both mean gone."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

    def gone(_driver: object) -> bool:
        try:
            page.is_enabled()  # type: ignore[attr-defined]
        except StaleElementReferenceException:
            return True
        except WebDriverException as err:
            if "does not belong to the document" in str(err):
                return True
            raise
        return False

    return gone


def _click_through(browser: object, element: object) -> None:
    """Click ``element`` and wait until the page it leads to replaced this one (bounded)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    page = browser.find_element(By.TAG_NAME, "html")  # type: ignore[attr-defined]
    element.click()  # type: ignore[attr-defined]
    WebDriverWait(browser, 60).until(_replaced(page))  # type: ignore[arg-type]


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


def _save(browser: object, name: str, tmp_path: Path) -> None:
    """A screenshot of the page, kept where CI publishes artifacts."""
    from selenium.webdriver.remote.webdriver import WebDriver

    assert isinstance(browser, WebDriver)
    shot = tmp_path / name
    assert browser.save_screenshot(str(shot))
    assert _png_size(shot)[0] >= 800
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(shot, ARTIFACTS / name)


def test_the_overview_window_picker_and_the_refresh_switch(
    browser: object, world: World, start_dashboard: Callable[..., str]
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.support.ui import Select, WebDriverWait

    assert isinstance(browser, WebDriver)
    browser.get(start_dashboard(world.root, "--refresh", "600"))
    assert "3 minute(s) from" in browser.find_element(By.ID, "window-text").text
    meta = browser.find_elements(By.CSS_SELECTOR, 'meta[http-equiv="refresh"]')
    assert [m.get_attribute("content") for m in meta] == ["600"]
    page = browser.find_element(By.TAG_NAME, "html")
    Select(browser.find_element(By.NAME, "minutes")).select_by_value("60")  # submits itself
    WebDriverWait(browser, 60).until(_replaced(page))
    assert "60 minute(s) from" in _wait_for(browser, "#window-text")[0].text
    _click_through(browser, browser.find_element(By.ID, "refresh-off"))
    _wait_for(browser, "#refresh-on")
    assert not browser.find_elements(By.CSS_SELECTOR, 'meta[http-equiv="refresh"]')
    assert "minutes=60" in browser.current_url  # the chosen window stays


def test_messages_page_through_by_offset_and_by_time(
    browser: object, world: World, start_dashboard: Callable[..., str]
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver

    assert isinstance(browser, WebDriver)
    browser.get(start_dashboard(world.root, "--page-size", "2") + "messages")
    form = browser.find_element(By.ID, "by-offset")
    form.find_element(By.NAME, "topic").send_keys("orders")
    _click_through(browser, form.find_element(By.TAG_NAME, "button"))
    offsets = [e.text for e in _wait_for(browser, ".message .queue-offset")]
    assert offsets == ["0", "1"]
    _click_through(browser, browser.find_element(By.ID, "next-page"))
    _wait_for(browser, "#previous-page")
    assert [e.text for e in browser.find_elements(By.CSS_SELECTOR, ".queue-offset")] == ["2", "3"]

    form = browser.find_element(By.ID, "by-time")
    topic = form.find_element(By.NAME, "topic")
    topic.clear()
    topic.send_keys("payments")
    form.find_element(By.NAME, "begin").send_keys("0")
    _click_through(browser, form.find_element(By.TAG_NAME, "button"))
    bodies: list[str] = []
    while True:
        bodies += [e.text for e in _wait_for(browser, "pre.body")]
        following = browser.find_elements(By.ID, "next-page")
        if not following:
            break
        _click_through(browser, following[0])
    assert sorted(bodies) == [f"payment {i}" for i in range(PAYMENTS)]


def test_dead_letters_are_browsed_and_resent_through_the_broker(
    browser: object, start_dashboard: Callable[..., str], tmp_path: Path
) -> None:
    from broker.broker_harness import props, read_records, start_broker
    from dashboard_world import DEAD, DLQ_GROUP, build_dlq_world
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver

    assert isinstance(browser, WebDriver)
    store = build_dlq_world(tmp_path / "store")
    browser.get(start_dashboard(store) + f"dlq/{DLQ_GROUP}")  # no --broker: read-only
    assert "--broker HOST:PORT" in browser.find_element(By.ID, "no-resend").text
    assert not browser.find_elements(By.CSS_SELECTOR, "form.resend")

    running = start_broker(store, tmp_path / "work")
    try:
        browser.get(start_dashboard(store, "--broker", running.address))
        _click_through(browser, browser.find_element(By.LINK_TEXT, "Dead letters"))
        depth = [e.text for e in _wait_for(browser, "#dlqs td.depth")]
        assert depth == [str(DEAD)]
        _click_through(browser, browser.find_element(By.LINK_TEXT, DLQ_GROUP))
        buttons = _wait_for(browser, "form.resend button")
        assert len(buttons) == DEAD and buttons[0].text == "Re-send to tasks"
        _save(browser, "dashboard-dlq.png", tmp_path)
        _click_through(browser, buttons[0])
        notice = _wait_for(browser, "#notice")[0].text
        assert "Re-sent the dead letter at offset 0 to tasks" in notice
    finally:
        running.stop()
    again = [r for r in read_records(store) if r.topic == "tasks" and r.body == b"task 0"]
    assert len(again) == 2  # the original and its one re-send
    assert props(again[1])["KEYS"] == "task-0"
