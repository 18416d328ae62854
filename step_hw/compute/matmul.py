"""The matmul Map unit: a MAC array of ``lanes`` multipliers."""

from __future__ import annotations

from typing import Any

from amaranth.hdl import Const, Module, Mux, Signal, Value, signed

from step_lang import ops

from ..block_rules import unit_tiles_rule
from ..checks import check_bool, check_choice, check_int, check_node, check_shapes, node_formats
from ..config import HwConfig
from ..contract import matmul_steps
from ..payload import TokenFormat
from ..unit_functions import node_fn
from . import arith
from ._unit import (
    Datapath,
    FoldUnit,
    MacSchedule,
    check_bits,
    dynamic_shapes,
    shapes_kwargs,
)
from .float_datapaths import FloatMacArrayDatapath

__all__ = [
    "MacArrayDatapath",
    "MatmulUnit",
    "check_float_matmul",
    "float_result",
    "mac_array_datapath",
    "matmul_dims",
]


def matmul_dims(
    owner: str, in_shapes: Any, transpose_b: bool
) -> tuple[tuple[tuple[int, int], ...], tuple[int, int, int]]:
    """Validated input shapes and ``(M, K, N)`` of ``a @ b`` (``a @ b.T`` with ``transpose_b``)."""
    shapes = check_shapes(owner, in_shapes, 2, "a matmul")
    (rows, k), b = shapes
    k_b, n = (b[1], b[0]) if transpose_b else b
    if k != k_b:
        what = "a @ b.T" if transpose_b else "a @ b"
        raise ValueError(f"{owner} in_shapes {shapes[0]} and {shapes[1]} do not match for {what}")
    return shapes, (rows, k, n)


def check_matmul_bits(owner: str, elem_bits, frac_bits, acc_bits, out_bits) -> tuple[int, int]:
    check_bits(owner, elem_bits, frac_bits)
    check_choice(owner, "acc_bits", acc_bits, (8, 16, 32))
    out_bits = acc_bits if out_bits is None else out_bits
    check_choice(owner, "out_bits", out_bits, (8, 16, 32))
    if acc_bits < elem_bits:
        raise ValueError(f"{owner} acc_bits {acc_bits} is narrower than elem_bits {elem_bits}")
    if frac_bits >= out_bits:
        raise ValueError(f"{owner} frac_bits {frac_bits} do not fit out_bits {out_bits}")
    return acc_bits, out_bits


def check_float_matmul(owner: str, float_dtype: Any, elem_bits: Any, acc_bits: Any) -> None:
    """A floating-point MAC array multiplies BF16 tiles into an FP32 sum."""
    if float_dtype is None:
        return
    if float_dtype != "bfloat16" or elem_bits != 16:
        raise ValueError(
            f"{owner} float_dtype must be 'bfloat16' with elem_bits 16, "
            f"not {float_dtype!r} with {elem_bits!r}"
        )
    if acc_bits not in (None, 32):
        raise ValueError(f"{owner} acc_bits of a BF16 MAC array is 32 (FP32), not {acc_bits!r}")


def float_result(float_dtype: str | None, out_bits: int) -> str | None:
    """The dtype of a floating-point MAC array's ``out_bits``-bit result."""
    if float_dtype is None:
        return None
    return "float32" if out_bits == 32 else "bfloat16"


def mac_array_datapath(float_dtype: str | None, **kwargs: Any) -> Datapath:
    """The MAC array of a matmul unit (``accumulate=True``: of an Accum or Scan): the
    floating-point one for ``float_dtype`` (``bits``, ``frac_bits`` and ``acc_bits`` are then
    fixed: BF16 in, FP32 sums; ``exact`` is fixed point only), else the fixed-point one."""
    if float_dtype is not None:
        if kwargs.pop("exact", False):
            raise ValueError("an exact (matmul_sum) accumulator is fixed point only")
        for fixed_only in ("bits", "frac_bits", "acc_bits"):
            kwargs.pop(fixed_only)
        return FloatMacArrayDatapath(**kwargs)
    return MacArrayDatapath(**kwargs)


