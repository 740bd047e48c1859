"""Hypothesis profiles: fast by default, thorough under CI=true, long on demand.

Select explicitly with HYPOTHESIS_PROFILE=dev|ci|long.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings
from rootguard import pytest_sessionfinish, pytest_sessionstart

# No profile has a deadline or the too_slow health check: both measure the machine's speed, and
# a loaded machine would fail an example that is right.
settings.register_profile(
    "dev", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "ci",
    max_examples=1000,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.register_profile(
    "long", max_examples=20_000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
_default = "ci" if os.environ.get("CI", "").lower() in {"1", "true", "yes"} else "dev"
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", _default))

__all__ = ["pytest_sessionfinish", "pytest_sessionstart"]  # the root guard's hooks
