"""Formats of layout signals built when first read (``step_hw.signal_formats``): the same
formats, Verilog and simulator traces as Amaranth's own, computed only by the readers."""

import enum
import re
from pathlib import Path

from amaranth.hdl import Module, Signal, unsigned
from amaranth.lib import data
from amaranth.sim import Simulator

from step_hw import signal_formats
from tests.hw_helpers import run_script

# A BF16 map on 4 x 4 tiles behind a queue: ports, queue entries and registers with tile layouts.
# Printed: whether it was installed, and the digests of the Verilog with and without field wires
# (the field wires read every layout signal's format).
CONVERT = """
import hashlib, sys
import step_hw.signal_formats as sf
if sys.argv[1] == "off":
    sf.install = lambda: False
from step_hw.config import BF16_CONFIG
from step_hw.elaborate import _convert
from step_hw.field_wires import omitted
from step_lang import Graph, Map, Sink, Source, StreamType, Tile, numerics
from step_lang.types import bfloat16
g = Graph("fmt")
x = Source(g, StreamType(Tile(bfloat16, 4, 4), (3,)), name="x").out
Sink(Map(x, fn=numerics.functions(BF16_CONFIG).silu, name="f").out, name="y")
out = [str(sf.installed())]
for omit in (False, True):
    with omitted(omit):
        text, _ = _convert(g, BF16_CONFIG, "step_top")
    out.append(hashlib.sha256(text.encode()).hexdigest())
print(*out)
"""

# a traced simulation of a struct signal holding an array
TRACE = """
import sys
import step_hw.signal_formats as sf
if sys.argv[1] == "on":
    sf.install()
from amaranth.hdl import Module, Signal, unsigned
from amaranth.lib import data
from amaranth.sim import Simulator
m = Module()
s = Signal(data.StructLayout({"a": unsigned(3), "b": data.ArrayLayout(unsigned(2), 2)}))
m.d.sync += s.as_value().eq(s.as_value() + 3)
sim = Simulator(m)
sim.add_clock(1e-6)
with sim.write_vcd(sys.argv[2]):
    sim.run_until(5e-6)
print(sf.installed())
"""


def test_a_design_converts_to_the_same_verilog_with_and_without_it():
    on, off = run_script(CONVERT, "on"), run_script(CONVERT, "off")
    assert on[0] == "True" and off[0] == "False"
    assert on[1:] == off[1:]
    assert on[1] != on[2]  # the field wires are there in one and not in the other


def test_the_simulators_trace_is_the_same_with_and_without_it(tmp_path):
    on, off = tmp_path / "on.vcd", tmp_path / "off.vcd"
    assert run_script(TRACE, "on", str(on)) == ["True"]
    assert run_script(TRACE, "off", str(off)) == ["False"]

    def body(path: Path) -> str:  # without the header's date
        return re.sub(r"\$date.*?\$end", "", path.read_text(), flags=re.S)

    assert body(on) == body(off)
    names = set(re.findall(r"\$var \S+ \d+ \S+ (\S+)", body(on)))
    assert {r"\s.a", r"\s.b[0]", r"\s.b[1]"} <= names


class Op(enum.Enum):
    ADD = 0
    SUB = 1


class Pair(data.Struct):
    lo: unsigned(4)
    hi: data.ArrayLayout(unsigned(2), 3)


LAYOUTS = {
    "struct": data.StructLayout({"a": unsigned(3), "b": data.ArrayLayout(unsigned(2), 2)}),
    "array of arrays": data.ArrayLayout(data.ArrayLayout(unsigned(5), 3), 4),
    "union": data.UnionLayout({"x": unsigned(6), "y": data.ArrayLayout(unsigned(3), 2)}),
    "Struct class": Pair,
}


def test_a_signals_format_is_built_when_first_read_and_is_amaranths():
    assert signal_formats.install() and signal_formats.installed()
    assert signal_formats.install()  # idempotent
    for name, layout in LAYOUTS.items():
        s = Signal(layout, name="s")
        value = s.as_value()
        assert type(value.__dict__[signal_formats._SLOT]) is signal_formats._Deferred, name
        # called by anyone but Signal.__init__, a layout's format is built at once
        want = layout.format(layout(value), "")
        assert type(want) is not signal_formats._Deferred, name
        assert repr(value._format) == repr(want), name
        assert value._format is value._format, name  # built once, then kept


def test_signals_of_other_shapes_keep_their_formats():
    signal_formats.install()
    plain = Signal(unsigned(4), name="p")
    assert repr(plain._format) == "(format '{}' (sig p))"
    decoded = Signal(data.ArrayLayout(unsigned(1), 2), name="d", decoder=Op)
    assert repr(decoded.as_value()._format).startswith("(format-enum (sig d) 'Op'")
    m = Module()
    s = Signal(LAYOUTS["struct"])
    m.d.sync += s.a.eq(s.a + 1)
    sim = Simulator(m)
    sim.add_clock(1e-6)

    async def bench(ctx):
        await ctx.tick().repeat(3)
        assert ctx.get(s.a) == 3

    sim.add_testbench(bench)
    sim.run()
