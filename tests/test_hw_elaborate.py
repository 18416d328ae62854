# amaranth: UnusedElaboratable=no
# (Components built only to inspect them, or rejected mid-elaboration, are never elaborated.)
"""Graph elaboration: whole graphs become one component; misuse is rejected naming the node."""

from __future__ import annotations

import pytest
from amaranth.hdl import Fragment

from examples import swiglu
from step_hw.config import HwConfig
from step_hw.elaborate import ElaboratedGraph, supported_kinds
from step_lang import (
    Graph,
    LinearOffChipLoad,
    LinearOffChipStore,
    Map,
    Sink,
    Source,
    StepTypeError,
    StreamType,
    Tile,
    numerics,
)
from step_lang import functions as F
from step_lang.types import float32, int16


def test_swiglu_elaborates_with_one_submodule_per_node():
    g = swiglu.hardware()
    top = ElaboratedGraph(g, HwConfig())
    assert top.graph is not g  # the lowered copy: the user's graph is not changed
    assert set(top.blocks) == {
        n for n, node in top.graph.nodes.items() if node.kind not in ("Source", "Sink", "Feedback")
    }
    assert set(g.nodes) < set(top.graph.nodes) and "load_x_out_bc" in top.blocks
    desc = top.description()
    assert desc["axi_ports"] == [
        "m_axi_load_x",
        "m_axi_load_gate",
        "m_axi_load_up",
        "m_axi_load_down",
        "m_axi_store",
    ]
    addrs = [v["addr"] for v in desc["memory_map"].values()]
    assert addrs == sorted(addrs) and all(a % 4096 == 0 for a in addrs)
    assert "start" in top.signature.members and "done" in top.signature.members
    Fragment.get(top, None)  # elaborates every block (and marks them used)


def _graph_with(fn, elem):
    g = Graph("bad")
    x = Source(g, StreamType(elem, (1, 2)), name="x").out
    Sink(Map(x, fn=fn, name="op").out, name="y")
    return g


@pytest.mark.parametrize(
    ("fn", "elem", "message"),
    [
        (
            F.exp,
            Tile(float32, 2, 2),
            r"^Source 'x': dtype float32 is not supported by the hardware",
        ),
        (
            numerics.functions(HwConfig()).exp,
            Tile(int16, 8, 8),
            r"^Source 'x': tile Tile<int16, 8x8> does not fit the configured 4x4 tile$",
        ),
        (F.scalar_op("add", 1), Tile(int16, 1, 1), r"^Map 'op'"),
    ],
)
def test_unsupported_graphs_are_rejected_naming_the_node(fn, elem, message):
    with pytest.raises(StepTypeError, match=message):
        ElaboratedGraph(_graph_with(fn, elem), HwConfig())


def test_float_tensors_are_rejected():
    g = Graph("f")
    t = g.tensor("t", (4, 4), "float32")
    LinearOffChipStore(LinearOffChipLoad(t, tile=(4, 4)).out, t)
    with pytest.raises(
        StepTypeError,
        match=r"^tensor 't': dtype float32 has no hardware encoding under int16 \(floating point "
        r"needs HwConfig\(elem_dtype='bfloat16'\)\)$",
    ):
        ElaboratedGraph(g, HwConfig())


def test_supported_kinds_cover_the_language_but_generic_flatmap():
    kinds = supported_kinds()
    assert "Partition" in kinds and "LinearOffChipLoad" in kinds and "Streamify" in kinds
    # FlatMap: the address generators of step_hw.addrgen and retile_* only; any other function
    # is refused naming the node (tests/test_hw_attention_blocks.py).
    assert "FlatMap" in kinds


def test_to_selector_block_matches_interpreter():
    import numpy as np

    from step_hw.payload import TokenFormat
    from step_hw.select import ToSelector
    from step_hw.testing import PATTERNS, run_block
    from step_lang import DONE, Selector, Stop
    from step_lang.types import int32

    node_in = Tile(int32, 1, 3)
    fmt = TokenFormat.for_elem(node_in, HwConfig())
    dut = ToSelector(tile_format=fmt, n=3)
    rows = [np.array([[0, 5, 0]]), np.array([[-1, 0, 2]]), np.array([[0, 0, 0]])]
    tokens = [rows[0], Stop(1), rows[1], rows[2], Stop(1), DONE]
    out_fmt = TokenFormat.for_elem(Selector(3), HwConfig())
    for pattern in PATTERNS:
        run = run_block(dut, {"i": (dut.i, fmt, tokens)}, {"o": (dut.o, out_fmt)}, pattern=pattern)
        got = run.outputs["o"]
        assert [t.tolist() if hasattr(t, "tolist") else t for t in got] == [
            [False, True, False],
            Stop(1),
            [True, False, True],
            [False, False, False],
            Stop(1),
            DONE,
        ]
        dut = ToSelector(tile_format=fmt, n=3)
    Fragment.get(dut, None)


def test_sources_wait_for_start_and_lose_no_token():
    # Every queue is held in reset until the cycle after `start`; a Source offering a token in
    # the `start` cycle (or before) must see `ready` low rather than lose the token.
    import numpy as np
    from amaranth.sim import Simulator

    from step_hw.testing import token_sink
    from step_lang import DONE, Stop

    g = Graph("pass")
    src = Source(g, StreamType(Tile(int16, 4, 4), (1, 3)), name="x")
    Sink(src.out, name="y")
    top = ElaboratedGraph(g)
    fmt = top._formats["x"]
    tokens = [np.full((4, 4), v, np.int16) for v in (1, 2, 3)] + [Stop(1), DONE]
    src_port, snk_port = top.src_x, top.snk_y
    first_ready, received = [], []

    async def source(ctx):
        ctx.set(top.start, 1)
        for k, tok in enumerate(tokens):
            ctx.set(src_port.valid, 1)
            ctx.set(src_port.payload.as_value(), fmt.pack(tok))
            while True:
                _, _, ready = await ctx.tick().sample(src_port.ready)
                if k == 0 and not first_ready:
                    first_ready.append(ready)
                if ready:
                    break
            ctx.set(top.start, 0)
        ctx.set(src_port.valid, 0)

    sim = Simulator(top)
    sim.add_clock(1e-6)
    sim.add_testbench(source)
    sim.add_testbench(token_sink(snk_port, fmt, iter(lambda: False, True), received))
    sim.run_until(1e-4)
    assert first_ready == [0]  # the start cycle: queues still in reset
    assert len(received) == len(tokens)
    for got, want in zip(received, tokens, strict=True):
        assert got == want if not isinstance(want, np.ndarray) else np.array_equal(got, want)


def test_a_hidden_instance_is_found_through_a_merged_module():
    """Instance ``b`` of the module written for ``a`` (identical modules merged) is named like
    a wire of that module: Verilator's VARHIDDEN, so its node must be renamed."""
    from step_hw.elaborate import _hidden_instances

    text = """module top(clk);
  input clk;
  \\top.a  a (
    .clk(clk)
  );
  \\top.a  b (
    .clk(clk)
  );
endmodule

module \\top.a (clk);
  input clk;
  wire [3:0] b;
endmodule
"""
    assert _hidden_instances(text, "top", {"a": "node_a", "b": "node_b"}) == ["node_b"]
    assert _hidden_instances(text.replace("wire [3:0] b;", "wire c;"), "top", {"b": "b"}) == []
