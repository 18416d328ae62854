"""Units and routers on a Zip's tuples on Verilator: ``tests/test_hw_zip_units.zipped_units`` (an
element-wise ``mul``, a ``matmul`` and a ``matmul_acc`` of ``(a, b)`` pairs, and a FlatMap of
``cache_read_addr`` on ``(row, tiles)`` pairs) and ``routed_pairs`` (pairs through a Partition and
a Reassemble, and a Parallelize) through every reader (``step_hw.cosim.validate``): the same
tokens in the interpreter, both profiles and the co-simulation, and the rtl profile's cycle count
the RTL's. One build each, run with Sinks always ready and with random back-pressure."""

from __future__ import annotations

import pytest

from step_hw.config import HwConfig
from step_hw.cosim import validate
from tests.test_hw_zip_units import routed_pairs, zipped_units

GRAPHS = {
    "units": lambda: zipped_units(HwConfig(), addresses=True),
    "routers": lambda: routed_pairs(HwConfig()),
}


@pytest.mark.parametrize("name", list(GRAPHS))
@pytest.mark.parametrize(("pattern", "seed"), [("always", 1), ("random", 2)])
def test_zipped_streams_on_the_rtl(name, pattern, seed):
    graph, inputs = GRAPHS[name]()
    report = validate(
        graph, inputs=inputs, pattern=pattern, seed=seed, tag=f"zip_{name}", quiet=True
    )
    assert report.rtl_error is None and report.mismatch is None, str(report)
    assert report.ok and report.rtl_cycles > 0, str(report)
    if pattern == "always":  # the profile models always-ready Sinks and memories
        assert report.rtl_profile_cycles == report.rtl_cycles, str(report)


def test_a_sink_takes_a_zips_tuples_whole_on_the_fast_tier():
    """The routers' graph, whose Sink ``y_pairs`` takes ``(a, b)`` pairs whole, on the fast tier:
    the recorded payloads unpack (``format_from_json``) to the interpreter's pairs."""
    graph, inputs = GRAPHS["routers"]()
    report = validate(graph, inputs=inputs, tier="fast", tag="zip_routers_fast", quiet=True)
    assert report.ok and report.rtl_profile_cycles == report.rtl_cycles, str(report)
    pairs = report.cosim.sinks["y_pairs"]
    assert len(pairs) == 3 * 2 + 3 + 1 and all(isinstance(t, tuple) for t in pairs[:2])
    a0, b0 = pairs[0]
    assert (a0 == inputs["a"][0][0]).all() and (b0 == inputs["b"][0][0]).all()
