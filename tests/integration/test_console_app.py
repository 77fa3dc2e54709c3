"""The console's pages through Starlette's TestClient against a real single node: what each
page shows, that inputs are validated and errors are pages (never tracebacks), and that
POSTs need the console's token. The real browser and a 3-node cluster: tests/browser."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from replog.client import Client, ClientTls, Record, RetryPolicy
from replog.console.app import create_app
from replog.console.cluster import Prober
from replog.console.state import ConsoleConfig
from replog.devcluster import DevCluster
from replog.server.edge.auth import hash_token
from tests.integration.servers import ServerProcess
from tests.integration.waiting import wait_until

pytestmark = pytest.mark.integration
BASE = "http://127.0.0.1:8080"
SAME_ORIGIN = {"origin": BASE}
_names = itertools.count()


@pytest.fixture(scope="module")
def client(shared_server: ServerProcess) -> Iterator[Client]:
    with Client(shared_server.address, timeout_s=10, retry=RetryPolicy(deadline_ms=10_000)) as c:
        yield c


@pytest.fixture(scope="module")
def web(client: Client) -> Iterator[TestClient]:
    config = ConsoleConfig(page_size=5, follow_duration_s=3.0, snapshot_ttl_s=0.0)
    app = create_app(client, config)
    with TestClient(app, base_url=BASE, raise_server_exceptions=False) as tc:
        yield tc
    app.state.console.prober.close()


@pytest.fixture
def topic(client: Client) -> str:
    name = f"console-{next(_names)}"
    client.create_topic(name, 2)
    return name


def token(web: TestClient, topic: str) -> str:
    """The CSRF token, as a browser gets it: from a page's form."""
    found = re.search(r'name="csrf" value="([^"]+)"', web.get(f"/topics/{topic}/produce").text)
    assert found
    return found.group(1)


def test_the_cluster_page_shows_the_node_ready_and_leading_the_topics_partitions(
    web: TestClient, topic: str
) -> None:
    page = web.get("/")
    assert page.status_code == 200
    assert re.search(r'id="node-0" data-state="ready"', page.text)
    assert f"<code>{topic}/0</code>" in page.text and f"<code>{topic}/1</code>" in page.text
    assert 'id="no-under"' in page.text


def test_the_live_part_of_a_page_comes_alone_when_its_script_asks(web: TestClient) -> None:
    part = web.get("/", headers={"x-console-partial": "1"}).text
    assert 'id="nodes"' in part and "<html" not in part


def test_topics_are_searched_and_paged(web: TestClient, client: Client) -> None:
    for i in range(7):
        client.create_topic(f"paged-{i:02d}", 1)
    first = web.get("/topics", params={"q": "PAGED"}).text
    assert "7 of" in first and "page 1 of 2" in first
    assert len(re.findall(r'href="/topics/paged-\d+"', first)) == 5
    second = web.get("/topics", params={"q": "paged", "page": "2"}).text
    assert "paged-05" in second and "paged-06" in second and "paged-00" not in second
    beyond = web.get("/topics", params={"q": "paged", "page": "99"}).text
    assert "page 2 of 2" in beyond


def test_a_topic_page_shows_each_partitions_offsets_and_replicas(
    web: TestClient, client: Client, topic: str
) -> None:
    client.append(topic, 1, [b"a", b"b", b"c"])
    page = web.get(f"/topics/{topic}").text
    (hw,) = [o.latest for o in client.list_offsets(topic, [1])]
    row = page[page.index('id="partition-1"') :]
    row = row[: row.index("</tr>")]
    assert f"<td>{hw}</td>" in row and "node 0 (leader)" in row


def test_the_record_browser_shows_records_as_text_json_and_hex(
    web: TestClient, client: Client, topic: str
) -> None:
    client.append(topic, 0, [b'{"n": 1}', b"plain", b"\x00\xff"])
    text = web.get(f"/topics/{topic}/records", params={"partition": "0"}).text
    assert "{&#34;n&#34;: 1}" in text and "plain" in text
    pretty = web.get(f"/topics/{topic}/records", params={"decode": "json"}).text
    assert "{\n  &#34;n&#34;: 1\n}" in pretty and "not JSON" in pretty
    hexed = web.get(f"/topics/{topic}/records", params={"decode": "hex", "limit": "1"}).text
    assert "7b 22 6e 22" in hexed and "plain" not in hexed
    assert 'id="next-page"' in hexed


