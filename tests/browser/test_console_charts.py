"""The Charts page in a real browser (headless Chromium) against a real 3-node cluster over
TLS: a produce-rate line moves when load starts, and a group's lag line rises when the
group stops consuming. What the charts hold is read from the page's DOM (each figure's
`data-last`, the latest value of each line, set by charts.js from what it drew) and from
`/charts/data`, never from pixels. The console samples every 0.5 s here (10 s by default).
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable, Iterator

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from replog.client import Client
from replog.devcluster import DevCluster
from tests.browser.harness import ConsoleProcess, console_errors
from tests.integration.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
TOPIC = "clicks"
GROUP = "reporting"
CHART_INTERVAL_S = "0.5"
LOAD_BATCHES_MAX = 3000  # every load loop is bounded in batches and in time
LOAD_DEADLINE_S = 90.0


@pytest.fixture(scope="module")
def console(
    cluster: DevCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ConsoleProcess]:
    proc = ConsoleProcess(
        cluster,
        tmp_path_factory.mktemp("console"),
        extra_args=["--chart-interval-s", CHART_INTERVAL_S],
    ).start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module", autouse=True)
def data(client: Client) -> None:
    client.create_topic(TOPIC, 2, 3)
    client.commit_offsets(GROUP, {(TOPIC, 0): 0, (TOPIC, 1): 0})


def latest(browser: WebDriver, chart: str) -> dict[str, float]:
    """The latest value of each line of `chart` as the page drew it."""
    figure = browser.find_element(By.CSS_SELECTOR, f'figure[data-chart="{chart}"]')
    raw = figure.get_attribute("data-last")
    return dict(json.loads(raw)) if raw else {}


def drawn(browser: WebDriver, chart: str) -> bool:
    """Whether uPlot has drawn `chart` (its canvas is in the figure)."""
    css = f'figure[data-chart="{chart}"] canvas'
    return bool(browser.find_elements(By.CSS_SELECTOR, css))


def data_json(console: ConsoleProcess) -> dict[str, object]:
    with urllib.request.urlopen(console.url + "/charts/data", timeout=10) as resp:
        body = json.loads(resp.read())
    assert isinstance(body, dict)
    return body


def produce_until(client: Client, done: Callable[[], bool], what: str) -> int:
    """Append batches to both partitions until `done()` (bounded); the batches sent."""
    deadline = time.monotonic() + LOAD_DEADLINE_S
    for batch in range(LOAD_BATCHES_MAX):
        if done():
            return batch
        if time.monotonic() > deadline:
            break
        client.append(TOPIC, batch % 2, [b"click %d" % i for i in range(20)])
    raise AssertionError(f"timed out producing until {what}")


def consumed(console: ConsoleProcess) -> bool:
    """Whether the console's `consume_topic` series of the topic holds a rate above 0."""
    charts = data_json(console)["charts"]
    assert isinstance(charts, dict)
    return any((v or 0) > 0 for v in charts.get("consume_topic", {}).get(TOPIC, []))


def hw_total(client: Client) -> dict[tuple[str, int], int]:
    return {(TOPIC, o.partition): o.latest for o in client.list_offsets(TOPIC)}


def test_produce_rate_moves_when_load_starts(
    browser: WebDriver, console: ConsoleProcess, client: Client
) -> None:
    console_errors(browser)
    browser.get(console.url + "/charts")
    assert browser.find_element(By.TAG_NAME, "h1").text == "Charts"
    wait_until(lambda: drawn(browser, "leaders"), "the leaders chart drawn", 60)
    # quiet first: the topic's line is drawn at 0
    wait_until(lambda: latest(browser, "produce_topic").get(TOPIC) == 0, "a quiet topic at 0", 60)
    produce_until(
        client, lambda: latest(browser, "produce_topic").get(TOPIC, 0) > 0, "the line moved"
    )
    assert drawn(browser, "produce_topic")
    assert sum(latest(browser, "produce_node").values()) > 0  # into its leaders' nodes
    leaders = latest(browser, "leaders")
    assert sum(leaders.values()) >= 2 and len(leaders) == 3  # every node has a line
    assert sum(latest(browser, "bytes").values()) > 0
    charts = data_json(console)["charts"]
    assert isinstance(charts, dict)
    rates = [v for v in charts["produce_topic"][TOPIC] if v is not None]
    assert rates[0] == 0 and max(rates) > 0
    took = data_json(console)["took_s"]
    assert isinstance(took, float)
    print(f"\none observation (3 nodes, 3 topics, 1 group) took {took * 1000:.0f} ms")
    assert console_errors(browser) == []


def test_a_lag_line_rises_when_the_group_stops_consuming(
    browser: WebDriver, console: ConsoleProcess, client: Client
) -> None:
    browser.get(console.url + "/charts")
    # the group consumes everything there is (commits the high watermarks): its lag is 0
    client.commit_offsets(GROUP, hw_total(client))
    wait_until(lambda: latest(browser, "lag").get(GROUP) == 0, "the group's lag at 0", 60)
    # The commit shows as a consume rate in one sample only (the next has no new commit):
    # looked for in the series the page draws (its latest value alone can be missed on a
    # loaded machine), and the chart must be drawn.
    wait_until(lambda: consumed(console), "a consume rate in the series", 60)
    assert drawn(browser, "consume_topic")
    # then it stops committing while records keep coming: its line rises
    produce_until(client, lambda: latest(browser, "lag").get(GROUP, 0) > 0, "the lag rose")
    first = latest(browser, "lag")[GROUP]
    produce_until(client, lambda: latest(browser, "lag")[GROUP] > first, "the lag rose further")
    assert drawn(browser, "lag")
    assert console_errors(browser) == []
