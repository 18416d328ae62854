"""Accum and Scan units: fold tiles into an accumulator register."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from amaranth.hdl import Const, Module, Mux, Signal

from step_lang import numerics, ops

from ..block_rules import unit_tiles_rule
from ..checks import check_bool, check_choice, check_int, check_node, check_shapes, node_formats
from ..config import HwConfig
from ..payload import TokenFormat, max_level
from ..unit_functions import ACCUM_OPS, SCAN_OPS, node_fn
from . import arith
from ._unit import (
    Datapath,
    FoldUnit,
    check_bits,
    dynamic_shapes,
    shapes_kwargs,
)
from .float_datapaths import FLOAT_DTYPES, FloatElementFold, FloatRowSumFold, float_bits
from .matmul import (
    check_float_matmul,
    check_matmul_bits,
    float_result,
    mac_array_datapath,
    matmul_dims,
)

__all__ = ["AccumUnit", "ScanUnit"]


_MATMUL_ONLY = ("lanes", "transpose_b", "acc_bits", "out_bits")


class _ElementFold(Datapath):
    """``acc + x`` (wrapping) or ``max(acc, x)``, element by element."""

    def __init__(self, op: str, shape: tuple[int, int], bits: int):
        self.op, self.shape, self.bits = op, shape, bits
        self.init = 0 if op == "add" else -(2 ** (bits - 1))
        self.may_overflow = op == "add"

    def build(self, m: Module, *, xs, acc, step, advance, finish, clear) -> Any:
        rows, cols = self.shape
        res = Signal(TokenFormat("tile", rows, cols, self.bits).data_shape, name="result")
        self.overflow_rows = []
        for r in range(rows):
            over: Any = Const(0)
            for c in range(cols):
                a, x = acc[r][c], xs[0][r][c]
                if self.op == "add":
                    y = arith.wrap(a + x, self.bits)
                    over = over | arith.overflows(a + x, self.bits)
                else:
                    y = Mux(x > a, x, a)
                m.d.comb += res[r][c].eq(y)
            self.overflow_rows.append(over)
        return res


class _RowConcat(Datapath):
    """``retile_row``: the ``g``-th tile of a group fills rows ``g*R .. g*R + R - 1``.

    Rows beyond the output tile are dropped (a well-typed stream has none); a short group leaves
    zero rows (likewise).
    """

    def __init__(self, in_rows: int, out_rows: int, cols: int, bits: int):
        self.in_rows, self.out_rows, self.cols, self.bits = in_rows, out_rows, cols, bits

    def build(self, m: Module, *, xs, acc, step, advance, finish, clear) -> Any:
        groups = self.out_rows // self.in_rows
        count = Signal(range(groups + 1), name="count")
        with m.If(finish):
            m.d.sync += count.eq(Mux(count == groups, count, count + 1))
        with m.If(clear):
            m.d.sync += count.eq(0)
        res = Signal(
            TokenFormat("tile", self.out_rows, self.cols, self.bits).data_shape, name="result"
        )
        m.d.comb += res.eq(acc)
        with m.Switch(count):
            for g in range(groups):
                with m.Case(g):
                    m.d.comb += [
                        res[g * self.in_rows + r].eq(xs[0][r]) for r in range(self.in_rows)
                    ]
        return res


class _RowAppend(Datapath):
    """``retile_row`` into a dynamic tile: each tile of a group is appended below the rows so
    far (``count``); the result's row count is ``count + R``. A tile that would pass
    ``max_rows`` is dropped (elaboration proves that a graph's tiles fit, ``step_hw.dyntile``).
    """

    def __init__(self, in_rows: int, max_rows: int, cols: int, bits: int):
        self.in_rows, self.max_rows, self.cols, self.bits = in_rows, max_rows, cols, bits
        self._next: Any = None

    def build(self, m: Module, *, xs, acc, step, advance, finish, clear) -> Any:
        r_in, top = self.in_rows, self.max_rows
        count = Signal(range(top + 1), name="count")
        nxt = Signal(range(top + 1), name="count_next")
        m.d.comb += nxt.eq(Mux(count + r_in <= top, count + r_in, count))
        self._next = nxt
        with m.If(finish):
            m.d.sync += count.eq(nxt)
        with m.If(clear):
            m.d.sync += count.eq(0)
        res = Signal(TokenFormat("tile", top, self.cols, self.bits).data_shape, name="result")
        m.d.comb += res.eq(acc)
        with m.Switch(count):
            for at in range(top - r_in + 1):
                with m.Case(at):
                    m.d.comb += [res[at + r].eq(xs[0][r]) for r in range(r_in)]
        return res

    def out_rows(self, m: Module, in_rows: Any) -> Any:
        return self._next


def _reduce_unit(
    owner: str,
    ops,
    *,
    op,
    rank,
    in_shapes,
    elem_bits,
    frac_bits,
    level_bits,
    lanes,
    transpose_b,
    acc_bits,
    out_bits,
    out_rows,
    max_rows=None,
    float_dtype=None,
    exact=False,
):
    """Validate the parameters of an Accum or Scan unit: (input formats, output format, datapath)."""
    check_choice(owner, "op", op, ops)
    check_bool(owner, "exact", exact)
    if exact and (op != "matmul" or float_dtype is not None):
        raise ValueError(
            f"{owner} exact applies to fixed-point op='matmul' only, not op={op!r} with "
            f"float_dtype={float_dtype!r}"
        )
    if float_dtype is not None:
        check_choice(owner, "float_dtype", float_dtype, tuple(FLOAT_DTYPES))
        if elem_bits != float_bits(float_dtype):
            raise ValueError(
                f"{owner} elem_bits of {float_dtype} is {float_bits(float_dtype)}, not {elem_bits!r}"
            )
        if op == "matmul":
            check_float_matmul(owner, float_dtype, elem_bits, acc_bits)
    dyn: tuple[bool, ...] = ()
    if op == "matmul":
        in_shapes, dyn = dynamic_shapes(owner, in_shapes, max_rows)
        if len(dyn) == 2 and dyn[1]:
            raise ValueError(f"{owner} b must be a static tile; only a's rows may be dynamic")
    elif op == "retile_row" and max_rows is not None:
        check_int(owner, "max_rows", max_rows)
        if out_rows is not None:
            raise ValueError(
                f"{owner} out_rows (a static result) and max_rows (a dynamic one) exclude "
                "each other"
            )
    elif max_rows is not None:
        raise ValueError(f"{owner} max_rows applies to op='matmul' and op='retile_row' only")
    if not (op == "retile_row" and elem_bits == 1):  # bool flags only move; no arithmetic
        check_bits(owner, elem_bits, frac_bits)
    check_int(owner, "level_bits", level_bits)
    top = max_level(level_bits)
    if isinstance(rank, bool) or not isinstance(rank, int):
        raise TypeError(f"{owner} rank must be an integer in [1, {top}], not {rank!r}")
    if not 1 <= rank <= top:
        raise ValueError(
            f"{owner} rank must be an integer in [1, {top}] for {level_bits} level bits, not {rank!r}"
        )
    given = {"lanes": lanes, "transpose_b": transpose_b, "acc_bits": acc_bits, "out_bits": out_bits}
    if op != "matmul":
        for name in _MATMUL_ONLY:
            if given[name] is not None:
                raise ValueError(f"{owner} {name} applies to op='matmul' only")
    if op != "retile_row" and out_rows is not None:
        raise ValueError(f"{owner} out_rows applies to op='retile_row' only")

    def fmt(
        rows: int, cols: int, bits: int = elem_bits, dynamic: bool = False, dt=float_dtype
    ) -> TokenFormat:
        return TokenFormat(
            "tile", rows, cols, bits, level_bits=level_bits, dynamic=dynamic, float_dtype=dt
        )

    if op == "matmul":
        transpose_b = (
            False if transpose_b is None else check_bool(owner, "transpose_b", transpose_b)
        )
        shapes, dims = matmul_dims(owner, in_shapes, transpose_b)
        acc_bits, out_bits = check_matmul_bits(
            owner, elem_bits, frac_bits, 32 if acc_bits is None else acc_bits, out_bits
        )
        lanes = check_int(owner, "lanes", 1 if lanes is None else lanes)
        if float_dtype is not None and out_bits not in (16, 32):
            raise ValueError(f"{owner} out_bits of a BF16 MAC array is 16 or 32, not {out_bits}")
        datapath = mac_array_datapath(
            float_dtype,
            dims=dims,
            lanes=lanes,
            transpose_b=transpose_b,
            bits=elem_bits,
            frac_bits=frac_bits,
            acc_bits=acc_bits,
            out_bits=out_bits,
            accumulate=True,
            dynamic=any(dyn),
            exact=exact,
        )
        ins = [fmt(*s, dynamic=d) for s, d in zip(shapes, dyn, strict=True)]
        out_dt = float_result(float_dtype, out_bits)
        return ins, fmt(dims[0], dims[2], out_bits, any(dyn), out_dt), datapath
    (shape,) = check_shapes(owner, in_shapes, 1, f"op {op!r}")
    if op == "retile_row" and max_rows is not None:
        if shape[0] > max_rows:
            raise ValueError(
                f"{owner} max_rows must be at least the input's {shape[0]} rows, not {max_rows}"
            )
        datapath = _RowAppend(shape[0], max_rows, shape[1], elem_bits)
        return [fmt(*shape)], fmt(max_rows, shape[1], dynamic=True), datapath
    if op == "retile_row":
        if out_rows is None:
            raise ValueError(f"{owner} out_rows is required for op='retile_row'")
        check_int(owner, "out_rows", out_rows)
        if out_rows % shape[0]:
            raise ValueError(
                f"{owner} out_rows must be a multiple of the input's {shape[0]} rows, not {out_rows}"
            )
        datapath = _RowConcat(shape[0], out_rows, shape[1], elem_bits)
        return [fmt(*shape)], fmt(out_rows, shape[1]), datapath
    if op == "row_sum":
        if float_dtype is None:
            raise ValueError(
                f"{owner} op 'row_sum' accumulates floating-point tiles only (float_dtype "
                "'bfloat16' or 'float32'); fixed-point row sums have no accumulating form"
            )
        return [fmt(*shape)], fmt(shape[0], 1), FloatRowSumFold(shape, elem_bits)
    if float_dtype is not None:
        return [fmt(*shape)], fmt(*shape), FloatElementFold(op, shape, elem_bits)
    return [fmt(*shape)], fmt(*shape), _ElementFold(op, shape, elem_bits)


def _reduce_kwargs(node: Any, config: HwConfig, ops, owner: str) -> dict[str, Any]:
    ins, out = node_formats(node, config)
    fn = node_fn(node, config, ops, owner)
    op = "retile_row" if fn is numerics.retile_row else fn.op
    unit_tiles_rule(node, config, owner)  # dynamic tiles: a's rows of an Accum matmul only
    kw: dict[str, Any] = {
        "op": op,
        "rank": node.rank,
        **shapes_kwargs(ins),
        "elem_bits": ins[0].elem_bits,
        "frac_bits": config.frac_bits,
        "level_bits": config.level_bits,
    }
    if ins[0].float_dtype is not None:
        kw["float_dtype"] = ins[0].float_dtype
    if op == "matmul":
        kw.update(
            lanes=config.lanes,
            transpose_b=fn.transpose_b,
            acc_bits=config.acc.nbytes * 8,
            out_bits=out.elem_bits,
        )
        if getattr(fn, "exact", False):  # numerics.matmul_sum_out: the exact sum, rescaled
            kw["exact"] = True
    if op == "retile_row" and out.dynamic:
        kw["max_rows"] = out.rows
    elif op == "retile_row":
        kw["out_rows"] = out.rows
    if getattr(node, "held", 0):
        bound = dict(config.geometry_bounds).get(node.name)
        kw.update(held=node.held_shape if bound is None else bound, inner=node.inner)
        if bound is not None:
            kw["held_run_time"] = True
    return kw


def _check_held(
    owner: str, op: Any, rank: Any, held: Any, inner: Any, level_bits: Any, max_rows: Any
) -> tuple[tuple[int, ...], int]:
    """Validate held accumulators: (held extents, inner)."""
    if not isinstance(held, (tuple, list)) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in held
    ):
        raise ValueError(f"{owner} held must be a sequence of positive integers, not {held!r}")
    if not held:
        if inner != 0:
            raise ValueError(f"{owner} inner applies to held accumulators only, not {inner!r}")
        return (), 0
    if op not in ("add", "max", "matmul"):
        raise ValueError(f"{owner} held accumulators fold add, max or matmul, not op={op!r}")
    if (
        isinstance(inner, bool)
        or not isinstance(inner, int)
        or not (isinstance(rank, int) and 1 <= inner < rank)
    ):
        raise ValueError(
            f"{owner} inner must be an integer in [1, rank) with held accumulators, "
            f"not {inner!r} (rank {rank!r})"
        )
    if isinstance(level_bits, int) and rank + len(held) > max_level(level_bits):
        raise ValueError(
            f"{owner} rank + held dims = {rank + len(held)} exceeds the {max_level(level_bits)} "
            f"stop levels of {level_bits} level bits"
        )
    return tuple(held), inner


class AccumUnit(FoldUnit):
    """An Accum of rank ``b``: folds the tiles of each group into an accumulator register.

    Operations (:data:`ACCUM_OPS`), with the arithmetic of :func:`step_lang.numerics.functions`:
    ``add`` (wrapping) and ``max`` of equal tiles; ``matmul`` (``acc += a @ b`` on a MAC array of
    ``lanes`` multipliers, as :class:`~step_hw.compute.MatmulUnit`, inputs zipped; ``matmul_acc``
    rescales each tile's product, ``exact`` sums the products exactly and rescales once per
    group); ``retile_row`` (the tiles of a group are stacked into one tile of ``out_rows`` rows,
    which must fit the configured tile); ``row_sum`` (floating point only, ``float_numerics.row_sum_acc``: the
    ``[R, 1]`` row sums of a group's ``[R, C]`` tiles, one FP32 chain per row continued across
    the tiles).

    Parameters
    ----------
    op : str
        One of :data:`ACCUM_OPS`.
    rank : int
        Folded dims ``b`` (``1 <= b <= max_level(level_bits)``, :func:`step_hw.payload.max_level`).
    in_shapes : sequence of (rows, cols)
        One shape (``a`` and ``b`` for ``matmul``).
    elem_bits, frac_bits, level_bits : int
        As :class:`~step_hw.compute.MapUnit`.
    lanes, transpose_b, acc_bits, out_bits
        ``matmul`` only; as :class:`~step_hw.compute.MatmulUnit`.
    exact : bool
        Fixed-point ``matmul`` only (``numerics`` ``matmul_sum_out``): the accumulator register
        is ``acc_bits`` wide and holds the group's sum of products modulo ``2**acc_bits``; the
        emitted tile is ``wrap(round_shift(acc, frac_bits), out_bits)``, what the Map ``matmul``
        of the group's tiles concatenated along ``K`` gives
        (:class:`~step_hw.compute.matmul.MacArrayDatapath`). Without it (``matmul_acc``) each
        tile's product is rescaled and added in ``out_bits``. Timing is the same.
    out_rows : int
        ``retile_row`` only: rows of the output tile (a multiple of the input's rows).
    float_dtype : str
        ``"bfloat16"`` or ``"float32"``: floating-point tiles (``elem_bits`` 16 or 32), with
        the arithmetic of :mod:`step_lang.float_numerics`: ``add`` into an FP32 accumulator
        register (emitted rounded to the input's dtype), ``max``, ``row_sum`` into an ``[R, 1]``
        FP32 accumulator register (``s = s + x[c]`` per row, the columns left to right through
        ``C`` chained adders; emitted rounded to the input's dtype), and ``matmul`` of BF16
        tiles into an FP32 accumulator (emitted as ``out_bits``: 32 FP32, 16 BF16). ``None``:
        fixed point (``row_sum`` is refused).
    held : sequence of int
        Held accumulators (``step_lang`` ``Accum(held=len(held), inner=inner)``): the extents of
        the held dims ``H``; the unit keeps ``prod(held)`` accumulators, the one being folded in
        its register and the others in a memory (``bank``). ``op`` ``add``, ``max`` or
        ``matmul``, ``inner >= 1``; with dynamic tiles (``max_rows``) each bank word holds a
        dynamic accumulator, its row count included (a held position takes the rows of the
        tiles folded into it). Empty: a plain Accum.
    inner : int
        With ``held``: the reduced dims inside the held ones (``1 <= inner < rank``).
    held_run_time : bool
        With ``held``: the held extents are a run-time setting (``HwConfig.geometry_bounds``):
        ``held`` is then their bound and the input ``params``
        (:func:`step_hw.run_time_geometry.held_fields`: each held dim's last index, and the last
        position) gives them, held while the unit runs; cycle for cycle the unit built for them.
    max_rows : int
        Dynamic tiles (``step_hw.payload``), bounded by ``max_rows`` (``HwConfig.dyn_tile_rows``):
        for ``matmul``, with ``in_shapes`` ``((None, K), (K, N))``, ``a`` and the accumulator are
        dynamic, the accumulator taking ``a``'s row count (``ceil(n*K*N / lanes)`` cycles per
        pair, at least one, as :class:`~step_hw.compute.MatmulUnit`); for ``retile_row``
        (instead of ``out_rows``) the result is a dynamic tile and every input tile is appended
        below the rows so far (its row count grows by the input's rows; an empty group gives a
        0-row tile, as the interpreter).

    Ports
    -----
    in0 (, in1) : In(TokenFormat.signature())
        The inputs (zipped for ``matmul``).
    out : Out(TokenFormat.signature())
        One accumulator tile per group.
    misaligned : Out(1)
        (``matmul``.) Sticky: set when the inputs' tokens did not line up.
    overflow : Out(1)
        (Fixed-point ``add`` and ``matmul``.) Sticky: set when a result wrapped. With ``exact``:
        when a running sum left ``acc_bits`` (in the cycle the pair is taken) or an emitted
        element did not fit ``out_bits`` (in the cycle it is loaded into ``out``).

    Protocol
        :mod:`amaranth.lib.stream`; ``out.valid`` is a register. Data tokens are taken without
        waiting for the output.
    Latency
        The accumulator is offered 1 cycle after the stop that closes its group is taken
        (``exact``'s rescaling is combinational between the register and ``out``).
    Throughput
        One data token per cycle (``ceil(M*K*N / lanes)`` cycles per tile pair for ``matmul``);
        a stop of level ``s >= b`` takes one cycle, plus one for ``s > b`` (two output beats).
        With ``held``: every stop takes one cycle; the stop that closes a group is followed by
        ``prod(held)`` data beats and a stop beat after each position where a held dim ends
        (``stoprules.held_stop``) and after the last, during which no input is taken.
    Stop tokens
        The rule of ``step_lang.stoprules.accum_stop``: a stop of level ``s < b`` is dropped; a
        stop of level ``s >= b`` emits the accumulator (the initial value for an empty group:
        zeros, or the smallest value for ``max``) and restarts it, then ``s > b`` is written as
        ``Stop(s - b)``. The done token passes through. With ``held`` (``h`` dims): stops below
        ``inner`` are dropped, those of levels ``inner .. b + h - 1`` move to the next held
        position, and one of level ``s >= b + h`` emits the ``prod(held)`` accumulators,
        the last followed by ``Stop(s - b)``.
    """

    def __init__(
        self,
        *,
        op: str,
        rank: int,
        in_shapes,
        elem_bits: int,
        frac_bits: int = 0,
        level_bits: int = 3,
        lanes: int | None = None,
        transpose_b: bool | None = None,
        acc_bits: int | None = None,
        out_bits: int | None = None,
        out_rows: int | None = None,
        max_rows: int | None = None,
        float_dtype: str | None = None,
        held: Sequence[int] = (),
        inner: int = 0,
        exact: bool = False,
        held_run_time: bool = False,
    ):
        held, inner = _check_held("AccumUnit", op, rank, held, inner, level_bits, max_rows)
        if held_run_time and not held:
            raise ValueError("AccumUnit held_run_time applies to held accumulators only")
        ins, out, datapath = _reduce_unit(
            "AccumUnit",
            ACCUM_OPS,
            op=op,
            rank=rank,
            in_shapes=in_shapes,
            elem_bits=elem_bits,
            frac_bits=frac_bits,
            level_bits=level_bits,
            lanes=lanes,
            transpose_b=transpose_b,
            acc_bits=acc_bits,
            out_bits=out_bits,
            out_rows=out_rows,
            max_rows=max_rows,
            float_dtype=float_dtype,
            exact=exact,
        )
        self._op = op
        super().__init__(ins, out, datapath, mode="accum", rank=rank, held=held, inner=inner,
                         held_run_time=held_run_time)  # fmt: skip

    @property
    def op(self) -> str:
        return self._op

    @property
    def rank(self) -> int:
        return self._rank

    @classmethod
    def from_node(cls, node: Any, config: HwConfig) -> AccumUnit:
        """The unit of a step_lang ``Accum`` node with a numerics function (or ``retile_row``);
        raises :class:`StepTypeError` naming the node otherwise."""
        check_node(node, (ops.Accum,), cls.__name__)
        return cls(**_reduce_kwargs(node, config, ACCUM_OPS, cls.__name__))


class ScanUnit(FoldUnit):
    """A Scan of rank ``b``: an Accum that emits the accumulator after every element.

    Operations :data:`SCAN_OPS` (``add``, ``max``, ``matmul``), parameters and ports as
    :class:`AccumUnit` (without ``out_rows``, ``max_rows``, ``held`` and ``inner``; with
    ``exact`` every emitted tile is the running exact sum rescaled, as the interpreter's Scan
    emits ``matmul_sum_out``).

    Protocol
        :mod:`amaranth.lib.stream`; ``out.valid`` is a register.
    Latency
        1 cycle (``ceil(M*K*N / lanes)`` for ``matmul``), as :class:`MapUnit`.
    Throughput
        Initiation interval 1 (``ceil(M*K*N / lanes)`` per tile pair for ``matmul``).
    Stop tokens
        Pass through unchanged, one cycle each; a stop of level ``>= b`` (and the done token)
        restarts the accumulator.
    """

    def __init__(
        self,
        *,
        op: str,
        rank: int,
        in_shapes,
        elem_bits: int,
        frac_bits: int = 0,
        level_bits: int = 3,
        lanes: int | None = None,
        transpose_b: bool | None = None,
        acc_bits: int | None = None,
        out_bits: int | None = None,
        float_dtype: str | None = None,
        exact: bool = False,
    ):
        ins, out, datapath = _reduce_unit(
            "ScanUnit",
            SCAN_OPS,
            op=op,
            rank=rank,
            in_shapes=in_shapes,
            elem_bits=elem_bits,
            frac_bits=frac_bits,
            level_bits=level_bits,
            lanes=lanes,
            transpose_b=transpose_b,
            acc_bits=acc_bits,
            out_bits=out_bits,
            out_rows=None,
            float_dtype=float_dtype,
            exact=exact,
        )
        self._op = op
        super().__init__(ins, out, datapath, mode="scan", rank=rank)

    @property
    def op(self) -> str:
        return self._op

    @property
    def rank(self) -> int:
        return self._rank

    @classmethod
    def from_node(cls, node: Any, config: HwConfig) -> ScanUnit:
        """The unit of a step_lang ``Scan`` node with a numerics function; raises
        :class:`StepTypeError` naming the node otherwise."""
        check_node(node, (ops.Scan,), cls.__name__)
        return cls(**_reduce_kwargs(node, config, SCAN_OPS, cls.__name__))