def test_envelope_records_show_their_key_and_headers(web: TestClient, client: Client) -> None:
    name = f"console-env-{next(_names)}"
    client.create_topic(name, 1, format="envelope")
    client.append(name, 0, [Record(b"v1", key=b"customer-42", headers=[("trace", b"abc")])])
    page = web.get(f"/topics/{name}/records").text
    assert "<code>customer-42</code>" in page and "<code>trace=abc</code>" in page


def test_the_record_browser_starts_from_a_time(web: TestClient, client: Client) -> None:
    name = f"console-times-{next(_names)}"
    client.create_topic(name, 1, format="envelope")
    day = 1_767_225_600_000  # 2026-01-01T00:00:00Z
    hour = 3_600_000
    client.append(name, 0, [Record(b"at-%d" % h, timestamp_ms=day + h * hour) for h in range(4)])
    page = web.get(f"/topics/{name}/records", params={"time": "2026-01-01T01:30:00Z"}).text
    assert "at-0" not in page and "at-1" not in page and "at-2" in page and "at-3" in page
    in_ms = web.get(f"/topics/{name}/records", params={"time": str(day + 3 * hour)}).text
    assert "at-2" not in in_ms and "at-3" in in_ms
    later = web.get(f"/topics/{name}/records", params={"time": "2027-01-01T00:00:00Z"}).text
    assert "no record at or after 2027-01-01T00:00:00.000+00:00 yet" in later
    bad = web.get(f"/topics/{name}/records", params={"time": "tomorrow"})
    assert bad.status_code == 400 and "ISO 8601" in bad.text


def test_offsets_out_of_range_and_bad_inputs_are_messages_not_tracebacks(
    web: TestClient, topic: str
) -> None:
    past = web.get(f"/topics/{topic}/records", params={"offset": "999999"})
    assert past.status_code == 200 and "past the high watermark" in past.text
    for params, status, said in [
        ({"partition": "7"}, 404, "partition"),
        ({"partition": "x"}, 400, "partition must be a whole number"),
        ({"decode": "yaml"}, 400, "decode must be one of text, json, hex"),
        ({"limit": "100000"}, 400, "limit must be in"),
    ]:
        resp = web.get(f"/topics/{topic}/records", params=params)
        assert resp.status_code == status, (params, resp.text)
        assert said in resp.text and "Traceback" not in resp.text
    missing = web.get("/topics/no-such-topic")
    assert missing.status_code == 404 and "UNKNOWN_TOPIC" in missing.text


def test_an_unexpected_failure_is_an_internal_error_page_without_details(
    client: Client,
) -> None:
    class Broken(Prober):
        def snapshot(self, client: Client) -> object:  # type: ignore[override]
            raise RuntimeError("secret detail")

    app = create_app(client, ConsoleConfig(), Broken(None, None))
    with TestClient(app, base_url=BASE, raise_server_exceptions=False) as tc:
        resp = tc.get("/")
    assert resp.status_code == 500 and "Internal error" in resp.text
    assert "secret detail" not in resp.text and "Traceback" not in resp.text


def test_producing_or_resetting_offsets_without_signing_in_changes_nothing(
    web: TestClient, client: Client, topic: str
) -> None:
    """Both act as the signed-in user (tested over TLS below): a session that is not signed
    in is refused before anything is sent."""
    before = client.list_offsets(topic, [0])[0].latest
    form = {"csrf": token(web, topic), "partition": "0", "value": "x", "acks": "all"}
    resp = web.post(f"/topics/{topic}/produce", data=form, headers=SAME_ORIGIN)
    assert resp.status_code == 403 and "sign in" in resp.text
    assert client.list_offsets(topic, [0])[0].latest == before
    assert 'id="sign-in-note"' in web.get(f"/topics/{topic}/produce").text


