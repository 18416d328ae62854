"""Every operator has behaviour in every reader (docs/architecture.md).

The interpreter and the cost model are methods of the node class; the paper and rtl timing
profiles, the hardware contract and the elaborator are :class:`~step_lang.registry.NodeRegistry`
entries keyed by class. A new operator class that one reader lacks fails here, by name.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from sim.profiles.paper import PAPER_TIMING
from sim.profiles.rtl import RTL_TIMING
from step_hw.contract import BLOCKS, Block
from step_hw.elaborate import HARDWARE
from step_lang import Graph, Node, Sink, Source, StepTypeError, StreamType, Tile
from step_lang.registry import NodeRegistry, Unsupported, node_classes
from step_lang.types import int16

REGISTRIES = {
    "paper-profile timing (sim/profiles/paper.py)": PAPER_TIMING,
    "hardware contract (step_hw/contract.py)": BLOCKS,
    "hardware (step_hw/elaborate.py)": HARDWARE,
}
RTL = "rtl-profile timing (sim/profiles/rtl/registry.py RTL_TIMING, or a Block in step_hw/contract.py)"
COSTS = ("onchip_bytes", "offchip_bytes", "flops")


def missing_behaviour(classes: list[type[Node]]) -> list[str]:
    """One line per operator class and reader that has no behaviour for it."""
    out = []
    for cls in classes:
        if cls.execute is Node.execute:
            out.append(f"{cls.__name__}: no interpreter semantics (define execute)")
        for hook in COSTS:
            if getattr(cls, hook) is getattr(Node, hook) and hook not in cls.zero_costs:
                out.append(
                    f"{cls.__name__}: no metrics {hook} (define it or list it in zero_costs)"
                )
        for reader, registry in REGISTRIES.items():
            if cls not in registry:
                out.append(f"{cls.__name__}: no {reader} entry")
        # The rtl profile times every contract Block; other operators need a model of their own.
        if cls not in RTL_TIMING and not isinstance(BLOCKS.get(cls), Block):
            out.append(f"{cls.__name__}: no {RTL} entry")
    return out


def library_classes() -> list[type[Node]]:
    """The language's operators (classes defined by other tests are left out)."""
    return [c for c in node_classes() if c.__module__.startswith("step_lang.")]


def test_the_language_has_25_operators():
    names = [c.__name__ for c in library_classes()]
    assert len(names) == 25 and "Map" in names and "Feedback" in names
    assert not any(n.startswith("_") for n in names)  # private bases are not operators


def test_every_operator_has_every_reader():
    assert missing_behaviour(library_classes()) == []


def test_an_unregistered_operator_is_named_with_each_reader():
    class Mystery(Node):
        kind = "Mystery"

    problems = missing_behaviour([Mystery])
    assert "Mystery: no interpreter semantics (define execute)" in problems
    assert "Mystery: no metrics flops (define it or list it in zero_costs)" in problems
    for reader in [*REGISTRIES, RTL]:
        assert f"Mystery: no {reader} entry" in problems
    assert len(problems) == 1 + len(COSTS) + len(REGISTRIES) + 1


def _source_and_sink():
    g = Graph("g")
    src = Source(g, StreamType(Tile(int16, 4, 4), (2,)), name="x")
    Sink(src.out, name="y")
    return g


def test_unsupported_entries_name_the_operator():
    g = _source_and_sink()
    with pytest.raises(
        StepTypeError, match=r"^Source 'x': is a top-level stream port \(src_<node>\)$"
    ):
        HARDWARE.entry(g.nodes["x"])
    with pytest.raises(StepTypeError, match=r"^Sink 'y': is a top-level port, not a block$"):
        BLOCKS.entry(g.nodes["y"])


def test_a_registry_refuses_duplicates_and_names_missing_entries():
    reg = NodeRegistry("test reader")
    reg.add("first", Source)
    with pytest.raises(ValueError, match=r"^test reader: Source is registered twice$"):
        reg.add("second", Source)
    with pytest.raises(TypeError, match=r"^test reader: 'Map' is not a Node class$"):
        reg.add("x", "Map")
    g = _source_and_sink()
    assert reg.entry(g.nodes["x"]) == "first"
    with pytest.raises(
        StepTypeError, match=r"^Sink 'y': has no test reader entry \(not registered\)$"
    ):
        reg.entry(g.nodes["y"])
    reg.add(Unsupported("is not for this reader"), Sink)
    with pytest.raises(StepTypeError, match=r"^Sink 'y': is not for this reader$"):
        reg.entry(g.nodes["y"])
    assert reg.missing([Source, Sink, Graph]) == [Graph]


def test_metrics_of_an_operator_without_costs_say_so():
    class Costless(Node):
        kind = "Costless"

    g = Graph("g")
    node = Costless(g, "c")
    with pytest.raises(NotImplementedError, match=re.escape("Costless 'c': defines no flops cost")):
        node.flops()


# -- an operator added from outside the library (the walk-through of docs/architecture.md) -----


class Identity(Node):
    """Passes its tokens on unchanged (a stand-in for a new operator)."""

    kind = "Identity"
    zero_costs = frozenset({"onchip_bytes", "offchip_bytes", "flops"})

    def __init__(self, x, *, name=None):
        super().__init__(x.graph, name)
        x = self._stream(x, "in")
        self._finish([("in", x)], [("out", x.type)])

    def execute(self, io):
        from step_lang import DONE

        while True:
            tok = yield from io.recv(0)
            yield from io.send(0, tok)
            if tok is DONE:
                return


def _identity_block(node, config, memory_map):
    from amaranth.hdl import Module
    from amaranth.lib import wiring
    from amaranth.lib.wiring import In, Out

    from step_hw.payload import TokenFormat

    fmt = TokenFormat.for_elem(node.inputs[0].elem, config, where=node.name)

    class IdentityUnit(wiring.Component):
        def __init__(self):
            super().__init__({"i": In(fmt.signature()), "o": Out(fmt.signature())})
            self.in_ports, self.out_ports = [self.i], [self.o]

        def elaborate(self, platform):
            m = Module()
            wiring.connect(m, wiring.flipped(self.i), wiring.flipped(self.o))
            return m

    return IdentityUnit()


def test_an_operator_added_outside_the_library():
    from sim import simulate
    from sim.profiles import RtlProfile
    from sim.profiles.paper import _SendCost
    from step_hw.config import HwConfig
    from step_hw.elaborate import convert
    from step_lang import DONE, interpret

    assert len(missing_behaviour([Identity])) == 4  # the readers, before registration
    if Identity not in PAPER_TIMING:
        PAPER_TIMING.add(lambda profile, node, resident: _SendCost(lambda tok: 1), Identity)
        BLOCKS.add(Block(), Identity)
        HARDWARE.add(_identity_block, Identity)
    assert missing_behaviour([Identity]) == []

    g = Graph("ident")
    src = Source(g, StreamType(Tile(int16, 4, 4), (3,)), name="x")
    Sink(Identity(src.out, name="same").out, name="y")
    tiles = [np.full((4, 4), i, np.int16) for i in range(3)]
    want = interpret(g, inputs={"x": tiles}).streams["same.out"]
    assert len(want) == 4 and want[-1] is DONE
    for profile in (None, RtlProfile(HwConfig())):
        r = simulate(g, inputs={"x": tiles}, profile=profile)
        assert len(r.streams["same.out"]) == 4 and r.cycles > 0
    text, desc = convert(g, HwConfig())
    assert "module ident" in text and desc["nodes"] == {"same": "Identity"}
