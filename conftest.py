"""Test-wide settings: Hypothesis never fails on timing, CI runs reproducible examples, and the
fast co-simulation tier compiles without optimisation."""

import os

from hypothesis import settings

from step_hw.cosim.harness import FAST_OPT_ENV
from step_hw.cosim.verilator import NO_OPT

settings.register_profile("default", deadline=None)
# CI=true (as .ci/run is run) draws the same examples every time, so a red run is reproducible.
settings.register_profile("ci", deadline=None, derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") else "default")

# The fast tier compiles at FAST_OPT (-O1) for the paper-scale runs of `make validate`; the tests'
# runs are a few hundred to a few thousand cycles, where compiling at -O0 takes about half the CPU
# time and the runs hardly change (measured in docs/cosim.md).
os.environ.setdefault(FAST_OPT_ENV, NO_OPT)
