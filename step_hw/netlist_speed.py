"""A faster path through Amaranth's netlist for the conversions of hardware-size designs.

Amaranth 0.5 turns a design into a netlist of single-bit nets and then into RTLIL text, all in
Python, one net at a time. A design on 16 x 16 BF16 tiles moves 4,096-bit payloads through every
queue, buffer and unit, so that per-net work dominates its conversion. :func:`install` replaces
such steps by equivalents that do the work at C speed where the input allows it, and leave
anything else to Amaranth's own code:

* ``_nir.Value(nets)``: a value built from another value, or sliced from one, is a plain tuple
  copy (its nets were checked when it was made; a Fig. 8 design made 53 million such checks); a
  value built from anything else is checked at once (every element's type is ``Net``), and by
  Amaranth's own code (its assertion) when it is not.
* ``Value.from_const``, ``Net.from_cell``, ``Netlist.add_value_cell`` and
  ``Netlist.alloc_late_value``: the same nets without a Python step per bit (``from_cell``
  passes anything outside the range Amaranth asserts to Amaranth's own method).
* ``Netlist.resolve_value``: a value without late nets (none is negative) is already resolved and
  is returned as it is; otherwise each late net follows its connections, as in Amaranth.
* ``Netlist.check_comb_cycles``: an iterative search for a combinational cycle over the same
  edges (``Cell.comb_edges_to``), which searches a cell whose bits all have the same sources
  once, not once per bit; when it finds a cycle, Amaranth's own check runs and raises its
  message (the cycle's path).
* ``rtlil.ModuleEmitter.emit_memory``: a memory's initial contents as one constant of
  ``depth * width`` bits, formatted row by row instead of net by net.
* ``rtlil.ModuleEmitter.sigspec``: the same text, the runs of nets found in fewer Python steps.

The Verilog is the same text (``tests/test_netlist_speed.py`` converts designs both ways);
docs/cosim.md has the conversion times (Fig. 8 ``32 x 32`` without field wires: 30.7 s with
only the first item's copies, 22.7 s with everything here).

Installed once per process by :mod:`step_hw.elaborate` for Amaranth 0.5 when every method it
replaces is still there; otherwise nothing changes.
"""

from __future__ import annotations

import threading
from itertools import repeat

__all__ = ["install", "installed"]

_LOCK = threading.Lock()
_INSTALLED = False


def installed() -> bool:
    """Whether :func:`install` replaced the methods in this process."""
    return _INSTALLED


def _known(amaranth, nir, rtlil) -> bool:
    value = getattr(nir, "Value", None)
    netlist = getattr(nir, "Netlist", None)
    emitter = getattr(rtlil, "ModuleEmitter", None)
    return (
        amaranth.__version__.startswith("0.5.")
        and value is not None
        and value.__bases__ == (tuple,)
        and {"__new__", "__getitem__"} <= set(value.__dict__)
        and netlist is not None
        and {"resolve_value", "check_comb_cycles", "add_value_cell", "alloc_late_value"}
        <= set(netlist.__dict__)
        and "from_const" in value.__dict__
        and isinstance(getattr(nir, "Net", None), type)
        and isinstance(nir.Net.__dict__.get("from_cell"), classmethod)
        and all(
            isinstance(getattr(nir, k, None), type)
            for k in (
                "Operator",
                "Part",
                "Matches",
                "PriorityMatch",
                "AssignmentList",
                "AsyncReadPort",
                "FlipFlop",
            )
        )
        and emitter is not None
        and {"sigspec", "emit_memory"} <= set(emitter.__dict__)
    )


def install() -> bool:
    """Replace the steps by their fast paths (idempotent; thread safe). False when this
    Amaranth is not one it knows."""
    global _INSTALLED
    import amaranth
    from amaranth.back import rtlil
    from amaranth.hdl import _nir

    with _LOCK:
        if _INSTALLED:
            return True
        if not _known(amaranth, _nir, rtlil):
            return False
        _install_values(_nir)
        _install_netlist(_nir)
        _install_emitter(_nir, rtlil)
        _INSTALLED = True
        return True


