"""The console in a real browser (headless Chromium) against a real 3-node cluster over TLS.

Each page loads without errors in the browser's console (its live part refreshed at least
once), the record browser shows records just produced and follows new ones, a record
produced through the form lands, a group's lag on its page moves as a member reads, its
offsets reset through the dry run and the confirmation, and a SIGKILLed leader shows up
on the cluster page within seconds, its replica on the topic page as not fetching and its
node unreachable (and its node comes back as ready when restarted).

Every wait is on a condition with a generous deadline; the leader kill, which changes the
cluster, runs last.
"""

from __future__ import annotations

import re
import time

import pytest
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select

from replog.client import Client, Record
from replog.devcluster import DevCluster
from tests.browser.conftest import OPERATOR_TOKEN
from tests.browser.harness import ConsoleProcess, console_errors, text
from tests.integration.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
TOPIC = "orders"
GROUP = "billing"


@pytest.fixture(scope="module", autouse=True)
def data(client: Client) -> None:
    """An envelope topic with a few keyed records and a group with a committed offset."""
    client.create_topic(TOPIC, 2, 3, format="envelope")
    client.append(
        TOPIC,
        0,
        [Record(b'{"order": %d}' % i, key=b"customer-%d" % i, headers=[("source", b"web")])
         for i in range(5)],
    )  # fmt: skip
    client.commit_offsets(GROUP, {(TOPIC, 0): 0, (TOPIC, 1): 0})


def load(browser: WebDriver, console: ConsoleProcess, path: str) -> None:
    browser.get(console.url + path)
    assert browser.find_element(By.TAG_NAME, "h1").text
    assert "Internal error" not in browser.page_source


def refreshed(browser: WebDriver) -> bool:
    """Whether the page's live part has refreshed itself since it loaded."""
    return browser.find_element(By.ID, "live-status").text.startswith("updated")


@pytest.mark.parametrize(
    ("path", "live"),
    [
        ("/", True),
        ("/topics", False),
        ("/topics?q=ord&page=1", False),
        (f"/topics/{TOPIC}", True),
        (f"/topics/{TOPIC}/records?partition=0&decode=json", False),
        (f"/topics/{TOPIC}/records?partition=0&decode=hex", False),
        (f"/topics/{TOPIC}/produce", False),
        ("/groups", False),
        (f"/groups/{GROUP}", True),
        ("/acls", False),
    ],
)
def test_each_page_loads_without_browser_console_errors(
    browser: WebDriver, console: ConsoleProcess, path: str, live: bool
) -> None:
    console_errors(browser)  # drain what earlier pages left
    load(browser, console, path)
    if live:
        wait_until(lambda: refreshed(browser), f"{path} refreshed itself", 30)
    assert console_errors(browser) == []


def test_a_bad_input_is_a_message_on_the_page(browser: WebDriver, console: ConsoleProcess) -> None:
    load(browser, console, f"/topics/{TOPIC}/records?partition=9")
    assert "partition" in text(browser, "error-message")
    load(browser, console, "/topics?page=zero")
    assert text(browser, "error-message") == "page must be a whole number, got 'zero'"


def test_the_record_browser_shows_records_just_produced_and_follows_new_ones(
    browser: WebDriver, console: ConsoleProcess, client: Client
) -> None:
    client.append(TOPIC, 1, [Record(b"fresh-1", key=b"k1", headers=[("h", b"v")])])
    load(browser, console, f"/topics/{TOPIC}/records?partition=1")
    rows = browser.find_element(By.ID, "records").text
    assert "fresh-1" in rows and "k1" in rows and "h=v" in rows
    console_errors(browser)
    browser.find_element(By.ID, "follow").click()
    wait_until(lambda: "following" in text(browser, "follow-status"), "following", 30)
    client.append(TOPIC, 1, [Record(b"live-%d" % i, key=b"k") for i in range(3)])
    wait_until(lambda: "live-2" in text(browser, "records"), "followed records appear", 30)
    assert "3 new record(s)" in text(browser, "follow-status")
    browser.find_element(By.ID, "follow").click()  # stop
    assert console_errors(browser) == []


