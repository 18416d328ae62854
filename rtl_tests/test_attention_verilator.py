"""Whole-graph co-simulation of decode attention on Verilator, every schedule: the hardware-size
graph (``examples.attention.hardware``: 4 requests over 2 regions, int16 Q8, ``[4, 4]`` KV
tiles) runs against cocotbext-axi RAMs that answer at once and with random latency and
back-pressure (``step_hw.cosim``); the ``out`` tensor and the appended K and V caches must equal
the interpreter's bit for bit.

Each schedule is verilated once and its build reused for both traffic patterns. A build is about
as large as MoE's (some 45 MB of C++), so only the dynamic schedule, which uses every attention
block (address generators, row append, the count / region-id / region-select loop, Feedback),
runs in ``make test``; interleaved and coarse are marked ``slow`` (``make test-all``).
"""

from __future__ import annotations

import numpy as np
import pytest

from examples import attention
from step_hw import cosim
from step_lang import interpret

#: KV lengths per request: a single-row request, a full last tile (15 = 3 * 4 + 3, the last row of
#: the cache), requests with 1 to 4 tiles, so requests take unequal times.
KV_LENGTHS = [0, 15, 5, 10]
TENSORS = ("out", "k_cache", "v_cache")


@pytest.mark.parametrize(
    "schedule",
    [
        pytest.param("interleaved", marks=pytest.mark.slow),
        pytest.param("coarse", marks=pytest.mark.slow),
        "dynamic",
    ],
)
@pytest.mark.parametrize(("pattern", "seed"), [("always", 1), ("random", 2)])
def test_cosim_matches_interpreter(schedule: str, pattern: str, seed: int):
    memory = attention.hardware_inputs(KV_LENGTHS, seed=seed)
    want = interpret(attention.hardware(schedule), memory).memory
    result = cosim.run(
        attention.hardware(schedule),
        memory,
        pattern=pattern,
        seed=seed,
        tag=f"attention_{schedule}_{pattern}",
    )
    for name in TENSORS:
        got = result.outputs[name]
        assert np.array_equal(got, want[name]), (
            f"tensor '{name}' differs:\n{got}\nwant\n{want[name]}"
        )
    # The appends really happened (the caches differ from the input image).
    assert not np.array_equal(result.outputs["k_cache"], memory["k_cache"])
    assert result.cycles > 0
    print(f"attention {schedule} {pattern}: {result.cycles} cycles, build {result.build_s:.0f} s")
