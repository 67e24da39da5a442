"""The web chat in a real headless browser (Debian's chromium and chromedriver, driven by selenium):
a real uvicorn server on a loopback port over fakes slowed to ~30 tokens/s, so that a human-speed
Stop lands mid-answer. scripts/test.sh installs chromium when it is missing."""

from __future__ import annotations

import json
import re
import os
import shutil
import socket
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from fakes import fake_pair

from localspec.config import GenerationConfig
from localspec.server import create_app
from localspec.session import Reply

pytestmark = pytest.mark.slow
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is missing: pip install -e '.[test]'")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

KEY = "browser-key-5d1e"
DELAY_S = 0.03  # per emitted piece
# Set LOCALSPEC_WEB_SCREENSHOT=scripts/results/web-chat.png to refresh the README's picture.
SCREENSHOT = os.environ.get("LOCALSPEC_WEB_SCREENSHOT")
WAIT_S = 20     # the bound on every wait


def find_chromium() -> tuple[str, str]:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver") or "/usr/lib/chromium/chromedriver"
    if not browser or not Path(driver).exists():
        pytest.skip("chromium and chromium-driver are missing: scripts/test.sh installs them (as root: "
                    "apt-get install chromium chromium-driver)")
    return browser, driver


class SlowServer:
    """uvicorn in a thread over a fake pair whose stream sleeps DELAY_S per item; records how each
    generation finished."""

    def __init__(self, tmp_path: Path):
        import uvicorn

        paths = tmp_path / "fake-instruct.gguf", tmp_path / "fake-draft.gguf"
        for path in paths:
            path.write_bytes(b"GGUF")
        pair = fake_pair(n_ctx=8192, target_path=paths[0], draft_path=paths[1])
        self.finished: list[str] = []
        fast_stream = pair.stream

        def slow_stream(*args, **kwargs):
            for item in fast_stream(*args, **kwargs):
                time.sleep(DELAY_S)
                if isinstance(item, Reply):
                    self.finished.append(item.finish_reason)
                yield item

        pair.stream = slow_stream
        app = create_app(pair, GenerationConfig(gamma=4, drafter="model", p_min=0.0), api_key=KEY)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + WAIT_S
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "the server did not start"
            time.sleep(0.05)
        return self

    def health(self) -> dict:
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/health",
                                         headers={"Authorization": f"Bearer {KEY}"})
        with urllib.request.urlopen(request, timeout=WAIT_S) as r:
            return json.load(r)

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(WAIT_S)


@pytest.fixture
def browser():
    path, driver_path = find_chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = path
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,860"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=driver_path))
    driver.set_page_load_timeout(WAIT_S)
    try:
        yield driver
    finally:
        driver.quit()


def answer(driver) -> str:
    """The text of the last assistant message."""
    return driver.find_elements(By.CSS_SELECTOR, "#log .msg.assistant .text")[-1].text


def send(driver, text: str) -> None:
    box = driver.find_element(By.ID, "message")
    box.send_keys(text)
    box.send_keys("\n")  # Enter sends


def set_field(driver, field: str, value: str) -> None:
    driver.execute_script("document.getElementById('settings').open = true")
    element = driver.find_element(By.ID, field)
    element.clear()
    element.send_keys(value)


def test_chat_in_a_browser(tmp_path, browser):
    wait = WebDriverWait(browser, WAIT_S)
    with SlowServer(tmp_path) as server:
        browser.get(f"http://127.0.0.1:{server.port}/")  # the page answers without the key
        wait.until(lambda d: "API key" in d.find_element(By.ID, "model").text)
        box = browser.find_element(By.ID, "message")
        box.send_keys("Hello", Keys.SHIFT, Keys.ENTER, Keys.SHIFT, "there")  # Shift+Enter: a new line
        assert box.get_attribute("value") == "Hello\nthere" and not browser.find_elements(By.CSS_SELECTOR, ".msg")
        box.send_keys(Keys.ENTER)  # Enter sends; without the key the 401's message shows under the answer
        wait.until(lambda d: "API key" in d.find_element(By.CSS_SELECTOR, "#log .msg.assistant .note.error").text)

        set_field(browser, "api-key", KEY)
        set_field(browser, "temperature", "0")  # the other settings left empty: the server's defaults
        browser.find_element(By.ID, "new-chat").click()
        send(browser, "Tell me a long story.")
        wait.until(lambda d: len(answer(d)) > 20)
        first_stats, first_len = browser.find_element(By.ID, "stats").text, len(answer(browser))
        wait.until(lambda d: len(answer(d)) > first_len + 20 and d.find_element(By.ID, "stats").text != first_stats)
        live = browser.find_element(By.ID, "stats").text
        assert "tok/s" in live and "drafter model · γ 4" in live, live
        assert browser.find_elements(By.CSS_SELECTOR, "#log .msg.assistant .text span.draft")  # green draft runs

        browser.find_element(By.ID, "stop").click()  # aborts the fetch: the server ends the generation
        wait.until(lambda d: server.finished == ["cancelled"])
        wait.until(lambda d: server.health()["cancelled"] == 1 and not server.health()["busy"])
        wait.until(lambda d: not d.find_element(By.ID, "send").get_attribute("disabled"))
        stopped = answer(browser)
        time.sleep(10 * DELAY_S)
        assert answer(browser) == stopped and 0 < len(stopped)
        assert browser.find_elements(By.CSS_SELECTOR, "#log .msg.assistant .note")[-1].text.startswith("Stopped.")

        set_field(browser, "max-tokens", "40")
        send(browser, "Now a short one.")  # the second turn, with the stopped answer in its history
        wait.until(lambda d: "(length)" in d.find_element(By.ID, "stats").text)
        assert re.search(r"α [01]\.\d\d", browser.find_element(By.ID, "stats").text)
        assert server.finished == ["cancelled", "length"]
        assert len(browser.find_elements(By.CSS_SELECTOR, "#log .msg")) == 4
        assert browser.find_elements(By.CSS_SELECTOR, "#log .msg.assistant .text span.draft")

        browser.save_screenshot(str(tmp_path / "web-chat.png"))
        if SCREENSHOT:
            shutil.copyfile(tmp_path / "web-chat.png", SCREENSHOT)

        browser.refresh()  # the conversations were kept in the browser
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#log .msg")) == 4)
        assert browser.find_elements(By.CSS_SELECTOR, "#log .msg.assistant .text span.draft")
        titles = browser.find_elements(By.CSS_SELECTOR, "#conversations button")
        assert [t.text for t in titles] == ["Tell me a long story.", "Hello there"]
        titles[1].click()
        wait.until(lambda d: "Hello" in d.find_element(By.CSS_SELECTOR, "#log .msg.user .text").text)
        browser.find_element(By.ID, "reset-chat").click()
        assert not browser.find_elements(By.CSS_SELECTOR, "#log .msg")