class MacArrayDatapath(MacSchedule):
    """``a @ b`` on ``lanes`` multipliers over ``ceil(M*K*N / lanes)`` steps.

    The ``M*K*N`` products are numbered ``((i*N + j)*K + k)`` and step ``t`` computes products
    ``t*lanes .. t*lanes + lanes - 1``, adding them into per-output partial sums wide enough to
    be exact; the last step's sums are wrapped to ``acc_bits`` (as ``numerics.matmul_q``: the
    same value as wrapping every partial sum) and rescaled with ``round_shift(., frac_bits)``;
    with ``accumulate`` the result is added to the accumulator, then wrapped to ``out_bits``
    (``numerics`` ``matmul_acc``). ``overflow_rows`` flags a sum that does not fit ``acc_bits``
    or a result that does not fit ``out_bits`` (where ``numerics`` under ``overflow="raise"``
    raises).

    With ``exact`` (and ``accumulate``: ``numerics`` ``matmul_sum_out``, a matmul whose ``K`` is
    split over the tiles of a group) the accumulator register is ``acc_bits`` wide
    (``acc_register_bits``) and holds ``wrap(acc + sum of the products, acc_bits)``: in modular
    arithmetic the exact group sum wrapped once, as the interpreter's int64 sum wrapped when it
    emits. :meth:`emit` rescales it, ``wrap(round_shift(acc, frac_bits), out_bits)``, so a
    group emits what the Map ``matmul`` of the unsplit tiles gives. ``overflow_rows`` flags a
    running sum that leaves ``acc_bits`` (a superset of ``overflow="raise"``, which checks only
    the group's final sum: a running sum that wraps and comes back is flagged, not raised), and
    :meth:`emit_overflows` an emitted value that does not fit ``out_bits`` (exactly where
    ``"raise"`` raises for it).

    With ``dynamic`` ``M`` is the most rows of a dynamic tile ``a``: a tile of ``n`` rows takes
    ``max(1, ceil(n*K*N / lanes))`` steps (its products are the first ``n*K*N``).
    """

    def __init__(
        self,
        *,
        dims,
        lanes,
        transpose_b,
        bits,
        frac_bits,
        acc_bits,
        out_bits,
        accumulate: bool,
        dynamic: bool = False,
        exact: bool = False,
    ):
        self.dims, self.lanes, self.transpose_b = dims, lanes, transpose_b
        self.bits, self.frac_bits = bits, frac_bits
        self.acc_bits, self.out_bits, self.accumulate = acc_bits, out_bits, accumulate
        self.dynamic = dynamic
        if exact and not accumulate:
            raise ValueError("an exact (matmul_sum) accumulator needs accumulate=True")
        self.exact = exact
        self.acc_register_bits = acc_bits if exact else None
        mm, kk, nn = dims
        self.steps = matmul_steps(mm, kk, nn, lanes)
        self.may_overflow = True
        # exact sums of K products of two `bits`-bit values (and at least the accumulator)
        self.sum_bits = max(acc_bits, 2 * bits + kk.bit_length())

    def build(self, m: Module, *, xs, acc, step, advance, finish, clear) -> Any:
        mm, _, nn = self.dims
        lanes, steps = self.lanes, self.steps
        a_el, b_el = self.operand_elements(m, xs)
        acc_bits, f = self.acc_bits, self.frac_bits

        # Partial sums of earlier steps (registers only when the products take several steps).
        wide = self.sum_bits
        partial = (
            [[Signal(signed(wide), name=f"partial_{i}_{j}") for j in range(nn)] for i in range(mm)]
            if steps > 1
            else []
        )
        sums = [[Signal(signed(wide), name=f"sum_{i}_{j}") for j in range(nn)] for i in range(mm)]
        # One multiplier per lane; the step selects its operands and its output.
        a_op = [Signal(signed(self.bits), name=f"lane{lane}_a") for lane in range(lanes)]
        b_op = [Signal(signed(self.bits), name=f"lane{lane}_b") for lane in range(lanes)]
        prod = [Signal(signed(2 * self.bits), name=f"lane{lane}_p") for lane in range(lanes)]
        m.d.comb += [p.eq(x * y) for p, x, y in zip(prod, a_op, b_op, strict=True)]

        sched = self.lane_schedule()
        self.select_operands(m, step, sched, (a_el, b_el), (a_op, b_op))
        # An output adds its lanes' products to its partial sum in the steps they compute it; in
        # other steps it keeps its partial sum (zero after `finish`).
        for o in range(mm * nn):
            i, j = divmod(o, nn)
            base = partial[i][j] if steps > 1 else 0
            value: Any = base
            for t, adding in sched.adding[o].items():
                added = base + sum(prod[lane] for lane in adding)
                value = Mux(step == t, added, value) if steps > 1 else added
            m.d.comb += sums[i][j].eq(value)
        if steps > 1:
            for i in range(mm):
                for j in range(nn):
                    with m.If(advance):
                        m.d.sync += partial[i][j].eq(sums[i][j])
                    with m.If(finish):
                        m.d.sync += partial[i][j].eq(0)
        res_bits = acc_bits if self.exact else self.out_bits
        res = Signal(TokenFormat("tile", mm, nn, res_bits).data_shape, name="result")
        self.overflow_rows = []
        for i in range(mm):
            over: Any = Const(0)
            for j in range(nn):
                total = sums[i][j]
                if self.exact:  # the running exact sum, wrapped to the accumulator register
                    s = acc[i][j] + total
                    m.d.comb += res[i][j].eq(arith.wrap(s, acc_bits))
                    over = over | arith.overflows(s, acc_bits)
                    continue
                y = arith.round_shift(arith.wrap(total, acc_bits), f)
                if self.accumulate:
                    y = acc[i][j] + y
                m.d.comb += res[i][j].eq(arith.wrap(y, self.out_bits))
                over = over | arith.overflows(total, acc_bits) | arith.overflows(y, self.out_bits)
            self.overflow_rows.append(over)
        return res

    def _rescaled(self, value: Any) -> list[list[Any]]:
        """``round_shift(acc, frac_bits)`` of every accumulator element (exact, unwrapped)."""
        mm, _, nn = self.dims  # (a dynamic tile's elements: M = max_rows rows)
        return [
            [arith.round_shift(value[i][j], self.frac_bits) for j in range(nn)] for i in range(mm)
        ]

    def emit(self, m: Module, value: Any) -> Any:
        if not self.exact:
            return value
        rescaled = self._rescaled(value)
        mm, _, nn = self.dims
        out = Signal(TokenFormat("tile", mm, nn, self.out_bits).data_shape, name="emitted")
        for i, row in enumerate(rescaled):
            m.d.comb += [out[i][j].eq(arith.wrap(y, self.out_bits)) for j, y in enumerate(row)]
        return out

    def emit_overflows(self, m: Module, value: Any) -> Value | None:
        if not self.exact:
            return None
        over: Any = Const(0)
        for row in self._rescaled(value):
            for y in row:
                over = over | arith.overflows(y, self.out_bits)
        return over


