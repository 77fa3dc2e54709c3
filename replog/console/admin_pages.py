"""Administration from the console: sign-in, topics (create, delete, grow, configs), ACLs
and quotas (docs/console.md, Administration).

    GET  /login, POST /login          sign in with a bearer token of the cluster
    POST /logout
    GET  /topics/new, POST            create a topic
    POST /topics/{topic}/delete       delete it: the form must repeat the topic's name
    POST /topics/{topic}/partitions   grow it (a confirmation step first)
    POST /topics/{topic}/configs      set a config, or reset one (a confirmation step first)
    POST /acls/add, /acls/remove      (remove: a confirmation step first)
    GET  /quotas, POST /quotas/set    (all rates 0 removes an entry: a confirmation first)

Every change is one call of the public gRPC admin API, made with the signed-in user's token
(sessions.py): the nodes validate it, authorize it by their ACLs and write their
`audit.change` line, exactly as for the CLI; the console adds its own `audit.console` line
on the logger `replog.audit` (the session's token fingerprint, the operation, the
resource, the outcome: OK or the error's reason, and the browser's address). A POST needs
the session's CSRF token (state.Console.posted_form) and a signed-in session; nothing is
sent to the cluster otherwise. A refused or failed call shows the typed error's message.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from replog.client import Client, RetryPolicy
from replog.console import forms
from replog.console.sessions import TOKEN_CHARS_MAX, Session, fingerprint
from replog.console.state import Console, console_of, set_session_cookie, text_field
from replog.errors import ReplogError

T = TypeVar("T")
AUDIT_LOGGER = "replog.audit"  # the nodes' audit logger (server/edge/audit.py)
_audit = logging.getLogger(AUDIT_LOGGER)
FORMATS = ("envelope", "raw")
TIMESTAMP_TYPES = ("create_time", "log_append_time")
ACL_OPERATIONS = ("read", "write", "create", "delete", "describe", "alter", "idempotent_write")
ACL_RESOURCES = ("topic", "group", "producer", "cluster")
QUOTA_RATES = (
    "produce_bytes_per_s",
    "fetch_bytes_per_s",
    "requests_per_s",
    "metadata_writes_per_s",
)
DONE = {  # ?done= on the page a change redirects to (a fixed text: nothing reflected)
    "created": "Topic created.",
    "grown": "Partitions added.",
    "config-set": "Config set.",
    "config-reset": "Config reset to its default.",
    "acl-added": "ACL added.",
    "acl-removed": "ACL removed.",
    "quota-set": "Quota set.",
    "deleted": "Topic deleted.",
    "signed-in": "Signed in.",
    "signed-out": "Signed out.",
}


class NotSignedIn(forms.FormError):
    """An admin POST from a session that is not signed in (403)."""


def _clip(value: object) -> str:
    text = str(value)
    return text if len(text) <= 200 else text[:200] + "..."


def audit(request: Request, session: Session, operation: str, resource: str, outcome: str) -> None:
    """The console's `audit.console` line (never dropped, no secrets)."""
    peer = request.client.host if request.client else "?"
    _audit.info(
        "audit.console principal=%s token=%s operation=%s resource=%r outcome=%s peer=%s "
        "via=console",
        session.user or "?",
        session.principal,
        operation,
        _clip(resource),
        outcome,
        peer,
    )


async def admin_form(request: Request) -> tuple[Console, Session, FormData]:
    """The form of an admin POST: its CSRF token checks out and its session is signed in."""
    console = console_of(request)
    form = await console.posted_form(request)
    return console, signed_in(request), form


def signed_in(request: Request) -> Session:
    """The request's session, signed in (else NotSignedIn: nothing is sent)."""
    console = console_of(request)
    if console.config.admin_refusal:
        raise NotSignedIn(console.config.admin_refusal)
    session = console.session_of(request)
    if session is None or session.client is None:
        raise NotSignedIn("sign in (top right) to change the cluster")
    return session


async def change(
    request: Request,
    session: Session,
    operation: str,
    resource: str,
    fn: Callable[..., T],
    /,
    *args: Any,
    **kwargs: Any,
) -> T:
    """`fn(*args, **kwargs)`, a call of the session's client, audited with its outcome
    (positional-only: `kwargs` may name `operation` or `principal`, as ACL calls do)."""
    try:
        result = await console_of(request).call(fn, *args, **kwargs)
    except ReplogError as err:
        audit(request, session, operation, resource, err.reason)
        raise
    audit(request, session, operation, resource, "OK")
    return result


def field(form: FormData, name: str) -> str:
    return text_field(form, name) or ""


def redirect(path: str, done: str) -> Response:
    assert done in DONE
    return RedirectResponse(f"{path}?done={done}", 303)


def confirm(
    request: Request, title: str, what: str, action: str, fields: Mapping[str, str], cancel: str
) -> Response:
    """The confirmation step of a destructive change: the same form again, with confirm=yes."""
    context = {"title": title, "what": what, "action": action, "fields": fields, "cancel": cancel}
    return console_of(request).render(request, "confirm.html", context)