def _install_values(nir) -> None:
    value, net = nir.Value, nir.Net
    checked_new = value.__new__
    new_tuple = tuple.__new__
    item = tuple.__getitem__
    only_nets = {net}

    def __new__(cls, nets=()):
        kind = type(nets)
        if kind is value:  # its nets were checked when it was made
            return new_tuple(cls, nets)
        if kind is net or isinstance(nets, net):
            return checked_new(cls, nets)
        nets = tuple(nets)
        if set(map(type, nets)) <= only_nets:
            return new_tuple(cls, nets)
        return checked_new(cls, nets)  # raises Amaranth's own assertion

    def __getitem__(self, index):
        if isinstance(index, slice):
            return new_tuple(type(self), item(self, index))
        return item(self, index)

    def from_const(cls, const, width):
        if width <= 0:
            return new_tuple(cls, ())
        bits = format(const & ((1 << width) - 1), f"0{width}b")  # the top bit first
        return new_tuple(cls, map(const_nets.__getitem__, reversed(bits)))

    def from_cell(cls, cell, bit):
        if cell > 0 and 0 <= bit <= 0xFFFF:  # what Amaranth asserts
            return new_int(cls, (cell << 16) | bit)
        return checked_from_cell(cls, cell, bit)

    new_int = int.__new__
    checked_from_cell = net.__dict__["from_cell"].__func__
    net.from_cell = classmethod(from_cell)
    const_nets = {"0": net.from_const(0), "1": net.from_const(1)}
    value.__new__ = staticmethod(__new__)
    value.__getitem__ = __getitem__
    value.from_const = classmethod(from_const)


def _install_netlist(nir) -> None:
    netlist = nir.Netlist
    value, net = nir.Value, nir.Net
    new_tuple = tuple.__new__
    checked_resolve = netlist.resolve_value
    checked_value_cell = netlist.add_value_cell
    checked_cycles = netlist.check_comb_cycles

    def resolve_value(self, val):
        if type(val) is not value:
            return checked_resolve(self, val)
        if not val or min(val) >= 0:  # no late net in it
            return val
        connections = self.connections
        nets = []
        for n in val:
            while n < 0:  # a late net: follow its connection
                n = connections[n]
            nets.append(n)
        return new_tuple(value, nets)

    def add_value_cell(self, width, cell):
        if not 0 <= width <= 0xFFFF:
            return checked_value_cell(self, width, cell)
        base = self.add_cell(cell) << 16
        return new_tuple(value, map(net, range(base, base + width)))

    def alloc_late_value(self, signal):
        width = len(signal)
        self.last_late_net -= width
        start = self.last_late_net
        val = new_tuple(value, map(net, range(start, start + width)))
        self.late_to_signal.update(zip(val, zip(repeat(signal), range(width)), strict=True))
        return val

    def check_comb_cycles(self):
        if _cells_acyclic(nir, self):  # no cycle of cells, so none of nets
            return
        if _has_comb_cycle(nir, self):
            checked_cycles(self)  # raises CombinationalCycle with the cycle's path
            raise AssertionError("a combinational cycle that Amaranth's check did not find")

    netlist.resolve_value = resolve_value
    netlist.add_value_cell = add_value_cell
    netlist.alloc_late_value = alloc_late_value
    netlist.check_comb_cycles = check_comb_cycles


def _cells_acyclic(nir, netlist) -> bool:
    """Whether the cells of ``netlist`` are free of cycles in the graph where a cell points to
    the cells that drive its combinational inputs. A cycle of nets runs through a cycle of their
    cells, so True means that the nets have none; False (a cycle of cells, which may join bits
    that do not reach each other) leaves the question to :func:`_has_comb_cycle`.

    A cell's combinational inputs: a flip-flop's clock and asynchronous reset; every input of the
    combinational cells (an operator, a part select, a match, a priority match, an assignment
    list, an asynchronous read port: a superset of the nets that reach any one output bit); for
    any other cell, what ``comb_edges_to`` gives for each output bit. Sets of nets are made at C
    speed, with no Python step per bit (a Fig. 8 design's 4,096-bit payloads)."""
    cells, flipflop = netlist.cells, nir.FlipFlop
    whole = (
        nir.Operator,
        nir.Part,
        nir.Matches,
        nir.PriorityMatch,
        nir.AssignmentList,
        nir.AsyncReadPort,
    )
    shift = repeat(16)
    drivers: list[set[int]] = []
    for idx, cell in enumerate(cells):
        kind = type(cell)
        if kind is flipflop:
            nets = {cell.clk, cell.arst}
        elif kind in whole:
            nets = cell.input_nets()
        else:
            nets = {
                src for net in cell.output_nets(idx) for src, _ in cell.comb_edges_to(net & 0xFFFF)
            }
        if nets and min(nets) < 0:  # late nets: where their connections lead
            late = {n for n in nets if n < 0}
            nets = (nets - late) | set(map(netlist.resolve_net, late))
        found = set(map(int.__rshift__, nets, shift))  # cell 0 (inputs, constants) drives nothing
        found.discard(0)
        drivers.append(found)
    # Kahn: take cells no remaining cell points to, until none is left (acyclic) or none can go
    users = [0] * len(cells)
    for found in drivers:
        for d in found:
            users[d] += 1
    ready = [i for i, n in enumerate(users) if n == 0]
    taken = 0
    while ready:
        i = ready.pop()
        taken += 1
        for d in drivers[i]:
            users[d] -= 1
            if users[d] == 0:
                ready.append(d)
    return taken == len(cells)


