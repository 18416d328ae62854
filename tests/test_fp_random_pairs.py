"""The floating-point datapaths (step_hw/compute/fp.py) on Verilated RTL against step_lang.floats,
bit for bit, on a million random operands each besides every combination of special values.

The fast tier of tests/test_fp_units.py (the Amaranth simulator, 10^4 pairs): each datapath is
Verilated once by step_hw.cosim.datapath (7-8 s a build, cached under build/datapath/), then
10^6 vectors take a fraction of a second. Measured on the 2-core machine: 26 s for the file with
its three builds (23 s of them building), 3.3 s with the builds cached.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from test_fp_units import BF16_SPECIAL, F32_SPECIAL, _pairs

from step_hw.compute import fp
from step_hw.cosim import datapath
from step_lang import floats as fl

N = 1_000_000


def _check(got: np.ndarray, want: np.ndarray, *operands: np.ndarray) -> None:
    bad = np.flatnonzero(got != want)
    shown = "; ".join(
        " ".join(f"{int(c[i]):#x}" for c in operands) + f" -> {int(got[i]):#x}, want "
        f"{int(want[i]):#x}"
        for i in bad[:5]
    )
    assert not bad.size, f"{bad.size} of {got.size} mismatch; first: {shown}"


@pytest.mark.parametrize("seed", [0])
def test_bf16_product_on_a_million_pairs(seed):
    a, b = _pairs(BF16_SPECIAL, N, 16, seed)
    got = datapath.evaluate(fp.mul_bf16, [16, 16], 32, [a, b], name="mul_bf16")
    _check(got, fl.mul_bf16(a, b), a, b)


@pytest.mark.parametrize("seed", [0])
def test_fp32_sum_on_a_million_pairs(seed):
    a, b = _pairs(F32_SPECIAL, N, 32, seed)
    got = datapath.evaluate(fp.add_f32, [32, 32], 32, [a, b], name="add_f32")
    _check(got, fl.add_f32(a, b), a, b)


def _mac(m, acc, a, b):
    return fp.add_f32(m, acc, fp.mul_bf16(m, a, b))


@pytest.mark.parametrize("seed", [0])
def test_mac_element_on_a_million_triples(seed):
    """``acc + a * b`` as the MAC arrays compute it: the exact product, then one rounding."""
    sp = np.array(list(itertools.product(F32_SPECIAL, BF16_SPECIAL, BF16_SPECIAL)), np.uint32)
    a, b = _pairs(BF16_SPECIAL, N, 16, seed)
    a, b = a[-N:], b[-N:]  # the random pairs, half of them of nearby magnitudes
    rng = np.random.default_rng(seed + 1)
    acc = rng.integers(0, 2**32, N, dtype=np.uint64).astype(np.uint32)
    # half the accumulators near minus the product (cancellation), half near the product
    near = rng.random(N) < 0.5
    k = int(near.sum())
    prod = fl.mul_bf16(a[near], b[near])
    flip = np.where(rng.random(k) < 0.5, np.uint32(0x80000000), np.uint32(0))
    acc[near] = prod ^ rng.integers(0, 2**12, k, dtype=np.uint32) ^ flip
    acc = np.concatenate([sp[:, 0], acc])
    a = np.concatenate([sp[:, 1].astype(np.uint16), a])
    b = np.concatenate([sp[:, 2].astype(np.uint16), b])
    got = datapath.evaluate(_mac, [32, 16, 16], 32, [acc, a, b], name="mac_bf16")
    _check(got, fl.add_f32(acc, fl.mul_bf16(a, b)), acc, a, b)
