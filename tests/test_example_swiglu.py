"""SwiGLU example: numerics against numpy and the paper's off-chip traffic accounting."""

from __future__ import annotations

import numpy as np
import pytest

from examples import swiglu
from step_lang import interpret, metrics

SMALL = swiglu.SwiGLUConfig(batch=16, hidden=32, intermediate=64)


@pytest.mark.parametrize(("tile_b", "tile_i"), [(4, 8), (8, 16), (16, 64)])
def test_interpreter_matches_numpy(tile_b, tile_i):
    mem = swiglu.inputs(SMALL, seed=1)
    r = interpret(swiglu.build(SMALL, tile_b, tile_i), mem)
    assert np.allclose(r.memory["out"], swiglu.reference(mem), rtol=1e-4, atol=1e-5)


def test_tilings_agree_bit_for_bit():
    mem = swiglu.inputs(SMALL, seed=2)
    outs = [
        interpret(swiglu.build(SMALL, tb, ti), mem).memory["out"] for tb, ti in [(4, 8), (16, 64)]
    ]
    # Per-element K order is fixed, but the down projection sums K tiles in different groupings.
    assert np.allclose(outs[0], outs[1], rtol=1e-5, atol=1e-6)


def _hand_traffic(c: swiglu.SwiGLUConfig, tb: int, ti: int, elem: int = 4) -> int:
    nb, ni = c.batch // tb, c.intermediate // ti
    per_pair = (
        tb * c.hidden + 2 * c.hidden * ti + ti * c.hidden
    )  # x row block, gate, up, down tiles
    return (nb * ni * per_pair + c.batch * c.hidden) * elem


def test_paper_traffic_16x16_is_8_45_MB():
    m = metrics(swiglu.build(), "paper")
    assert m.offchip_bytes == 8_454_144
    assert round(m.offchip_bytes / 1e6, 2) == 8.45


@pytest.mark.parametrize(("tile_b", "tile_i"), swiglu.SWEEP)
def test_sweep_traffic_follows_hand_count(tile_b, tile_i):
    c = swiglu.SwiGLUConfig()
    assert metrics(swiglu.build(c, tile_b, tile_i), "artifact").offchip_bytes == _hand_traffic(
        c, tile_b, tile_i
    )


def test_bad_tiles_are_rejected():
    with pytest.raises(
        ValueError,
        match=r"^tiles must divide the layer: batch 64 by tile_b 24, intermediate 512 by tile_i 16$",
    ):
        swiglu.build(swiglu.SwiGLUConfig(), 24, 16)


def test_bf16_inputs_in_a_process_that_has_not_imported_ml_dtypes():
    """``np.dtype("bfloat16")`` is known only once ``ml_dtypes`` is imported; the examples' inputs
    must not depend on something else having imported it (``bench.cosim_speed`` failed so)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from examples import moe, swiglu\n"
        "assert 'ml_dtypes' not in sys.modules\n"
        "x = swiglu.inputs(swiglu.SwiGLUConfig(batch=2, hidden=4, intermediate=4,"
        " dtype='bfloat16'))\n"
        "c = moe.MoEConfig('bf16', 4, 8, 4, 2, dtype='bfloat16')\n"
        "m = moe.inputs(c, moe.synthetic_routing(8, c.experts, c.top_k, seed=0))\n"
        "print(sorted({a.dtype.name for a in x.values()}), m['x'].dtype.name)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['bfloat16'] bfloat16"
