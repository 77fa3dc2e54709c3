from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from replog.errors import InvalidConfigError
from replog.server.settings import Settings
from replog.storage import FlushPolicy


def parse(argv: list[str], env: dict[str, str] | None = None) -> Settings:
    parser = argparse.ArgumentParser()
    Settings.add_arguments(parser)
    return Settings.from_sources(vars(parser.parse_args(argv)), env or {})


def test_defaults_apply_when_nothing_is_given() -> None:
    s = parse([])
    assert s.listen == "127.0.0.1:7070"
    assert s.storage_config().flush is FlushPolicy.INTERVAL


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
    assert (cfg.segment_bytes_max, cfg.read_bytes_max, cfg.flush) == (
        4096,
        65536,
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
