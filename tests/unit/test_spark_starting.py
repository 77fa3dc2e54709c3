"""Starting a stream again when Spark did not start the source's Python process in time:
the decision, checked without Spark (the loop runs in every Spark streaming test)."""

from __future__ import annotations

from replog.spark.starting import SPARK_CONNECT_BACK, Step, next_step

# The text of the StreamingQueryException a loaded CI machine produced (abridged).
CONNECT_BACK = (
    "Python worker failed to connect back.\n=== Streaming Query ===\nIdentifier: [id = "
    "9d2fae16-36...] ... Caused by: java.net.SocketTimeoutException: Timed out while "
    "waiting for the Python worker to connect back"
)


def test_a_query_creating_its_sources_is_waited_for_until_the_deadline() -> None:
    for message in ("Initializing StreamExecution", "Initializing sources"):
        assert next_step(True, message, None, False, 12.0) is Step.WAIT
        assert next_step(True, message, None, False, 0.0) is Step.DONE  # the deadline passed


def test_a_query_whose_sources_started_is_the_callers() -> None:
    for message in ("Waiting for next trigger", "Getting offsets from x", "Processing new data"):
        assert next_step(True, message, None, False, 12.0) is Step.DONE


def test_only_sparks_connect_back_failure_starts_the_query_again_within_the_deadline() -> None:
    assert SPARK_CONNECT_BACK in CONNECT_BACK
    assert next_step(False, "", CONNECT_BACK, False, 12.0) is Step.RESTART
    # Failed but still winding down (active, its exception set): Spark refuses a second
    # active query on one checkpoint, so it is waited for (seen: returning then let the
    # failure reach the caller).
    wind_down = "Terminated with exception: Python worker failed to connect back."
    assert next_step(True, wind_down, CONNECT_BACK, False, 12.0) is Step.WAIT
    assert next_step(True, wind_down, None, False, 12.0) is Step.WAIT  # its exception not set yet
    assert next_step(True, "Stopped", None, False, 12.0) is Step.WAIT
    assert next_step(False, "", CONNECT_BACK, False, 0.0) is Step.DONE  # the caller sees it
    # The source's own errors, and a query that ended cleanly (AvailableNow), are final.
    assert (
        next_step(False, "", "[CONNECT_FAILED] cannot reach 127.0.0.1:1", False, 12.0) is Step.DONE
    )
    assert (
        next_step(False, "", "OFFSET_OUT_OF_RANGE: failOnDataLoss=true", False, 12.0) is Step.DONE
    )
    assert next_step(False, "", None, False, 12.0) is Step.DONE


def test_a_query_that_ran_a_micro_batch_is_never_started_again() -> None:
    assert next_step(False, "", CONNECT_BACK, True, 12.0) is Step.DONE
    assert next_step(True, "Initializing sources", None, True, 12.0) is Step.DONE
