"""Shared plumbing of the compute units: zipped token inputs, the output register, the control of
Map, Accum and Scan, the compute-specific parameter checks and the helpers of ``from_node`` (the
generic checks are in :mod:`step_hw.checks`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from step_lang.stoprules import accum_stop, held_stop, partition_closes_chunk

from ..checks import INT_BITS, check_choice, check_int
from ..contract import matmul_steps
from ..memory.sequence import AffineWalk
from ..payload import Kind, TokenFormat, max_level
from ..run_time_geometry import held_fields, params_layout

ELEM_BITS = INT_BITS  # the fixed-point element widths


# -- formats and compute parameters -----------------------------------------------------------


def scalar_format(bits: int, level_bits: int) -> TokenFormat:
    """The token format of a ``1x1`` integer tile of ``bits`` bits."""
    return TokenFormat("tile", 1, 1, bits, level_bits=level_bits)


def dynamic_shapes(owner: str, in_shapes: Any, max_rows: Any) -> tuple[Any, tuple[bool, ...]]:
    """Tile shapes whose rows may be ``None`` (a dynamic tile of up to ``max_rows`` rows): the
    shapes with ``max_rows`` in place of ``None`` (for the shape checks) and which were dynamic."""
    if not isinstance(in_shapes, (tuple, list)):
        return in_shapes, ()
    dyn = tuple(isinstance(s, (tuple, list)) and len(s) == 2 and s[0] is None for s in in_shapes)
    if any(dyn):
        if max_rows is None:
            raise ValueError(f"{owner} max_rows is required for dynamic-row (None) in_shapes")
        check_int(owner, "max_rows", max_rows)
    elif max_rows is not None:
        raise ValueError(f"{owner} max_rows applies to dynamic-row (None) in_shapes only")
    else:
        return in_shapes, dyn  # as given, for the shape checks' messages
    shapes = [(max_rows, s[1]) if d else s for s, d in zip(in_shapes, dyn, strict=True)]
    return shapes, dyn


def check_bits(owner: str, elem_bits: Any, frac_bits: Any) -> tuple[int, int]:
    check_choice(owner, "elem_bits", elem_bits, ELEM_BITS)
    if isinstance(frac_bits, bool) or not isinstance(frac_bits, int):
        raise TypeError(
            f"{owner} frac_bits must be an integer in [0, {elem_bits}), not {frac_bits!r}"
        )
    if not 0 <= frac_bits < elem_bits:
        raise ValueError(
            f"{owner} frac_bits must be an integer in [0, {elem_bits}), not {frac_bits!r}"
        )
    return elem_bits, frac_bits


# -- from_node --------------------------------------------------------------------------------


def tile_shape(fmt: TokenFormat) -> tuple[int | None, int]:
    """``(rows, cols)`` of a tile format; rows ``None`` for a dynamic tile."""
    return (None if fmt.dynamic else fmt.rows, fmt.cols)


def shapes_kwargs(formats: Sequence[TokenFormat]) -> dict[str, Any]:
    """``in_shapes`` (and ``max_rows`` with a dynamic tile) of a unit's constructor."""
    kw: dict[str, Any] = {"in_shapes": [tile_shape(f) for f in formats]}
    dyn = [f.rows for f in formats if f.dynamic]
    if dyn:
        kw["max_rows"] = dyn[0]
    return kw


# -- the units --------------------------------------------------------------------------------


