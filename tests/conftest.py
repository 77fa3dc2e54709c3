"""Hypothesis profiles: `ci` (default), `dev` (quick), `soak` (long; HYPOTHESIS_PROFILE=soak)."""

import os

from hypothesis import HealthCheck, settings

_relaxed = [HealthCheck.too_slow, HealthCheck.data_too_large]
settings.register_profile("ci", max_examples=100, deadline=None, suppress_health_check=_relaxed)
settings.register_profile("dev", max_examples=30, deadline=None, suppress_health_check=_relaxed)
settings.register_profile(
    "soak",
    max_examples=2000,
    stateful_step_count=100,
    deadline=None,
    suppress_health_check=_relaxed,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
