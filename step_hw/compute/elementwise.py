"""The element-wise Map unit: one tile per cycle through a fixed-point operation."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from amaranth.hdl import Const, Module, Mux, Signal

from step_lang import ops

from ..checks import check_choice, check_int, check_node, check_shapes, node_formats
from ..config import HwConfig
from ..payload import TokenFormat
from ..unit_functions import BINARY_OPS, FLOAT_MAP_OPS, MAP_OPS, node_fn
from . import arith
from ._unit import (
    Datapath,
    FoldUnit,
    check_bits,
    dynamic_shapes,
    shapes_kwargs,
)
from .float_datapaths import FLOAT_DTYPES, FloatElementwiseDatapath, float_bits

__all__ = ["MapUnit"]


def _broadcast(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int] | None:
    out = []
    for x, y in zip(a, b, strict=True):
        if x != y and 1 not in (x, y):
            return None
        out.append(max(x, y))
    return (out[0], out[1])


class _ElementwiseDatapath(Datapath):
    def __init__(self, op: str, in_shapes, out_shape, bits: int, frac_bits: int):
        self.op, self.in_shapes, self.out_shape = op, in_shapes, out_shape
        self.bits, self.frac_bits = bits, frac_bits
        # max never leaves the range, nor does silu (|silu(x)| <= |x|)
        self.may_overflow = op not in ("max", "silu")

    def build(self, m: Module, *, xs, acc, step, advance, finish, clear) -> Any:
        op, bits, f = self.op, self.bits, self.frac_bits
        rows, cols = self.out_shape
        res = Signal(TokenFormat("tile", rows, cols, bits).data_shape, name="result")

        def elem(i: int, r: int, c: int) -> Any:  # broadcasting size-1 dims
            ir, ic = self.in_shapes[i]
            return xs[i][r if ir > 1 else 0][c if ic > 1 else 0]

        self.overflow_rows = []
        for r in range(rows):
            flags: list[Any] = []  # where numerics(overflow="raise") would raise
            for c in range(cols):
                name = f"{op}_{r}_{c}"
                if op == "row_sum":
                    total = sum(elem(0, r, k) for k in range(self.in_shapes[0][1]))
                    y = arith.wrap(total, bits)
                    flags.append(arith.overflows(total, bits))
                elif op in ("exp", "silu", "recip"):
                    x = elem(0, r, c)
                    if op == "exp":
                        y = arith.exp_q(m, x, bits=bits, frac_bits=f, name=name, flags=flags)
                    elif op == "silu":
                        y = arith.silu_q(m, x, bits=bits, frac_bits=f, name=name)
                    else:
                        y = arith.div_q(m, 2**f, x, bits=bits, frac_bits=f, name=name, flags=flags)
                else:
                    a, b = elem(0, r, c), elem(1, r, c)
                    if op in ("add", "sub", "mul"):
                        v = a + b if op == "add" else a - b if op == "sub" else None
                        if v is None:  # mul_q: the rounded product, then the wrap
                            v = arith.round_shift(a * b, f)
                        y = arith.wrap(v, bits)
                        flags.append(arith.overflows(v, bits))
                    elif op == "max":
                        y = Mux(a > b, a, b)
                    else:
                        y = arith.div_q(m, a, b, bits=bits, frac_bits=f, name=name, flags=flags)
                m.d.comb += res[r][c].eq(y)
            self.overflow_rows.append(_any(flags))
        return res


def _any(flags: list[Any]) -> Any:
    out = Const(0)
    for flag in flags:
        out = out | flag
    return out


class MapUnit(FoldUnit):
    """A Map of an element-wise fixed-point function: one tile per cycle.

    Computes the functions of :func:`step_lang.numerics.functions` (``add``, ``sub``, ``mul``,
    ``div``, ``max`` of two zipped tiles, broadcasting size-1 rows or columns; ``exp``, ``silu``,
    ``recip``, ``row_sum`` of one tile) with the same integer formulas, so its outputs equal the
    interpreter's bit for bit.

    Parameters
    ----------
    op : str
        One of :data:`MAP_OPS`.
    in_shapes : sequence of (rows, cols)
        The input tiles' shapes (two for :data:`BINARY_OPS`, one otherwise). Rows ``None``: a
        dynamic tile of up to ``max_rows`` rows (``step_hw.payload``); the result is then a
        dynamic tile with that input's row count (rows beyond it zero), and the other input of a
        binary operation is dynamic too (same count; not checked: the interpreter raises on a
        mismatch, the hardware uses the first dynamic input's count) or a single row that
        broadcasts.
    max_rows : int
        The bound of dynamic inputs (``HwConfig.dyn_tile_rows``); only with a ``None`` row.
    elem_bits : int
        Element width (8, 16 or 32); inputs and output share it.
    frac_bits : int
        Fraction bits of the fixed-point format, in ``[0, elem_bits)``.
    level_bits : int
        Width of the stop-level field.
    float_dtype : str
        ``"bfloat16"`` or ``"float32"``: the inputs are floating-point tiles and the operation
        is one of ``float_datapaths.FLOAT_MAP_OPS``, computed as
        :mod:`step_lang.float_numerics` (``frac_bits`` unused; ``elem_bits`` 16 or 32 to
        match). ``None`` (default): fixed point.

    Ports
    -----
    in0, in1 : In(TokenFormat.signature())
        The zipped input streams (``in1`` for binary operations only).
    out : Out(TokenFormat.signature())
        Result tiles (broadcast shape; ``[R, 1]`` for ``row_sum``).
    misaligned : Out(1)
        (Binary operations.) Sticky: set when the inputs' tokens did not line up.

    Protocol
        :mod:`amaranth.lib.stream` on every port. The inputs are taken together, in a cycle where
        all are valid and the output register is empty or being emptied (``ready`` depends on
        the other inputs' ``valid`` and on ``out.ready``, never the reverse). ``out.valid`` comes
        from a register.
    Latency
        1 cycle (a token taken in cycle *t* is offered in *t + 1*; the datapath is
        combinational).
    Throughput
        Initiation interval 1: one token (tile, stop or done) per cycle, dynamic tiles included
        (all ``max_rows`` rows are computed in parallel).
    Stop tokens
        Stops and the done token pass through unchanged, in order, one cycle each.
    """

    def __init__(
        self,
        *,
        op: str,
        in_shapes: Sequence[tuple[int, int]],
        elem_bits: int,
        frac_bits: int = 0,
        level_bits: int = 3,
        max_rows: int | None = None,
        float_dtype: str | None = None,
    ):
        owner = "MapUnit"
        if float_dtype is not None:
            check_choice(owner, "float_dtype", float_dtype, tuple(FLOAT_DTYPES))
            check_choice(owner, "op", op, FLOAT_MAP_OPS)
            if elem_bits != float_bits(float_dtype):
                raise ValueError(
                    f"{owner} elem_bits of {float_dtype} is {float_bits(float_dtype)}, "
                    f"not {elem_bits!r}"
                )
            need = "float32" if op == "to_bf16" else "bfloat16"
            if op in ("mul", "div", "exp", "silu", "recip", "to_f32", "to_bf16") and (
                float_dtype != need
            ):
                raise ValueError(f"{owner} op {op!r} takes {need} tiles, not {float_dtype}")
        else:
            check_choice(owner, "op", op, MAP_OPS)
        arity = 2 if op in BINARY_OPS else 1
        in_shapes, dyn = dynamic_shapes(owner, in_shapes, max_rows)
        shapes = check_shapes(owner, in_shapes, arity, f"op {op!r}")
        if any(dyn):
            for s, d in zip(shapes, dyn, strict=True):
                if not d and s[0] != 1:
                    raise ValueError(
                        f"MapUnit in_shapes: a static {s[0]}-row tile does not broadcast against "
                        "a dynamic tile (only a single row does)"
                    )
        check_bits(owner, elem_bits, frac_bits)
        check_int(owner, "level_bits", level_bits)
        if arity == 2:
            out_shape = _broadcast(*shapes)
            if out_shape is None:
                raise ValueError(f"MapUnit in_shapes {shapes[0]} and {shapes[1]} do not broadcast")
        else:
            out_shape = (shapes[0][0], 1) if op == "row_sum" else shapes[0]
        self._op = op

        out_dtype = {"to_bf16": "bfloat16", "to_f32": "float32"}.get(op, float_dtype)
        out_bits = elem_bits if out_dtype is None else float_bits(out_dtype)

        def fmt(shape: tuple[int, int], dynamic: bool, bits: int, dt: str | None) -> TokenFormat:
            return TokenFormat(
                "tile", shape[0], shape[1], bits, level_bits=level_bits, dynamic=dynamic,
                float_dtype=dt,
            )  # fmt: skip

        if float_dtype is not None:
            datapath: Datapath = FloatElementwiseDatapath(
                op, shapes, out_shape, elem_bits, out_bits
            )
        else:
            datapath = _ElementwiseDatapath(op, shapes, out_shape, elem_bits, frac_bits)
        ins = [fmt(s, d, elem_bits, float_dtype) for s, d in zip(shapes, dyn, strict=True)]
        out = fmt(out_shape, any(dyn), out_bits, out_dtype)
        super().__init__(ins, out, datapath, mode="map")

    @property
    def op(self) -> str:
        return self._op

    @classmethod
    def from_node(cls, node: Any, config: HwConfig) -> MapUnit:
        """The unit of a step_lang ``Map`` node whose function is an element-wise function of
        :func:`step_lang.numerics.functions`; raises :class:`StepTypeError` naming the node
        otherwise."""
        check_node(node, (ops.Map,), cls.__name__)
        ins, out = node_formats(node, config)
        fn = node_fn(node, config, FLOAT_MAP_OPS if config.is_float else MAP_OPS, "MapUnit")
        if config.is_float:
            return cls(
                op=fn.op,
                **shapes_kwargs(ins),
                elem_bits=ins[0].elem_bits,
                float_dtype=ins[0].float_dtype,
                level_bits=config.level_bits,
            )
        return cls(
            op=fn.op,
            **shapes_kwargs(ins),
            elem_bits=out.elem_bits,
            frac_bits=config.frac_bits,
            level_bits=config.level_bits,
        )
