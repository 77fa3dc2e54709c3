"""`replog dev-cluster` restarts a node that died, unless it keeps dying quickly."""

from __future__ import annotations

from replog.devcluster import RestartBudget, describe_exit


def test_a_node_is_restarted_until_it_dies_three_times_within_30_seconds() -> None:
    budget = RestartBudget()
    assert budget.restart_after_death(100.0)
    assert budget.restart_after_death(110.0)
    assert not budget.restart_after_death(129.9)  # third death within 30 s: left down


def test_deaths_further_apart_than_the_window_never_use_up_the_budget() -> None:
    budget = RestartBudget(deaths_max=3, window_s=30.0)
    assert all(budget.restart_after_death(t) for t in (0.0, 20.0, 50.1, 70.2, 100.3, 120.4))
    assert len(budget.deaths) == 2  # only the deaths inside the window are kept


def test_a_budget_of_one_never_restarts() -> None:
    assert not RestartBudget(deaths_max=1).restart_after_death(0.0)


def test_exit_codes_are_told_as_users_know_them() -> None:
    assert describe_exit(-9) == "killed by SIGKILL"
    assert describe_exit(-15) == "killed by SIGTERM"
    assert describe_exit(1) == "exit code 1"
    assert describe_exit(-200) == "killed by signal 200"
