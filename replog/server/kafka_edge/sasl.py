"""SASL on the Kafka listener: PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802, RFC 7677).

Pure exchanges (no sockets); the credentials they check come from files the operator
keeps (reloaded when they change, as the token file is; passwords are never stored):

* PLAIN, one message `authzid NUL authcid NUL password`: the password is a bearer token
  of `--token-file` (edge/auth.py), whose entry must be `User:<authcid>`; an authzid, if
  any, must equal the authcid. Served over TLS only (settings: credentials never cross
  the network in the clear).
* SCRAM, two round trips: client-first `n,[a=<authzid>],n=<user>,r=<cnonce>[,ext]`,
  server-first `r=<cnonce><snonce>,s=<salt base64>,i=<iterations>`, client-final
  `c=<base64 of the gs2 header>,r=<nonce>,p=<proof base64>`, server-final
  `v=<server signature base64>` (`e=<error>` on failure). Channel binding (`p=`) and
  Kafka's delegation tokens (`tokenauth=true`) are refused. A user with no credential gets
  a server-first with a salt derived from a per-process secret, so the answer does not say
  which users exist; its proof never matches.

The SCRAM credentials file (`--kafka-scram-file`), one credential a line, `#` comments,
what Kafka's `kafka-configs --add-config 'SCRAM-SHA-256=[...]'` keeps::

    User:alice SCRAM-SHA-256 iterations=8192 salt=<base64> stored_key=<base64> server_key=<base64>

`replog token scram --principal User:alice --mechanism SCRAM-SHA-256 < password` prints
one (`--iterations`, default 8192).
The authenticated principal is `User:<name>`: the namespace of gRPC's tokens and client
certificates, so the same ACLs apply.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from replog.errors import InvalidConfigError, UnauthenticatedError
from replog.server.edge.watched_file import WatchedFile

PLAIN: Final = "PLAIN"
MECHANISMS: Final[dict[str, str]] = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
ITERATIONS_MIN: Final = 4096  # Kafka's minimum (and RFC 7677's advice)
ITERATIONS_MAX: Final = 1 << 20
MESSAGE_BYTES_MAX: Final = 4096
NONCE_CHARS_MAX: Final = 256
RELOAD_CHECK_S: Final = 1.0
_FAKE_SECRET: Final = secrets.token_bytes(32)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise UnauthenticatedError("invalid base64 in the SCRAM message") from None


@dataclass(frozen=True, slots=True)
class ScramCredential:
    mechanism: str
    iterations: int
    salt: bytes
    stored_key: bytes
    server_key: bytes

    def entry(self, principal: str) -> str:
        """Its line in the SCRAM credentials file."""
        return (
            f"{principal} {self.mechanism} iterations={self.iterations} salt={_b64(self.salt)} "
            f"stored_key={_b64(self.stored_key)} server_key={_b64(self.server_key)}"
        )


def _hmac(hash_name: str, key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hash_name).digest()


def scram_keys(hash_name: str, password: str, salt: bytes, iterations: int) -> tuple[bytes, bytes]:
    """(stored_key, server_key) of RFC 5802 section 3 (SASLprep not applied: ASCII
    passwords are what interoperate)."""
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode(), salt, iterations)
    client_key = _hmac(hash_name, salted, b"Client Key")
    return hashlib.new(hash_name, client_key).digest(), _hmac(hash_name, salted, b"Server Key")


def scram_credential(
    mechanism: str, password: str, *, salt: bytes | None = None, iterations: int = 8192
) -> ScramCredential:
    hash_name = MECHANISMS.get(mechanism)
    if hash_name is None:
        raise InvalidConfigError(f"SCRAM mechanism must be one of {sorted(MECHANISMS)}")
    if not ITERATIONS_MIN <= iterations <= ITERATIONS_MAX:
        raise InvalidConfigError(f"iterations must be in [{ITERATIONS_MIN}, {ITERATIONS_MAX}]")
    salt = secrets.token_bytes(32) if salt is None else salt
    stored, server = scram_keys(hash_name, password, salt, iterations)
    return ScramCredential(mechanism, iterations, salt, stored, server)


def _parse_entry(line: str, where: str) -> tuple[str, ScramCredential]:
    parts = line.split()
    fields = dict(p.partition("=")[::2] for p in parts[2:])
    try:
        if len(parts) != 6 or not parts[0].startswith("User:") or parts[1] not in MECHANISMS:
            raise ValueError
        iterations = int(fields["iterations"])
        if not ITERATIONS_MIN <= iterations <= ITERATIONS_MAX:
            raise ValueError
        salt, stored, server = (
            base64.b64decode(fields[k], validate=True) for k in ("salt", "stored_key", "server_key")
        )
    except (ValueError, KeyError):
        raise InvalidConfigError(
            f"{where}: expected `User:<name> SCRAM-SHA-256|SCRAM-SHA-512 iterations=<n> "
            "salt=<base64> stored_key=<base64> server_key=<base64>`"
        ) from None
    return parts[0], ScramCredential(parts[1], iterations, salt, stored, server)


def _parse_credentials(path: Path) -> dict[tuple[str, str], ScramCredential]:
    entries: dict[tuple[str, str], ScramCredential] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if line:
            principal, credential = _parse_entry(line, f"{path}:{number}")
            entries[(principal, credential.mechanism)] = credential
    return entries


class ScramFile:
    """SCRAM credentials by (principal, mechanism), from a file re-read when it changes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = WatchedFile(path, _parse_credentials, RELOAD_CHECK_S)

    def lookup(self, principal: str, mechanism: str) -> ScramCredential | None:
        return self._file.current().get((principal, mechanism))


