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

import datetime
import os
import shutil
import time

import pytest
from selenium.webdriver.common.by import By

import harness

from harness import (ORIGIN, ORIGIN_TITLE, REPO, Holder, config, document_id, page, png_size,
                     room, set_viewport, wait_until)

WAITING_TITLE = "You are in line"       # the built-in page's default title
PREQUEUE_TITLE = "The event starts soon"  # the built-in pre-queue page's
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



# ------------------------------------------------------------------------------------------
# 4. A scheduled event: the pre-queue's countdown becomes the queue at the start

def rfc3339(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")


def drop_event(start_in: float, prequeue_in: float, **fields: object) -> tuple[str, float]:
    """A `[[rooms.events]]` table for an event starting `start_in` seconds from now (on a whole
    second) with its pre-queue from `prequeue_in` seconds from now; returns it and the start."""
    now = time.time()
    start = float(int(now + start_in))
    lines = ["[[rooms.events]]", 'name = "drop"',
             f'prequeue_start = "{rfc3339(now + prequeue_in)}"',
             f'event_start = "{rfc3339(start)}"',
             f'event_end = "{rfc3339(start + 3600)}"']
    lines += [f"{k} = {harness.toml_value(v)}" for k, v in fields.items()]
    return "\n".join(lines) + "\n", start


@pytest.mark.parametrize("door", ["nginx", "uvicorn"])
def test_the_prequeue_countdown_becomes_the_queue_at_the_start(start, browser, door) -> None:
    # One place, held from before the pre-queue opens; the pre-queue opens in 3 s, the event
    # (shuffled start) in 12 s. The browser arrives in the pre-queue: a countdown, no place.
    # At the start its own refresh turns the page into the queue (the place is still held);
    # once the holder leaves, it is let in: all without any action of the test.
    event, start_at = drop_event(12, 3, shuffle_at_event_start=True)
    site = start(door, config(room("wait", total_active_users=1, session_duration=3,
                                   refresh_interval=1, extra=event)))
    holder = Holder(site)
    try:
        assert wait_until(lambda: time.time() > start_at - 9 + 0.5, 10, 0.1)
        driver = browser()
        driver.get(site.url("/"))
        assert driver.title == PREQUEUE_TITLE, f"not the pre-queue page: {page(driver)[:600]}"
        countdown = driver.find_element(By.ID, "countdown")
        secs = int(countdown.get_attribute("data-secs"))
        assert 0 < secs <= 12, f"countdown {secs} s"
        assert not driver.find_elements(By.ID, "position"), "a place in the pre-queue"
        # The start: the same page, refreshed by itself, is now the queue with a place.
        assert wait_until(lambda: driver.title == WAITING_TITLE, start_at - time.time() + 6,
                          0.2), f"no queue after the start: {page(driver)[:600]}"
        assert driver.find_element(By.ID, "position").text.isdigit()
        assert ORIGIN not in page(driver), "let in while the place was held"
    finally:
        holder.leave()
    assert wait_until(lambda: ORIGIN in page(driver), 20, 0.2), \
        f"still not admitted 20 s after the place freed: {page(driver)[:600]}"
    stats = site.settled_stats("wait")
    assert (stats["event"], stats["event_phase"]) == ("drop", "active"), stats


# ------------------------------------------------------------------------------------------
# 5. A custom template, and a right-to-left language

# A page written for Cloudflare's waiting room (its variables and sections).
CLOUDFLARE_TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="refresh" content="{{refreshIntervalSeconds}}">
<title>Spring drop: please wait</title>
<style>body{font-family:sans-serif;background:#0b3d2e;color:#fff;text-align:center;padding:4rem}
.big{font-size:3rem;font-weight:700}</style></head>
<body><h1>Spring drop</h1>
{{#waitTimeKnown}}<p>Your estimated wait: <span class="big" id="cf-wait">{{waitTimeFormatted}}</span></p>{{/waitTimeKnown}}
{{^waitTimeKnown}}<p id="cf-unknown">We are working out your wait.</p>{{/waitTimeKnown}}
{{#queueIsFull}}<p>The queue is full.</p>{{/queueIsFull}}
<p id="cf-updated">Last updated {{lastUpdated}}</p>
<p id="cf-name">{{roomName}} &amp; friends: {{pageTitle}}</p>
</body></html>
"""


@pytest.mark.parametrize("door", ["nginx", "uvicorn"])
def test_a_cloudflare_template_renders_in_the_browser(start, browser, door, tmp_path) -> None:
    site = start(door, config(room("wait", total_active_users=1, session_duration=5,
                                   custom_page=CLOUDFLARE_TEMPLATE,
                                   page_title="<b>not bold</b>")))
    holder = Holder(site)
    try:
        driver = browser(viewport=(1024, 640))
        driver.get(site.url("/"))
        assert driver.title == "Spring drop: please wait", page(driver)[:600]
        assert driver.find_element(By.ID, "cf-wait").text.strip(), page(driver)[:600]
        assert not driver.find_elements(By.ID, "cf-unknown")
        # {{x}} is escaped: the title set by the operator shows as text, not markup.
        assert driver.find_element(By.ID, "cf-name").text == "wait & friends: <b>not bold</b>"
        save_screenshot(driver, tmp_path, "custom-template.png")
    finally:
        holder.leave()


@pytest.mark.parametrize("lang,dir_", [("ar-EG", "rtl"), ("he-IL", "rtl"), ("de-DE", "ltr")])
def test_the_page_in_the_visitors_language(start, browser, lang, dir_, tmp_path) -> None:
    site = start("nginx", config(room("wait", total_active_users=1, session_duration=5,
                                      accept_language=True)))
    holder = Holder(site)
    try:
        driver = browser(lang=lang, viewport=(1024, 640))
        driver.get(site.url("/"))
        html = driver.find_element(By.TAG_NAME, "html")
        assert html.get_attribute("lang") == lang, page(driver)[:400]
        assert html.get_attribute("dir") == dir_
        assert driver.title != WAITING_TITLE, "the English page for " + lang
        assert driver.find_element(By.ID, "position").is_displayed()
        if dir_ == "rtl":
            # Laid out right to left: the heading's text starts at the right.
            direction = driver.execute_script(
                "return getComputedStyle(document.querySelector('h1')).direction")
            assert direction == "rtl"
        if lang == "ar-EG":
            save_screenshot(driver, tmp_path, "waiting-page-ar.png")
    finally:
        holder.leave()


def test_screenshot_of_the_prequeue_page(start, browser, tmp_path) -> None:
    event, _ = drop_event(600, -1, shuffle_at_event_start=True)
    site = start("nginx", config(room("wait", total_active_users=10, extra=event),
                                 bucket_width_secs=60))
    driver = browser(viewport=(1024, 640))
    driver.get(site.url("/"))
    assert driver.title == PREQUEUE_TITLE, page(driver)[:600]
    assert driver.find_element(By.ID, "countdown").is_displayed()
    save_screenshot(driver, tmp_path, "prequeue-page.png")


def save_screenshot(driver, tmp_path, name: str) -> None:  # type: ignore[no-untyped-def]
    """Writes the page's screenshot to the test's folder, and to docs/screenshots/ with
    UPDATE_SCREENSHOTS=1 (`make screenshots`)."""
    driver.execute_script("return document.fonts.ready")
    png = driver.get_screenshot_as_png()
    (tmp_path / name).write_bytes(png)
    if os.environ.get("UPDATE_SCREENSHOTS") == "1":
        docs = os.path.join(REPO, "docs", "screenshots")
        os.makedirs(docs, exist_ok=True)
        shutil.copyfile(tmp_path / name, os.path.join(docs, name))
        print(f"wrote docs/screenshots/{name}")
