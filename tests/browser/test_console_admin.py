"""Administration from the console in a real browser (headless Chromium) against a 3-node
TLS cluster with ACLs and bearer tokens: a user the ACLs allow signs in with their token,
creates a topic with a config through the form, finds a record of it by key through the
search, and deletes it after typing its name (a wrong name is refused); each change is
an `audit.console` line of the console and an `audit.change` line of a node. A user
without ACLs is refused with the cluster's PERMISSION_DENIED message, and a token the
cluster does not know does not sign in."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.expected_conditions import staleness_of
from selenium.webdriver.support.ui import WebDriverWait

from replog.client import Client, Record
from replog.devcluster import DevCluster
from replog.server.edge.auth import hash_token
from tests.browser.harness import ConsoleProcess, console_errors, text
from tests.integration.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
ALICE = "alice-token-0123456789"
MALLORY = "mallory-token-0123456789"
TOPIC = "web-orders"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    work = tmp_path_factory.mktemp("cluster")
    tokens = work / "tokens"
    tokens.write_text(f"User:alice {hash_token(ALICE)}\nUser:mallory {hash_token(MALLORY)}\n")
    c = DevCluster(work, 3, tls=True, acl=True, extra_args=["--token-file", str(tokens)])
    c.start()
    yield c
    c.kill_all()


@pytest.fixture(scope="module", autouse=True)
def acls(client: Client) -> None:
    client.add_acl("User:alice", "all", topic="web-", prefix=True)


def sign_in(browser: WebDriver, console: ConsoleProcess, token: str) -> None:
    browser.get(console.url + "/login")
    browser.find_element(By.ID, "token").send_keys(token)
    submit(browser, "login-submit")


def submit(browser: WebDriver, button_id: str) -> None:
    """Click a form's button and wait for the page it loads (the old one gone, the new one
    complete)."""
    old = browser.find_element(By.TAG_NAME, "html")
    browser.find_element(By.ID, button_id).click()
    WebDriverWait(browser, 30).until(staleness_of(old))
    done = lambda: browser.execute_script("return document.readyState") == "complete"  # noqa: E731
    wait_until(done, "the page loaded", 30)


def test_a_user_creates_a_topic_finds_a_record_and_deletes_it_after_typing_its_name(
    browser: WebDriver, console: ConsoleProcess, client: Client, cluster: DevCluster
) -> None:
    console_errors(browser)
    sign_in(browser, console, ALICE)
    wait_until(lambda: "signed in" in text(browser, "signed-in-as"), "signed in", 30)
    browser.get(console.url + "/topics/new")
    browser.find_element(By.ID, "new-name").send_keys(TOPIC)
    browser.find_element(By.ID, "new-partitions").clear()
    browser.find_element(By.ID, "new-partitions").send_keys("2")
    browser.find_element(By.ID, "new-configs").send_keys("retention.ms=3600000")
    submit(browser, "new-submit")
    assert text(browser, "done") == "Topic created.", browser.page_source[:2000]
    assert "3600000" in text(browser, "config-retention.ms")
    assert client.partition_count(TOPIC) == 2

    client.append(TOPIC, 1, [Record(b"v%d" % i, key=b"customer-%d" % i) for i in range(20)])
    browser.get(console.url + f"/topics/{TOPIC}/search?partition=1")
    browser.find_element(By.ID, "search-contains").send_keys("customer-13")
    submit(browser, "search-submit")
    rows = browser.find_elements(By.CSS_SELECTOR, "#record-rows tr.record")
    assert len(rows) == 1 and "customer-13" in rows[0].text and "v13" in rows[0].text
    assert "reached the high watermark" in text(browser, "search-stopped")

    browser.get(console.url + f"/topics/{TOPIC}")
    browser.find_element(By.ID, "delete-confirm").send_keys("web-order")
    submit(browser, "delete-submit")
    assert "type its name exactly" in text(browser, "error-message")
    assert TOPIC in client.list_topics()
    assert all("/delete - " in e and "400" in e for e in console_errors(browser))  # the refusal
    browser.get(console.url + f"/topics/{TOPIC}")
    browser.find_element(By.ID, "delete-confirm").send_keys(TOPIC)
    submit(browser, "delete-submit")
    assert text(browser, "done") == "Topic deleted."
    assert TOPIC not in client.list_topics()
    assert console_errors(browser) == []

    for op in ("create", "delete"):
        line = f"audit.console principal=sha256:{hash_token(ALICE)[7:23]} operation={op}"
        wait_until(lambda line=line: line in console.log_text(), f"the console logged {op}", 30)
    logs = "".join(n.log_tail(200_000) for n in cluster.members.values())
    assert "User:alice" in logs and f"topic:{TOPIC}" in logs  # the nodes' audit.change


def test_a_user_the_acls_do_not_allow_is_refused_and_an_unknown_token_does_not_sign_in(
    browser: WebDriver, console: ConsoleProcess, client: Client
) -> None:
    sign_in(browser, console, "not-a-token-of-this-cluster")
    wait_until(lambda: text(browser, "error-message"), "a refusal", 30)
    assert "bearer token is not valid" in text(browser, "error-message")
    sign_in(browser, console, MALLORY)
    wait_until(lambda: "signed in" in text(browser, "signed-in-as"), "signed in", 30)
    browser.get(console.url + "/topics/new")
    browser.find_element(By.ID, "new-name").send_keys("web-mallory")
    submit(browser, "new-submit")
    refused = text(browser, "error-message")
    assert "User:mallory" in refused and "create" in refused, refused
    assert "web-mallory" not in client.list_topics()
    submit(browser, "signout")
    assert text(browser, "done") == "Signed out." and not text(browser, "signed-in-as")
