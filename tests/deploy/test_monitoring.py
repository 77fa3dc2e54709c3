"""The Grafana dashboard and the Prometheus alerts in deploy/monitoring.

`promtool` (Debian's `prometheus` package; `make test` installs it through
scripts/ensure-command.sh) checks the rules and runs their unit tests
(monitoring/replog-alerts.test.yml: series that fire each alert and series that do not).
The dashboard's queries go through promtool's PromQL parser too. Every metric name the
dashboard and the rules use (besides Prometheus's own `up` and recording rules, `a:b`) must
be one that a running 3-node cluster exports, so a renamed metric breaks this test rather
than a dashboard nobody looks at until an incident. Then promtool evaluates every dashboard
query over that cluster's samples (each must return something) and every alert (none may
fire on the healthy cluster).
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from replog.client import Client
from replog.devcluster import DevCluster

REPO = Path(__file__).resolve().parents[2]
MONITORING = REPO / "deploy" / "monitoring"
RULES = MONITORING / "replog-alerts.yml"
DASHBOARD = MONITORING / "replog-dashboard.json"
RULE_TESTS = Path(__file__).parent / "monitoring" / "replog-alerts.test.yml"
EXPORT_TIMEOUT_S = 60.0

# What a dashboard query may contain besides PromQL: Grafana's variables, as Grafana would
# substitute them.
GRAFANA_VARIABLES = {"$topic": ".*", "$__rate_interval": "1m"}
# What the dashboard and alerts may use that a node does not export: Prometheus's own.
PROMETHEUS_METRICS = {"up"}
# Where the names a node exports come from: replog's own, prometheus_client's process,
# platform and GC collectors.
EXPORTED_PREFIXES = ("replog_", "process_", "python_")
PROMQL_WORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
    "bool", "offset", "inf", "nan",
}  # fmt: skip


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail(
            "promtool is not installed: the monitoring tests check deploy/monitoring with it; "
            "`bash scripts/ensure-command.sh promtool prometheus` installs it",
            pytrace=False,
        )
    return found


def run_promtool(promtool: str, *args: str | Path) -> str:
    done = subprocess.run(
        [promtool, *(str(a) for a in args)], capture_output=True, text=True, timeout=120
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    return output


def alert_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def dashboard_queries() -> list[str]:
    """Every PromQL query of the dashboard, Grafana variables substituted."""
    queries = [
        target["expr"] for panel in dashboard()["panels"] for target in panel.get("targets", [])
    ]
    for variable in dashboard()["templating"]["list"]:
        if variable["type"] == "query":
            found = re.fullmatch(r"label_values\((\w+),\s*\w+\)", variable["definition"])
            assert found, f"unexpected variable query {variable['definition']!r}"
            queries.append(found.group(1))
    for i, query in enumerate(queries):
        for name, value in GRAFANA_VARIABLES.items():
            query = query.replace(name, value)
        assert "$" not in query, f"unknown Grafana variable in {query!r}"
        queries[i] = query
    return queries


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (not functions, labels or keywords)."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # ranges and subqueries
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    names = set()
    for found in re.finditer(r"(?<![\w.])[A-Za-z_:][\w:]*(?!\w)(\s*\()?", expr):
        name, call = found.group(0).split("(")[0].strip(), found.group(1)
        if call is None and name not in PROMQL_WORDS:
            names.add(name)
    return names


def used_metric_names() -> dict[str, set[str]]:
    """Metric name -> where it is used ('alert X' or 'dashboard'): the names a node must
    export (not Prometheus's own `up`, not recording rules)."""
    used: dict[str, set[str]] = {}
    for rule in alert_rules():
        for name in metric_names(rule["expr"]):
            used.setdefault(name, set()).add(f"alert {rule['alert']}")
    for query in dashboard_queries():
        for name in metric_names(query):
            used.setdefault(name, set()).add("dashboard")
    return {
        name: where
        for name, where in used.items()
        if name not in PROMETHEUS_METRICS and ":" not in name
    }


def test_the_alert_rules_pass_promtool_check(promtool: str) -> None:
    out = run_promtool(promtool, "check", "rules", RULES)
    assert f"SUCCESS: {len(alert_rules())} rules found" in out


def test_each_alert_fires_on_its_test_series_and_stays_quiet_on_the_others(
    promtool: str,
) -> None:
    out = run_promtool(promtool, "test", "rules", RULE_TESTS)
    assert "SUCCESS" in out


def test_every_alert_has_a_case_where_it_fires_and_one_where_it_does_not() -> None:
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    cases = [case for test in tests for case in test.get("alert_rule_test", [])]
    for rule in alert_rules():
        mine = [case for case in cases if case["alertname"] == rule["alert"]]
        assert any(case["exp_alerts"] for case in mine), f"{rule['alert']} never fires"
        assert any(not case["exp_alerts"] for case in mine), f"{rule['alert']} is never quiet"


def test_every_alert_says_what_to_look_at(promtool: str) -> None:
    for rule in alert_rules():
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


def test_every_dashboard_query_is_valid_promql(promtool: str, tmp_path: Path) -> None:
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:query_{i}", "expr": query}
                    for i, query in enumerate(dashboard_queries())
                ],
            }
        ]
    }
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump(rules))
    out = run_promtool(promtool, "check", "rules", path)
    assert f"SUCCESS: {len(dashboard_queries())} rules found" in out


