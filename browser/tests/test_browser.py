"""The waiting page in a real browser: Debian's chromium, headless, driven by selenium through
Debian's chromedriver, in front of Debian's nginx with the module and of uvicorn with the ASGI
middleware, all on 127.0.0.1.

- A queued browser is let in by the page's own refresh once a place frees, with no action of
  the test (no click, no navigation), at each front door and with a 503 waiting page too.
- The ticket cookie over plain HTTP: with `secure = false` the browser keeps its admission
  across navigations (one visitor, one seat). With the default `secure = true`, chromium keeps
  the cookie on http://127.0.0.1 (a potentially trustworthy origin) but refuses it on a plain
  http host name (`shop.test`, resolved by the browser to 127.0.0.1): every page load there is
  a new visitor.
- Screenshots of the default waiting page at fixed viewports, written to the test's temporary
  folder; with UPDATE_SCREENSHOTS=1 (`make screenshots`) copied into docs/screenshots/.
"""

from __future__ import annotations

import os
import shutil
import time

import pytest
from selenium.webdriver.common.by import By

from harness import (ORIGIN, ORIGIN_TITLE, REPO, Holder, config, document_id, page, png_size,
                     room, set_viewport, wait_until)

WAITING_TITLE = "You are in line"       # the built-in page's default title
COOKIE = "__vr_wait"                    # the ticket cookie of room `wait`


# ------------------------------------------------------------------------------------------
# 1. Admitted without any action once a place frees

@pytest.mark.parametrize("door,status", [("nginx", 200), ("nginx", 503), ("uvicorn", 200)],
                         ids=["nginx", "nginx-503", "uvicorn"])
def test_queued_browser_is_admitted_without_any_action(start, browser, door, status) -> None:
    # One place; sessions of two 2 s buckets; the page refreshes every second.
    site = start(door, config(room("wait", total_active_users=1, session_duration=2,
                                   refresh_interval=1, queueing_status_code=status)))
    holder = Holder(site)
    try:
        driver = browser()
        driver.get(site.url("/"))           # the test's only navigation
        assert driver.title == WAITING_TITLE, f"not the waiting page: {page(driver)[:400]}"
        position = driver.find_element(By.ID, "position").text
        assert position.isdigit() and int(position) >= 1, f"position {position!r}"
        assert ORIGIN not in page(driver)
        assert any(c["name"] == COOKIE for c in driver.get_cookies()), "no queued ticket kept"
        # While the place is held, the page refreshes itself and stays in line.
        first = document_id(driver)
        assert wait_until(lambda: document_id(driver) not in (None, first), 5, 0.2), \
            "the waiting page did not refresh itself within 5 s (refresh_interval 1)"
        assert wait_until(lambda: WAITING_TITLE in page(driver), 3, 0.2), page(driver)[:400]
        assert ORIGIN not in page(driver), "admitted while the place was held"
    finally:
        holder.leave()
    left = time.monotonic()
    # No click, no navigation: the page's own refresh lets it in.
    assert wait_until(lambda: ORIGIN in page(driver), 20, 0.2), \
        f"still not admitted 20 s after the place freed: {page(driver)[:400]}"
    waited = time.monotonic() - left
    assert driver.title == ORIGIN_TITLE
    assert driver.current_url == site.url("/"), driver.current_url
    print(f"{door}: admitted {waited:.1f} s after the holder left")
    stats = site.settled_stats("wait")
    assert stats["admitted_total"] == 2, stats


# ------------------------------------------------------------------------------------------
# 2. The ticket cookie over plain HTTP

@pytest.mark.parametrize("door", ["nginx", "uvicorn"])
def test_insecure_cookie_keeps_the_admission_across_navigations(start, browser, door) -> None:
    site = start(door, config(room("wait", total_active_users=5, session_duration=5)))
    driver = browser()
    for path in ("/", "/page.html", "/", "/page.html"):
        driver.get(site.url(path))
        assert ORIGIN in page(driver) and driver.title == ORIGIN_TITLE, \
            f"{path}: not the origin page: {page(driver)[:400]}"
    cookies = {c["name"]: c for c in driver.get_cookies()}
    assert set(cookies) == {COOKIE}, cookies
    c = cookies[COOKIE]
    assert (c["secure"], c["httpOnly"], c["sameSite"], c["path"]) == (False, True, "Lax", "/"), c
    stats = site.settled_stats("wait")
    assert (stats["active_users"], stats["admitted_total"]) == (1, 1), \
        f"one browser counted as {stats['active_users']} visitors: {stats}"


def test_secure_cookie_over_plain_http(start, browser) -> None:
    """The default `secure = true` over plain HTTP (what chromium 156 does): on
    http://127.0.0.1 the cookie is kept (127.0.0.1 is a potentially trustworthy origin, like
    localhost); on a plain http host name it is refused, and every load is a new visitor."""
    site = start("nginx", config(room("wait", total_active_users=5, session_duration=5,
                                      cookie={})))
    loopback, named = browser(), browser()
    for _ in range(3):
        loopback.get(site.url("/"))
        assert ORIGIN in page(loopback)
    (c,) = loopback.get_cookies()
    assert c["name"] == COOKIE and c["secure"] is True, c
    stats = site.settled_stats("wait")
    assert (stats["active_users"], stats["admitted_total"]) == (1, 1), stats

    for _ in range(3):
        named.get(site.url("/", host="shop.test"))
        assert ORIGIN in page(named)
    assert named.get_cookies() == [], "chromium kept a Secure cookie from a plain http host"
    stats = site.settled_stats("wait")
    assert (stats["active_users"], stats["admitted_total"]) == (4, 4), \
        f"3 loads without the ticket should count 3 new visitors: {stats}"


# ------------------------------------------------------------------------------------------
# 3. Screenshots of the default waiting page

SCREENSHOTS = {"waiting-page.png": (1024, 640), "waiting-page-narrow.png": (390, 700)}


def test_screenshots_of_the_default_waiting_page(start, browser, tmp_path) -> None:
    # The room's defaults but for one place and an insecure cookie (the page does not show
    # it): the built-in English page, refreshing every 20 s.
    site = start("nginx", config(room("wait", total_active_users=1), bucket_width_secs=60))
    holder = Holder(site)
    try:
        driver = browser()
        out = tmp_path / "screenshots"
        out.mkdir()
        for name, (width, height) in SCREENSHOTS.items():
            set_viewport(driver, width, height)
            driver.get(site.url("/"))
            assert driver.title == WAITING_TITLE, page(driver)[:400]
            assert driver.find_element(By.ID, "position").text.isdigit()
            driver.execute_script("return document.fonts.ready")
            png = driver.get_screenshot_as_png()
            assert png_size(png) == (width, height), f"{name}: {png_size(png)}"
            assert driver.find_element(By.ID, "position").is_displayed()
            (out / name).write_bytes(png)
    finally:
        holder.leave()
    if os.environ.get("UPDATE_SCREENSHOTS") == "1":
        docs = os.path.join(REPO, "docs", "screenshots")
        os.makedirs(docs, exist_ok=True)
        for name in SCREENSHOTS:
            shutil.copyfile(out / name, os.path.join(docs, name))
            print(f"wrote docs/screenshots/{name}")

