"""The BF16/FP32 datapaths of the Map, Matmul, Accum and Scan units, bit for bit as
:mod:`step_lang.float_numerics`.

Elements travel as IEEE bit patterns (``TokenFormat.float_dtype``); every operation widens BF16
to FP32 exactly, computes in FP32 (:mod:`step_hw.compute.fp`) and rounds the result to the
output's dtype, in the order the module docstring of :mod:`step_lang.float_numerics` defines.
The datapaths are combinational (results registered by the unit): initiation interval 1, or
``ceil(M*K*N / lanes)`` for a MAC array. Floating-point units raise no overflow flag: an
overflow is an infinity, as in the interpreter.
"""

from __future__ import annotations

from typing import Any

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value

from step_lang.float_numerics import fold_identity_bits
from step_lang.numerics import FLOAT_DTYPES as _FLOATS
from step_lang.types import DTYPES

from ..contract import matmul_steps
from ..payload import TokenFormat
from . import fp
from ._unit import Datapath, MacSchedule, select_by_step

__all__ = [
    "FLOAT_DTYPES",
    "FloatElementFold",
    "FloatElementwiseDatapath",
    "FloatMacArrayDatapath",
    "FloatRowSumFold",
    "float_bits",
    "float_init",
]

FLOAT_DTYPES = {name: DTYPES[name].nbytes * 8 for name in _FLOATS}  # BF16 elements, FP32 sums
_DTYPE_OF_WIDTH = {bits: name for name, bits in FLOAT_DTYPES.items()}


def float_bits(float_dtype: str) -> int:
    return FLOAT_DTYPES[float_dtype]


def float_init(bits: int, width: int) -> int:
    """The signed integer whose ``width``-bit pattern is ``bits`` (register initial values)."""
    return bits - (1 << width) if bits >> (width - 1) else bits


def _u(x: Any, width: int) -> Value:
    return Value.cast(x).as_unsigned()[0:width]


def _to_f32(x: Any, width: int) -> Value:
    return fp.bf16_to_f32(x) if width == 16 else _u(x, 32)


def _from_f32(m: Module, x: Value, width: int, name: str) -> Value:
    return fp.f32_to_bf16(m, x, name=name) if width == 16 else x


def _approx() -> Any:
    from . import fp_approx  # the table-and-interpolation units (exp, silu, recip, div)

    return fp_approx


def _fmt(rows: int, cols: int, width: int) -> Any:
    return TokenFormat("tile", rows, cols, width).data_shape


class FloatElementwiseDatapath(Datapath):
    """One tile per cycle through a floating-point Map operation (``step_hw.unit_functions.FLOAT_MAP_OPS``);
    size-1 rows or columns of binary operands broadcast."""

    def __init__(self, op: str, in_shapes, out_shape, in_bits: int, out_bits: int):
        self.op, self.in_shapes, self.out_shape = op, in_shapes, out_shape
        self.in_bits, self.out_bits = in_bits, out_bits

    def build(self, m: Module, *, xs, acc, step, advance, finish, clear) -> Any:
        op, w_in, w_out = self.op, self.in_bits, self.out_bits
        rows, cols = self.out_shape
        res = Signal(_fmt(rows, cols, w_out), name="result")

        def elem(i: int, r: int, c: int) -> Any:
            ir, ic = self.in_shapes[i]
            return _u(xs[i][r if ir > 1 else 0][c if ic > 1 else 0], w_in)

        approx = _approx() if op in ("div", "exp", "silu", "recip") else None
        for r in range(rows):
            for c in range(cols):
                name = f"{op}_{r}_{c}"
                if op == "row_sum":
                    s: Value = Const(0, 32)
                    for k in range(self.in_shapes[0][1]):
                        s = fp.add_f32(m, s, _to_f32(elem(0, r, k), w_in), name=f"{name}_{k}")
                    y = _from_f32(m, s, w_out, name)
                elif op in ("add", "sub"):
                    b = _to_f32(elem(1, r, c), w_in)
                    if op == "sub":
                        b = Cat(b[0:31], ~b[31])
                    s = fp.add_f32(m, _to_f32(elem(0, r, c), w_in), b, name=name)
                    y = _from_f32(m, s, w_out, name)
                elif op == "mul":
                    p = fp.mul_bf16(m, elem(0, r, c), elem(1, r, c), name=name)
                    y = fp.f32_to_bf16(m, p, name=name)
                elif op == "max":
                    y = fp.max_float(m, elem(0, r, c), elem(1, r, c), width=w_in, name=name)
                elif op == "div":
                    y = approx.div_bf16(m, elem(0, r, c), elem(1, r, c), name=name)
                elif op == "exp":
                    y = approx.exp_bf16(m, elem(0, r, c), name=name)
                elif op == "silu":
                    y = approx.silu_bf16(m, elem(0, r, c), name=name)
                elif op == "recip":
                    y = approx.recip_bf16(m, elem(0, r, c), name=name)
                elif op == "to_bf16":
                    y = fp.f32_to_bf16(m, elem(0, r, c), name=name)
                else:  # to_f32
                    y = fp.bf16_to_f32(elem(0, r, c))
                m.d.comb += res[r][c].eq(y)
        return res