def test_a_post_without_the_token_or_from_another_site_changes_nothing(
    web: TestClient, client: Client, topic: str
) -> None:
    before = client.list_offsets(topic, [0])[0].latest
    form = {"partition": "0", "value": "x", "acks": "all"}
    no_token = web.post(f"/topics/{topic}/produce", data=form, headers=SAME_ORIGIN)
    assert no_token.status_code == 403 and "token" in no_token.text
    evil = {**form, "csrf": token(web, topic)}
    cross = web.post(
        f"/topics/{topic}/produce", data=evil, headers={"origin": "http://evil.example"}
    )
    assert cross.status_code == 403
    assert client.list_offsets(topic, [0])[0].latest == before


def test_a_group_page_shows_lag_and_a_reset_is_a_dry_run_until_confirmed(
    web: TestClient, client: Client, topic: str
) -> None:
    client.append(topic, 0, [b"r"] * 10)
    group = f"billing-{next(_names)}"
    client.commit_offsets(group, {(topic, 0): 3, (topic, 1): 0})
    hw = client.list_offsets(topic, [0])[0].latest
    page = web.get(f"/groups/{group}").text
    row = page[page.index(f'id="lag-{topic}-0"') :]
    assert re.search(rf'<td class="lag bad">{hw - 3}</td>', row[: row.index("</tr>")])
    assert group in web.get("/groups", params={"q": group[:8]}).text
    plan = {"csrf": token(web, topic), "step": "plan", "target": "latest", "topic": topic}
    dry = web.post(f"/groups/{group}/reset", data=plan, headers=SAME_ORIGIN)
    assert dry.status_code == 200 and 'id="dry-run"' in dry.text
    assert {(c.partition, c.offset) for c in client.committed_offsets(group)} == {(0, 3), (1, 0)}
    applied = web.post(
        f"/groups/{group}/reset", data={**plan, "step": "apply"}, headers=SAME_ORIGIN
    )
    assert applied.status_code == 403 and "sign in" in applied.text  # applied: as a user
    assert {(c.partition, c.offset) for c in client.committed_offsets(group)} == {(0, 3), (1, 0)}


def test_a_reset_naming_a_partition_the_topic_has_not_is_refused(
    web: TestClient, topic: str
) -> None:
    plan = {"csrf": token(web, topic), "target": "offset", "offset": "1", "topic": topic}
    resp = web.post("/groups/g/reset", data={**plan, "partitions": "0,9"}, headers=SAME_ORIGIN)
    assert resp.status_code == 400 and "has no partition [9]" in resp.text


def test_the_acl_page_lists_no_acls_on_an_open_node(web: TestClient) -> None:
    page = web.get("/acls")
    assert page.status_code == 200 and "0 of 0 ACLs" in page.text


def test_follow_live_streams_records_appended_after_it_started(
    web: TestClient, client: Client, topic: str
) -> None:
    start = client.list_offsets(topic, [0])[0].latest
    client.append(topic, 0, [b"live-1", b"live-2"])
    events = []
    url = f"/topics/{topic}/records/live"
    with web.stream("GET", url, params={"partition": "0", "offset": str(start)}) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        for line in resp.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[len("data: ") :]))
                break
    assert "live-1" in events[0]["html"] and "live-2" in events[0]["html"]
    assert events[0]["next"] > start


# -- TLS and token authentication ------------------------------------------------------------

TOKENS = {"User:admin": "admin-console-token", "User:alice": "alice-console-token"}
WHO = re.compile(r'id="signed-in-user">([^<]*)<')


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    work = tmp_path_factory.mktemp("console-authz")
    token_file = work / "tokens"
    token_file.write_text("".join(f"{p} {hash_token(t)}\n" for p, t in TOKENS.items()))
    cluster = DevCluster(
        work / "cluster",
        1,
        tls=True,
        extra_args=[
            "--authorization", "acl",
            "--token-file", str(token_file),
            "--super-users", "User:admin",
        ],
    )  # fmt: skip
    cluster.start()
    yield cluster
    cluster.kill_all()


