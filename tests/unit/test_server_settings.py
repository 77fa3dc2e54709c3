from __future__ import annotations

import argparse
import enum
from pathlib import Path

import pytest

from replog.errors import InvalidConfigError
from replog.server.settings import Authorization, ClientAuth, JoinMode, LogFormat, Settings
from replog.storage import FlushPolicy


def parse(argv: list[str], env: dict[str, str] | None = None) -> Settings:
    parser = argparse.ArgumentParser()
    Settings.add_arguments(parser)
    return Settings.from_sources(vars(parser.parse_args(argv)), env or {})


def test_defaults_apply_when_nothing_is_given() -> None:
    s = parse([])
    assert s.listen == "127.0.0.1:7070"
    assert s.storage_config().flush is FlushPolicy.ALWAYS  # durable acks by default (issue 16)


def test_flags_override_env_which_overrides_defaults() -> None:
    env = {"REPLOG_FLUSH": "always", "REPLOG_LISTEN": "127.0.0.1:1", "REPLOG_DATA_DIR": "/d"}
    s = parse(["--listen", "127.0.0.1:0", "--retention-bytes", "1_000"], env)
    assert s.listen == "127.0.0.1:0"
    assert s.flush == "always"
    assert s.data_dir == Path("/d")
    assert s.retention_bytes == 1000
    assert s.storage_config().retention_bytes == 1000


def test_settings_fan_out_into_the_storage_config() -> None:
    s = parse(["--segment-bytes-max", "4096", "--fetch-bytes-max", "65536", "--flush", "never"])
    cfg = s.storage_config()
    # storage reads may reach a whole message: a leader's fetch answer carries whole batches
    assert (cfg.segment_bytes_max, cfg.read_bytes_max, cfg.flush) == (
        4096,
        s.message_bytes_max,
        FlushPolicy.NEVER,
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["--flush", "sometimes"],
        ["--listen", "nohost"],
        ["--log-format", "xml"],
        ["--segment-bytes-max", "ten"],
        ["--segment-bytes-max", "1"],
        # a reply could exceed the gRPC message limit
        ["--fetch-bytes-max", str(8 * 1024 * 1024)],
        ["--record-bytes-max", str(4 * 1024 * 1024)],
    ],
)
def test_invalid_settings_are_refused_at_start(argv: list[str]) -> None:
    with pytest.raises(InvalidConfigError):
        parse(argv)


STATEFULSET_ENV = {
    "REPLOG_CLUSTER_SIZE": "3",
    "REPLOG_PEER_ADDRESS_TEMPLATE": "replog-{ordinal}.replog-headless.prod.svc.cluster.local:7070",
    "REPLOG_LISTEN": "0.0.0.0:7070",
    "REPLOG_PEER_LISTEN": "0.0.0.0:7071",
    "REPLOG_INSECURE": "true",  # (deploy/k8s gives TLS files; none exist here)
}


def test_a_statefulset_pod_derives_its_peers_and_its_id_from_its_ordinal() -> None:
    s = parse([], {**STATEFULSET_ENV, "HOSTNAME": "replog-2"})
    assert s.peer_map() == {
        1: "replog-0.replog-headless.prod.svc.cluster.local:7070",
        2: "replog-1.replog-headless.prod.svc.cluster.local:7070",
        3: "replog-2.replog-headless.prod.svc.cluster.local:7070",
    }
    assert s.node_id == 3
    # clients and peers are told the pod's DNS name, not the wildcard it listens on
    assert s.advertised_address == "replog-2.replog-headless.prod.svc.cluster.local:7070"


def test_an_explicit_node_id_wins_over_the_host_name() -> None:
    s = parse(["--node-id", "1"], {**STATEFULSET_ENV, "HOSTNAME": "replog-2"})
    assert s.node_id == 1
    assert s.advertised_address.startswith("replog-0.")


@pytest.mark.parametrize(
    "env",
    [
        {**STATEFULSET_ENV, "HOSTNAME": "replog-3"},  # ordinal beyond cluster_size
        {**STATEFULSET_ENV, "HOSTNAME": "replog"},  # no ordinal in the host name
        {**STATEFULSET_ENV, "REPLOG_PEER_ADDRESS_TEMPLATE": "replog.svc:7070"},  # no {ordinal}
        {**STATEFULSET_ENV, "REPLOG_CLUSTER_SIZE": "0", "HOSTNAME": "replog-0"},
        {**STATEFULSET_ENV, "HOSTNAME": "replog-0", "REPLOG_PEERS": "1=a:1"},  # both ways
    ],
)
def test_inconsistent_statefulset_identities_are_refused_at_start(env: dict[str, str]) -> None:
    with pytest.raises(InvalidConfigError):
        parse([], env)


TLS_ENV = {
    "REPLOG_TLS_CERT_FILE": "/c.pem",
    "REPLOG_TLS_KEY_FILE": "/k.pem",
    "REPLOG_TLS_CA_FILE": "/ca.pem",
}


@pytest.mark.parametrize(
    ("flag", "text", "value"),
    [
        ("--flush", "interval", FlushPolicy.INTERVAL),
        ("--log-format", "json", LogFormat.JSON),
        ("--join", "auto", JoinMode.AUTO),
        ("--tls-client-auth", "require", ClientAuth.REQUIRE),
        ("--authorization", "acl", Authorization.ACL),
    ],
)
def test_options_with_a_fixed_set_of_values_become_their_enum(
    flag: str, text: str, value: enum.StrEnum
) -> None:
    name = flag.removeprefix("--").replace("-", "_")
    s = parse([flag, text], TLS_ENV)  # (join=auto, require and acl need TLS)
    assert getattr(s, name) is value
    assert getattr(s, name) == text  # (a StrEnum: equal to its text, as the docs name it)


@pytest.mark.parametrize(
    ("env", "accepted"),
    [
        ({"REPLOG_FLUSH": "Always"}, "always|interval|never"),
        ({"REPLOG_JOIN": "automatic"}, "manual|auto"),
        ({"REPLOG_AUTHORIZATION": "on"}, "off|acl"),
    ],
)
def test_a_value_outside_an_options_set_is_refused_naming_the_accepted_ones(
    env: dict[str, str], accepted: str
) -> None:
    with pytest.raises(InvalidConfigError, match=accepted):
        parse([], env)


def test_the_replica_config_follows_the_election_timeout_and_the_flush_policy() -> None:
    s = parse(["--node-id", "2", "--election-timeout-ms", "500", "--replica-fetch-wait-ms", "100"])
    config = s.replica_config((1, 2, 3), (4,))
    assert (config.replica_id, config.voters, config.observers) == (2, (1, 2, 3), (4,))
    assert (config.election_timeout_ms_min, config.election_timeout_ms_max) == (500, 1000)
    assert (config.fetch_wait_ms_max, config.fetch_retry_ms) == (100, 200)
    assert config.flush_always
    assert not parse(["--flush", "never"]).replica_config((0,)).flush_always