class StreamUnit(wiring.Component):
    """A component with token streams ``in0``, ``in1``, ... (zipped) and ``out``.

    With several inputs it also has ``misaligned`` (``Out(1)``), a sticky flag set when tokens
    taken together do not line up (data with a stop, stops of different levels, ...): the
    interpreter raises an error there, the hardware goes on with ``in0``'s token kind. With
    ``error=True`` it has ``error`` (``Out(1)``), a sticky flag the unit raises where the
    interpreter's function raises (e.g. an index out of range). With ``overflow=True`` it has
    ``overflow`` (``Out(1)``), a sticky flag set when a result wrapped or saturated: where the
    interpreter with ``numerics.functions(config, overflow="raise")`` raises.
    """

    def __init__(
        self,
        in_formats: Sequence[TokenFormat],
        out_format: TokenFormat,
        *,
        error: bool = False,
        overflow: bool = False,
        params: Any = None,
    ):
        self._in_formats = tuple(in_formats)
        self._out_format = out_format
        members: dict[str, Any] = {
            f"in{i}": In(fmt.signature()) for i, fmt in enumerate(self._in_formats)
        }
        members["out"] = Out(out_format.signature())
        if len(self._in_formats) > 1:
            members["misaligned"] = Out(1)
        if error:
            members["error"] = Out(1)
        if overflow:
            members["overflow"] = Out(1)
        if params is not None:  # run-time geometry (step_hw.run_time_geometry)
            members["params"] = In(params)
        super().__init__(members)

    @property
    def in_ports(self) -> list[Any]:
        """The input streams, in the node's input order."""
        return [getattr(self, f"in{i}") for i in range(len(self._in_formats))]

    @property
    def out_ports(self) -> list[Any]:
        """The output streams, in the node's output order (one)."""
        return [self.out]

    @property
    def in_formats(self) -> tuple[TokenFormat, ...]:
        return self._in_formats

    @property
    def out_format(self) -> TokenFormat:
        return self._out_format

    def _join(self, m: Module) -> tuple[Value, Signal, Signal, Signal]:
        """Zip the inputs: (all valid, take, kind, level). Drive ``take`` to transfer them all."""
        ins = self.in_ports
        valid = Const(1)
        for p in ins:
            valid = valid & p.valid
        take = Signal()
        kind = Signal.like(ins[0].payload.kind, name="kind")
        level = Signal.like(ins[0].payload.level, name="level")
        m.d.comb += [kind.eq(ins[0].payload.kind), level.eq(ins[0].payload.level)]
        m.d.comb += [p.ready.eq(take) for p in ins]
        if len(ins) > 1:
            aligned = Const(1)
            for p in ins[1:]:
                aligned = aligned & (p.payload.kind == kind) & (p.payload.level == level)
            with m.If(take & ~aligned):
                m.d.sync += self.misaligned.eq(1)
        return valid, take, kind, level

    def _emit(self, m: Module, kind: Any, level: Any = 0, data: Any = None) -> None:
        """Load the output register (to be called under a condition that includes ``free``)."""
        out = self.out
        m.d.sync += [out.valid.eq(1), out.payload.kind.eq(kind), out.payload.level.eq(level)]
        m.d.sync += out.payload.data.eq(0 if data is None else data)


class Datapath:
    """The arithmetic of a Map, Accum or Scan unit, built into the unit's module.

    ``steps`` cycles per data token (``> 1`` for a MAC array with fewer lanes than products).
    :meth:`build` returns the result (Map: the output tile; Accum and Scan: the new accumulator)
    from the inputs' data, the accumulator, the step counter and three strobes: ``advance`` (a
    step other than the last completes), ``finish`` (the last step completes and the token is
    taken) and ``clear`` (the accumulator restarts).
    """

    steps = 1
    init = 0  # every element's initial value in the accumulator (Accum and Scan)
    #: Whether a result can leave the element range (wrap or saturate). Such a datapath sets
    #: ``overflow_rows`` in :meth:`build`: per result row, high when an element of it does.
    may_overflow = False
    overflow_rows: list[Any] | None = None
    #: Element width of an accumulator register that :meth:`emit` converts to the output (the
    #: FP32 accumulator of a BF16 Accum; the exact ``acc_bits`` sum of a fixed-point
    #: ``matmul_sum``, rescaled when emitted); ``None``: the accumulator is the output.
    acc_register_bits: int | None = None

    def emit(self, m: Module, value: Any) -> Any:
        """The output elements of accumulator elements ``value`` (Accum and Scan)."""
        return value

    def emit_overflows(self, m: Module, value: Any) -> Value | None:
        """High when an element :meth:`emit` makes of ``value`` leaves the output's range
        (``None``: never; with ``may_overflow`` only). The unit ORs it into ``overflow`` in the
        cycle the emitted tile is loaded into the output register."""
        return None

    def build(
        self,
        m: Module,
        *,
        xs: list[Any],
        acc: Any,
        step: Value,
        advance: Value,
        finish: Value,
        clear: Value,
    ) -> Any:
        raise NotImplementedError

    # Dynamic tiles (``TokenFormat.dynamic``): ``build`` sees the ``elems`` arrays of dynamic
    # inputs and accumulators (``max_rows`` rows, zeros beyond the count); these hooks give the
    # row count of the result and the data-dependent number of steps.

    def last_step(self, m: Module, step: Value, in_rows: Value | None) -> Value:
        """High in the last step of a data token (``in_rows``: the first dynamic input's
        row count, ``None`` without one)."""
        return (step == self.steps - 1) if self.steps > 1 else Const(1)

    def out_rows(self, m: Module, in_rows: Value | None) -> Value | None:
        """Rows of a dynamic result (default: those of the first dynamic input)."""
        return in_rows


