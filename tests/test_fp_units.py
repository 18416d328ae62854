"""The floating-point datapaths (step_hw/compute/fp.py) against step_lang.floats, bit for bit."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from step_hw.compute import fp
from step_lang import floats as fl

# FP32 special values: zeros, subnormals, smallest/largest normals, one, infinities, NaNs
F32_SPECIAL = [
    0x00000000, 0x80000000, 0x00000001, 0x807FFFFF, 0x00800000, 0x80800000, 0x00800001,
    0x7F7FFFFF, 0xFF7FFFFF, 0x3F800000, 0xBF800000, 0x7F800000, 0xFF800000, 0x7FC00000,
    0x7F800001, 0xFFFFFFFF, 0x33800000, 0x4B000000, 0x3F7FFFFF, 0x00FFFFFF,
]  # fmt: skip
BF16_SPECIAL = [
    0x0000, 0x8000, 0x0001, 0x807F, 0x0080, 0x8080, 0x0081, 0x7F7F, 0xFF7F, 0x3F80, 0xBF80,
    0x7F80, 0xFF80, 0x7FC0, 0x7F81, 0xFFFF, 0x3F81, 0x4000, 0x1F80, 0x5F80,
]  # fmt: skip


def evaluate(build, operands: list[np.ndarray], width: int) -> np.ndarray:
    """Drive a combinational datapath with every operand tuple; its outputs."""
    m = Module()
    ins = [
        Signal(32 if o.dtype == np.uint32 else 16, name=f"in{i}") for i, o in enumerate(operands)
    ]
    out = Signal(width)
    m.d.comb += out.eq(build(m, *ins))
    got = np.zeros(len(operands[0]), dtype=np.uint32 if width == 32 else np.uint16)

    async def bench(ctx):
        for k in range(len(got)):
            for s, o in zip(ins, operands, strict=True):
                ctx.set(s, int(o[k]))
            got[k] = ctx.get(out)

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    return got


def _show(bad, *cols) -> str:
    return ", ".join(" ".join(f"{int(c[i]):#x}" for c in cols) for i in bad[:5])


def test_conversion_of_every_bf16_value_and_its_neighbours():
    """Every BF16 bit pattern, widened with low bits that round down, to a tie, and up."""
    hi = np.arange(2**16, dtype=np.uint32) << 16
    rng = np.random.default_rng(1)
    low = np.array([0, 0x7FFF, 0x8000, 0x8001, 0xFFFF], dtype=np.uint32)
    x = np.concatenate(
        [hi | low[i % len(low)] for i in range(2)]
        + [hi | rng.integers(0, 2**16, hi.size, dtype=np.uint32)]
    )
    x = np.concatenate([x, np.array(F32_SPECIAL, dtype=np.uint32)])
    got = evaluate(fp.f32_to_bf16, [x], 16)
    want = fl.f32_to_bf16(x)
    bad = np.flatnonzero(got != want)
    assert not bad.size, _show(bad, x, got, want)


def _pairs(special: list[int], n: int, bits: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    dtype = np.uint32 if bits == 32 else np.uint16
    sp = np.array(list(itertools.product(special, repeat=2)), dtype=dtype)
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 2**bits, n, dtype=np.uint64).astype(dtype)
    b = rng.integers(0, 2**bits, n, dtype=np.uint64).astype(dtype)
    # nearby magnitudes (cancellation, rounding carries) as often as random ones
    near = rng.random(n) < 0.5
    b[near] = (a[near] ^ (rng.integers(0, 2**6, int(near.sum())).astype(dtype))) ^ (
        dtype(1 << (bits - 1)) * (rng.random(int(near.sum())) < 0.5)
    ).astype(dtype)
    return np.concatenate([sp[:, 0], a]), np.concatenate([sp[:, 1], b])


@pytest.mark.parametrize("seed", [0])
def test_bf16_product_is_exact_in_fp32(seed):
    a, b = _pairs(BF16_SPECIAL, 10_000, 16, seed)
    got = evaluate(fp.mul_bf16, [a, b], 32)
    want = fl.mul_bf16(a, b)
    bad = np.flatnonzero(got != want)
    assert not bad.size, _show(bad, a, b, got, want)


@pytest.mark.parametrize("seed", [0])
def test_fp32_sum_rounds_to_nearest_even(seed):
    a, b = _pairs(F32_SPECIAL, 10_000, 32, seed)
    got = evaluate(fp.add_f32, [a, b], 32)
    want = fl.add_f32(a, b)
    bad = np.flatnonzero(got != want)
    assert not bad.size, _show(bad, a, b, got, want)