def test_the_dashboard_panels_have_unique_ids_and_use_the_datasource_variable() -> None:
    panels = dashboard()["panels"]
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids))
    for panel in panels:
        for target in panel.get("targets", []):
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
    titles = " ".join(panel["title"] for panel in panels)
    for topic in (
        "leader", "lag", "latency", "bytes", "Elections", "Consumer-group lag", "Free space",
        "CPU", "Resident memory", "File descriptors", "GC", "Nodes down",
    ):  # fmt: skip
        assert topic in titles


def test_the_dashboard_panels_do_not_overlap() -> None:
    taken: dict[tuple[int, int], str] = {}
    for panel in dashboard()["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in taken, f"{panel['title']} overlaps {taken[(x, y)]}"
                taken[(x, y)] = panel["title"]


def test_the_dashboard_charts_consumer_lag_and_the_process_of_each_node() -> None:
    used = {name for query in dashboard_queries() for name in metric_names(query)}
    assert {
        "replog_group_lag_records",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_max_fds",
        "python_gc_collections_total",
        "replog_storage_free_bytes",
        "replog_storage_size_bytes",
    } <= used


def test_the_disk_alert_is_on_the_free_fraction_whatever_the_volume_size() -> None:
    (rule,) = [r for r in alert_rules() if r["alert"] == "ReplogDiskAlmostFull"]
    assert metric_names(rule["expr"]) == {"replog_storage_free_bytes", "replog_storage_size_bytes"}
    assert re.search(r"< 0\.15$", rule["expr"].strip())
    assert not re.search(r"\d{4,}", rule["expr"]), "no byte count: a fraction of the disk"


def test_a_node_that_is_down_or_gone_from_the_scrape_alerts() -> None:
    exprs = {r["alert"]: r["expr"].strip() for r in alert_rules()}
    assert exprs["ReplogNodeDown"] == 'up{job="replog"} == 0'
    assert exprs["ReplogNodesAbsent"] == 'absent(up{job="replog"})'


def test_the_metric_name_reader_sees_metrics_and_nothing_else() -> None:
    expr = (
        'count by (topic) (a_metric{code="x y", le=~"1"} > 30 or (b:rule unless on (r) c))'
        " - histogram_quantile(0.9, rate(d_bucket[5m] offset 1h)) * 1e9 + e offset 5m"
    )
    assert metric_names(expr) == {"a_metric", "b:rule", "c", "d_bucket", "e"}


def exported_metric_names(metrics_text: str) -> set[str]:
    names = set()
    for line in metrics_text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            names.add(name)
            if kind == "counter":
                names.add(name.removesuffix("_total") + "_total")
            if kind == "histogram":
                names.update(f"{name}_{suffix}" for suffix in ("bucket", "sum", "count"))
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


Scrape = Callable[[], dict[int, str]]


@pytest.fixture(scope="module")
def live_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scrape]:
    """A running 3-node cluster with a topic, records, reads and a consumer group's committed
    offset; yields a function that scrapes every node's /metrics (node id -> text)."""
    with DevCluster(tmp_path_factory.mktemp("monitored") / "cluster", 3) as cluster:
        client = Client(cluster.bootstrap)
        with client:
            client.create_topic("monitored", partitions=2, replication_factor=3)
            for partition in (0, 1):
                client.append("monitored", partition, [b"a", b"b", b"c"])
                client.fetch("monitored", partition, 0)
            # a group with a committed offset: its coordinator exports its lag
            client.commit_offsets("watchers", {("monitored", 0): 1})

            def scrape() -> dict[int, str]:
                texts = {}
                for node_id, node in cluster.members.items():
                    url = f"http://{node.metrics_address}/metrics"
                    with urllib.request.urlopen(url, timeout=10) as reply:
                        texts[node_id] = reply.read().decode()
                return texts

            yield scrape


