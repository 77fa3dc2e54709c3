"""The console's admin forms and record search, without a cluster: a POST without its
session's CSRF token or from a session that is not signed in is refused before anything is
sent (the client points at a port where nothing listens: a call would fail otherwise), the
sessions' bounds, the inputs' bounds, what a search matches, and when sign-in is off."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from replog.client import Client, RetryPolicy
from replog.console import forms, search
from replog.console.app import create_app
from replog.console.server import admin_refusal
from replog.console.sessions import SESSION_COOKIE, Sessions, SignInThrottle, fingerprint
from replog.console.state import ConsoleConfig

BASE = "http://127.0.0.1:8080"
NOWHERE = "127.0.0.1:9"  # discard: nothing answers a gRPC call there


@pytest.fixture
def web() -> Iterator[TestClient]:
    with Client(NOWHERE, timeout_s=1, retry=RetryPolicy(deadline_ms=1000)) as client:
        app = create_app(client, ConsoleConfig())
        yield TestClient(app, base_url=BASE, raise_server_exceptions=False)
        app.state.console.prober.close()


def csrf(web: TestClient) -> str:
    """The session's token, as a browser gets it: from a form (the sign-in page's)."""
    found = re.search(r'name="csrf" value="([^"]+)"', web.get("/login").text)
    assert found
    return found.group(1)


ADMIN_POSTS = [
    ("/topics/new", {"name": "t", "partitions": "1"}),
    ("/topics/t/delete", {"confirm_name": "t"}),
    ("/topics/t/partitions", {"partitions": "3", "confirm": "yes"}),
    ("/topics/t/configs", {"name": "retention.ms", "value": "1", "action": "set"}),
    ("/acls/add", {"principal": "User:a", "operation": "read", "name": "t"}),
    ("/acls/remove", {"principal": "User:a", "operation": "read", "name": "t", "confirm": "yes"}),
    ("/quotas/set", {"principal": "User:a", "produce_bytes_per_s": "10"}),
    ("/topics/t/produce", {"value": "x", "acks": "all"}),  # as the user, like the above
    ("/groups/g/reset", {"step": "apply", "target": "earliest", "topic": "t"}),
]


@pytest.mark.parametrize(("path", "form"), ADMIN_POSTS)
def test_an_admin_post_without_the_sessions_token_is_refused(
    web: TestClient, path: str, form: dict[str, str]
) -> None:
    token = csrf(web)  # a session exists; the form below does not carry its token
    assert web.post(path, data=form).status_code == 403
    assert web.post(path, data={**form, "csrf": token + "x"}).status_code == 403
    other = TestClient(web.app, base_url=BASE)  # another browser: no session cookie
    refused = other.post(path, data={**form, "csrf": token})
    assert refused.status_code == 403 and "token is missing or stale" in refused.text


@pytest.mark.parametrize(("path", "form"), ADMIN_POSTS)
def test_an_admin_post_from_a_session_not_signed_in_is_refused(
    web: TestClient, path: str, form: dict[str, str]
) -> None:
    refused = web.post(path, data={**form, "csrf": csrf(web)})
    assert refused.status_code == 403 and "sign in" in refused.text


def test_sign_in_needs_the_token_and_a_cluster_reached_over_tls(web: TestClient) -> None:
    assert web.post("/login", data={"token": "secret"}).status_code == 403  # no CSRF token
    refused = web.post("/login", data={"token": "secret", "csrf": csrf(web)})
    assert refused.status_code == 400 and "never sent in the clear" in refused.text
    assert "secret" not in refused.text  # the token is never echoed


def test_the_session_cookie_is_http_only_and_same_site_strict(web: TestClient) -> None:
    cookie = web.get("/login").headers["set-cookie"]
    assert cookie.startswith(SESSION_COOKIE + "=")
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie


def test_sign_in_is_off_on_a_plain_listener_off_loopback_unless_insecure() -> None:
    assert admin_refusal("127.0.0.1", False) == "" and admin_refusal("::1", False) == ""
    assert admin_refusal("localhost", False) == ""
    assert "in the clear" in admin_refusal("0.0.0.0", False)
    assert admin_refusal("10.0.0.5", True) == ""


def test_sessions_are_bounded_expire_when_idle_and_change_id_on_sign_in() -> None:
    now = [0.0]
    sessions = Sessions(sessions_max=2, idle_s=10, lifetime_s=100, clock=lambda: now[0])
    a, b, c = sessions.new(), sessions.new(), sessions.new()
    assert sessions.get(a.session_id) is None  # the least recently used went first
    assert sessions.get(b.session_id) is b and sessions.get(c.session_id) is c
    now[0] = 11
    assert sessions.get(b.session_id) is None  # idle too long
    with Client(NOWHERE) as client:
        signed = sessions.sign_in(c, client, fingerprint("tok"))
    assert signed.session_id != c.session_id and signed.csrf_token != c.csrf_token
    assert sessions.get(c.session_id) is None and signed.principal == fingerprint("tok")


def test_admin_inputs_are_bounded() -> None:
    assert forms.configs("retention.ms=1000\n\nsegment.bytes=4096") == {
        "retention.ms": "1000",
        "segment.bytes": "4096",
    }
    for bad in ("retention.ms", "a b=1", "x=" + "9" * 1001):
        with pytest.raises(forms.FormError):
            forms.configs(bad)
    with pytest.raises(forms.FormError, match="at most 100"):
        forms.configs("\n".join(f"c{i}=1" for i in range(101)))
    assert forms.principal(" User:alice ") == "User:alice"
    for bad in ("alice", "User:", "User:" + "a" * 300):
        with pytest.raises(forms.FormError):
            forms.principal(bad)


def test_a_search_matches_key_value_or_header_as_asked() -> None:
    meta = (b"customer-7", (("source", b"web"),), 0)
    assert search.matches(b"tomer-7", "key", b"v", meta)
    assert not search.matches(b"tomer-7", "value", b"v", meta)
    assert search.matches(b"we", "headers", b"v", meta)
    assert search.matches(b"sour", "any", b"v", meta)
    assert search.matches(b"v", "value", b"v", None)
    assert not search.matches(b"x", "any", None, None)  # a tombstone of a raw topic
    assert search.needle_of("0x00ff") == b"\x00\xff" and search.needle_of("0x") == b"0x"
    with pytest.raises(forms.FormError):
        search.needle_of("0xzz")


def test_a_search_window_is_bounded_in_records_examined(web: TestClient) -> None:
    page = web.get("/topics/t/search?contains=a&scan=1000001")
    assert page.status_code == 400 and "must be in [1, 1000000]" in page.text


def test_new_browsers_never_evict_a_signed_in_session_and_sign_ins_are_bounded() -> None:
    sessions = Sessions(sessions_max=2, signed_in_max=1)
    with Client(NOWHERE) as c1, Client(NOWHERE) as c2:
        alice = sessions.sign_in(sessions.new(), c1, "a")
        for _ in range(5):
            sessions.new()
        assert sessions.get(alice.session_id) is alice and len(sessions) == 3
        bob = sessions.sign_in(sessions.new(), c2, "b")
        assert sessions.get(alice.session_id) is None and sessions.get(bob.session_id) is bob


def test_failed_sign_ins_are_throttled_per_address_for_a_window() -> None:
    now = [0.0]
    throttle = SignInThrottle(failures_max=2, window_s=60, clock=lambda: now[0])
    throttle.failed("10.0.0.1")
    throttle.failed("10.0.0.1")
    assert not throttle.allowed("10.0.0.1") and throttle.allowed("10.0.0.2")
    now[0] = 61
    assert throttle.allowed("10.0.0.1")