# -- sign-in -------------------------------------------------------------------------------


async def login_page(request: Request) -> Response:
    console = console_of(request)
    context: dict[str, Any] = {"error": "", "next": _next_path(request.query_params.get("next"))}
    if request.method == "GET":
        return console.render(request, "login.html", context)
    form = await console.posted_form(request)
    context["next"] = _next_path(text_field(form, "next"))
    token = field(form, "token").strip()
    address = request.client.host if request.client else "?"
    try:
        if console.config.admin_refusal:
            raise forms.FormError(console.config.admin_refusal)
        if not console.sign_ins.allowed(address):
            raise forms.FormError("too many failed sign-ins from here: wait a minute")
        if not token or len(token) > TOKEN_CHARS_MAX or not token.isprintable():
            raise forms.FormError(f"a token is 1 to {TOKEN_CHARS_MAX} printable characters")
        client, me = await console.call(_signed_in_client, console.client, token)
    except (forms.FormError, ReplogError) as err:
        if isinstance(err, ReplogError):
            console.sign_ins.failed(address)
        context["error"] = err.message
        status = 403 if isinstance(err, ReplogError) else 400
        return console.render(request, "login.html", context, status)
    old = console.session_of(request) or console.sessions.new()
    user = str(me["principal"])
    session = console.sessions.sign_in(old, client, fingerprint(token), user)
    audit(request, session, "sign_in", "console", "OK")
    response = RedirectResponse(context["next"], 303)
    set_session_cookie(request, response, session)
    return response


def _signed_in_client(console_client: Client, token: str) -> tuple[Client, dict[str, object]]:
    """A client of the cluster that sends `token`, once the cluster took it, and who the
    cluster takes it for (WhoAmI)."""
    if console_client.tls is None:
        raise forms.FormError(
            "the console reaches the cluster without TLS: a token is never sent in the clear"
        )
    address = ",".join(console_client.known_nodes)
    retry = RetryPolicy(deadline_ms=int(console_client.timeout_s * 1000))
    client = Client(
        address,
        timeout_s=console_client.timeout_s,
        tls=console_client.tls,
        token=token,
        retry=retry,
    )
    try:
        me = client.whoami()  # any caller may: a token no token file holds is refused
        client.refresh_metadata()
    except BaseException:
        client.close()
        raise
    return client, me


def _next_path(text: str | None) -> str:
    """Where to go after signing in: a path of this console only (no open redirect)."""
    if text and text.startswith("/") and not text.startswith("//") and len(text) < 500:
        return text if text.isprintable() and "\\" not in text else "/"
    return "/"


async def logout(request: Request) -> Response:
    console = console_of(request)
    await console.posted_form(request)
    session = console.session_of(request)
    if session is not None:
        if session.signed_in:
            audit(request, session, "sign_out", "console", "OK")
        console.sessions.end(session)
    return RedirectResponse("/?done=signed-out", 303)


# -- topics --------------------------------------------------------------------------------


async def new_topic_page(request: Request) -> Response:
    console = console_of(request)
    fields = {
        "name": "",
        "partitions": "1",
        "replication_factor": "",
        "format": "envelope",
        "timestamp_type": "create_time",
        "configs": "",
    }
    context: dict[str, Any] = {
        "fields": fields,
        "error": "",
        "formats": FORMATS,
        "timestamp_types": TIMESTAMP_TYPES,
    }
    if request.method == "GET":
        return console.render(request, "topic_new.html", context)
    console, session, form = await admin_form(request)
    context["fields"] = fields = {k: field(form, k) for k in fields}
    try:
        name = forms.name(fields["name"], "name")
        partitions = forms.integer(fields["partitions"], "partitions", 1, forms.PARTITIONS_MAX)
        rf = forms.integer(fields["replication_factor"], "replication factor", 0, 1000, default=0)
        fmt = forms.choice(fields["format"], "format", FORMATS, "envelope")
        ts = forms.choice(
            fields["timestamp_type"], "timestamp type", TIMESTAMP_TYPES, "create_time"
        )
        configs = forms.configs(fields["configs"])
        assert session.client is not None
        await change(
            request,
            session,
            "create",
            f"topic:{name}",
            session.client.create_topic,
            name,
            partitions,
            rf,
            format=fmt,
            timestamp_type=ts,
            configs=configs,
        )
    except (forms.FormError, ReplogError) as err:
        context["error"] = err.message
        return console.render(request, "topic_new.html", context, 400)
    return redirect(f"/topics/{forms.quoted(name)}", "created")


async def delete_topic(request: Request) -> Response:
    _console, session, form = await admin_form(request)
    name = forms.name(request.path_params["topic"], "topic")
    if field(form, "confirm_name") != name:
        raise forms.FormError("to delete the topic, type its name exactly in the box")
    assert session.client is not None
    await change(request, session, "delete", f"topic:{name}", session.client.delete_topic, name)
    return redirect("/topics", "deleted")