class FloatElementFold(Datapath):
    """Accum/Scan ``add`` (an FP32 accumulator plus each tile widened; emitted rounded to the
    input's dtype) or ``max`` (in the input's dtype), element by element."""

    def __init__(self, op: str, shape: tuple[int, int], bits: int):
        self.op, self.shape, self.bits = op, shape, bits
        self.acc_register_bits = 32 if op == "add" else bits
        identity = fold_identity_bits(op, "float32" if op == "add" else _DTYPE_OF_WIDTH[bits])
        self.init = float_init(identity, self.acc_register_bits)

    def build(self, m: Module, *, xs, acc, step, advance, finish, clear) -> Any:
        rows, cols = self.shape
        res = Signal(_fmt(rows, cols, self.acc_register_bits), name="result")
        for r in range(rows):
            for c in range(cols):
                a, x, name = (
                    _u(acc[r][c], self.acc_register_bits),
                    xs[0][r][c],
                    f"{self.op}_{r}_{c}",
                )
                if self.op == "add":
                    y = fp.add_f32(m, a, _to_f32(x, self.bits), name=name)
                else:
                    y = fp.max_float(m, a, x, width=self.bits, name=name)
                m.d.comb += res[r][c].eq(y)
        return res

    def emit(self, m: Module, value: Any) -> Any:
        if self.op != "add" or self.bits == 32:
            return value
        return _round_tile(m, value, self.shape, 16)


class FloatRowSumFold(Datapath):
    """Accum ``row_sum`` (``float_numerics.row_sum_acc``): an ``[R, 1]`` FP32 accumulator; each
    ``[R, C]`` tile (BF16 widened exactly, or FP32) continues, per row, the chain ``s = s +
    x[c]`` over its columns left to right (``C`` adders in a row, as
    :class:`FloatElementwiseDatapath`'s ``row_sum``); emitted rounded to the input's dtype."""

    def __init__(self, shape: tuple[int, int], bits: int):
        self.shape, self.bits = shape, bits
        self.acc_register_bits = 32
        self.init = 0  # +0

    def build(self, m: Module, *, xs, acc, step, advance, finish, clear) -> Any:
        rows, cols = self.shape
        res = Signal(_fmt(rows, 1, 32), name="result")
        for r in range(rows):
            s: Value = _u(acc[r][0], 32)
            for c in range(cols):
                x = _to_f32(_u(xs[0][r][c], self.bits), self.bits)
                s = fp.add_f32(m, s, x, name=f"row_sum_{r}_{c}")
            m.d.comb += res[r][0].eq(s)
        return res

    def emit(self, m: Module, value: Any) -> Any:
        if self.bits == 32:
            return value
        return _round_tile(m, value, (self.shape[0], 1), 16)


def _round_tile(m: Module, value: Any, shape: tuple[int, int], width: int) -> Any:
    """An FP32 tile rounded to BF16 (``width`` 16)."""
    rows, cols = shape
    out = Signal(_fmt(rows, cols, width), name="emitted")
    for r in range(rows):
        for c in range(cols):
            y = fp.f32_to_bf16(m, _u(value[r][c], 32), name=f"emit_{r}_{c}")
            m.d.comb += out[r][c].eq(y)
    return out