Lookup = Callable[[str, str], ScramCredential | None]  # principal, mechanism
Tokens = Callable[[str], str | None]  # token -> its principal


def _text(message: bytes) -> str:
    if len(message) > MESSAGE_BYTES_MAX:
        raise UnauthenticatedError("the SASL message is too long")
    try:
        return message.decode()
    except UnicodeDecodeError:
        raise UnauthenticatedError("the SASL message is not UTF-8") from None


def plain(message: bytes, tokens: Tokens | None) -> str:
    """The principal a PLAIN message authenticates (UnauthenticatedError otherwise)."""
    parts = _text(message).split("\0")
    if len(parts) != 3 or not parts[1] or not parts[2]:
        raise UnauthenticatedError("a PLAIN message is authzid NUL authcid NUL password")
    authzid, authcid, password = parts
    if authzid and authzid != authcid:
        raise UnauthenticatedError("PLAIN: authorization as another user is not served")
    found = tokens(password) if tokens is not None else None
    if found is None or found != "User:" + authcid:
        raise UnauthenticatedError("authentication failed: invalid username or password")
    return found


def _unescape(name: str) -> str:
    if "=" in name.replace("=2C", "").replace("=3D", ""):
        raise UnauthenticatedError("a SCRAM username escapes only ',' and '='")
    return name.replace("=2C", ",").replace("=3D", "=")


def _attributes(text: str) -> list[tuple[str, str]]:
    out = []
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if not sep or len(key) != 1:
            raise UnauthenticatedError(f"malformed SCRAM attribute {item[:20]!r}")
        out.append((key, value))
    return out


class ScramServer:
    """One SCRAM exchange, server side: `first` then `final`; each answers the message
    to send. `hash_name` is hashlib's (RFC 5802's own vectors use sha1)."""

    def __init__(self, hash_name: str, mechanism: str, lookup: Lookup, nonce: str = "") -> None:
        self.hash_name = hash_name
        self.mechanism = mechanism
        self.lookup = lookup
        self.server_nonce = nonce or secrets.token_urlsafe(24)
        self.principal = ""
        self._credential: ScramCredential | None = None
        self._gs2 = ""
        self._nonce = ""
        self._auth_prefix = ""  # client-first-bare "," server-first

    def first(self, message: bytes) -> bytes:
        text = _text(message)
        flag, _, rest = text.partition(",")
        authzid, _, bare = rest.partition(",")
        if flag not in ("n", "y"):
            raise UnauthenticatedError("SCRAM channel binding is not served")
        attrs = _attributes(bare)
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r":
            raise UnauthenticatedError("a SCRAM client-first message is n=<user>,r=<nonce>")
        user = _unescape(attrs[0][1])
        if authzid and authzid != "a=" + attrs[0][1]:
            raise UnauthenticatedError("SCRAM: authorization as another user is not served")
        if ("tokenauth", "true") in (tuple(e.partition("=")[::2]) for e in bare.split(",")[2:]):
            raise UnauthenticatedError("delegation tokens are not served")
        client_nonce = attrs[1][1]
        if not user or not 0 < len(client_nonce) <= NONCE_CHARS_MAX or "," in client_nonce:
            raise UnauthenticatedError("a SCRAM client-first message needs a user and a nonce")
        self.principal = "User:" + user
        self._credential = self.lookup(self.principal, self.mechanism)
        salt, iterations = self._salt()
        self._gs2 = f"{flag},{authzid},"
        self._nonce = client_nonce + self.server_nonce
        server_first = f"r={self._nonce},s={_b64(salt)},i={iterations}"
        self._auth_prefix = f"{bare},{server_first}"
        return server_first.encode()

    def _salt(self) -> tuple[bytes, int]:
        if self._credential is not None:
            return self._credential.salt, self._credential.iterations
        fake = _hmac("sha256", _FAKE_SECRET, self.principal.encode())  # a stable answer
        return fake, 8192

    def final(self, message: bytes) -> bytes:
        """The server-final message; UnauthenticatedError when the proof is wrong."""
        if not self._auth_prefix:
            raise UnauthenticatedError("SCRAM: the client-first message comes first")
        text = _text(message)
        without_proof, sep, proof_b64 = text.rpartition(",p=")
        attrs = _attributes(without_proof) if sep else []
        if len(attrs) < 2 or attrs[0][0] != "c" or attrs[1][0] != "r":
            raise UnauthenticatedError("a SCRAM client-final message is c=...,r=...,p=...")
        if _unb64(attrs[0][1]) != self._gs2.encode():
            raise UnauthenticatedError("SCRAM: the channel binding does not match")
        if attrs[1][1] != self._nonce:
            raise UnauthenticatedError("SCRAM: the nonce does not match")
        proof = _unb64(proof_b64)
        auth_message = f"{self._auth_prefix},{without_proof}".encode()
        credential = self._credential
        if credential is None:
            raise UnauthenticatedError("authentication failed: invalid username or password")
        signature = _hmac(self.hash_name, credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise UnauthenticatedError("authentication failed: invalid username or password")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        stored = hashlib.new(self.hash_name, client_key).digest()
        if not hmac.compare_digest(stored, credential.stored_key):
            raise UnauthenticatedError("authentication failed: invalid username or password")
        server_signature = _hmac(self.hash_name, credential.server_key, auth_message)
        return f"v={_b64(server_signature)}".encode()
