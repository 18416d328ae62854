"""Shared floating-point cells: one Verilog module per floating-point operation, instantiated by
every unit that uses it.

A BF16 design at hardware size repeats the same few operators hundreds of times: a 64-lane MAC
array is 64 BF16 multipliers and 64 FP32 adders, a 16 x 16 SiLU Map 256 SiLU units. Inlined into
their units, every copy is elaborated, converted and verilated again, and Amaranth's conversion
grows faster than linearly with a module's size (64 lanes of multiply-add: 8.4 s, 256 lanes:
45 s; the hardware-size SwiGLU designs of ``bench.validate``: 200 to 1,000 s each).

Inside :func:`shared`, each function of :mod:`~step_hw.compute.fp` and
:mod:`~step_hw.compute.fp_approx` decorated with :func:`cell` adds an ``Instance`` of the module
``step_fp_<operation>`` in place of its logic, and records the operation; :func:`library` is the
Verilog of the recorded modules, converted once per process from the same functions, inline.
Outside :func:`shared` (Amaranth simulation, the area benches, the datapath tests) the functions
add their logic inline, as always: the two are one source. :func:`step_hw.elaborate.convert`
elaborates in :func:`shared` and appends :func:`library`.

A cell is combinational, like the function it stands for: ports ``in0``, ``in1`` (the operands,
each exactly the width the operation reads) and ``out``.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
from amaranth.hdl import Instance, Module, Signal, Value

__all__ = ["OPERATIONS", "PREFIX", "cell", "evaluate", "library", "module_name", "shared"]

#: Every cell module's name starts with this; no graph may be named so.
PREFIX = "step_fp_"

#: Every operation made a cell, by name: (its function, ``in_widths``, ``out_width``), as
#: :func:`cell` was given them (filled as :mod:`~step_hw.compute.fp` and
#: :mod:`~step_hw.compute.fp_approx` are imported).
OPERATIONS: dict[
    str, tuple[Callable[..., Value], Callable[..., tuple[int, ...]], Callable[..., int]]
] = {}

# The cells recorded by the innermost `shared` block (None: inline).
_RECORDED: contextvars.ContextVar[dict[str, Callable[[], str]] | None] = contextvars.ContextVar(
    "step_fp_cells", default=None
)


@contextlib.contextmanager
def shared() -> Iterator[dict[str, Callable[[], str]]]:
    """Elaborate floating-point operations as cell instances in this block; yields the record of
    the cells used (module name -> its Verilog, for :func:`library`)."""
    recorded: dict[str, Callable[[], str]] = {}
    token = _RECORDED.set(recorded)
    try:
        yield recorded
    finally:
        _RECORDED.reset(token)


def library(recorded: dict[str, Callable[[], str]]) -> str:
    """The Verilog modules of the cells in ``recorded``, in name order."""
    return "".join(recorded[name]() for name in sorted(recorded))


def module_name(operation: str, params: dict[str, Any]) -> str:
    """``step_fp_<operation>``, then ``_<param><value>`` for each parameter (``width=16``:
    ``_width16``)."""
    return PREFIX + operation + "".join(f"_{k}{v}" for k, v in sorted(params.items()))


def cell(operation: str, in_widths: Callable[..., tuple[int, ...]], out_width: Callable[..., int]):
    """Make a floating-point function ``fn(m, *operands, name=..., **params)`` a shared cell.

    ``in_widths(**params)`` are the bits of each operand the function reads (its low bits; an
    operand narrower than that is an error), ``out_width(**params)`` the bits of its result."""

    def decorate(fn: Callable[..., Value]) -> Callable[..., Value]:
        OPERATIONS[operation] = (fn, in_widths, out_width)

        @functools.wraps(fn)
        def inline_or_instance(m: Module, *operands: Any, **kwargs: Any) -> Value:
            recorded = _RECORDED.get()
            if recorded is None:
                return fn(m, *operands, **kwargs)
            name = kwargs.pop("name", operation)
            params = kwargs
            widths = in_widths(**params)
            if len(operands) != len(widths):
                raise TypeError(f"{operation} takes {len(widths)} operands, not {len(operands)}")
            module = module_name(operation, params)
            if module not in recorded:
                recorded[module] = functools.partial(
                    _cell_verilog, fn, module, widths, out_width(**params), tuple(params.items())
                )
            ports: dict[str, Any] = {}
            for k, (x, width) in enumerate(zip(operands, widths, strict=True)):
                x = Value.cast(x).as_unsigned()
                if len(x) < width:
                    raise ValueError(
                        f"{operation} '{name}': operand {k} has {len(x)} bits, fewer than the "
                        f"{width} it reads"
                    )
                ports[f"i_in{k}"] = x[0:width]
            out = Signal(out_width(**params), name=f"{name}_out")
            ports["o_out"] = out
            _add_named(m, name, Instance(module, **ports))
            return out

        return inline_or_instance

    return decorate


def _add_named(m: Module, name: str, submodule: Any) -> None:
    """Add ``submodule`` as ``name``, or ``name_1``, ``name_2``... when the name is taken."""
    candidate, k = name, 0
    while True:
        try:
            m.submodules[candidate] = submodule
            return
        except NameError:
            k += 1
            candidate = f"{name}_{k}"


@functools.cache
def _cell_verilog(
    fn: Callable[..., Value],
    module: str,
    in_widths: tuple[int, ...],
    out_width: int,
    params: tuple[tuple[str, Any], ...],
) -> str:
    from step_hw.verilog_backend import convert

    m = Module()
    ins = [Signal(w, name=f"in{k}") for k, w in enumerate(in_widths)]
    out = Signal(out_width, name="out")
    token = _RECORDED.set(None)  # the cell's own logic is inline
    try:
        result = Value.cast(fn(m, *ins, name="c", **dict(params)))
    finally:
        _RECORDED.reset(token)
    if len(result) != out_width:
        raise AssertionError(f"cell {module}: result has {len(result)} bits, not {out_width}")
    m.d.comb += out.eq(result)
    return convert(m, ports=[*ins, out], name=module, emit_src=False, strip_internal_attrs=True)


def evaluate(
    fn: Callable[..., Value], operands: Sequence[np.ndarray], *, width: int = 16, lanes: int = 128
) -> np.ndarray:
    """The results of the floating-point function ``fn`` (its logic inline) on the operand
    arrays ``operands`` (one per operand, unsigned integers of ``width`` bits), on Amaranth's
    simulator: ``lanes`` copies driven in parallel, one wide input per operand (all 65,536 BF16
    inputs of a one-input function in 512 steps). Unsigned integers of the result's width."""
    from amaranth.hdl import Cat
    from amaranth.sim import Simulator

    fn = getattr(fn, "__wrapped__", fn)  # the logic itself, not its cell
    n = len(operands[0])
    padded = [np.resize(np.asarray(o).astype(np.uint64), -(-n // lanes) * lanes) for o in operands]
    m = Module()
    ins = [Signal(width * lanes, name=f"in{i}") for i in range(len(operands))]
    results = [
        Value.cast(fn(m, *(s[width * k : width * (k + 1)] for s in ins), name=f"lane{k}"))
        for k in range(lanes)
    ]
    out_width = len(results[0])
    out = Signal(out_width * lanes)
    m.d.comb += out.eq(Cat(*results))
    got = np.zeros(len(padded[0]), dtype=np.uint64)
    mask = (1 << out_width) - 1

    async def bench(ctx):
        for k in range(0, len(got), lanes):
            for s, o in zip(ins, padded, strict=True):
                ctx.set(s, sum(int(v) << (width * i) for i, v in enumerate(o[k : k + lanes])))
            word = ctx.get(out)
            got[k : k + lanes] = [(word >> (out_width * i)) & mask for i in range(lanes)]

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    dtype = np.uint16 if out_width <= 16 else np.uint32 if out_width <= 32 else np.uint64
    return got[:n].astype(dtype)