class FloatMacArrayDatapath(MacSchedule):
    """``a @ b`` (BF16) on ``lanes`` multiplier-adder pairs over ``ceil(M*K*N / lanes)`` steps.

    Products are numbered ``((i*N + j)*K + k)``; step ``t`` computes products
    ``t*lanes .. t*lanes + lanes - 1``. Lane ``l`` multiplies (exactly, in FP32) and adds its
    product to the previous lane's sum when both belong to the same output, or to that output's
    running sum otherwise, so every output is the chain ``s = start; s = s + p_k`` in ``k`` order
    (``start``: ``+0``, or the accumulator with ``accumulate``), as
    ``float_numerics.matmul_bits``. The running sums between steps are FP32 registers. A Map
    result is rounded to ``out_bits`` (16: BF16); an Accum keeps the FP32 sum as its accumulator
    and rounds it when it emits it. A lane's operands and chain input are selected by the bits of
    the step counter they change with (:meth:`MacSchedule.select_operands`).

    With ``dynamic`` ``M`` is the most rows of a dynamic tile ``a`` (as
    :class:`~step_hw.compute.matmul.MacArrayDatapath`).
    """

    def __init__(self, *, dims, lanes, transpose_b, out_bits, accumulate, dynamic=False):
        self.dims, self.lanes, self.transpose_b = dims, lanes, transpose_b
        self.out_bits, self.accumulate, self.dynamic = out_bits, accumulate, dynamic
        self.steps = matmul_steps(*dims, lanes)
        self.acc_register_bits = 32 if accumulate else None

    def build(self, m: Module, *, xs, acc, step, advance, finish, clear) -> Any:
        mm, _, nn = self.dims
        lanes, steps = self.lanes, self.steps
        outputs = mm * nn
        a_el, b_el = self.operand_elements(m, xs, 16)
        starts: list[Value] = [Const(0, 32)] * outputs
        if self.accumulate:  # the accumulator's elements, one signal each (as the operands)
            starts = [Signal(32, name=f"start_{o // nn}_{o % nn}") for o in range(outputs)]
            m.d.comb += [starts[o].eq(_u(acc[o // nn][o % nn], 32)) for o in range(outputs)]
        partial = [Signal(32, name=f"partial_{o // nn}_{o % nn}") for o in range(outputs)]
        partial = partial if steps > 1 else []
        sums = [Signal(32, name=f"sum_{o // nn}_{o % nn}") for o in range(outputs)]
        a_op = [Signal(16, name=f"lane{lane}_a") for lane in range(lanes)]
        b_op = [Signal(16, name=f"lane{lane}_b") for lane in range(lanes)]
        chain_in = [Signal(32, name=f"lane{lane}_in") for lane in range(lanes)]
        outs = []
        for lane in range(lanes):
            p = fp.mul_bf16(m, a_op[lane], b_op[lane], name=f"lane{lane}_mul")
            outs.append(fp.add_f32(m, chain_in[lane], p, name=f"lane{lane}_add"))

        in_step0 = step == 0

        def running(o: int, *, in_step_0: bool) -> Value:
            """Output ``o``'s sum before this step: its start in step 0, else the partial sum
            (``in_step_0``: whether step 0 is among the steps that read it here)."""
            if steps == 1:
                return starts[o]
            return Mux(in_step0, starts[o], partial[o]) if in_step_0 else partial[o]

        sched = self.lane_schedule()
        self.select_operands(m, step, sched, (a_el, b_el), (a_op, b_op))
        for lane in range(lanes):
            # a lane that starts an output's chain adds to its running sum, else to the last
            # lane's sum (-1); only the output it starts in step 0 can read the start
            chain = [
                o if first else -1
                for o, first in zip(sched.output[lane], sched.first[lane], strict=True)
            ]

            def chain_value(o: int, lane: int = lane, at_0: int = (chain or [-1])[0]) -> Value:
                return outs[lane - 1] if o < 0 else running(o, in_step_0=o == at_0)

            select_by_step(m, chain_in[lane], step, chain, chain_value)

        # An output takes the sum of the last lane that adds to it in a step; in other steps it
        # keeps its running sum.
        for o in range(outputs):
            value = running(o, in_step_0=0 not in sched.adding[o])
            for t, adding in sched.adding[o].items():  # the chain's last lane in step t
                value = Mux(step == t, outs[adding[-1]], value) if steps > 1 else outs[adding[-1]]
            m.d.comb += sums[o].eq(value)
        if steps > 1:
            with m.If(advance):
                m.d.sync += [partial[o].eq(sums[o]) for o in range(outputs)]
        if self.accumulate or self.out_bits == 32:  # the FP32 sums (an Accum rounds on emit)
            res = Signal(_fmt(mm, nn, 32), name="result")
            m.d.comb += [res[i][j].eq(sums[i * nn + j]) for i in range(mm) for j in range(nn)]
            return res
        res = Signal(_fmt(mm, nn, 16), name="result")
        for i in range(mm):
            for j in range(nn):
                rounded = fp.f32_to_bf16(m, sums[i * nn + j], name=f"round_{i}_{j}")
                m.d.comb += res[i][j].eq(rounded)
        return res

    def emit(self, m: Module, value: Any) -> Any:
        if not self.accumulate or self.out_bits == 32:
            return value
        return _round_tile(m, value, (self.dims[0], self.dims[2]), 16)
