"""The administration and search screenshots of docs/console.md:

    .venv/bin/python -m tests.browser.admin_screenshots [docs/img]

A 3-node cluster over TLS with ACLs and a token file (DevCluster) in a temporary
directory, `replog console` beside it; headless Chromium signs in with the token of
`User:admin` (the super-user) and saves docs/img/console-admin-*.png,
console-search.png and console-search-running.png (a search of 300,000 records in 1 KiB
fetches, shot while it runs). Everything started here is stopped at the end.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from selenium.webdriver.common.by import By

from replog.client import Client, Record, RetryPolicy
from replog.devcluster import DevCluster
from replog.server.edge.auth import hash_token
from tests.browser.harness import ConsoleProcess, chrome
from tests.browser.screenshots import shoot
from tests.integration.waiting import wait_until

TOKEN = "screenshot-admin-token"


def main(target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="replog-shots-") as tmp:
        tokens = Path(tmp) / "tokens"
        tokens.write_text(f"User:admin {hash_token(TOKEN)}\n")
        args = ["--token-file", str(tokens)]
        cluster = DevCluster(Path(tmp) / "cluster", 3, tls=True, acl=True, extra_args=args)
        cluster.start()
        slow = ["--search-fetch-kib", "1"]  # the running search: many small steps
        console = ConsoleProcess(cluster, Path(tmp), refresh_ms=2000, extra_args=slow)
        browser = None
        try:
            console.start()
            retry = RetryPolicy(deadline_ms=60_000, attempts_max=100)
            with Client(cluster.bootstrap, tls=cluster.client_tls, retry=retry) as client:
                client.create_topic("orders", 1, 3, configs={"retention.ms": "604800000"})
                records = [
                    Record(
                        b'{"order": %d, "total": %d}' % (i, 10 * i), key=b"customer-%d" % (i % 7)
                    )
                    for i in range(200)
                ]
                client.append("orders", 0, records)
                client.add_acl("User:alice", "all", topic="orders-", prefix=True)
                browser = chrome()
                url = console.url
                browser.get(f"{url}/login")
                browser.find_element(By.ID, "token").send_keys(TOKEN)
                browser.find_element(By.ID, "login-submit").click()
                shoot(browser, f"{url}/topics/new", target / "console-admin-new-topic.png")
                shoot(
                    browser, f"{url}/topics/orders", target / "console-admin-topic.png", "configs"
                )
                shoot(
                    browser,
                    f"{url}/topics/orders/search?partition=0&contains=customer-3&where=key&scan=100",
                    target / "console-search.png",
                    "search-summary",
                )
                shoot(browser, f"{url}/acls", target / "console-admin-acls.png", "acls")
                client.create_topic("haystack", 1, 3)
                for _ in range(30):
                    client.append("haystack", 0, [b"hay-%06d" % i for i in range(10_000)])
                browser.set_window_size(1300, 520)
                browser.get(f"{url}/topics/haystack/search?contains=needle&scan=1000000")
                wait_until(
                    lambda: int(browser.find_element(By.ID, "search-records").text or 0) > 0,
                    "the search's progress shows",
                    60,
                )
                browser.save_screenshot(str(target / "console-search-running.png"))
                print(f"wrote {target / 'console-search-running.png'}")
                browser.find_element(By.ID, "search-cancel").click()
        finally:
            if browser is not None:
                browser.quit()
            console.stop()
            cluster.kill_all()


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/img"))
