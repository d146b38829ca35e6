"""Debian's headless Chromium for the console's browser tests, driven by Selenium.

Nothing is downloaded: Selenium talks to Debian's ``chromedriver`` (package
``chromium-driver``) given by path, which starts Debian's ``chromium``; Selenium Manager
(which would look for or fetch a driver) is never run, and ``forbid_selenium_manager``
makes any call to it fail the test. Without both programs a browser test is skipped,
except under CI=true, where it fails: .ci/run installs them.
"""

import base64
import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
WAIT = 10.0  # seconds a wait for an element or a navigation may take before the test fails


def need_chromium(chromium: Path = CHROMIUM, driver: Path = CHROMEDRIVER) -> None:
    """Skip (fail under CI) unless Debian's chromium and chromedriver are installed."""
    missing = [str(p) for p in (chromium, driver) if not p.exists()]
    if not missing:
        return
    what = " and ".join(missing)
    if os.environ.get("CI"):
        pytest.fail(
            f"{what} missing: CI needs Debian's chromium and chromium-driver (.ci/run "
            "installs them)"
        )
    pytest.skip(f"{what} missing (apt-get install chromium chromium-driver); CI runs this test")


def forbid_selenium_manager() -> None:
    """Make Selenium Manager (a driver lookup that may download) fail if anything calls it."""
    from selenium.webdriver.common.selenium_manager import SeleniumManager  # noqa: PLC0415

    def refuse(*_: Any, **__: Any) -> Any:
        raise AssertionError("Selenium Manager ran: the tests must name chromedriver's path")

    SeleniumManager.binary_paths = refuse  # type: ignore[method-assign]


@contextlib.contextmanager
def chromium(width: int = 1280, height: int = 900, *, javascript: bool = True) -> Iterator[Any]:
    """A new headless Chromium session (its own profile: no cookies), closed at the end."""
    from selenium import webdriver  # noqa: PLC0415 - only the browser tests need it
    from selenium.webdriver.chrome.service import Service  # noqa: PLC0415

    forbid_selenium_manager()
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--window-size={width},{height}")
    if not javascript:
        options.add_experimental_option(
            "prefs", {"profile.managed_default_content_settings.javascript": 2}
        )
    # The browser log (script errors, CSP violations) and the network log (HTTP statuses).
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        driver.set_page_load_timeout(WAIT)
        driver.set_script_timeout(WAIT)
        driver.execute_cdp_cmd("Network.enable", {})
        yield driver
    finally:
        driver.quit()


def wait_for(driver: Any, css: str) -> Any:
    """The first element matching ``css``, once there is one."""
    from selenium.webdriver.common.by import By  # noqa: PLC0415
    from selenium.webdriver.support import expected_conditions as ec  # noqa: PLC0415
    from selenium.webdriver.support.ui import WebDriverWait  # noqa: PLC0415

    return WebDriverWait(driver, WAIT).until(ec.presence_of_element_located((By.CSS_SELECTOR, css)))


def wait_until(driver: Any, check: Any) -> Any:
    """``check(driver)``'s first true value."""
    from selenium.webdriver.support.ui import WebDriverWait  # noqa: PLC0415

    return WebDriverWait(driver, WAIT).until(check)


def find(driver: Any, css: str) -> Any:
    from selenium.webdriver.common.by import By  # noqa: PLC0415

    return driver.find_element(By.CSS_SELECTOR, css)


def find_all(driver: Any, css: str) -> list[Any]:
    from selenium.webdriver.common.by import By  # noqa: PLC0415

    return list(driver.find_elements(By.CSS_SELECTOR, css))


def texts(driver: Any, css: str) -> list[str]:
    return [e.text for e in find_all(driver, css)]


def document_statuses(driver: Any) -> list[int]:
    """The HTTP statuses of the documents loaded since the last call, in order."""
    statuses = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message.get("method") != "Network.responseReceived":
            continue
        params = message["params"]
        if params.get("type") == "Document":
            statuses.append(int(params["response"]["status"]))
    return statuses


def goto(driver: Any, url: str) -> int:
    """Load ``url``; returns its document's HTTP status."""
    document_statuses(driver)  # drop what came before
    driver.get(url)
    return document_statuses(driver)[-1]


def errors(driver: Any) -> list[str]:
    """Script errors and CSP violations the pages logged since the last call."""
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def screenshot(driver: Any, path: Path, *, full_page: bool = False) -> None:
    """The viewport, or the whole page, as a PNG at ``path``."""
    if not full_page:
        driver.save_screenshot(str(path))
        return
    metrics = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})
    size = metrics["cssContentSize"]
    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot",
        {
            "format": "png",
            "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1},
        },
    )
    path.write_bytes(base64.b64decode(shot["data"]))
