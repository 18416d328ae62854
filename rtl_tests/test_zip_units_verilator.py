"""Units that read a Zip's tuples on Verilator: ``tests/test_hw_zip_units.zipped_units`` (an
element-wise ``mul``, a ``matmul`` and a ``matmul_acc`` of ``(a, b)`` pairs, and a FlatMap of
``cache_read_addr`` on ``(row, tiles)`` pairs) through every reader (``step_hw.cosim.validate``):
the same tokens in the interpreter, both profiles and the co-simulation, and the rtl profile's
cycle count the RTL's. One build, run with Sinks always ready and with random back-pressure."""

from __future__ import annotations

import pytest

from step_hw.config import HwConfig
from step_hw.cosim import validate
from tests.test_hw_zip_units import zipped_units


@pytest.mark.parametrize(("pattern", "seed"), [("always", 1), ("random", 2)])
def test_zipped_units_on_the_rtl(pattern, seed):
    graph, inputs = zipped_units(HwConfig(), addresses=True)
    report = validate(graph, inputs=inputs, pattern=pattern, seed=seed, tag="zip", quiet=True)
    assert report.rtl_error is None and report.mismatch is None, str(report)
    assert report.ok and report.rtl_cycles > 0, str(report)
    if pattern == "always":  # the profile models always-ready Sinks and memories
        assert report.rtl_profile_cycles == report.rtl_cycles, str(report)
