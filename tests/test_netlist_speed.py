"""The fast paths through Amaranth's netlist (``step_hw.netlist_speed``): the same Verilog and
RTLIL, and the checks they keep."""

import pytest
from amaranth.hdl import Cat, Module, Mux, Signal, _nir
from hypothesis import given
from hypothesis import strategies as st

from step_hw import netlist_speed
from tests.hw_helpers import run_script

CONVERT = """
import hashlib, sys
import step_hw.netlist_speed as ns
if sys.argv[1] == "off":
    ns.install = lambda: False
from examples import swiglu
from step_hw.config import BF16_CONFIG
from step_hw.elaborate import _convert
text, _ = _convert(swiglu.hardware(hw=BF16_CONFIG), BF16_CONFIG, "step_top")
print(ns.installed(), hashlib.sha256(text.encode()).hexdigest())
"""

# memories with initial contents (negative rows, a row wider than the memory, an empty one)
# and constants, slices and late nets feeding them
MEMORIES = """
import hashlib, sys
import step_hw.netlist_speed as ns
if sys.argv[1] == "on":
    ns.install()
from amaranth import Module, Signal, Cat, Const
from amaranth.back import rtlil
from amaranth.lib.memory import Memory
m = Module()
addr = Signal(3)
out = Signal(40)
mems = [Memory(shape=13, depth=7, init=[1, -2, 0x1FFF, 0x2ABC, 5]),
        Memory(shape=1, depth=3, init=[1, 0, 1]),
        Memory(shape=8, depth=4, init=[])]
for k, mem in enumerate(mems):
    m.submodules[f"mem{k}"] = mem
ports = [mem.read_port(domain="comb") for mem in mems]
mid = Signal(13)
for p in ports:
    m.d.comb += p.addr.eq(addr)
m.d.comb += mid.eq(ports[0].data ^ 0x155)
m.d.comb += out.eq(Cat(mid[2:9], Const(0b1011, 4), ports[1].data, mid, ports[2].data, addr))
text = rtlil.convert(m, ports=[addr, out])
print(ns.installed(), hashlib.sha256(text.encode()).hexdigest())
"""


def test_a_design_converts_to_the_same_verilog_with_and_without_it():
    on, off = run_script(CONVERT, "on"), run_script(CONVERT, "off")
    assert on[0] == "True" and off[0] == "False"
    assert on[1] == off[1]


def test_initialised_memories_give_the_same_rtlil_with_and_without_it():
    on, off = run_script(MEMORIES, "on"), run_script(MEMORIES, "off")
    assert on[0] == "True" and off[0] == "False"
    assert on[1] == off[1]


def test_values_from_values_are_copied_and_anything_else_is_still_checked():
    assert netlist_speed.install() and netlist_speed.installed()
    assert netlist_speed.install()  # idempotent
    a = _nir.Value(_nir.Net.from_const(b) for b in (1, 0, 1, 1))
    b = _nir.Value(a)
    assert type(b) is _nir.Value and b == a
    assert type(a[1:3]) is _nir.Value and a[1:3] == (a[1], a[2])
    assert a[0] == _nir.Net.from_const(1)
    assert _nir.Value(_nir.Net.from_const(1)) == (1,)
    with pytest.raises(AssertionError):
        _nir.Value([1, 2])  # not nets: Amaranth's own check
    with pytest.raises(AssertionError):
        _nir.Value((_nir.Net.from_const(1), 2))


@given(st.integers(-(1 << 70), 1 << 70), st.integers(0, 70))
def test_constants_have_amaranths_bits(const, width):
    netlist_speed.install()
    got = _nir.Value.from_const(const, width)
    assert type(got) is _nir.Value
    assert list(got) == [(const >> bit) & 1 for bit in range(width)]
    assert all(type(n) is _nir.Net for n in got)


CYCLES = {
    # through every kind of cell the search treats apart: bit by bit (bitwise, mux) and a cell
    # whose every bit has the same sources (adder, comparison, part select), in its later bits
    "bitwise": lambda a, b, c, sel: [a.eq(b ^ 5), b.eq(c), c.eq(a & 3)],
    "adder": lambda a, b, c, sel: [a.eq(b + 1), b.eq(c), c.eq(a[0:2] ^ 3)],
    "adder_bit3": lambda a, b, c, sel: [a.eq(b + 1), b.eq(Cat(c[0:3], a[3])), c.eq(0)],
    "compare": lambda a, b, c, sel: [a.eq(b == 2), b.eq(a), c.eq(0)],
    "mux": lambda a, b, c, sel: [a.eq(Mux(sel, b, c)), b.eq(Cat(a[1:4], a[0])), c.eq(1)],
    "part": lambda a, b, c, sel: [a.eq(c.bit_select(sel, 4)), c.eq(Cat(a, b)), b.eq(0)],
}


