"""Check executed streams against their declared types and learn the values of dynamic dims.

Every stream the interpreter runs is decoded and compared with its :class:`StreamType`: static
dims must match, a regular symbol must take one value throughout, expressions over regular
symbols must evaluate to what was seen, and element types (tile shape and dtype, selector width,
buffer shape) must fit. A mismatch means an operator broke its own type rule or the data
contradicts the graph, and raises :class:`StepRuntimeError`.

A chain of single, data-free sub-tensors is ambiguous under the canonical stop-token form (it may
stand for a zero anywhere along the chain), so its inner extents are not observed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import sympy as sp

from .dims import Dim, RaggedSymbol, is_ragged, shape_str
from .errors import StepRuntimeError
from .tokens import DONE, Stop, from_tokens
from .types import BufferType, ElemType, Selector, StreamType, Tile, TupleType

__all__ = ["Bindings", "check_stream"]


@dataclass
class Bindings:
    """Values of dynamic dims observed in one run."""

    regular: dict[sp.Symbol, int] = field(default_factory=dict)
    ragged: dict[sp.Symbol, set[int]] = field(default_factory=dict)
    _deferred: list[tuple[sp.Expr, int, str]] = field(default_factory=list)

    def observe(self, dim: Dim, value: int, where: str) -> None:
        if isinstance(dim, int):
            if dim != value:
                raise StepRuntimeError(f"{where}: declared {dim}, observed {value}")
            return
        if isinstance(dim, RaggedSymbol):
            self.ragged.setdefault(dim, set()).add(value)
            return
        if is_ragged(dim):
            return  # compound ragged expressions are not checked
        if isinstance(dim, sp.Symbol):
            seen = self.regular.setdefault(dim, value)
            if seen != value:
                raise StepRuntimeError(
                    f"{where}: regular dim {dim} observed as {seen} and as {value}"
                )
            return
        self._deferred.append((dim, value, where))

    def finish(self) -> None:
        """Check the deferred compound expressions once every symbol is known."""
        for expr, value, where in self._deferred:
            got = expr.subs(self.regular)
            if got.free_symbols:
                continue
            if int(got) != value:
                raise StepRuntimeError(f"{where}: declared {expr} = {got}, observed {value}")
        self._deferred.clear()

    def values(self) -> dict[str, int]:
        """Regular symbols by name."""
        return {str(k): v for k, v in sorted(self.regular.items(), key=lambda kv: str(kv[0]))}


def _has_data(sub: Any, depth: int) -> bool:
    if depth == 0:
        return True
    return any(_has_data(c, depth - 1) for c in sub)


def check_elem(elem: ElemType, value: Any, b: Bindings, where: str) -> None:
    """Check one element against its declared type, binding symbolic tile dims."""
    if isinstance(elem, Tile):
        arr = value
        if not isinstance(arr, np.ndarray) or arr.ndim != 2:
            raise StepRuntimeError(
                f"{where}: expected a {elem}, got {type(value).__name__} {np.shape(value)}"
            )
        if arr.dtype != elem.dtype.numpy:
            raise StepRuntimeError(f"{where}: expected dtype {elem.dtype}, got {arr.dtype}")
        for what, dim, got in (
            ("rows", elem.rows, arr.shape[0]),
            ("cols", elem.cols, arr.shape[1]),
        ):
            if not (isinstance(dim, int) and dim == got):  # (a static match needs no message)
                b.observe(dim, got, f"{where}: tile {what} of {elem}")
    elif isinstance(elem, Selector):
        arr = np.asarray(value)
        if arr.dtype != np.bool_ or arr.shape != (elem.n,):
            raise StepRuntimeError(f"{where}: expected a {elem}, got {arr.dtype} {arr.shape}")
    elif isinstance(elem, BufferType):
        from .ops.onchip import BufferValue

        if not isinstance(value, BufferValue):
            raise StepRuntimeError(
                f"{where}: expected a buffer reference, got {type(value).__name__}"
            )
        inner = StreamType(elem.tile, (1, *elem.shape))
        _walk(from_tokens([*value.tokens, DONE], elem.rank), inner, b, f"{where}: buffer")
    elif isinstance(elem, TupleType):
        if not isinstance(value, tuple) or len(value) != len(elem.items):
            raise StepRuntimeError(
                f"{where}: expected a {len(elem.items)}-tuple, got {type(value).__name__}"
            )
        for k, (t, v) in enumerate(zip(elem.items, value, strict=True)):
            check_elem(t, v, b, f"{where}[{k}]")


def _walk(nested: list[Any], stype: StreamType, b: Bindings, where: str) -> None:
    shape, r = stype.shape, stype.rank
    # The messages are formatted once per stream, not once per sub-tensor: printing symbolic
    # shapes costs far more than checking them.
    head = f"{where} {stype}"
    dims = shape_str(shape)
    dim_what = [f"{head}: dim {idx} of {dims}" for idx in range(r + 1)]
    elem_where = f"{head}: element"

    def walk(sub: list[Any], idx: int) -> None:
        if idx > 0 and len(sub) == 1 and not _has_data(sub, r - idx + 1):
            return
        b.observe(shape[idx], len(sub), dim_what[idx])
        if idx == r:
            for e in sub:
                check_elem(stype.elem, e, b, elem_where)
        else:
            for child in sub:
                walk(child, idx + 1)

    walk(nested, 0)


def check_stream(tokens: Sequence[Any], stype: StreamType, b: Bindings, where: str) -> None:
    """Decode ``tokens`` and check them against ``stype``; raises :class:`StepRuntimeError`."""
    try:
        nested = from_tokens(tokens, stype.rank)
    except Exception as exc:  # malformed token order
        raise StepRuntimeError(f"{where} {stype}: malformed tokens: {exc}") from exc
    bad = [t for t in tokens if isinstance(t, Stop) and t.level > stype.rank]
    if bad:
        raise StepRuntimeError(f"{where} {stype}: stop {bad[0]!r} above the stream's rank")
    _walk(nested, stype, b, where)