class MatmulUnit(FoldUnit):
    """A Map of ``matmul`` (``a @ b``) or ``matmul_t`` (``a @ b.T``): a MAC array.

    The fixed-point product of :func:`step_lang.numerics.functions`: products of ``elem_bits``
    elements summed in ``acc_bits`` (wrapping), rescaled by ``round_shift(., frac_bits)`` and
    wrapped to ``out_bits``.

    Parameters
    ----------
    in_shapes : ((M, K), (K, N))
        The tiles ``a`` and ``b`` (``b`` is ``(N, K)`` with ``transpose_b``). ``M = None``: ``a``
        is a dynamic tile of up to ``max_rows`` rows (``step_hw.payload``); the result is a
        dynamic ``[rows, N]`` tile with ``a``'s row count.
    max_rows : int
        The bound of a dynamic ``a`` (``HwConfig.dyn_tile_rows``); only with ``M = None``.
    elem_bits, frac_bits : int
        Input element width (8, 16, 32) and fraction bits.
    lanes : int
        Multipliers. ``M*K*N`` products take ``ceil(M*K*N / lanes)`` cycles; a dynamic ``a`` of
        ``n`` rows takes ``max(1, ceil(n*K*N / lanes))`` cycles (the actual rows, not the bound;
        at least one cycle, in which a 0-row tile is taken and a 0-row result written).
    transpose_b : bool
        Multiply by ``b.T``.
    acc_bits, out_bits : int
        Accumulator width (default 32) and result width (default ``acc_bits``).
    level_bits : int
        Width of the stop-level field.
    float_dtype : str
        ``"bfloat16"``: BF16 tiles (``elem_bits`` 16), products exact in FP32 and summed in
        FP32 in ``k`` order (:class:`~step_hw.compute.float_datapaths.FloatMacArrayDatapath`),
        the result FP32 (``out_bits`` 32) or rounded to BF16 (``out_bits`` 16). ``None``:
        fixed point.

    Ports
    -----
    in0, in1 : In(TokenFormat.signature())
        ``a`` and ``b``, zipped (their tokens must line up).
    out : Out(TokenFormat.signature())
        ``[M, N]`` result tiles of ``out_bits`` elements.
    misaligned : Out(1)
        Sticky: set when the inputs' tokens did not line up.

    Protocol
        :mod:`amaranth.lib.stream`. A pair of data tokens is read in place for
        ``ceil(M*K*N / lanes)`` cycles (the stream rules keep the payloads stable) and taken in
        the last of them, together with loading the output register; ``out.valid`` is a register.
    Latency
        ``ceil(M*K*N / lanes)`` cycles from the first cycle the pair is valid to the result being
        offered.
    Throughput
        Initiation interval ``ceil(M*K*N / lanes)`` cycles per tile pair
        (``max(1, ceil(n*K*N / lanes))`` for a dynamic ``a`` of ``n`` rows); one cycle per stop
        or done token.
    Stop tokens
        Stops and the done token pass through unchanged, in order.
    """

    def __init__(
        self,
        *,
        in_shapes,
        elem_bits: int,
        frac_bits: int = 0,
        lanes: int = 1,
        transpose_b: bool = False,
        acc_bits: int = 32,
        out_bits: int | None = None,
        level_bits: int = 3,
        max_rows: int | None = None,
        float_dtype: str | None = None,
    ):
        owner = "MatmulUnit"
        check_bool(owner, "transpose_b", transpose_b)
        check_float_matmul(owner, float_dtype, elem_bits, acc_bits)
        in_shapes, dyn = dynamic_shapes(owner, in_shapes, max_rows)
        if len(dyn) == 2 and dyn[1]:
            raise ValueError(f"{owner} b must be a static tile; only a's rows may be dynamic")
        shapes, dims = matmul_dims(owner, in_shapes, transpose_b)
        acc_bits, out_bits = check_matmul_bits(owner, elem_bits, frac_bits, acc_bits, out_bits)
        if float_dtype is not None and out_bits not in (16, 32):
            raise ValueError(f"{owner} out_bits of a BF16 MAC array is 16 or 32, not {out_bits}")
        check_int(owner, "lanes", lanes)
        check_int(owner, "level_bits", level_bits)
        self._dims, self._lanes = dims, lanes
        datapath = mac_array_datapath(
            float_dtype,
            dims=dims,
            lanes=lanes,
            transpose_b=transpose_b,
            bits=elem_bits,
            frac_bits=frac_bits,
            acc_bits=acc_bits,
            out_bits=out_bits,
            accumulate=False,
            dynamic=any(dyn),
        )
        ins = [
            TokenFormat("tile", r, c, elem_bits, level_bits=level_bits, dynamic=d,
                        float_dtype=float_dtype)
            for (r, c), d in zip(shapes, dyn, strict=True)
        ]  # fmt: skip
        out = TokenFormat(
            "tile", dims[0], dims[2], out_bits, level_bits=level_bits, dynamic=any(dyn),
            float_dtype=float_result(float_dtype, out_bits),
        )  # fmt: skip
        super().__init__(ins, out, datapath, mode="map")

    @property
    def dims(self) -> tuple[int, int, int]:
        """``(M, K, N)``."""
        return self._dims

    @property
    def lanes(self) -> int:
        return self._lanes

    @classmethod
    def from_node(cls, node: Any, config: HwConfig) -> MatmulUnit:
        """The unit of a step_lang ``Map`` node with a numerics ``matmul`` (``lanes`` and the
        accumulator from ``config``); raises :class:`StepTypeError` naming the node otherwise."""
        check_node(node, (ops.Map,), cls.__name__)
        ins, out = node_formats(node, config)
        fn = node_fn(node, config, ("matmul",), "MatmulUnit")
        unit_tiles_rule(node, config, "MatmulUnit")
        if config.is_float:
            return cls(
                **shapes_kwargs(ins),
                elem_bits=ins[0].elem_bits,
                lanes=config.lanes,
                transpose_b=fn.transpose_b,
                out_bits=out.elem_bits,
                level_bits=config.level_bits,
                float_dtype=ins[0].float_dtype,
            )
        return cls(
            **shapes_kwargs(ins),
            elem_bits=ins[0].elem_bits,
            frac_bits=config.frac_bits,
            lanes=config.lanes,
            transpose_b=fn.transpose_b,
            acc_bits=config.acc.nbytes * 8,
            out_bits=out.elem_bits,
            level_bits=config.level_bits,
        )