def _has_comb_cycle(nir, netlist) -> bool:
    """Whether the combinational edges of ``netlist`` reachable from its cells' outputs and its
    signals close a cycle: Amaranth's ``check_comb_cycles`` without recursion (a net is constant
    for 0 and 1, late when negative, else bit ``net & 0xffff`` of cell ``net >> 16``).

    Where every output bit of a cell has the same sources (:func:`_same_sources_for_every_bit`:
    an adder, a comparison, a dynamic part select of a 4,096-bit payload), a bit whose search
    ended found all of them free of cycles, so the cell's other bits are not searched again."""
    cells, connections = netlist.cells, netlist.connections
    checked: set[int] = {0, 1}
    busy: set[int] = set()
    uniform: dict[int, bool] = {}  # cell index -> every bit has the same sources
    done: set[int] = set()  # cells of those whose sources are all checked
    nothing = ()

    def sources(net):  # (source net, source location) pairs
        if net < 0:
            return iter(((connections[net], None),))
        cell = net >> 16
        if cell in done:
            return iter(nothing)
        return cells[cell].comb_edges_to(net & 0xFFFF)

    def roots():
        for cell_idx, cell in enumerate(cells):
            yield from cell.output_nets(cell_idx)
        for val in netlist.signals.values():
            yield from val

    for root in roots():
        if root in checked:
            continue
        busy.add(root)
        stack = [(root, sources(root))]
        while stack:
            net, edges = stack[-1]
            for src, _ in edges:
                if src in checked:
                    continue
                if src in busy:
                    return True
                busy.add(src)
                stack.append((src, sources(src)))
                break
            else:
                stack.pop()
                busy.discard(net)
                checked.add(net)
                if net > 1:
                    cell = net >> 16
                    same = uniform.get(cell)
                    if same is None:
                        same = uniform[cell] = _same_sources_for_every_bit(nir, cells[cell])
                    if same:
                        done.add(cell)
    return False


def _same_sources_for_every_bit(nir, cell) -> bool:
    """Whether ``cell.comb_edges_to(bit)`` gives the same nets for every ``bit`` (Amaranth 0.5's
    cells of exactly these types; anything else is searched bit by bit)."""
    kind = type(cell)
    if kind is nir.Operator:
        if len(cell.inputs) == 1:
            return cell.operator != "~"
        return len(cell.inputs) == 2 and cell.operator not in ("&", "|", "^")
    return kind in (nir.Part, nir.Matches, nir.AsyncReadPort, nir.FlipFlop)


def _install_emitter(nir, rtlil) -> None:
    emitter = rtlil.ModuleEmitter
    checked_memory = emitter.emit_memory
    value = nir.Value

    def emit_memory(self, cell_idx, cell):
        total = cell.width * len(cell.init)
        if not total:
            return checked_memory(self, cell_idx, cell)
        mask = (1 << cell.width) - 1
        # sigspec's constant: the last row's top bit first, the first row's bit 0 last
        data = "".join(format(row & mask, f"0{cell.width}b") for row in reversed(cell.init))
        memory_info = self.memories[cell_idx]
        self.builder.cell("$meminit_v2", ports={
            "ADDR": self.sigspec(),
            "DATA": f"{total}'{data}",
            "EN": self.sigspec(value.ones(cell.width)),
        }, parameters={
            "MEMID": memory_info.memid,
            "ABITS": 0,
            "WIDTH": cell.width,
            "WORDS": cell.depth,
            "PRIORITY": 0,
        }, src_loc=cell.src_loc)  # fmt: skip

    def sigspec(self, *parts):
        nets = []
        for part in parts:
            nets.extend(value(part))
        wires = self.nets
        chunks = []
        pos, end = 0, len(nets)
        while pos < end:
            first = nets[pos]
            stop = pos + 1
            if first == 0 or first == 1:  # a run of constant bits
                while stop < end and (nets[stop] == 0 or nets[stop] == 1):
                    stop += 1
                bits = "".join("1" if n else "0" for n in reversed(nets[pos:stop]))
                chunks.append(f"{stop - pos}'{bits}")
            else:  # a run of consecutive bits of one wire
                wire, start_bit = wires[first]
                bit = start_bit + 1
                while stop < end:
                    n = nets[stop]
                    if n == 0 or n == 1 or wires[n] != (wire, bit):
                        break
                    stop += 1
                    bit += 1
                width = stop - pos
                if width == 1:
                    chunks.append(f"{wire.name} [{start_bit}]")
                else:
                    chunks.append(f"{wire.name} [{start_bit + width - 1}:{start_bit}]")
            pos = stop
        if len(chunks) == 1:
            return chunks[0]
        return "{ " + " ".join(reversed(chunks)) + " }"

    emitter.emit_memory = emit_memory
    emitter.sigspec = sigspec
