"""The Charts screenshot of docs/console.md, taken the way the browser tests run the console:

    .venv/bin/python -m tests.browser.chart_screenshots [docs/img]

A 3-node cluster over TLS (DevCluster) in a temporary directory, `replog console` beside it
sampling every second, two topics under a bounded load for about a minute, and a consumer
group that commits as it goes for half of it, then stops (its lag line rises); headless
Chromium saves docs/img/console-charts.png. Everything started here is stopped at the end.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from selenium.webdriver.common.by import By

from replog.client import Client, RetryPolicy
from replog.devcluster import DevCluster
from tests.browser.harness import ConsoleProcess, chrome
from tests.browser.screenshots import shoot
from tests.integration.waiting import wait_until

LOAD_S = 60.0
BATCHES_MAX = 20_000


def load(client: Client) -> None:
    """Bounded load: `orders` steady, `payments` in bursts; `billing` stops halfway."""
    client.create_topic("orders", 3, 3)
    client.create_topic("payments", 2, 3)
    client.commit_offsets("billing", {("orders", p): 0 for p in range(3)})
    started = time.monotonic()
    for batch in range(BATCHES_MAX):
        elapsed = time.monotonic() - started
        if elapsed > LOAD_S:
            break
        client.append("orders", batch % 3, [b"order %d" % i for i in range(20)])
        if int(elapsed) % 20 < 8:
            client.append("payments", batch % 2, [b"payment %d" % i for i in range(40)])
        if elapsed < LOAD_S / 2 and batch % 10 == 0:
            ends = {("orders", o.partition): o.latest for o in client.list_offsets("orders")}
            client.commit_offsets("billing", ends)
        time.sleep(0.01)


def main(target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="replog-shots-") as tmp:
        cluster = DevCluster(Path(tmp) / "cluster", 3, tls=True).start()
        console = ConsoleProcess(
            cluster, Path(tmp), refresh_ms=2000, extra_args=["--chart-interval-s", "1"]
        )
        browser = None
        try:
            console.start()
            retry = RetryPolicy(deadline_ms=60_000, attempts_max=100)
            with Client(cluster.bootstrap, tls=cluster.client_tls, retry=retry) as client:
                load(client)
            browser = chrome()
            url = f"{console.url}/charts"
            browser.get(url)
            css = 'figure[data-chart="bytes"] canvas'
            wait_until(lambda: browser.find_elements(By.CSS_SELECTOR, css), "charts drawn", 60)
            shoot(browser, url, target / "console-charts.png", "charts")
        finally:
            if browser is not None:
                browser.quit()
            console.stop()
            cluster.kill_all()


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/img"))
