"""The hardware's floating point, bit for bit: BF16 elements, FP32 products and sums.

The reference the BF16 hardware units (``step_hw/compute/fp.py``) are checked against, in numpy
on bit patterns (``uint16`` for BF16, ``uint32`` for FP32; view them as ``ml_dtypes.bfloat16`` /
``float32`` values). On normal operands and results every function equals IEEE 754 arithmetic
(checked against numpy's float32 and ml_dtypes' bfloat16 conversion); the decisions below say
where it differs.

Decisions (``docs/hardware.md``, "Floating point"):

* **Subnormals are flushed to zero**, on input (a subnormal operand counts as a zero of its sign)
  and on output: a result whose exact magnitude is below the smallest normal (``2**-126``) is a
  zero of the exact result's sign, decided *before* rounding. The BF16 MAC arrays of TPUs and
  most ML accelerators do the same; it saves the normalisation shifters of gradual underflow.
  (Berkeley HardFloat and FPnew/cvfpu keep subnormals, as IEEE 754 does; on the workloads here
  values below ``2**-126`` carry no information.)
* **Rounding** is round-to-nearest-even everywhere; an overflow rounds to infinity.
* **NaN**: any NaN operand, ``inf - inf`` and ``0 * inf`` give the canonical quiet NaN
  (``0x7FC00000`` in FP32, ``0x7FC0`` in BF16, sign clear), as FPnew does; payloads are not
  propagated.
* **Infinities and signed zeros** follow IEEE 754: ``x + (-x) = +0``, ``(-0) + (-0) = -0``, the
  sign of a product is the XOR of the operands' signs.
* **Products** of two BF16 values are exact in FP32 (8 x 8 significand bits), before the
  flush-to-zero and overflow rules above.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "BF16_NAN",
    "F32_NAN",
    "MIN_NORMAL",
    "add_f32",
    "bf16_to_f32",
    "f32_to_bf16",
    "mul_bf16",
]

F32_NAN = np.uint32(0x7FC00000)
BF16_NAN = np.uint16(0x7FC0)
MIN_NORMAL = 2.0**-126


def _f32(bits: np.ndarray) -> np.ndarray:
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def _bits(values: np.ndarray) -> np.ndarray:
    return np.asarray(values, dtype=np.float32).view(np.uint32)


def _daz(bits: np.ndarray) -> np.ndarray:
    """FP32 bits with subnormals replaced by zeros of their sign."""
    bits = np.asarray(bits, dtype=np.uint32)
    sub = ((bits & 0x7F800000) == 0) & ((bits & 0x007FFFFF) != 0)
    return np.where(sub, bits & 0x80000000, bits).astype(np.uint32)


def _flush(exact: np.ndarray, rounded: np.ndarray) -> np.ndarray:
    """``rounded`` (FP32 values), with results whose ``exact`` (float64) magnitude is below the
    smallest normal made zeros of the exact result's sign."""
    tiny = (exact != 0) & (np.abs(exact) < MIN_NORMAL)
    return np.where(tiny, np.copysign(np.float32(0), exact).astype(np.float32), rounded)


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """FP32 bits of BF16 bits (exact: the 16 low bits are zero)."""
    return np.asarray(bits, dtype=np.uint32) << 16


def f32_to_bf16(bits: np.ndarray) -> np.ndarray:
    """BF16 bits of FP32 bits: round to nearest even; subnormal inputs flush to zero; NaN gives
    the canonical NaN; a value that rounds beyond the largest BF16 becomes infinity."""
    x = _daz(bits).astype(np.uint64)
    nan = ((x & 0x7F800000) == 0x7F800000) & ((x & 0x007FFFFF) != 0)
    rounded = (x + 0x7FFF + ((x >> 16) & 1)) >> 16
    return np.where(nan, BF16_NAN, rounded).astype(np.uint16)


def mul_bf16(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """FP32 bits of the product of BF16 bits ``a`` and ``b`` (exact, then the FP32 rules)."""
    fa, fb = _f32(_daz(bf16_to_f32(a))), _f32(_daz(bf16_to_f32(b)))
    with np.errstate(all="ignore"):
        exact = fa.astype(np.float64) * fb.astype(np.float64)
        out = _flush(exact, exact.astype(np.float32))  # overflow gives infinity
    out = _bits(out)
    return np.where(np.isnan(exact), F32_NAN, out).astype(np.uint32)


def add_f32(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """FP32 bits of ``a + b`` (FP32 bits): flush-to-zero, round to nearest even."""
    fa, fb = _f32(_daz(a)), _f32(_daz(b))
    with np.errstate(all="ignore"):
        # Exact in float64 whenever the result is tiny (it then comes from cancellation of
        # nearby values); otherwise float32 addition rounds the exact sum to nearest even.
        exact = fa.astype(np.float64) + fb.astype(np.float64)
        out = _flush(exact, fa + fb)
    out = _bits(out)
    return np.where(np.isnan(exact), F32_NAN, out).astype(np.uint32)
