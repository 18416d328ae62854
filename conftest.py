"""Test-wide settings: Hypothesis never fails on timing, and CI runs reproducible examples."""

import os

from hypothesis import settings

settings.register_profile("default", deadline=None)
# CI=true (as .ci/run is run) draws the same examples every time, so a red run is reproducible.
settings.register_profile("ci", deadline=None, derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") else "default")
