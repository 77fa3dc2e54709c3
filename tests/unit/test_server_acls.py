"""ACL commands in the cluster metadata, the authorizer's question, and the token file."""

from __future__ import annotations

from pathlib import Path

import pytest

from replog.errors import (
    InvalidArgumentError,
    InvalidConfigError,
    NotFoundError,
    UnauthenticatedError,
)
from replog.server.edge.auth import (
    ANONYMOUS,
    TokenFile,
    authenticator_for,
    hash_token,
    super_users_of,
)
from replog.server.edge.security import SAN_KEY
from replog.server.meta import command_codec
from replog.server.meta.metadata import AclEntry, AddAcl, MetadataImage, RemoveAcl


def entry(principal: str = "User:alice", **kw: object) -> AclEntry:
    fields: dict[str, object] = {
        "resource_type": "topic",
        "resource_name": "orders",
        "prefix": False,
        "operation": "write",
        **kw,
    }
    return AclEntry.checked(principal, **fields)  # type: ignore[arg-type]


def test_acl_commands_round_trip_through_their_records() -> None:
    for command in (AddAcl(entry(prefix=True, resource_name="orders.")), RemoveAcl(entry())):
        assert command_codec.decode(command_codec.encode(command)) == command


def test_an_applied_acl_grants_exactly_its_operation_and_resource() -> None:
    image = MetadataImage()
    image.apply(0, image.add_acl(entry()))
    assert image.allowed("User:alice", "write", "topic", "orders")
    assert not image.allowed("User:alice", "read", "topic", "orders")
    assert not image.allowed("User:alice", "write", "topic", "orders2")
    assert not image.allowed("User:bob", "write", "topic", "orders")
    image.apply(1, image.remove_acl(entry()))
    assert not image.allowed("User:alice", "write", "topic", "orders")


def test_prefixes_wildcards_all_and_cluster_rights() -> None:
    image = MetadataImage()
    image.apply(0, AddAcl(entry(prefix=True, resource_name="orders.")))
    image.apply(1, AddAcl(entry("User:*", operation="read")))
    image.apply(2, AddAcl(entry("User:ops", resource_type="cluster", resource_name="",
                                operation="all")))  # fmt: skip
    assert image.allowed("User:alice", "write", "topic", "orders.eu")
    assert not image.allowed("User:alice", "write", "topic", "ordersx")
    assert image.allowed("User:anyone", "read", "topic", "orders")
    assert not image.allowed("Node:1", "read", "topic", "orders")  # User:* is users only
    assert image.allowed("User:ops", "delete", "topic", "whatever")
    assert image.allowed("User:ops", "alter", "cluster")


@pytest.mark.parametrize(
    "kw",
    [
        {"principal": "alice"},
        {"principal": "Group:x"},
        {"resource_type": "consumer"},
        {"resource_type": "group", "resource_name": ""},
        {"resource_type": "group", "resource_name": "g" * 256},
        {"operation": "own"},
        {"resource_type": "cluster", "resource_name": "x"},
        {"resource_name": "bad/name"},
    ],
)
def test_an_acl_out_of_shape_is_invalid(kw: dict[str, str]) -> None:
    principal = kw.pop("principal", "User:alice")
    with pytest.raises(InvalidArgumentError):
        entry(principal, **kw)


def test_group_acls_grant_their_group_only_and_cluster_acls_every_group() -> None:
    image = MetadataImage()
    image.apply(
        0, image.add_acl(entry(resource_type="group", resource_name="billing", operation="read"))
    )
    image.apply(
        1,
        image.add_acl(
            entry(
                "User:bob",
                resource_type="group",
                resource_name="team.",
                prefix=True,
                operation="all",
            )
        ),
    )
    image.apply(
        2,
        image.add_acl(
            entry("User:ops", resource_type="cluster", resource_name="", operation="describe")
        ),
    )
    assert image.allowed("User:alice", "read", "group", "billing")
    assert not image.allowed("User:alice", "read", "group", "billing2")
    assert not image.allowed("User:alice", "read", "topic", "billing")  # a group is not a topic
    assert image.allowed("User:bob", "delete", "group", "team.a")
    assert not image.allowed("User:bob", "read", "topic", "team.a")
    assert image.allowed("User:ops", "describe", "group", "anything")
    assert command_codec.decode(
        command_codec.encode(AddAcl(entry(resource_type="group", resource_name="g h")))
    ) == AddAcl(entry(resource_type="group", resource_name="g h"))


def test_removing_an_acl_that_does_not_exist_is_not_found() -> None:
    with pytest.raises(NotFoundError):
        MetadataImage().remove_acl(entry())


def test_the_token_file_holds_hashes_and_maps_tokens_to_principals(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text(f"# comment\nUser:alice {hash_token('s3cret')}\n")
    tokens = TokenFile(path)
    assert tokens.principal("s3cret") == "User:alice"
    assert tokens.principal("s3cre") is None
    assert "s3cret" not in path.read_text()


def test_a_malformed_token_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text("User:alice s3cret\n")
    with pytest.raises(InvalidConfigError):
        TokenFile(path)


class _Call:
    """A call's context as grpc.aio gives it to a handler: metadata and TLS peer names."""

    def __init__(
        self, metadata: tuple[tuple[str, str], ...] = (), sans: tuple[bytes, ...] = ()
    ) -> None:
        self.metadata = metadata
        self.sans = list(sans)

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self.metadata

    def auth_context(self) -> dict[str, list[bytes]]:
        return {SAN_KEY: self.sans}


def test_whoami_names_the_token_then_the_certificate_else_anonymous(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text(f"User:alice {hash_token('s3cret')}\n")
    identify = authenticator_for(path).identify
    cert = (b"replog://client/bob",)
    assert identify(_Call((("authorization", "Bearer s3cret"),), cert)) == ("User:alice", "token")
    assert identify(_Call((), cert)) == ("User:bob", "certificate")
    assert identify(_Call()) == (ANONYMOUS, "none")
    with pytest.raises(UnauthenticatedError):  # an unknown token is never anyone
        identify(_Call((("authorization", "Bearer guess"),), cert))
    with pytest.raises(UnauthenticatedError):  # nor is a token where no file is
        authenticator_for(None).identify(_Call((("authorization", "Bearer s3cret"),)))
    assert super_users_of(" User:admin, ,User:ops ") == {"User:admin", "User:ops"}
