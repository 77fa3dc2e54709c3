"""Why a client cannot reach a node, in words a user can act on (fail fast, with a hint).

gRPC reports a node it could not connect to as a bare `UNAVAILABLE` ("failed to connect to
all addresses; ... Connection refused", "... Socket closed", "... Tls handshake failed
...CERTIFICATE_VERIFY_FAILED...") or, when nothing answered, as a passed deadline. Retried,
such a failure costs the whole retry budget (30 s) and ends with gRPC's words. `check`
turns it into a `ConnectFailedError` whose message names the likely cause:

- `certificate` (TLS client; CERTIFICATE_VERIFY_FAILED or a peer name mismatch):
  "certificate verify failed: ...";
- `not_tls` (TLS client; the handshake failed otherwise, e.g. WRONG_VERSION_NUMBER):
  "the server does not speak TLS there";
- `tls_required` (plaintext client; "Socket closed"/"Connection reset", and a TLS handshake
  probe succeeds): "the server speaks TLS: pass --tls-ca / REPLOG_TLS_CA";
- `refused` ("Connection refused"): "nothing listens on HOST:PORT";
- `dns` ("DNS resolution failed"): "cannot resolve the host name";
- `timeout` (no answer within the attempt deadline; a TCP probe says why): "no route /
  timed out connecting to HOST:PORT", or "accepts connections but did not answer".

Each is final only while the client has never reached any node and every bootstrap
address failed so (`Routing.connect_failed`): one bad address in a list does not fail a
call another address serves, and once the cluster answered, a refused connection is a
node restarting, and the client fails over as usual. The probes (a TCP connect, a TLS
handshake that verifies nothing) run only before the first contact, at most
`PROBE_TIMEOUT_S` each; they block, so the asyncio client runs `check` in a thread.
"""

from __future__ import annotations

import re
import socket
import ssl

from replog.client.routing import Routing
from replog.errors import ConnectFailedError, DeadlineExceededError, ReplogError, UnavailableError

PROBE_TIMEOUT_S = 1.0
TLS_HINT = "pass --tls-ca / REPLOG_TLS_CA (tls=ClientTls(ca_file); Spark: tls.ca)"
_VERIFY = re.compile(r"CERTIFICATE_VERIFY_FAILED:?\s*([^:]*)")


def host_port(address: str) -> tuple[str, int] | None:
    """`host:port` or `[v6]:port` -> (host, port); None for other targets (dns:///..., unix:)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "/" in address:
        return None
    return host.strip("[]") or "localhost", int(port)


def transport_failure(err: ReplogError) -> bool:
    """A failure gRPC itself reported (no replog ErrorInfo): the server may never have answered."""
    if type(err) is DeadlineExceededError:
        return True
    return type(err) is UnavailableError and "grpc_code" in err.metadata


def speaks_tls(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool | None:
    """Whether `address` completes a TLS handshake (certificates not checked); None when no
    TCP connection could be made."""
    hp = host_port(address)
    if hp is None:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2"])
    try:
        sock = socket.create_connection(hp, timeout=timeout_s)
    except OSError:
        return None
    try:
        with ctx.wrap_socket(sock) as tls:
            tls.getpeercert(binary_form=True)
            return True
    except ssl.SSLError as exc:
        # A TLS alert (e.g. a client certificate demanded) is TLS; bytes that are no TLS
        # record (an HTTP/2 server's GOAWAY) are not.
        return "ALERT" in str(exc).upper()
    except OSError:
        return False
    finally:
        sock.close()


def tcp_probe(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> str:
    """What a plain TCP connect to `address` says: "ok", "refused", "dns", "no route" or
    "timeout"."""
    hp = host_port(address)
    if hp is None:
        return "ok"
    try:
        socket.create_connection(hp, timeout=timeout_s).close()
    except ConnectionRefusedError:
        return "refused"
    except socket.gaierror:
        return "dns"
    except TimeoutError:
        return "timeout"
    except OSError:
        return "no route"
    return "ok"


def diagnose(err: ReplogError, address: str, tls: bool, *, probe: bool) -> tuple[str, str] | None:
    """(cause, message) when `err` says `address` could not be reached, else None. With
    `probe`, a TCP connect or TLS handshake may be made to tell causes apart."""
    if not transport_failure(err):
        return None
    text = err.message
    where = f"cannot reach {address}"
    if tls and ("CERTIFICATE_VERIFY_FAILED" in text or "Peer name" in text):
        found = _VERIFY.search(text)
        why = found.group(1).strip() if found and found.group(1).strip() else text
        return "certificate", (
            f"{where}: certificate verify failed: {why} (is --tls-ca / REPLOG_TLS_CA the "
            "cluster's CA, and the name verified one its certificate holds?)"
        )
    if tls and ("handshake failed" in text.lower() or "WRONG_VERSION_NUMBER" in text):
        return "not_tls", (
            f"{where}: the TLS handshake failed; the server does not speak TLS there "
            "(drop --tls-ca / REPLOG_TLS_CA, or give the node's TLS address)"
        )
    if "Connection refused" in text:
        return "refused", f"{where}: nothing listens on {address} (connection refused)"
    if any(s in text for s in ("DNS resolution failed", "errors resolving", "Domain name not")):
        return "dns", f"{where}: cannot resolve the host name"
    if "No route to host" in text or "Network is unreachable" in text:
        return "timeout", f"{where}: no route to {address}"
    if "before receiving SETTINGS" in text:
        return "timeout", (
            f"{where}: it accepts connections but did not answer (a paused or overloaded "
            "process, or not a replog node?)"
        )
    if "Connection timed out" in text:
        return "timeout", f"{where}: timed out connecting to {address}"
    if not probe:
        return None
    if not tls and any(s in text for s in ("Socket closed", "Connection reset", "Broken pipe")):
        if speaks_tls(address):
            return "tls_required", f"{where}: the server speaks TLS: {TLS_HINT}"
        return None
    if isinstance(err, DeadlineExceededError):
        return _timed_out(address, tls, where)
    return None


def _timed_out(address: str, tls: bool, where: str) -> tuple[str, str] | None:
    tcp = tcp_probe(address)
    if tcp == "refused":
        return "refused", f"{where}: nothing listens on {address} (connection refused)"
    if tcp == "dns":
        return "dns", f"{where}: cannot resolve the host name"
    if tcp in ("timeout", "no route"):
        return "timeout", f"{where}: {tcp}: timed out connecting to {address}"
    if not tls and speaks_tls(address):
        return "tls_required", f"{where}: the server speaks TLS: {TLS_HINT}"
    return "timeout", (
        f"{where}: it accepts connections but did not answer in time (a paused or "
        "overloaded process, or not a replog node?)"
    )


def check(err: ReplogError, address: str, tls: bool, routing: Routing) -> ReplogError:
    """What a failed attempt to `address` raises: `err`, or a final `ConnectFailedError`
    (see the module doc). Notes first contact in `routing` (any answer of a server)."""
    if not transport_failure(err):
        routing.answered(address)
        return err
    found = diagnose(err, address, tls, probe=not routing.reached)
    if found is None:
        return err
    cause, message = found
    if routing.connect_failed(address):
        return ConnectFailedError(message, cause=cause, address=address)
    return err
