"""Shape-only tile values for timing-only simulation.

A :class:`MetaTile` stands for a tile whose shape and dtype are known but whose values are not.
Functions map them by shape rules (:func:`meta_apply`), so a full-size model can be simulated
without computing its arithmetic. Control values (selectors, addresses, lengths, padding flags)
stay real: they decide routing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import StepRuntimeError

__all__ = ["MetaTile", "is_meta", "meta_apply"]


@dataclass(frozen=True)
class MetaTile:
    """A ``rows x cols`` tile of ``dtype`` without values."""

    shape: tuple[int, int]
    dtype: np.dtype

    @property
    def nbytes(self) -> int:
        return int(self.shape[0]) * int(self.shape[1]) * np.dtype(self.dtype).itemsize

    @property
    def ndim(self) -> int:
        return 2

    def __getitem__(self, index: Any) -> MetaTile:
        """Row or column slices, as retiling takes them (``t[i:j]``, ``t[:, i:j]``)."""
        rows, cols = self.shape
        if not isinstance(index, tuple):
            index = (index, slice(None))
        r = range(rows)[index[0]]
        c = range(cols)[index[1]]
        if not isinstance(r, range) or not isinstance(c, range):
            raise StepRuntimeError("a meta tile can only be sliced, not indexed")
        return MetaTile((len(r), len(c)), self.dtype)

    def __repr__(self) -> str:
        return f"Meta[{self.shape[0]}x{self.shape[1]} {np.dtype(self.dtype).name}]"


def is_meta(*values: Any) -> bool:
    """True if any value is a :class:`MetaTile`."""
    return any(isinstance(v, MetaTile) for v in values)


def _shape(v: Any) -> tuple[int, int]:
    return tuple(v.shape)  # numpy arrays and MetaTiles alike


def meta_apply(kind: str, dtype: np.dtype, *values: Any) -> Any:
    """The shape-only result of a function of ``kind`` on ``values`` (some of them meta).

    Kinds: ``same`` (shape of the first argument), ``broadcast``, ``matmul``, ``matmul_t``,
    ``rowsum``, ``concat_rows`` (accumulator first), ``split_rows``, ``split_cols``,
    ``split_rows_masked`` (tile, real mask).
    """
    if kind == "same":
        return MetaTile(_shape(values[0]), dtype)
    if kind == "broadcast":
        return MetaTile(tuple(np.broadcast_shapes(*(_shape(v) for v in values))), dtype)
    if kind in ("matmul", "matmul_t"):
        a, b = _shape(values[0]), _shape(values[1])
        k_b, n = (b[1], b[0]) if kind == "matmul_t" else b
        if a[1] != k_b:
            raise StepRuntimeError(f"meta {kind}: inner dims differ, {a} and {b}")
        return MetaTile((a[0], n), dtype)
    if kind == "rowsum":
        return MetaTile((_shape(values[0])[0], 1), dtype)
    if kind == "concat_rows":
        acc, x = _shape(values[0]), _shape(values[1])
        return MetaTile((acc[0] + x[0], x[1]), dtype)
    if kind == "split_rows":
        t = values[0]
        return [t[i : i + 1] for i in range(_shape(t)[0])]
    if kind == "split_cols":
        t = values[0]
        return [t[:, j : j + 1] for j in range(_shape(t)[1])]
    if kind == "split_rows_masked":
        t, mask = values
        if is_meta(mask):
            raise StepRuntimeError("padding masks must carry real values in timing-only runs")
        return [t[i : i + 1] for i in range(_shape(t)[0]) if not mask[i, 0]]
    raise StepRuntimeError(f"no shape-only model for function kind {kind!r}")
