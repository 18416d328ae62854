"""How tensors cross between the harness and the simulator process (step_hw.cosim.raw_tensors)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from step_hw.cosim.raw_tensors import bit_patterns, raw_dtype


@pytest.mark.parametrize(
    ("name", "raw"),
    [("bfloat16", "<u2"), ("float32", "<u4"), ("int16", "<i2"), ("int32", "<i4"), ("uint8", "|u1")],
)
def test_floating_point_crosses_as_bit_patterns_and_integers_as_themselves(name, raw):
    assert raw_dtype(name).str == raw


def test_bit_patterns_keep_every_bit():
    x = np.array([1.5, -0.0, np.inf, np.nan], dtype=ml_dtypes.bfloat16)
    bits = bit_patterns(x)
    assert bits.dtype == np.uint16
    assert bits.tolist() == [0x3FC0, 0x8000, 0x7F80, int(x.view(np.uint16)[3])]
    assert np.array_equal(bits.view(ml_dtypes.bfloat16).view(np.uint16), x.view(np.uint16))
    ints = np.array([-3, 7], dtype=np.int16)
    assert bit_patterns(ints) is ints


def test_the_run_description_gives_the_bench_each_tensors_raw_dtype():
    """The benches read the raw dtype from the description instead of importing the language."""
    from examples import swiglu
    from step_hw.cosim.harness import _with_run_tensors

    graph = swiglu.hardware(2, 2)
    desc = {
        "memory_map": {
            name: {"addr": 0, "shape": [1], "dtype": t.dtype.name, "bytes": 2}
            for name, t in graph.tensors.items()
        }
    }
    out = _with_run_tensors(desc, graph)["memory_map"]
    for name, t in graph.tensors.items():
        assert out[name]["raw_dtype"] == raw_dtype(t.dtype.name).str
        assert out[name]["shape"] == list(t.shape)
