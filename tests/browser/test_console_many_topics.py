"""The console with 1,000 topics on a 3-node cluster: the topic list pages (50 a page) and
searches, the cluster page keeps refreshing itself, and no page logs a browser error.

The times it takes are printed (run with -s), not asserted: the machine is shared.
"""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from replog.client import Client
from tests.browser.harness import ConsoleProcess, console_errors
from tests.integration.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
TOPICS = 1000
PAGE_ROWS = 50  # ConsoleConfig.page_size
TIME_REFRESHES = """
const done = arguments[arguments.length - 1];
const started = performance.now();
fetch("/", {headers: {"X-Console-Partial": "1"}, cache: "no-store"})
  .then((resp) => resp.text()).then(() => done(performance.now() - started));
"""


@pytest.fixture(scope="module", autouse=True)
def many_topics(client: Client) -> None:
    started = time.monotonic()
    names = [f"bulk-{i:04d}" for i in range(TOPICS)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda name: client.create_topic(name, 1, 1), names))
    print(f"\ncreated {TOPICS} topics in {time.monotonic() - started:.1f}s")


def timed_get(browser: WebDriver, url: str) -> float:
    started = time.monotonic()
    browser.get(url)
    return time.monotonic() - started


def topic_links(browser: WebDriver) -> list[str]:
    rows = browser.find_elements(By.CSS_SELECTOR, "#topics tbody tr td:first-child a")
    return [r.text for r in rows]


def test_a_thousand_topics_page_fifty_at_a_time_and_search_finds_one(
    browser: WebDriver, console: ConsoleProcess
) -> None:
    console_errors(browser)
    first_s = timed_get(browser, f"{console.url}/topics?q=bulk-")
    assert f"{TOPICS} of" in browser.find_element(By.ID, "topics-summary").text
    assert topic_links(browser) == [f"bulk-{i:04d}" for i in range(PAGE_ROWS)]
    pages = TOPICS // PAGE_ROWS
    assert f"page 1 of {pages}" in browser.page_source
    browser.find_element(By.CSS_SELECTOR, "a[rel=next]").click()
    assert topic_links(browser)[0] == f"bulk-{PAGE_ROWS:04d}"
    last_s = timed_get(browser, f"{console.url}/topics?q=bulk-&page={pages}")
    assert topic_links(browser)[-1] == f"bulk-{TOPICS - 1:04d}"
    search_s = timed_get(browser, f"{console.url}/topics?q=bulk-0777")
    assert topic_links(browser) == ["bulk-0777"]
    assert console_errors(browser) == []
    print(
        f"\n/topics with {TOPICS} topics: first page {first_s:.2f}s, last page {last_s:.2f}s, "
        f"a search {search_s:.2f}s"
    )


def test_the_cluster_page_with_a_thousand_topics_refreshes_itself(
    browser: WebDriver, console: ConsoleProcess
) -> None:
    console_errors(browser)
    load_s = timed_get(browser, f"{console.url}/")
    summary = browser.find_element(By.ID, "cluster-live").text
    found = re.search(r"(\d+) partitions", summary)
    assert found and int(found.group(1)) >= TOPICS
    wait_until(
        lambda: browser.find_element(By.ID, "live-status").text.startswith("updated"),
        "the cluster page refreshed itself",
        60,
    )
    refresh_ms = sorted(browser.execute_async_script(TIME_REFRESHES) for _ in range(5))
    leads = browser.find_elements(By.CSS_SELECTOR, "dl.leads dd")
    assert leads and all(len(dd.find_elements(By.TAG_NAME, "code")) <= 50 for dd in leads)
    assert console_errors(browser) == []
    print(
        f"\n/ with {TOPICS} topics: load {load_s:.2f}s; its live part (every node's health and "
        f"metadata, cached 1 s): median {refresh_ms[2]:.0f} ms, max {refresh_ms[-1]:.0f} ms"
    )
