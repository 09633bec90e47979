"""Hypothesis profiles: ``dev`` (default), ``ci`` (more examples), ``mutation`` and ``debug``.

``ci`` and ``mutation`` keep no example database. A database replays, first, every example
that once failed, so a test looks as if it found a bug that it would not find from a fresh
start: in CI each run starts from a fresh clone anyway (a database there only hides that), and
in a mutation check a mutant must be killed by what the test finds itself, not by an example
saved while an earlier mutant was applied. ``dev`` keeps the database (``.hypothesis/``, not
committed) so a failure found locally is replayed until it is fixed.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Verbosity, settings

settings.register_profile("dev", max_examples=100, deadline=None)
settings.register_profile(
    "ci",
    max_examples=300,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("mutation", max_examples=100, deadline=None, database=None)
settings.register_profile("debug", max_examples=20, deadline=None, verbosity=Verbosity.verbose)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))