async def grow_partitions(request: Request) -> Response:
    _console, session, form = await admin_form(request)
    name = forms.name(request.path_params["topic"], "topic")
    count = forms.integer(field(form, "partitions"), "partitions", 1, forms.PARTITIONS_MAX)
    if field(form, "confirm") != "yes":
        what = (
            f"Grow topic {name} to {count} partitions. This cannot be undone (a topic never "
            "shrinks), and keyed records sent from now on may go to other partitions."
        )
        fields = {"partitions": str(count)}
        back = f"/topics/{forms.quoted(name)}"
        return confirm(request, "Grow partitions", what, request.url.path, fields, back)
    assert session.client is not None
    resource = f"topic:{name} partitions={count}"
    await change(
        request,
        session,
        "create_partitions",
        resource,
        session.client.create_partitions,
        name,
        count,
    )
    return redirect(f"/topics/{forms.quoted(name)}", "grown")


async def alter_config(request: Request) -> Response:
    _console, session, form = await admin_form(request)
    topic = forms.name(request.path_params["topic"], "topic")
    config = forms.config_name(field(form, "name"))
    action = forms.choice(field(form, "action"), "action", ("set", "reset"), "set")
    assert session.client is not None
    if action == "set":
        value = forms.config_value(field(form, "value"))
        resource = f"topic:{topic} {config}={value}"
        call = session.client.alter_configs
        await change(request, session, "alter_configs", resource, call, topic, set={config: value})
        return redirect(f"/topics/{forms.quoted(topic)}", "config-set")
    if field(form, "confirm") != "yes":
        what = f"Reset config {config} of topic {topic} to the node's default."
        fields = {"name": config, "action": "reset"}
        back = f"/topics/{forms.quoted(topic)}"
        return confirm(request, "Reset a config", what, request.url.path, fields, back)
    resource = f"topic:{topic} {config}"
    call = session.client.alter_configs
    await change(request, session, "reset_config", resource, call, topic, delete=[config])
    return redirect(f"/topics/{forms.quoted(topic)}", "config-reset")


# -- ACLs and quotas -----------------------------------------------------------------------


def _acl_fields(form: FormData) -> tuple[dict[str, str], dict[str, Any], str]:
    """The ACL a form names: its fields, the client's keyword arguments, how it is shown."""
    fields = {k: field(form, k) for k in ("principal", "operation", "resource_type", "name")}
    fields["prefix"] = "yes" if field(form, "prefix") == "yes" else ""
    principal = forms.principal(fields["principal"])
    operation = forms.choice(fields["operation"], "operation", (*ACL_OPERATIONS, "all"), "")
    kind = forms.choice(fields["resource_type"], "resource type", ACL_RESOURCES, "topic")
    if not operation:
        raise forms.FormError("operation is required")
    kwargs: dict[str, Any] = {"prefix": bool(fields["prefix"])}
    if kind == "cluster":
        kwargs["cluster"] = True
        shown = f"acl {principal} {operation} cluster"
    else:
        kwargs[kind] = forms.name(fields["name"], f"{kind} name")
        shown = f"acl {principal} {operation} {kind}{'-prefix' if kwargs['prefix'] else ''}:"
        shown += kwargs[kind]
    return fields, {"principal": principal, "operation": operation, **kwargs}, shown


async def add_acl(request: Request) -> Response:
    _console, session, form = await admin_form(request)
    _fields, acl, shown = _acl_fields(form)
    assert session.client is not None
    await change(request, session, "add_acl", shown, session.client.add_acl, **acl)
    return redirect("/acls", "acl-added")


async def remove_acl(request: Request) -> Response:
    _console, session, form = await admin_form(request)
    fields, acl, shown = _acl_fields(form)
    if field(form, "confirm") != "yes":
        return confirm(
            request, "Remove an ACL", f"Remove {shown}.", "/acls/remove", fields, "/acls"
        )
    assert session.client is not None
    await change(request, session, "remove_acl", shown, session.client.remove_acl, **acl)
    return redirect("/acls", "acl-removed")


async def quotas_page(request: Request) -> Response:
    console = console_of(request)
    quotas = await console.call(console.client.list_quotas)
    return console.render(request, "quotas.html", {"rows": quotas, "rates": QUOTA_RATES})


async def set_quota(request: Request) -> Response:
    _console, session, form = await admin_form(request)
    principal = forms.principal(field(form, "principal"))
    rates = {r: forms.integer(field(form, r), r, 0, 2**63 - 1, default=0) for r in QUOTA_RATES}
    shown = f"quota:{principal} " + " ".join(f"{k}={v}" for k, v in rates.items())
    if not any(rates.values()) and field(form, "confirm") != "yes":
        fields = {"principal": principal, **{k: "0" for k in rates}}
        what = f"Remove the quotas of {principal} (every rate 0: unlimited)."
        return confirm(request, "Remove a quota", what, "/quotas/set", fields, "/quotas")
    assert session.client is not None
    await change(request, session, "set_quota", shown, session.client.set_quota, principal, **rates)
    return redirect("/quotas", "quota-set")