def step_bits(keys: list[Any], width: int) -> list[int]:
    """The bits of a ``width``-bit step counter that ``keys`` (one per step ``t``, for the steps
    ``0 .. len(keys) - 1``) depends on: the fewest whose values determine the key (no bit for a
    constant, every bit when no smaller set does)."""
    n = len(keys)
    bits = [
        b for b in range(width)
        if any(t ^ (1 << b) < n and keys[t] != keys[t ^ (1 << b)] for t in range(n))
    ]  # fmt: skip
    mask = sum(1 << b for b in bits)
    seen: dict[int, Any] = {}
    if all(seen.setdefault(t & mask, k) == k for t, k in enumerate(keys)):
        return bits
    return list(range(width))


def select_by_step(
    m: Module, target: Signal, step: Value, keys: list[Any], value_of: Callable[[Any], Any]
) -> None:
    """Drive ``target`` with ``value_of(keys[t])`` in step ``t`` (``step``; ``keys`` covers the
    steps that use ``target``, a prefix), selected by only the bits of the step counter the keys
    depend on (:func:`step_bits`): a MAC array's lane reads the same operand row for ``2**s``
    steps, so its case has one arm per row, not one per step. In a step beyond ``keys`` (an idle
    lane's, whose result nobody reads) ``target`` is whatever those bits select, or 0."""
    if not keys:
        return
    bits = step_bits(keys, len(step))
    if not bits:
        m.d.comb += target.eq(value_of(keys[0]))
        return
    arms: dict[int, Any] = {}
    for t, key in enumerate(keys):
        arms.setdefault(sum((t >> b & 1) << n for n, b in enumerate(bits)), key)
    with m.Switch(Cat(step[b] for b in bits)):
        for value, key in arms.items():
            with m.Case(value):
                m.d.comb += target.eq(value_of(key))


class LaneSchedule:
    """Which products each lane of a MAC array computes in each step: product
    ``p = t * lanes + lane`` of step ``t`` is ``a[i][k] * b[k][j]`` with
    ``p = (i * N + j) * K + k``. Per lane, lists over the steps in which it has a product (a
    prefix of the steps): ``a_index`` (``i * K + k``), ``b_index`` (``k * N + j``), ``output``
    (``i * N + j``) and ``first`` (1 when the lane starts its output's chain in that step:
    ``k == 0`` or lane 0). ``adding[o]``: step -> the lanes that add to output ``o`` in it, in
    order."""

    def __init__(self, dims: tuple[int, int, int], lanes: int, steps: int):
        mm, kk, nn = dims
        total = mm * kk * nn
        self.a_index: list[list[int]] = [[] for _ in range(lanes)]
        self.b_index: list[list[int]] = [[] for _ in range(lanes)]
        self.output: list[list[int]] = [[] for _ in range(lanes)]
        self.first: list[list[int]] = [[] for _ in range(lanes)]
        self.adding: list[dict[int, list[int]]] = [{} for _ in range(mm * nn)]
        for t in range(steps):
            for lane in range(lanes):
                p = t * lanes + lane
                if p >= total:
                    break
                o, k = divmod(p, kk)
                i, j = divmod(o, nn)
                self.a_index[lane].append(i * kk + k)
                self.b_index[lane].append(k * nn + j)
                self.output[lane].append(o)
                self.first[lane].append(int(k == 0 or lane == 0))
                self.adding[o].setdefault(t, []).append(lane)