def test_every_metric_the_dashboard_and_alerts_use_is_exported_by_a_running_cluster(
    live_cluster: Scrape,
) -> None:
    used = used_metric_names()
    assert {
        "replog_replica_role",
        "replog_follower_lag_records",
        "replog_log_bytes",
        "replog_group_lag_records",
        "process_open_fds",
    } <= set(used)
    assert all(name.startswith(EXPORTED_PREFIXES) for name in used), sorted(used)
    deadline = time.monotonic() + EXPORT_TIMEOUT_S
    while True:
        exported = set().union(*map(exported_metric_names, live_cluster().values()))
        missing = {name: where for name, where in used.items() if name not in exported}
        if not missing or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert not missing, f"used but not exported by a running node: {missing}"


# Alerts that may rightly fire on a healthy cluster: the test machine's disk may be nearly
# full.
MACHINE_ALERTS = {"ReplogDiskAlmostFull"}
SCRAPE_INTERVAL = "15s"
SCRAPES = 100  # 25 minutes of the same values: longer than every alert's `for` and window


def input_series(scrapes: dict[int, str]) -> list[dict[str, str]]:
    """The scraped samples as promtool input series, as Prometheus would store them (the
    target labels job and instance added, plus `up` = 1), constant for `SCRAPES` scrapes."""
    series = []
    for node_id, text in sorted(scrapes.items()):
        target = {"job": "replog", "instance": f"n{node_id}"}
        samples = [("up", {}, 1.0)]
        for family in text_string_to_metric_families(text):
            samples += [(s.name, s.labels, s.value) for s in family.samples]
        for name, labels, value in samples:
            if not math.isfinite(value):
                continue  # (none today; promtool's series notation has no NaN)
            matchers = ",".join(
                f"{k}={json.dumps(v)}" for k, v in sorted({**labels, **target}.items())
            )
            series.append({"series": f"{name}{{{matchers}}}", "values": f"{value!r}x{SCRAPES}"})
    return series


def live_rule_tests(tmp_path: Path, scrapes: dict[int, str]) -> Path:
    """A promtool test over `scrapes`: each dashboard query (as an alert on `absent(query)`)
    and each alert rule (but `MACHINE_ALERTS`) must stay quiet."""
    queries = dashboard_queries()
    empty = [
        {"alert": f"DashboardQuery{i}Empty", "expr": f"absent({query})"}
        for i, query in enumerate(queries)
    ]
    dashboard_rules = tmp_path / "dashboard.yml"
    dashboard_rules.write_text(yaml.safe_dump({"groups": [{"name": "d", "rules": empty}]}))
    quiet = [rule["alert"] for rule in empty] + [
        rule["alert"] for rule in alert_rules() if rule["alert"] not in MACHINE_ALERTS
    ]
    tests = {
        "rule_files": [str(dashboard_rules), str(RULES)],
        "evaluation_interval": SCRAPE_INTERVAL,
        "tests": [
            {
                "interval": SCRAPE_INTERVAL,
                "input_series": input_series(scrapes),
                "alert_rule_test": [
                    {"alertname": name, "eval_time": "20m", "exp_alerts": []} for name in quiet
                ],
            }
        ],
    }
    path = tmp_path / "live.test.yml"
    path.write_text(yaml.safe_dump(tests))
    return path


def test_every_dashboard_query_has_data_and_no_alert_fires_on_a_healthy_cluster(
    promtool: str, live_cluster: Scrape, tmp_path: Path
) -> None:
    """promtool evaluates, over the live cluster's samples as Prometheus would hold them,
    each dashboard query (it must return something) and each alert rule (quiet: the cluster
    is healthy), scraping again until they all hold (a new cluster elects its leaders, a
    group's lag appears at its coordinator's next refresh) or the deadline passes."""
    deadline = time.monotonic() + EXPORT_TIMEOUT_S
    while True:
        path = live_rule_tests(tmp_path, live_cluster())
        done = subprocess.run(
            [promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=300
        )
        if done.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    numbered = "\n".join(
        f"DashboardQuery{i}Empty: {query}" for i, query in enumerate(dashboard_queries())
    )
    assert done.returncode == 0, f"{done.stdout}{done.stderr}\nthe queries:\n{numbered}"
    assert "SUCCESS" in done.stdout