def test_the_record_browser_starts_from_a_time_typed_in(
    browser: WebDriver, console: ConsoleProcess, client: Client
) -> None:
    client.append(TOPIC, 1, [Record(b"dated", timestamp_ms=4_102_444_800_000)])  # 2100-01-01
    load(browser, console, f"/topics/{TOPIC}/records?partition=1")
    field = browser.find_element(By.NAME, "time")
    field.send_keys("2099-12-31T23:00:00Z")
    field.submit()
    wait_until(lambda: "dated" in text(browser, "records"), "the record from that time", 30)
    assert "fresh-1" not in text(browser, "records")  # older records are not shown
    assert console_errors(browser) == []


def test_a_record_produced_through_the_form_lands(
    browser: WebDriver, console: ConsoleProcess, client: Client
) -> None:
    sign_in(browser, console)
    load(browser, console, f"/topics/{TOPIC}/produce")
    browser.find_element(By.NAME, "partition").send_keys("0")
    browser.find_element(By.NAME, "key").send_keys("from-the-form")
    browser.find_element(By.NAME, "headers").send_keys("origin=console")
    browser.find_element(By.NAME, "value").send_keys('{"hello": "browser"}')
    browser.find_element(By.ID, "produce-submit").click()
    said = wait_until(lambda: text(browser, "produced"), "the form answered", 30)
    offset = int(said.split("offset ")[1].split(":")[0])
    (got,) = client.fetch(TOPIC, 0, offset, max_bytes=4096).records.records()[:1]
    assert (got.offset, got.key, got.value) == (offset, b"from-the-form", b'{"hello": "browser"}')
    assert got.headers == (("origin", b"console"),)
    browser.find_element(By.LINK_TEXT, "see it").click()
    assert "from-the-form" in text(browser, "records")
    wait_until(
        lambda: (
            "principal=User:operator" in console.log_text()
            and "operation=produce" in console.log_text()
        ),
        "the console's audit line names the user",
        30,
    )


def sign_in(browser: WebDriver, console: ConsoleProcess) -> None:
    """Sign in as User:operator (producing and resetting offsets act as the user)."""
    browser.get(console.url + "/login")
    browser.find_element(By.ID, "token").send_keys(OPERATOR_TOKEN)
    browser.find_element(By.ID, "login-submit").click()
    wait_until(lambda: text(browser, "signed-in-user") == "User:operator", "signed in", 30)


def lag_shown(browser: WebDriver) -> int:
    shown = text(browser, "lag-total")
    return int(shown) if shown.isdigit() else -1


def test_a_groups_lag_moves_on_its_page_as_a_member_reads(
    browser: WebDriver, console: ConsoleProcess, client: Client
) -> None:
    topic, group = "lagging", "readers"
    client.create_topic(topic, 1, 3)
    client.append(topic, 0, [b"r%d" % i for i in range(200)])
    client.commit_offsets(group, {(topic, 0): 0})
    load(browser, console, f"/groups/{group}")
    start = lag_shown(browser)
    assert start >= 200
    read = 0
    with client.consumer(topic, group=group, max_poll_records=20) as member:
        deadline = time.monotonic() + 60
        while read < 100 and time.monotonic() < deadline:
            read += len(member.poll(1.0)[: 100 - read])
        assert read >= 100
        member.commit()
        wait_until(lambda: 0 <= lag_shown(browser) < start, "the page shows a smaller lag", 30)
        wait_until(lambda: text(browser, "members"), "the page shows the member", 30)
        deadline = time.monotonic() + 60
        while lag_shown(browser) != 0 and time.monotonic() < deadline:
            member.poll(0.5)
            member.commit()
    wait_until(lambda: lag_shown(browser) == 0, "the page shows no lag", 30)
    wait_until(lambda: text(browser, "no-members"), "the page shows the member left", 30)
    assert console_errors(browser) == []


