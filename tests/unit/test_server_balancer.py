"""Leadership goes back to the preferred replica only when it is alive and caught up."""

from __future__ import annotations

from replog.server.cluster.balancer import preferred_target


def test_the_preferred_replica_gets_leadership_back_once_caught_up_and_alive() -> None:
    fresh_caught_up = [(2, 100, 0, 0), (1, 100, 0, 10), (3, 100, 0, 10)]
    assert preferred_target(2, (1, 2, 3), fresh_caught_up) == 1
    assert preferred_target(1, (1, 2, 3), fresh_caught_up) is None  # it leads already
    assert preferred_target(2, (1, 2, 3), [(2, 100, 0, 0), (1, 90, 10, 10)]) is None  # lags
    assert preferred_target(2, (1, 2, 3), [(2, 100, 0, 0), (1, 100, 0, 60_000)]) is None
    assert preferred_target(2, (1, 2, 3), [(2, 100, 0, 0), (1, 100, 0, -1)]) is None
    assert preferred_target(2, (1, 2, 3), [(2, 100, 0, 0)]) is None  # no word from it
