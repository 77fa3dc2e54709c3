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
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import Select

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
    wait_gone(old)
    done = lambda: browser.execute_script("return document.readyState") == "complete"  # noqa: E731
    wait_until(done, "the page loaded", 30)


def test_a_user_creates_a_topic_finds_a_record_and_deletes_it_after_typing_its_name(
    browser: WebDriver, console: ConsoleProcess, client: Client, cluster: DevCluster
) -> None:
    console_errors(browser)
    sign_in(browser, console, ALICE)
    wait_until(lambda: "signed in" in text(browser, "signed-in-as"), "signed in", 30)
    assert text(browser, "signed-in-user") == "User:alice"  # as the cluster names her
    browser.get(console.url + "/topics/new")
    browser.find_element(By.ID, "new-name").send_keys(TOPIC)
    browser.find_element(By.ID, "new-partitions").clear()
    browser.find_element(By.ID, "new-partitions").send_keys("2")
    browser.find_element(By.ID, "new-configs").send_keys("retention.ms=3600000")
    submit(browser, "new-submit")
    assert text(browser, "done") == "Topic created.", browser.page_source[:2000]
    wait_shown(browser, "config-retention.ms", "3600000")
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
        token = hash_token(ALICE)[7:23]
        line = f"audit.console principal=User:alice token=sha256:{token} operation={op}"
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
    assert text(browser, "signed-in-user") == "User:mallory"
    browser.get(console.url + "/topics/new")
    browser.find_element(By.ID, "new-name").send_keys("web-mallory")
    submit(browser, "new-submit")
    refused = text(browser, "error-message")
    assert "User:mallory" in refused and "create" in refused, refused
    assert "web-mallory" not in client.list_topics()
    submit(browser, "signout")
    assert text(browser, "done") == "Signed out." and not text(browser, "signed-in-as")


def test_configs_partitions_acls_and_quotas_change_through_the_forms_and_confirmations(
    browser: WebDriver, console: ConsoleProcess, client: Client
) -> None:
    topic = "web-configs"
    client.create_topic(topic, 1, 3)
    console_errors(browser)  # drain the earlier tests' refusals
    sign_in(browser, console, ALICE)
    wait_until(lambda: "signed in" in text(browser, "signed-in-as"), "signed in", 30)
    browser.get(console.url + f"/topics/{topic}")
    Select(browser.find_element(By.ID, "config-name")).select_by_value("retention.ms")
    browser.find_element(By.ID, "config-value").send_keys("120000")
    submit(browser, "config-submit")
    assert text(browser, "done") == "Config set."
    assert client.describe_configs(topic)["retention.ms"].value == "120000"
    remove_row(browser, "#configs tr", "retention.ms")
    assert "Reset config retention.ms" in text(browser, "confirm-what")
    assert client.describe_configs(topic)["retention.ms"].source == "topic"  # not yet
    submit(browser, "confirm-submit")
    assert client.describe_configs(topic)["retention.ms"].source == "default"
    browser.find_element(By.ID, "grow-partitions").clear()
    browser.find_element(By.ID, "grow-partitions").send_keys("3")
    submit(browser, "grow-submit")
    assert "cannot be undone" in text(browser, "confirm-what")
    assert client.partition_count(topic) == 1
    submit(browser, "confirm-submit")
    assert text(browser, "done") == "Partitions added." and client.partition_count(topic) == 3

    # alice may not change ACLs (no ACL on the cluster): the cluster's refusal is shown
    browser.get(console.url + "/acls")
    browser.find_element(By.ID, "acl-principal").send_keys("User:bob")
    browser.find_element(By.ID, "acl-name").send_keys("web-")
    submit(browser, "acl-submit")
    assert "PERMISSION_DENIED" in browser.find_element(By.TAG_NAME, "h1").text
    assert "User:alice" in text(browser, "error-message")
    errors = console_errors(browser)
    assert all("/acls/add - " in e and "403" in e for e in errors), errors
    client.add_acl("User:alice", "alter", cluster=True)
    browser.get(console.url + "/acls")
    browser.find_element(By.ID, "acl-principal").send_keys("User:bob")
    browser.find_element(By.ID, "acl-name").send_keys("web-")
    submit(browser, "acl-submit")
    assert text(browser, "done") == "ACL added."
    bob = [a for a in client.list_acls() if a["principal"] == "User:bob"]
    assert [(a["operation"], a["resource_name"]) for a in bob] == [("read", "web-")]
    remove_row(browser, "#acls tr", "User:bob")
    assert "Remove acl User:bob read topic:web-" in text(browser, "confirm-what")
    submit(browser, "confirm-submit")
    assert text(browser, "done") == "ACL removed."
    assert not [a for a in client.list_acls() if a["principal"] == "User:bob"]

    browser.get(console.url + "/quotas")
    browser.find_element(By.NAME, "principal").send_keys("User:bob")
    browser.find_element(By.NAME, "produce_bytes_per_s").clear()
    browser.find_element(By.NAME, "produce_bytes_per_s").send_keys("1048576")
    submit(browser, "quota-submit")
    assert text(browser, "done") == "Quota set."
    bob_quotas = [q for q in client.list_quotas() if q["principal"] == "User:bob"]
    assert [q["produce_bytes_per_s"] for q in bob_quotas] == [1048576]
    remove_row(browser, "#quotas tr", "User:bob")
    assert "Remove the quotas of User:bob" in text(browser, "confirm-what")
    submit(browser, "confirm-submit")
    assert not [q for q in client.list_quotas() if q["principal"] == "User:bob"]
    assert console_errors(browser) == []


def remove_row(browser: WebDriver, rows: str, principal: str) -> None:
    """Click the Remove button of the table row naming `principal` (a confirmation loads).
    The page lists what the node it asked knows: reload until that node has the change."""

    def row_found() -> WebElement | None:
        found = [
            r
            for r in browser.find_elements(By.CSS_SELECTOR, rows)
            if principal in r.text and r.find_elements(By.TAG_NAME, "button")
        ]
        if not found:
            browser.refresh()
        return found[0] if found else None

    row = wait_until(row_found, f"a row of {principal} listed", 30)
    old = browser.find_element(By.TAG_NAME, "html")
    row.find_element(By.TAG_NAME, "button").click()
    wait_gone(old)
    done = lambda: browser.execute_script("return document.readyState") == "complete"  # noqa: E731
    wait_until(done, "the page loaded", 30)


def wait_shown(browser: WebDriver, element_id: str, needle: str) -> None:
    """Reload until the element shows `needle`: a page lists what the node it asked knows,
    and that node may apply a change a moment after the one that took it."""

    def shown() -> bool:
        if needle in text(browser, element_id):
            return True
        browser.refresh()
        return False

    wait_until(shown, f"#{element_id} showing {needle}", 30)


def wait_gone(element: WebElement) -> None:
    """Until `element` left the document (a new page replaced it)."""

    def gone() -> bool:
        try:
            element.tag_name  # noqa: B018
        except WebDriverException:  # stale, or Chromium's "does not belong to the document"
            return True
        return False

    wait_until(gone, "the old page replaced", 30)
