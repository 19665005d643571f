"""Headless Debian chromium driven by Selenium, with chromedriver named explicitly (no Selenium Manager downloads).

In CI (the CI environment variable set) a missing browser fails the test; elsewhere it skips with the reason.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")


def require_browser() -> None:
    if CHROMIUM and CHROMEDRIVER:
        return
    reason = "chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)"
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI must run the browser tests (.ci/run installs them)")
    pytest.skip(f"{reason}; CI runs these tests")


@contextmanager
def chromium(*flags: str) -> Iterator:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    require_browser()
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,900", *flags):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