def test_a_stopped_groups_offsets_reset_after_a_dry_run_and_a_confirmation(
    browser: WebDriver, console: ConsoleProcess, client: Client
) -> None:
    topic, group = "lagging", "readers"
    before = {(c.topic, c.partition): c.offset for c in client.committed_offsets(group)}
    earliest = client.list_offsets(topic, [0])[0].earliest
    sign_in(browser, console)
    load(browser, console, f"/groups/{group}")
    Select(browser.find_element(By.NAME, "target")).select_by_value("earliest")
    Select(browser.find_element(By.NAME, "topic")).select_by_value(topic)
    browser.find_element(By.ID, "reset-plan").click()
    wait_until(lambda: text(browser, "dry-run"), "the dry run's plan", 30)
    assert {(c.topic, c.partition): c.offset for c in client.committed_offsets(group)} == before
    browser.find_element(By.ID, "reset-confirm").click()
    wait_until(lambda: text(browser, "reset-done"), "the reset is confirmed", 30)
    assert client.committed_offsets(group, [(topic, 0)])[0].offset == earliest
    assert console_errors(browser) == []


def records_shown(browser: WebDriver) -> int:
    shown = text(browser, "search-records")
    return int(shown) if shown.isdigit() else 0


def test_a_long_search_shows_its_progress_and_stops_when_cancelled(
    browser: WebDriver, console: ConsoleProcess, client: Client
) -> None:
    topic, total = "haystack", 300_000
    client.create_topic(topic, 1, 3)
    for _ in range(total // 10_000):
        client.append(topic, 0, [b"hay-%06d" % i for i in range(10_000)])
    console_errors(browser)
    load(browser, console, f"/topics/{topic}/search?contains=needle&scan=1000000")
    first = wait_until(lambda: records_shown(browser), "the page shows progress", 60)
    wait_until(lambda: records_shown(browser) > first, "the progress moves", 60)
    assert text(browser, "search-state") == "running"
    browser.find_element(By.ID, "search-cancel").click()
    wait_until(lambda: text(browser, "search-stopped") == "cancelled", "the search stopped", 30)
    assert text(browser, "search-state") == "cancelled"
    assert not browser.find_elements(By.ID, "search-cancel")
    examined = records_shown(browser)
    assert 0 < examined < total
    assert f"examined {examined} records" in text(browser, "search-summary")
    assert console_errors(browser) == []


def test_a_killed_leader_shows_up_on_the_cluster_page_within_seconds(
    browser: WebDriver, console: ConsoleProcess, client: Client, cluster: DevCluster
) -> None:
    meta = client.refresh_metadata([TOPIC])
    victim = int(meta.topics[0].partitions[0].leader_id)
    assert victim in cluster.members
    load(browser, console, "/")
    node = f"node-{victim}"

    def state() -> str:
        try:
            found = browser.find_elements(By.ID, node)
            return (found[0].get_attribute("data-state") or "") if found else ""
        except StaleElementReferenceException:
            return ""  # the live part was replaced while read: read again

    wait_until(lambda: state() == "ready", f"node {victim} shown ready", 30)
    killed_at = time.monotonic()
    cluster.members[victim].kill()
    wait_until(lambda: state() == "down", f"node {victim} shown down", 30)
    shown_down_s = time.monotonic() - killed_at
    wait_until(
        lambda: (
            f"{TOPIC}/0" not in text(browser, f"leads-{victim}")
            and f"{TOPIC}/0" in text(browser, "cluster-live")
        ),
        f"{TOPIC}/0 shown led by another node",
        60,
    )
    moved_s = time.monotonic() - killed_at
    wait_until(
        lambda: text(browser, "under-count").split()[:1] not in ([], ["0"]),
        "its partitions shown under-replicated",
        30,
    )
    print(f"\nleader kill: node shown down after {shown_down_s:.2f}s, "
          f"its partition shown under a new leader after {moved_s:.2f}s")  # fmt: skip
    # On the topic page, the new leader's view of the dead replica, in words and spaced.
    load(browser, console, f"/topics/{TOPIC}")
    dead = re.compile(
        rf"node {victim}: not fetched since the leader's election, \d+ records behind "
        r"down node unreachable"
    )
    wait_until(
        lambda: dead.fullmatch(text(browser, f"replica-0-{victim}")),
        f"node {victim}'s replica of {TOPIC}/0 worded as dead",
        30,
    )
    load(browser, console, "/")
    cluster.members[victim].start()
    wait_until(lambda: state() == "ready", f"node {victim} shown ready again", 60)
    assert console_errors(browser) == []
