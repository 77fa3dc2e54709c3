"""Persisted quorum state and epoch history are validated when a replica loads them."""

from __future__ import annotations

from pathlib import Path

import pytest

from replog.errors import CorruptDataError
from replog.replication.driver import (
    EPOCH_HISTORY_FILE,
    QUORUM_STATE_FILE,
    load_epoch_history,
    load_quorum_state,
)
from replog.replication.epochs import EpochStart
from replog.replication.state import QuorumState


def test_a_valid_quorum_state_and_history_load_as_written(tmp_path: Path) -> None:
    (tmp_path / QUORUM_STATE_FILE).write_text('{"epoch": 7, "voted_for": 2, "leader_id": null}')
    (tmp_path / EPOCH_HISTORY_FILE).write_text("[[1, 0], [3, 10], [7, 10]]")
    assert load_quorum_state(tmp_path) == QuorumState(7, 2, None)
    assert load_epoch_history(tmp_path) == [EpochStart(1, 0), EpochStart(3, 10), EpochStart(7, 10)]


@pytest.mark.parametrize(
    "text",
    [
        '{"epoch": 18446744073709551615, "voted_for": 2, "leader_id": null}',  # 2^64-1
        '{"epoch": 2147483648, "voted_for": null, "leader_id": null}',
        '{"epoch": -1, "voted_for": null, "leader_id": null}',
        '{"epoch": "3", "voted_for": null, "leader_id": null}',
        '{"epoch": 3, "voted_for": 1.5, "leader_id": null}',
        '{"epoch": 3}',
        "[]",
        "not json",
    ],
)
def test_an_impossible_quorum_state_is_refused_on_load(tmp_path: Path, text: str) -> None:
    (tmp_path / QUORUM_STATE_FILE).write_text(text)
    with pytest.raises(CorruptDataError):
        load_quorum_state(tmp_path)


@pytest.mark.parametrize(
    "text",
    [
        "[[18446744073709551615, 0]]",
        "[[3, 0], [2, 5]]",  # epochs go back
        "[[1, 5], [2, 4]]",  # offsets go back
        "[[1, 0], [1, 3]]",  # an epoch twice
        "[[1]]",
        '{"1": 0}',
    ],
)
def test_an_impossible_epoch_history_is_refused_on_load(tmp_path: Path, text: str) -> None:
    (tmp_path / EPOCH_HISTORY_FILE).write_text(text)
    with pytest.raises(CorruptDataError):
        load_epoch_history(tmp_path)


def test_missing_files_load_as_a_fresh_replica_and_a_refusal_names_the_file(
    tmp_path: Path,
) -> None:
    assert load_quorum_state(tmp_path) == QuorumState()
    assert load_epoch_history(tmp_path) == []
    (tmp_path / EPOCH_HISTORY_FILE).write_text("[[2, 0], [1, 0]]")
    with pytest.raises(CorruptDataError, match=rf"{EPOCH_HISTORY_FILE}: invalid b'\[\[2, 0\]"):
        load_epoch_history(tmp_path)