def console_as(cluster: DevCluster, principal: str) -> tuple[Client, TestClient]:
    assert cluster.client_tls is not None
    client = Client(
        cluster.bootstrap,
        tls=ClientTls(cluster.client_tls.ca_file),  # server authentication only
        token=TOKENS[principal],
        retry=RetryPolicy(deadline_ms=10_000),
    )
    app = create_app(client, ConsoleConfig(snapshot_ttl_s=0.0))
    return client, TestClient(app, base_url=BASE, raise_server_exceptions=False)


def test_over_tls_with_a_token_the_console_shows_what_its_principal_may_see(
    secured: DevCluster,
) -> None:
    admin, as_admin = console_as(secured, "User:admin")
    alice, as_alice = console_as(secured, "User:alice")
    try:
        admin.create_topic("secured-orders", 1)
        admin.add_acl("User:alice", "read", topic="secured-", prefix=True)
        assert 'data-state="ready"' in as_alice.get("/").text  # metadata: any caller
        denied = as_alice.get("/acls")
        assert denied.status_code == 403 and "PERMISSION_DENIED" in denied.text
        assert "User:alice may not describe" in denied.text
        listed = as_admin.get("/acls", params={"q": "alice"})
        assert listed.status_code == 200 and "<code>secured-</code>" in listed.text
        assert "prefix" in listed.text
    finally:
        for c in (as_admin, as_alice):
            c.close()
        admin.close()
        alice.close()


def searched(web: TestClient, path: str) -> str:
    """The results of the search `path` starts, as the page's script gets them once the
    job ends (the page shows them itself when it ended within its wait)."""
    page = web.get(path)
    assert page.status_code == 200, page.text
    if 'id="search-summary"' in page.text:
        return page.text
    found = re.search(r'data-url="([^"]+/search/jobs/[^"]+)"', page.text)
    assert found, page.text
    job = wait_until(
        lambda: (doc := web.get(found.group(1)).json())["state"] != "running" and doc,
        "the search ended",
        60,
    )
    assert job["state"] == "done", job
    return str(job["html"])


def test_a_search_finds_records_by_key_value_or_header_within_its_window(
    web: TestClient, client: Client
) -> None:
    name = f"console-search-{next(_names)}"
    client.create_topic(name, 1, format="envelope")
    base = client.append(
        name,
        0,
        [Record(b"v%d" % i, key=b"k-%d" % i, headers=[("h", b"x%d" % i)]) for i in range(30)],
    ).base_offset
    page = searched(web, f"/topics/{name}/search?contains=k-2&where=key")
    offsets = re.findall(r'data-offset="(\d+)"', page)
    assert [int(o) - base for o in offsets] == [2, *range(20, 30)]
    assert "reached the high watermark" in page
    found = searched(web, f"/topics/{name}/search?contains=x7&where=headers")
    assert re.findall(r'data-offset="(\d+)"', found) == [str(base + 7)]
    assert "data-offset" not in searched(web, f"/topics/{name}/search?contains=x7&where=value")
    bounded = searched(web, f"/topics/{name}/search?contains=v&scan=10&offset={base + 5}")
    assert "examined 10 records" in bounded
    assert f"offsets {base + 5} to {base + 15}" in bounded
    assert 'id="search-next"' in bounded and f"offset={base + 15}" in bounded


