"""The screenshots of docs/console.md, taken the way the browser tests run the console:

    .venv/bin/python -m tests.browser.screenshots [docs/img]

A 3-node cluster over TLS (DevCluster) in a temporary directory, `replog console` beside it,
some topics, records and a consumer group with a member and lag; headless Chromium saves
docs/img/console-*.png. Then one node is SIGKILLed and the cluster page is taken again, and
the topic page once its replica there is shown dead.
Everything started here is stopped at the end.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from replog.client import Client, Record, RetryPolicy
from replog.devcluster import DevCluster
from tests.browser.harness import ConsoleProcess, chrome, text
from tests.integration.waiting import wait_until


def populate(client: Client) -> None:
    client.create_topic("orders", 3, 3, format="envelope")
    client.create_topic("payments", 2, 3)
    client.create_topic("audit.log", 1, 3)
    for i in range(8):
        client.create_topic(f"clicks.region-{i}", 1, 2)
    for p in range(3):
        client.append(
            "orders",
            p,
            [
                Record(
                    json.dumps({"order": 1000 + n, "amount": 12.5 * n, "currency": "EUR"}).encode(),
                    key=b"customer-%d" % (n % 7),
                    headers=[("source", b"web"), ("trace-id", b"%08x" % (n * 7919))],
                )
                for n in range(p * 40, p * 40 + 40)
            ],
        )
    client.append("payments", 0, [b"payment %d ok" % n for n in range(500)])
    client.append("payments", 1, [b"payment %d ok" % n for n in range(300)])


def settled(browser: WebDriver) -> bool:
    """Whether the cluster page (refreshing itself) shows no partition with a problem."""
    return all(text(browser, i).startswith("0 ") for i in ("under-count", "offline-count"))


def shoot(browser: WebDriver, url: str, out: Path, ready_id: str | None = None) -> None:
    browser.set_window_size(1300, 400)
    browser.get(url)
    if ready_id is not None:
        wait_until(lambda: browser.find_elements(By.ID, ready_id), f"#{ready_id} on {url}", 30)
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(1300, min(max(int(height) + 140, 500), 1400))  # + window chrome
    browser.save_screenshot(str(out))
    print(f"wrote {out}")


def main(target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="replog-shots-") as tmp:
        cluster = DevCluster(Path(tmp) / "cluster", 3, tls=True).start()
        console = ConsoleProcess(cluster, Path(tmp), refresh_ms=2000)
        browser = None
        try:
            console.start()
            retry = RetryPolicy(deadline_ms=60_000, attempts_max=100)
            with Client(cluster.bootstrap, tls=cluster.client_tls, retry=retry) as client:
                populate(client)
                browser = chrome()
                with client.consumer(["orders"], group="billing", max_poll_records=50) as member:
                    got = 0
                    deadline = time.monotonic() + 60
                    while got < 60 and time.monotonic() < deadline:
                        got += len(member.poll(1.0))
                    member.commit()
                    url = console.url
                    browser.get(f"{url}/")
                    wait_until(lambda: settled(browser), "every replica caught up, leaders", 60)
                    shoot(browser, f"{url}/", target / "console-cluster.png", "nodes")
                    shoot(browser, f"{url}/topics", target / "console-topics.png", "topics")
                    shoot(browser, f"{url}/topics/orders", target / "console-topic.png")
                    shoot(
                        browser,
                        f"{url}/topics/orders/records?partition=0&limit=8&decode=json",
                        target / "console-records.png",
                        "records",
                    )
                    shoot(browser, f"{url}/groups/billing", target / "console-group.png", "lag")
                victim = int(client.refresh_metadata(["orders"]).topics[0].partitions[0].leader_id)
            cluster.members[victim].kill()
            browser.get(f"{console.url}/")
            wait_until(
                lambda: "down" in text(browser, f"node-{victim}"), "the killed node shown down", 30
            )
            shoot(browser, f"{console.url}/", target / "console-cluster-failover.png", "nodes")
            # the topic page once a new leader leads orders/0: the dead replica in words
            browser.get(f"{console.url}/topics/orders")
            wait_until(
                lambda: "not fetched since" in text(browser, f"replica-0-{victim}"),
                "the killed node's replica of orders/0 shown not fetching",
                60,
            )
            shoot(
                browser,
                f"{console.url}/topics/orders",
                target / "console-topic-failover.png",
                f"replica-0-{victim}",
            )
        finally:
            if browser is not None:
                browser.quit()
            console.stop()
            cluster.kill_all()


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/img"))