@pytest.mark.parametrize("kind", sorted(CYCLES))
def test_a_combinational_cycle_still_raises_amaranths_message(kind):
    from amaranth.back import rtlil

    netlist_speed.install()
    m = Module()
    a, b, c, sel = Signal(4, name="looped"), Signal(4), Signal(8), Signal(2)
    m.d.comb += CYCLES[kind](a, b, c, sel)
    with pytest.raises(_nir.CombinationalCycle, match=r"(?s)Combinational cycle.*looped"):
        rtlil.convert(m, ports=[a, sel])


def test_a_cycle_through_one_bit_of_a_bitwise_cell_is_found_after_its_other_bits():
    """Bit 0 of ``x`` (an XOR, searched bit by bit) is searched first, from ``early``, and ends
    without a cycle; bit 1 closes one. Treating the XOR as a cell whose bits share their sources
    would skip bit 1."""
    from amaranth.back import rtlil

    netlist_speed.install()
    m = Module()
    x, y, early = Signal(4), Signal(4, name="looped"), Signal(2)
    m.d.comb += [early.eq(~x[0:1] + 1), x.eq(y ^ 1), y.eq(Cat(0, x[1], 0, 0))]
    with pytest.raises(_nir.CombinationalCycle, match=r"(?s)Combinational cycle.*looped"):
        rtlil.convert(m, ports=[x, early])


def test_shared_sources_without_a_cycle_convert():
    from amaranth.back import rtlil

    netlist_speed.install()
    m = Module()
    a, b, c, sel = Signal(8), Signal(8), Signal(16), Signal(2)
    m.d.comb += [c.eq(Cat(a + b, a == b)), b.eq(a.bit_select(sel, 8) + 1)]
    m.d.sync += a.eq(c[0:8] - c[8])
    assert "$add" in rtlil.convert(m, ports=[a, c, sel])


def test_a_late_value_resolves_through_its_connections():
    netlist_speed.install()
    n = _nir.Netlist()
    late = [_nir.Net.from_late(-1), _nir.Net.from_late(-2)]
    n.connections[late[0]] = late[1]
    n.connections[late[1]] = _nir.Net.from_const(1)
    cell = _nir.Net.from_cell(5, 3)
    got = n.resolve_value(_nir.Value([late[0], cell, late[1]]))
    assert got == (1, cell, 1) and type(got) is _nir.Value
    plain = _nir.Value([cell])
    assert n.resolve_value(plain) is plain  # no late net: already resolved


def test_an_unknown_amaranth_is_left_alone(monkeypatch):
    import amaranth

    monkeypatch.setattr(netlist_speed, "_INSTALLED", False)
    monkeypatch.setattr(amaranth, "__version__", "0.6.0")
    before = _nir.Value.__dict__["__getitem__"]
    assert not netlist_speed.install()
    assert _nir.Value.__dict__["__getitem__"] is before


def _bit_level_searches(monkeypatch, m, ports) -> int:
    """Converts ``m`` and counts the searches of nets that the cell-level check left to do."""
    from amaranth.back import rtlil

    calls = []
    search = netlist_speed._has_comb_cycle
    monkeypatch.setattr(netlist_speed, "_has_comb_cycle", lambda *a: calls.append(1) or search(*a))
    if not netlist_speed.install():
        pytest.skip("an Amaranth that step_hw.netlist_speed does not know")
    rtlil.convert(m, ports=ports)
    return len(calls)


def test_cells_without_a_cycle_need_no_search_of_nets(monkeypatch):
    m = Module()
    a, b, c = Signal(8), Signal(8), Signal(8)
    m.d.comb += [b.eq(a + 1), c.eq(Mux(a[0], b, a))]
    m.d.sync += a.eq(c)
    assert _bit_level_searches(monkeypatch, m, [c]) == 0


def test_bits_of_one_signal_that_feed_each_other_convert_after_a_search_of_nets(monkeypatch):
    """Bit 1 of ``x`` is bit 0 of ``x``: a cycle of cells (the signal's own assignment list), not
    of nets, so the nets are searched and the design converts."""
    m = Module()
    a, x = Signal(), Signal(2, name="x")
    m.d.comb += [x[0].eq(a), x[1].eq(x[0])]
    assert _bit_level_searches(monkeypatch, m, [a, x]) == 1