class MacSchedule(Datapath):
    """The step count of a MAC array of ``lanes`` multipliers over ``dims = (M, K, N)``
    (``steps = ceil(M*K*N / lanes)``, ``contract.matmul_steps``), and, with ``dynamic``, of a
    dynamic tile ``a`` of fewer rows: shared by the fixed- and floating-point MAC arrays."""

    dims: tuple[int, int, int]
    lanes: int
    dynamic: bool = False
    transpose_b: bool = False

    def lane_schedule(self) -> LaneSchedule:
        """Which product each lane computes in each step."""
        return LaneSchedule(self.dims, self.lanes, self.steps)

    def select_operands(
        self, m: Module, step: Value, sched: LaneSchedule, elements: tuple, operands: tuple
    ) -> None:
        """Drive each lane's operands ``operands = (a_op, b_op)`` (one signal per lane) from
        ``elements = (a_el, b_el)`` (:meth:`operand_elements`) in every step, selected by the
        step-counter bits they change with (:func:`select_by_step`)."""
        (a_el, b_el), (a_op, b_op) = elements, operands
        _, kk, nn = self.dims
        for lane in range(self.lanes):
            select_by_step(
                m, a_op[lane], step, sched.a_index[lane], lambda x: a_el[x // kk][x % kk]
            )
            select_by_step(
                m, b_op[lane], step, sched.b_index[lane], lambda x: b_el[x // nn][x % nn]
            )

    def operand_elements(
        self, m: Module, xs: list[Any], width: int | None = None
    ) -> tuple[list[list[Signal]], list[list[Signal]]]:
        """``a[i][k]`` and ``b[k][j]`` (``b[j][k]`` with ``transpose_b``) of the operand tiles
        ``xs`` as signals (the low ``width`` bits, unsigned, with ``width``), each driven once.

        Every step selects among these instead of slicing the tiles anew: Amaranth emits each
        slice of a tile by re-emitting the whole tile (``ResetInserter`` copies every
        expression, so sharing the slice object does not help), and a 16 x 16 matmul on 64
        lanes slices 8,192 operands over its 64 steps."""
        mm, kk, nn = self.dims
        transpose_b = self.transpose_b
        a_rows = [xs[0][i] for i in range(mm)]
        b_rows = [xs[1][r] for r in range(nn if transpose_b else kk)]

        def element(x: Any, name: str) -> Signal:
            x = Value.cast(x)
            if width is not None:
                x = x.as_unsigned()[0:width]
            sig = Signal(x.shape(), name=name)
            m.d.comb += sig.eq(x)
            return sig

        a_el = [[element(a_rows[i][k], f"a_{i}_{k}") for k in range(kk)] for i in range(mm)]
        b_el = [
            [
                element(b_rows[j][k] if transpose_b else b_rows[k][j], f"b_{k}_{j}")
                for j in range(nn)
            ]
            for k in range(kk)
        ]
        return a_el, b_el

    def steps_for(self, rows: int) -> int:
        """Steps of a tile ``a`` of ``rows`` rows (at least one, to take the token)."""
        _, kk, nn = self.dims
        return matmul_steps(rows, kk, nn, self.lanes)

    def last_step(self, m: Module, step, in_rows):
        if not self.dynamic or self.steps == 1:
            return super().last_step(m, step, in_rows)
        last = Signal(name="last_step")
        with m.Switch(in_rows):  # a small table: rows -> steps - 1
            for n in range(self.dims[0] + 1):
                with m.Case(n):
                    m.d.comb += last.eq(step == self.steps_for(n) - 1)
            with m.Default():  # beyond max_rows: never produced (the encoding's bound)
                m.d.comb += last.eq(step == self.steps - 1)
        return last


def dynamic_rows(unit: StreamUnit) -> Value | None:
    """The ``rows`` field of the first dynamic-tile input of ``unit`` (``None`` without one)."""
    for p, fmt in zip(unit.in_ports, unit.in_formats, strict=True):
        if fmt.dynamic:
            return p.payload.data.rows
    return None


def elems(value: Any, fmt: TokenFormat) -> Any:
    """The element array of a tile's data (a dynamic tile's ``elems``)."""
    return value.elems if fmt.dynamic else value


def with_rows(m: Module, fmt: TokenFormat, result: Any, rows: Value) -> Any:
    """A dynamic tile of ``fmt`` from an element array and a row count: rows ``>= rows`` are
    zeroed (the canonical encoding, ``step_hw.payload``)."""
    out = Signal(fmt.data_shape, name="result_rows")
    m.d.comb += out.rows.eq(rows)
    for r in range(fmt.rows):
        m.d.comb += out.elems[r].eq(Mux(r < rows, result[r], 0))
    return out


class FoldUnit(StreamUnit):
    """Control shared by Map (``mode="map"``), Accum and Scan units around a :class:`Datapath`."""

    def __init__(
        self,
        in_formats,
        out_format,
        datapath: Datapath,
        *,
        mode: str,
        rank: int = 0,
        held: tuple[int, ...] = (),
        inner: int = 0,
        held_run_time: bool = False,
    ):
        params = params_layout(held_fields(held)) if held_run_time and held else None
        super().__init__(in_formats, out_format, overflow=datapath.may_overflow, params=params)
        self._held_run_time = params is not None
        self._datapath = datapath
        self._mode = mode
        self._rank = rank
        self._held = tuple(held)
        self._inner = inner

    @property
    def initiation_interval(self) -> int:
        """Cycles per input data token with an always-ready output."""
        return self._datapath.steps

    def elaborate(self, platform) -> Module:
        m = Module()
        dp, mode, rank = self._datapath, self._mode, self._rank
        out = self.out
        valid, take, kind, level = self._join(m)
        free = ~out.valid | out.ready
        with m.If(out.ready):
            m.d.sync += out.valid.eq(0)  # a load below (later statement) wins

        steps = dp.steps
        step = Signal(range(steps), name="step") if steps > 1 else Const(0)
        in_rows = dynamic_rows(self)
        last = dp.last_step(m, step, in_rows)
        advance, finish, clear = Signal(), Signal(), Signal()
        if steps > 1:
            with m.If(advance):
                m.d.sync += step.eq(step + 1)
            with m.If(finish):
                m.d.sync += step.eq(0)
        out_fmt = self._out_format
        acc_fmt = out_fmt
        if dp.acc_register_bits is not None:  # a register that `dp.emit` converts
            float_acc = (
                out_fmt.float_dtype is not None and dp.acc_register_bits != out_fmt.elem_bits
            )
            acc_fmt = replace(
                out_fmt,
                elem_bits=dp.acc_register_bits,
                float_dtype="float32" if float_acc else out_fmt.float_dtype,
            )
        layout = acc_fmt.data_shape
        acc = None
        if mode != "map":
            fmt = acc_fmt
            init: Any = [[dp.init] * fmt.cols for _ in range(fmt.rows)]
            if fmt.dynamic:  # an empty group: a tile of 0 rows
                init = {"elems": init, "rows": 0}
            acc = Signal(layout, init=init, name="acc")
            with m.If(clear):
                m.d.sync += acc.eq(layout.const(init))
        result = dp.build(
            m,
            xs=[
                elems(p.payload.data, f)
                for p, f in zip(self.in_ports, self._in_formats, strict=True)
            ],
            acc=None if acc is None else elems(acc, acc_fmt),
            step=step,
            advance=advance,
            finish=finish,
            clear=clear,
        )
        rows = dp.out_rows(m, in_rows) if out_fmt.dynamic else None
        if out_fmt.dynamic:
            result = with_rows(m, out_fmt if mode == "map" else acc_fmt, result, rows)

        def emitted(value: Any) -> Any:  # accumulator to output (FP32 -> BF16, rescaling)
            if acc_fmt is out_fmt:
                return value
            if not out_fmt.dynamic:
                return dp.emit(m, value)
            out_value = Signal(out_fmt.data_shape, name="emitted_rows")
            m.d.comb += [out_value.rows.eq(value.rows), out_value.elems.eq(dp.emit(m, value.elems))]
            return out_value

        def emit_over(value: Any) -> Value | None:  # an emitted tile leaves the output range
            return dp.emit_overflows(m, elems(value, acc_fmt)) if dp.may_overflow else None

        emitted_result = emitted(result) if mode == "scan" else None
        emitted_acc = emitted(acc) if mode == "accum" else None
        result_over = emit_over(result) if mode == "scan" else None
        acc_over = emit_over(acc) if mode == "accum" and not self._held else None

        if dp.may_overflow:  # sticky: a data token whose result wrapped or saturated
            over = Const(0)
            for r, flag in enumerate(dp.overflow_rows):
                over = over | (flag & (r < rows) if rows is not None else flag)
            with m.If(finish & over):
                m.d.sync += self.overflow.eq(1)
        is_data = kind == Kind.DATA
        is_stop = kind == Kind.STOP

        if mode == "map":
            with m.If(valid):
                with m.If(is_data):
                    with m.If(~last):
                        m.d.comb += advance.eq(1)
                    with m.Elif(free):
                        m.d.comb += [take.eq(1), finish.eq(1)]
                        self._emit(m, Kind.DATA, 0, result)
                with m.Elif(free):
                    m.d.comb += take.eq(1)
                    self._emit(m, kind, level)
        elif mode == "scan":
            with m.If(valid):
                with m.If(is_data):
                    with m.If(~last):
                        m.d.comb += advance.eq(1)
                    with m.Elif(free):
                        m.d.comb += [take.eq(1), finish.eq(1)]
                        m.d.sync += acc.eq(result)
                        self._emit(m, Kind.DATA, 0, emitted_result)
                        self._flag_overflow(m, result_over)
                with m.Elif(free):
                    m.d.comb += take.eq(1)
                    self._emit(m, kind, level)
                    with m.If(~is_stop | partition_closes_chunk(level, rank)):
                        m.d.comb += clear.eq(1)
        elif self._held:  # accum with held accumulators
            self._held_control(
                m, valid, take, kind, level, free, last, advance, finish, clear, acc, result,
                emitted, emit_over, layout.const(init),
            )  # fmt: skip
        else:  # accum
            # A stop of level s >= rank emits the accumulator and, if s > rank, Stop(s - rank)
            # one cycle later (held in `pending`). The levels come from the shared rule.
            pending = Signal(name="pending")
            pending_level = Signal.like(level, name="pending_level")
            with m.If(pending), m.If(free):
                m.d.sync += pending.eq(0)
                self._emit(m, Kind.STOP, pending_level)
            with m.Elif(valid):
                with m.If(is_data):
                    _fold_data(m, last, advance, take, finish, acc, result)
                with m.Elif(is_stop & (level < rank)):
                    m.d.comb += take.eq(1)  # closes a dim inside the group: dropped
                with m.Elif(free):
                    m.d.comb += [take.eq(1), clear.eq(1)]
                    with m.If(is_stop):
                        self._emit(m, Kind.DATA, 0, emitted_acc)
                        self._flag_overflow(m, acc_over)
                        with m.Switch(level):
                            for lv in range(rank, max_level(len(level)) + 1):
                                outer = accum_stop(lv, rank)
                                if outer is not None:
                                    with m.Case(lv):
                                        m.d.sync += [pending.eq(1), pending_level.eq(outer)]
                    with m.Else():
                        self._emit(m, Kind.DONE)
        return m

    def _flag_overflow(self, m: Module, over: Value | None) -> None:
        """Set the sticky ``overflow`` flag when ``over`` (under the caller's condition)."""
        if over is not None:
            with m.If(over):
                m.d.sync += self.overflow.eq(1)

    def _held_control(
        self, m, valid, take, kind, level, free, last, advance, finish, clear, acc, result,
        emitted, emit_over, init,
    ) -> None:  # fmt: skip
        """The control of an Accum with held accumulators (``step_lang`` ``Accum(held=h,
        inner=i)``): the working register ``acc`` holds the position being folded; the others
        wait in ``bank`` (a memory of ``prod(H)`` accumulators). A stop that closes the inner
        reduced dims (level ``i <= s < rank + h``) takes one cycle: ``acc`` is written to the
        bank and the next position's accumulator loaded (its initial value while the first
        outer element of the group is folded). The stop that closes the group writes the last
        position, then the bank is emitted in ``H``'s order, one tile per cycle, with the stops
        between ``H``'s dims (``held_stop``) and ``Stop(s - rank)`` after the last. The bank's
        words are accumulator registers (``Datapath.acc_register_bits`` wide), converted by
        ``emitted`` as they leave."""
        held, inner, rank = self._held, self._inner, self._rank
        n = 1
        for d in held:
            n *= d
        group = rank + len(held)  # a stop of this level or above closes the group
        outer_end = inner + len(held)  # ... of this level or above, an outer reduced element
        bank = Memory(shape=acc.shape(), depth=n, init=[])
        m.submodules.bank = bank
        wr = bank.write_port()
        rd = bank.read_port(domain="comb")
        pos = Signal(range(n), name="held_pos")
        nxt = Signal(range(n), name="held_next")
        # the last position: built in, or (held_run_time) a field of `params`, `held` the bound
        last_pos = self.params.last if self._held_run_time else n - 1
        m.d.comb += nxt.eq(Mux(pos == last_pos, 0, pos + 1))
        first = Signal(init=1, name="held_first")  # the group's first outer element
        emitting = Signal(name="held_emitting")
        stop_due = Signal(name="held_stop_due")  # the beat after a data beat is a stop
        if self._held_run_time:
            # the position being emitted, and the stop after it, from a walk over the held dims
            # in row-major order (each step adds 1) with this run's extents
            m.submodules.held_walk = walk = AffineWalk(
                shape=held, stride=(0,) * len(held), base=0,
                index_width=max(1, (n - 1).bit_length()), run_time=True,
            )  # fmt: skip
            m.d.comb += [walk.params.base.eq(0)]
            for d in range(len(held)):
                m.d.comb += [
                    walk.params[f"end{d}"].eq(self.params[f"end{d}"]),
                    walk.params[f"delta{d}"].eq(1),
                ]
            at = walk.index
        else:
            at = Signal(range(n), name="held_out")
        final = Signal.like(level, name="held_final_level")
        m.d.comb += [wr.addr.eq(pos), wr.data.eq(acc), rd.addr.eq(Mux(emitting, at, nxt))]
        is_data, is_stop = kind == Kind.DATA, kind == Kind.STOP
        out_data, out_over = emitted(rd.data), emit_over(rd.data)

        with m.If(emitting), m.If(free):
            if self._held_run_time:
                self._emit_held_run_time(m, walk, stop_due, emitting, final, out_data, out_over)
            else:
                self._emit_held(m, n, held, at, stop_due, emitting, final, out_data, out_over)
        with m.Elif(valid):
            with m.If(is_data):
                _fold_data(m, last, advance, take, finish, acc, result)
            with m.Elif(is_stop & (level < inner)):
                m.d.comb += take.eq(1)  # closes a dim inside the chain: dropped
            with m.Elif(is_stop & (level < group)):  # the next held position
                m.d.comb += [take.eq(1), wr.en.eq(1)]
                m.d.sync += pos.eq(nxt)
                with m.If(level >= outer_end):
                    m.d.sync += first.eq(0)
                if n > 1:  # (one position: the chain simply continues in acc)

                    def load_next() -> None:
                        with m.If(first & (level < outer_end)):
                            m.d.sync += acc.eq(init)
                        with m.Else():
                            m.d.sync += acc.eq(rd.data)

                    if self._held_run_time:
                        with m.If(last_pos != 0):  # (one position at run time: as above)
                            load_next()
                    else:
                        load_next()
            with m.Elif(is_stop):  # the group ends: write the last position, then emit
                m.d.comb += [take.eq(1), wr.en.eq(1), clear.eq(1)]
                m.d.sync += [pos.eq(0), first.eq(1), emitting.eq(1)]
                if self._held_run_time:
                    m.d.comb += walk.start.eq(1)
                else:
                    m.d.sync += at.eq(0)
                m.d.sync += final.eq(level - rank)  # accum_stop: level >= group > rank
            with m.Elif(free):
                m.d.comb += take.eq(1)
                self._emit(m, Kind.DONE)

    def _emit_held(self, m, n, held, at, stop_due, emitting, final, out_data, out_over) -> None:
        """Emit the bank (built-in held extents): position ``at``'s tile, then (where a held
        dim ends, ``held_stop``, and after the last) its stop."""
        closes = [held_stop(i, held) for i in range(n)]
        with m.If(~stop_due):
            self._emit(m, Kind.DATA, 0, out_data)
            self._flag_overflow(m, out_over)
            with m.Switch(at):
                for i in range(n):
                    with m.Case(i):
                        if i == n - 1 or closes[i]:
                            m.d.sync += stop_due.eq(1)
                        else:
                            m.d.sync += at.eq(i + 1)
        with m.Else():
            m.d.sync += stop_due.eq(0)
            with m.Switch(at):
                for i in range(n):
                    with m.Case(i):
                        if i == n - 1:
                            self._emit(m, Kind.STOP, final)
                            m.d.sync += [emitting.eq(0), at.eq(0)]
                        else:
                            self._emit(m, Kind.STOP, closes[i])
                            m.d.sync += at.eq(i + 1)

    def _emit_held_run_time(self, m, walk, stop_due, emitting, final, out_data, out_over) -> None:
        """As :meth:`_emit_held`, the held extents from ``params``: ``walk`` (an
        :class:`~step_hw.memory.sequence.AffineWalk` over them) gives the position and, as its
        ``level``, the stop after it (``held_stop``). The same beats in the same cycles."""
        with m.If(~stop_due):
            self._emit(m, Kind.DATA, 0, out_data)
            self._flag_overflow(m, out_over)
            with m.If(walk.last | (walk.level != 0)):
                m.d.sync += stop_due.eq(1)
            with m.Else():
                m.d.comb += walk.advance.eq(1)
        with m.Else():
            m.d.sync += stop_due.eq(0)
            with m.If(walk.last):
                self._emit(m, Kind.STOP, final)
                m.d.sync += emitting.eq(0)
            with m.Else():
                self._emit(m, Kind.STOP, walk.level)
                m.d.comb += walk.advance.eq(1)


def _fold_data(m: Module, last, advance, take, finish, acc, result) -> None:
    """An Accum's data token: a step of the datapath, or (in its last step) the token taken and
    the accumulator updated."""
    with m.If(~last):
        m.d.comb += advance.eq(1)
    with m.Else():
        m.d.comb += [take.eq(1), finish.eq(1)]
        m.d.sync += acc.eq(result)