def test_a_search_is_its_sessions_and_stops_when_cancelled(client: Client) -> None:
    """A search of many small fetches: its progress moves, another browser can neither
    see nor cancel it, and a cancel stops it where it is."""
    name = f"console-long-{next(_names)}"
    client.create_topic(name, 1)
    for _ in range(20):
        client.append(name, 0, [b"x" * 20] * 5000)
    config = ConsoleConfig(snapshot_ttl_s=0.0, search_fetch_bytes=1024)
    app = create_app(client, config)
    other = TestClient(app, base_url=BASE, raise_server_exceptions=False)  # another browser
    with TestClient(app, base_url=BASE, raise_server_exceptions=False) as web:
        page = web.get(f"/topics/{name}/search?contains=nowhere&scan=1000000")
        url = re.search(r'data-url="([^"]+/search/jobs/[^"]+)"', page.text)
        assert url and 'id="search-cancel"' in page.text, page.text
        first = wait_until(lambda: web.get(url.group(1)).json()["records"], "progress", 60)
        wait_until(lambda: web.get(url.group(1)).json()["records"] > first, "it moves", 60)
        other.get("/")  # a session of its own
        assert other.get(url.group(1)).status_code == 400
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert csrf
        stranger = other.post(url.group(1) + "/cancel", data={"csrf": csrf.group(1)})
        assert stranger.status_code == 403  # not its session's token
        cancel = web.post(
            url.group(1) + "/cancel", data={"csrf": csrf.group(1)}, follow_redirects=False
        )
        assert cancel.status_code == 303
        job = wait_until(
            lambda: (d := web.get(url.group(1)).json())["state"] != "running" and d,
            "the search stopped",
            60,
        )
        assert (
            job["state"] == "cancelled"
            and 'stopped: <span id="search-stopped">cancelled' in job["html"]
        )
        assert 0 < job["records"] < 100_000
    app.state.console.prober.close()


def test_produce_and_reset_offsets_act_as_the_signed_in_user(secured: DevCluster) -> None:
    """The console's own principal is a super-user; the user signed in is alice: the
    cluster decides by alice's ACLs, and the console names her as the cluster does."""
    admin, web = console_as(secured, "User:admin")
    try:
        admin.create_topic("as-user", 2)
        admin.create_topic("as-user-raw", 1, format="raw")
        admin.append("as-user", 0, [b"r"] * 5, acks="all")
        admin.commit_offsets("as-user-group", {("as-user", 0): 1})
        csrf = re.search(r'name="csrf" value="([^"]+)"', web.get("/login").text)
        assert csrf
        signed = web.post("/login", data={"csrf": csrf.group(1), "token": TOKENS["User:alice"]})
        assert signed.status_code == 200 and WHO.findall(signed.text) == ["User:alice"]
        form = {"csrf": token(web, "as-user"), "partition": "1", "value": "hi", "acks": "all"}
        denied = web.post("/topics/as-user/produce", data=form, headers=SAME_ORIGIN)
        assert denied.status_code == 400 and "PERMISSION_DENIED: User:alice may not" in denied.text
        admin.add_acl("User:alice", "write", topic="as-user", prefix=True)
        done = web.post("/topics/as-user/produce", data=form, headers=SAME_ORIGIN)
        found = re.search(r"partition 1 at offset (\d+)", done.text)
        assert done.status_code == 200 and found, done.text
        assert admin.fetch("as-user", 1, int(found.group(1))).records.values[0] == b"hi"
        raw = {**form, "partition": "0", "headers": "a=1"}
        refused = web.post("/topics/as-user-raw/produce", data=raw, headers=SAME_ORIGIN)
        assert refused.status_code == 400 and "is raw" in refused.text
        plan = {"csrf": form["csrf"], "target": "latest", "topic": "as-user", "step": "apply"}
        no_acl = web.post("/groups/as-user-group/reset", data=plan, headers=SAME_ORIGIN)
        assert "PERMISSION_DENIED" in no_acl.text or "User:alice may not" in no_acl.text
        admin.add_acl("User:alice", "read", group="as-user-group")
        admin.add_acl("User:alice", "read", topic="as-user")
        applied = web.post("/groups/as-user-group/reset", data=plan, headers=SAME_ORIGIN)
        assert applied.status_code == 200 and "reset 2 partition(s)" in applied.text
        committed = {c.partition: c.offset for c in admin.committed_offsets("as-user-group")}
        assert committed == {o.partition: o.latest for o in admin.list_offsets("as-user")}
        assert committed[1] > 0
    finally:
        web.close()
        admin.close()
