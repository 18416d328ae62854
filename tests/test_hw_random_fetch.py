# amaranth: UnusedElaboratable=no
# (Blocks built only to test their constructors are never elaborated.)
"""RandomLoad and RandomStore with ``fetch`` blocks (``step_hw/memory/load.py``, ``store.py``).

Amaranth simulations of the controllers against the interpreter's tokens and memory, with the
AXI4 subordinate model and protocol checkers of ``tests/test_hw_memory.py`` under the three
traffic patterns and a slow memory; and the ``rtl`` profile's cycle counts against an Amaranth
simulation of the elaborated graph (Source -> controller -> Sink) on a memory with
cocotbext-axi ``AxiRam``'s timing.
"""

from __future__ import annotations

import numpy as np
import pytest

from step_hw.config import HwConfig
from step_hw.memory import RandomLoad, RandomStore
from step_hw.payload import TokenFormat
from step_hw.testing import PATTERNS
from step_lang import DONE, Graph, Stop, StreamType, Tile, interpret, ragged
from step_lang import ops as L
from step_lang.ops.offchip import block_tiles, tile_index
from step_lang.tokens import is_data, to_tokens
from step_lang.types import int8, int16, int32
from tests.test_hw_memory import _one_by_one, memory_with, norm, simulate, tensor_at, tiles

CFG = HwConfig()
R = ragged("R")
ADDR = 0x200

# name: (tensor shape, dtype, tile, fetch, config, addresses (nested), address stream shape)
LOAD_CASES = {
    # One row of tiles per block, tiles narrower than the tensor (a burst per tile row).
    "nr=1, rank 1 with empty vector": ((8, 16), int16, (4, 4), (1, 2), CFG, [[3, 0], [], [1, 3]], (3, R)),
    # Blocks spanning the full width: each tile is one burst.
    "full width, rank 0": ((16, 8), int16, (4, 4), (2, 2), CFG, [1, 0, 1], (3,)),
    "full width, 3-D tensor, rank 2": ((2, 8, 8), int16, (4, 4), (2, 2), CFG, [[[1], [0, 1]], [[], [0]]], (2, R, R)),
    "nr=1, narrow beats, rank 1": ((4, 8), int8, (2, 2), (1, 4), CFG, [[1, 0], [1]], (2, R)),
    "full width, one column, 32-bit bus": ((8, 4), int32, (2, 4), (2, 1), HwConfig(axi_data_width=32), [[1, 0]], (1, R)),
    "1x1 blocks": ((8, 8), int16, (4, 4), (1, 1), CFG, [[2, 3], [0]], (2, R)),
}  # fmt: skip


def build_load(name: str, seed: int = 0):
    shape, dtype, tile, fetch, cfg, addrs, addr_shape = LOAD_CASES[name]
    g = Graph("rload")
    t = g.tensor("t", shape, dtype)
    src = L.Source(g, StreamType(Tile(int32, 1, 1), addr_shape), name="a")
    node = L.RandomOffChipLoad(src.out, t, tile=tile, fetch=fetch, name="rl")
    L.Sink(node.out)
    arr = tiles(np.random.default_rng(seed), dtype, shape)
    res = interpret(g, {"t": arr}, inputs={"a": _one_by_one(addrs)})
    return node, src, res, arr, cfg


def run_load(node, src, tokens, arr, cfg, pattern, latency=3):
    dut = RandomLoad.from_node(node, cfg, addr=ADDR)
    fmt = TokenFormat.for_elem(node.tile_type, cfg)
    afmt = TokenFormat.for_elem(src.out.elem, cfg)
    run = simulate(dut, inputs={"raddr": (dut.raddr, afmt, tokens)}, outputs={"o": (dut.o, fmt)},
                   mem=memory_with({ADDR: arr}), pattern=pattern, latency=latency,
                   flags={"error": dut.error})  # fmt: skip
    return dut, run


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("name", LOAD_CASES)
def test_random_load_blocks_match_interpreter(name: str, pattern: str):
    node, src, res, arr, cfg = build_load(name)
    dut, run = run_load(node, src, res.tokens(src.out), arr, cfg, pattern)
    want = norm(res.tokens(node.out))
    assert norm(run.outputs["o"]) == want
    assert run.flags == {"error": 0}
    assert dut.fetch == node.fetch
    # Every tile of every block was read once: its bursts' ARs.
    n_tiles = sum(1 for t in want if isinstance(t, list))
    per_tile = len(dut.geometry.bursts(0))
    assert sum(1 for kind, _ in run.model.log if kind == "ar") == n_tiles * per_tile


@pytest.mark.parametrize(
    "name", ["nr=1, rank 1 with empty vector", "full width, 3-D tensor, rank 2"]
)
def test_random_load_blocks_on_a_slow_memory(name: str):
    # A memory answering 20 cycles after AR, with random pauses on every channel and stream.
    node, src, res, arr, cfg = build_load(name, seed=5)
    _, run = run_load(node, src, res.tokens(src.out), arr, cfg, "random", latency=20)
    assert norm(run.outputs["o"]) == norm(res.tokens(node.out))


def _tile(arr, tile, k):
    return arr[tile_index(arr.shape, tile, k)]


@pytest.mark.parametrize("pattern", ["always", "random"])
def test_random_load_out_of_range_block_is_zero_tiles(pattern: str):
    # The interpreter raises; the hardware answers a whole block of zero tiles and sets `error`.
    shape, tile, fetch = (8, 16), (4, 4), (1, 2)  # 4 blocks of 1x2 tiles
    g = Graph("oob")
    t = g.tensor("t", shape, int16)
    src = L.Source(g, StreamType(Tile(int32, 1, 1), (2, R)), name="a")
    node = L.RandomOffChipLoad(src.out, t, tile=tile, fetch=fetch, name="rl")
    arr = tiles(np.random.default_rng(7), int16, shape)
    addrs = [np.full((1, 1), k, np.int32) for k in (2, 4, -1, 1)]
    tokens = [addrs[0], addrs[1], Stop(1), addrs[2], addrs[3], Stop(1), DONE]
    _, run = run_load(node, src, tokens, arr, CFG, pattern)
    zero = np.zeros(tile, np.int64)
    b2 = [_tile(arr, tile, k) for k in block_tiles(shape, tile, fetch, 2)]
    b1 = [_tile(arr, tile, k) for k in block_tiles(shape, tile, fetch, 1)]
    want = [*b2, Stop(2), zero, zero, Stop(3), zero, zero, Stop(2), *b1, Stop(3), DONE]
    assert norm(run.outputs["o"]) == norm(want)
    assert run.flags == {"error": 1}
    # Only blocks 2 and 1 were read: 2 tiles each, 4 one-row bursts per tile.
    assert sum(1 for kind, _ in run.model.log if kind == "ar") == 2 * 2 * 4


# -- RandomStore -----------------------------------------------------------------------------------

STORE_CASES = {
    "nr=1, rank 1 with empty vector": ((8, 16), int16, (4, 4), (1, 2), CFG, [[3, 0], [], [1, 3]], (3, R)),
    "full width, rank 0": ((16, 8), int16, (4, 4), (2, 2), CFG, [1, 0, 1], (3,)),
    "full width, 3-D tensor, rank 2": ((2, 8, 8), int16, (4, 4), (2, 2), CFG, [[[1], [0]], [[], [1]]], (2, R, R)),
    "nr=1, narrow beats, rank 1": ((4, 8), int8, (2, 2), (1, 4), CFG, [[1, 0], [1]], (2, R)),
    "full width, one column, 32-bit bus": ((8, 4), int32, (2, 4), (2, 1), HwConfig(axi_data_width=32), [[1, 0]], (1, R)),
}  # fmt: skip


def block_stream(addr_tokens: list, blocks: list, rank: int) -> list:
    """The ``wdata`` tokens for ``addr_tokens`` (``BlockWriter``'s rule, ``rank``: waddr's), one
    ``(nr, nc)`` nested block of tiles per address, in order."""
    out, held, it = [], False, iter(blocks)
    for tok in addr_tokens:
        if isinstance(tok, Stop):
            out.append(Stop(tok.level + 2))
            held = False
            continue
        if held:
            out.append(Stop(2))
            held = False
        if tok is DONE:
            out.append(DONE)
            continue
        rows = next(it)
        for i, row in enumerate(rows):
            out += list(row)
            if i < len(rows) - 1:
                out.append(Stop(1))
        if rank == 0:
            out.append(Stop(2))
        else:
            held = True
    return out


def build_store(name: str, seed: int = 3):
    shape, dtype, tile, fetch, cfg, addrs, addr_shape = STORE_CASES[name]
    rng = np.random.default_rng(seed)
    g = Graph("rstore")
    t = g.tensor("t", shape, dtype)
    wa = L.Source(g, StreamType(Tile(int32, 1, 1), addr_shape), name="wa")
    wd = L.Source(g, StreamType(Tile(dtype, *tile), (*addr_shape, *fetch)), name="wd")
    node = L.RandomOffChipStore(wa.out, wd.out, t, fetch=fetch, name="rs")
    L.Sink(node.out)
    arr = tiles(rng, dtype, shape)
    atoks = to_tokens(_one_by_one(addrs), wa.out.rank)
    blocks = [tiles(rng, dtype, (*fetch, *tile)) for t in atoks if is_data(t)]
    # Token lists, not nested data: an empty inner address vector leaves wdata an empty
    # dimension above its innermost, which nested lists cannot write.
    dtoks = block_stream(atoks, blocks, wa.out.rank)
    res = interpret(g, {"t": arr}, inputs={"wa": atoks, "wd": dtoks})
    return node, wa, wd, res, arr, cfg


def run_store(node, wa, wd, atoks, dtoks, arr, cfg, pattern, latency=3):
    dut = RandomStore.from_node(node, cfg, addr=ADDR)
    mem = memory_with({ADDR: arr})
    afmt = TokenFormat.for_elem(wa.out.elem, cfg)
    fmt = TokenFormat.for_elem(wd.out.elem, cfg)
    run = simulate(
        dut,
        inputs={"waddr": (dut.waddr, afmt, atoks), "wdata": (dut.wdata, fmt, dtoks)},
        outputs={"ack": (dut.ack, dut.ack_format)},
        mem=mem, pattern=pattern, latency=latency, flags={"error": dut.error},
    )  # fmt: skip
    return dut, run, mem


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("name", STORE_CASES)
def test_random_store_blocks_match_interpreter(name: str, pattern: str):
    node, wa, wd, res, arr, cfg = build_store(name)
    before = bytes(memory_with({ADDR: arr}))
    dut, run, mem = run_store(
        node, wa, wd, res.tokens(wa.out), res.tokens(wd.out), arr, cfg, pattern
    )
    assert norm(run.outputs["ack"]) == norm(res.tokens(node.out))
    want = res.memory["t"]
    assert np.array_equal(tensor_at(mem, ADDR, want), want)
    end = ADDR + want.nbytes
    assert mem[:ADDR] == before[:ADDR] and mem[end:] == before[end:]
    assert run.flags == {"error": 0}
    assert dut.fetch == node.fetch
    # One ack per block, after the B response of the block's last burst (in order, one ID).
    b_cycles = [c for kind, c in run.model.log if kind == "b"]
    per_block = len(dut.geometry.bursts(0)) * node.fetch[0] * node.fetch[1]
    acks = [tr.cycle for tr in run.transfers["ack"] if (tr.payload & 3) == 0]
    assert len(b_cycles) == per_block * len(acks)
    assert all(ack > b_cycles[per_block * (i + 1) - 1] for i, ack in enumerate(acks))


def test_random_store_blocks_on_a_slow_memory():
    node, wa, wd, res, arr, cfg = build_store("full width, 3-D tensor, rank 2", seed=8)
    _, run, mem = run_store(node, wa, wd, res.tokens(wa.out), res.tokens(wd.out), arr, cfg,
                            "random", latency=20)  # fmt: skip
    assert norm(run.outputs["ack"]) == norm(res.tokens(node.out))
    assert np.array_equal(tensor_at(mem, ADDR, arr), res.memory["t"])


def _store_node(shape, tile, fetch, addr_shape, dtype=int16):
    g = Graph("s")
    t = g.tensor("t", shape, dtype)
    wa = L.Source(g, StreamType(Tile(int32, 1, 1), addr_shape), name="wa")
    wd = L.Source(g, StreamType(Tile(dtype, *tile), (*addr_shape, *fetch)), name="wd")
    return L.RandomOffChipStore(wa.out, wd.out, t, fetch=fetch, name="rs"), wa, wd


def _a(k):
    return np.full((1, 1), k, np.int32)


@pytest.mark.parametrize("pattern", ["always", "random"])
def test_random_store_out_of_range_block_is_not_written(pattern: str):
    shape, tile, fetch = (16, 8), (4, 4), (2, 2)  # 2 full-width blocks
    node, wa, wd = _store_node(shape, tile, fetch, (2, R))
    data = tiles(np.random.default_rng(4), int16, (3, 4, 4, 4))
    block = [[*d[0:2], Stop(1), *d[2:4]] for d in data]
    atoks = [_a(1), _a(5), Stop(1), _a(-1), Stop(1), DONE]
    dtoks = [*block[0], Stop(2), *block[1], Stop(3), *block[2], Stop(3), DONE]
    arr = np.zeros(shape, np.int16)
    dut, run, mem = run_store(node, wa, wd, atoks, dtoks, arr, CFG, pattern)
    assert norm(run.outputs["ack"]) == [[[1]], [[0]], "S1", [[0]], "S1", "D"]
    assert run.flags == {"error": 1}
    got = tensor_at(mem, ADDR, arr)
    want = arr.copy()
    want[8:16] = np.block([[data[0][0], data[0][1]], [data[0][2], data[0][3]]])
    assert np.array_equal(got, want)  # block 1 only; the out-of-range blocks wrote nothing
    assert sum(1 for kind, _ in run.model.log if kind == "aw") == 4 * len(dut.geometry.bursts(0))


MISALIGNED = {
    # waddr, wdata (tiles as "t"), expected acks; blocks of 1x2 tiles, waddr rank 1
    "S2 missing after a block": ([0, "S1", "D"], ["t", "t", "D"], [[[1]], "S1", "D"]),
    # The S2 inside block 0 is dropped, so block 0 takes the next tile and block 1 is cut short.
    "short block": ([0, 1, "S1", "D"], ["t", "S2", "t", "t", "S3", "D"], [[[1]], [[0]], "S1", "D"]),
    "wrong closing level": ([0, 1, "S1", "D"], ["t", "t", "S3", "t", "t", "S3", "D"], [[[1]], [[1]], "S1", "D"]),
    "extra data": ([0, "S1", "D"], ["t", "t", "S3", "t", "D"], [[[1]], "S1", "D"]),
    "block cut by done": ([0, "S1", "D"], ["t", "D"], [[[0]], "S1", "D"]),
}  # fmt: skip


@pytest.mark.parametrize("name", MISALIGNED)
def test_random_store_misaligned_streams_raise_error(name: str):
    node, wa, wd = _store_node((8, 16), (4, 4), (1, 2), (2, R))
    atoks, dtoks, want = MISALIGNED[name]
    rng = np.random.default_rng(6)

    def tok(x, tile):
        if x == "D":
            return DONE
        if isinstance(x, str) and x.startswith("S"):
            return Stop(int(x[1:]))
        return tiles(rng, int16, (4, 4)) if tile else _a(x)

    arr = np.zeros((8, 16), np.int16)
    _, run, _ = run_store(node, wa, wd, [tok(x, False) for x in atoks],
                          [tok(x, True) for x in dtoks], arr, CFG, "periodic")  # fmt: skip
    assert norm(run.outputs["ack"]) == want
    assert run.flags == {"error": 1}


# -- construction ----------------------------------------------------------------------------------

FMT = TokenFormat.for_elem(Tile(int16, 4, 4), CFG)
AFMT = TokenFormat.for_elem(Tile(int32, 1, 1), CFG)


@pytest.mark.parametrize("cls", [RandomLoad, RandomStore])
def test_blocks_that_are_not_consecutive_are_rejected(cls):
    extra = {"addr_rank": 1} if cls is RandomLoad else {}
    with pytest.raises(ValueError, match=(
        rf"^{cls.__name__} fetch block of 2x2 tiles of 4x4 is not consecutive in tensor "
        r"\[16, 16\]: it needs one row of tiles or the tensor's full width$"
    )):  # fmt: skip
        cls(
            config=CFG,
            tensor_shape=(16, 16),
            tile_format=FMT,
            addr_format=AFMT,
            fetch=(2, 2),
            **extra,
        )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"fetch": (2, 2), "addr_rank": 0, "tensor_shape": (12, 8)},
         r"^RandomLoad fetch block of 2x2 tiles of 4x4 must divide the last two dims 12x8 of the tensor$"),
        ({"fetch": (1, 2, 3), "addr_rank": 0},
         r"^RandomLoad fetch must be a pair \(rows, cols\) of tiles, not \(1, 2, 3\)$"),
        ({"fetch": (0, 1), "addr_rank": 0},
         r"^RandomLoad fetch must be a sequence of positive integers, not \(0, 1\)$"),
        ({"addr_rank": 1}, r"^RandomLoad addr_rank needs a fetch block$"),
    ],
)  # fmt: skip
def test_random_load_fetch_validation(kwargs, message):
    kwargs = {"tensor_shape": (16, 8), **kwargs}
    with pytest.raises(ValueError, match=message):
        RandomLoad(config=CFG, tile_format=FMT, addr_format=AFMT, **kwargs)


def test_from_node_rejects_non_consecutive_blocks():
    from step_lang import StepTypeError

    g = Graph("g")
    t = g.tensor("t", (16, 16), int16)
    src = L.Source(g, StreamType(Tile(int32, 1, 1), (2,)), name="a")
    node = L.RandomOffChipLoad(src.out, t, tile=(4, 4), fetch=(2, 2), name="rl")
    with pytest.raises(StepTypeError, match=r"RandomOffChipLoad 'rl'.*not consecutive"):
        RandomLoad.from_node(node, CFG)


# -- the rtl profile against the hardware ----------------------------------------------------------


def hardware_cycles(graph: Graph, tensors: dict, inputs: dict, config: HwConfig = CFG):
    """An Amaranth simulation of the elaborated graph as the co-simulation bench runs it (Sources
    offering a token every cycle from the cycle after ``start``, Sinks always ready) on a memory
    with ``MemoryModel.axi_ram()``'s timing (R 2 cycles after AR, B 2 cycles after the last W,
    no pauses): the bench's cycle count (the first cycle ``done`` is high, plus one), the Sinks'
    tokens and the memory."""
    import random

    from amaranth.hdl import Value
    from amaranth.sim import Simulator

    from step_hw.elaborate import ElaboratedGraph
    from step_hw.memory_model import MemoryModel
    from step_lang.interpret import check_inputs, source_tokens
    from tests.test_hw_memory import AxiModel

    ram = MemoryModel.axi_ram()
    assert ram.latency == ram.write_response == 2  # the AxiModel answers latency + 1 after
    top = ElaboratedGraph(graph, config)
    mem = memory_with({top.memory_map[n]["addr"]: a for n, a in tensors.items()}, 1 << 16)
    model = AxiModel(mem, config.axi_data_width // 8, "always", random.Random(0), latency=1)
    g = top.graph
    tokens = check_inputs(g, inputs)
    srcs = [(getattr(top, f"src_{n.name}"), top._formats[n.name], source_tokens(n, tokens))
            for n in g.nodes.values() if isinstance(n, L.Source)]  # fmt: skip
    sinks = {n.name: (getattr(top, f"snk_{n.name}"), top._formats[n.name])
             for n in g.nodes.values() if isinstance(n, L.Sink)}  # fmt: skip
    got: dict[str, list] = {name: [] for name in sinks}
    end = []

    async def bench(ctx):
        ctx.set(top.start, 1)
        for port, _ in sinks.values():
            ctx.set(port.ready, 1)
        at = [0] * len(srcs)
        sampled = [port.ready for port, _, _ in srcs]
        for port, _ in sinks.values():
            sampled += [port.valid, Value.cast(port.payload)]
        for cycle in range(5000):
            for k, (port, fmt, toks) in enumerate(srcs):
                ctx.set(port.valid, at[k] < len(toks))
                if at[k] < len(toks):
                    ctx.set(Value.cast(port.payload), fmt.pack(toks[at[k]]))
            *values, done = (await ctx.tick().sample(*sampled, top.done))[2:]
            ctx.set(top.start, 0)
            for k in range(len(srcs)):
                at[k] += bool(values[k])
            for i, (name, (_, fmt)) in enumerate(sinks.items()):
                valid, payload = values[len(srcs) + 2 * i : len(srcs) + 2 * i + 2]
                if valid:
                    got[name].append(fmt.unpack(payload))
            if done:
                end.append(cycle + 1)
                return

    sim = Simulator(top)
    sim.add_clock(1e-6)
    for port in top.axi_managers:
        axi = getattr(top, port)
        sim.add_testbench(model.reader(axi) if axi.signature.read else model.writer(axi))
    sim.add_testbench(bench)
    sim.run_until(6e-3)
    assert end, "the graph did not finish"
    return end[0], got, mem, top.memory_map


def profile_cycles(graph: Graph, tensors: dict, inputs: dict, config: HwConfig = CFG) -> int:
    from sim import simulate as sim_simulate
    from sim.profiles import RtlProfile

    mem = {name: a.copy() for name, a in tensors.items()}
    return sim_simulate(graph, mem, inputs=inputs, profile=RtlProfile(config)).cycles


def load_graph(shape, dtype, tile, fetch, addrs, addr_shape, seed=0):
    g = Graph("rload")
    t = g.tensor("t", shape, dtype)
    src = L.Source(g, StreamType(Tile(int32, 1, 1), addr_shape), name="a")
    node = L.RandomOffChipLoad(src.out, t, tile=tile, fetch=fetch, name="rl")
    L.Sink(node.out, name="sink")
    arr = tiles(np.random.default_rng(seed), dtype, shape)
    return g, {"t": arr}, {"a": _one_by_one(addrs)}, node


def test_harness_agrees_with_the_measured_linear_load():
    # tests/test_sim_rtl_profile.py::test_load_one_burst: 18 cycles, measured on Verilator.
    g = Graph("load")
    x = g.tensor("x", (4, 4), "int16")
    L.Sink(L.LinearOffChipLoad(x, tile=(4, 4), name="load").out, name="sink")
    cycles, *_ = hardware_cycles(g, {"x": np.arange(16, dtype=np.int16).reshape(4, 4)}, {})
    assert cycles == 18


def store_graph(shape, dtype, tile, fetch, addrs, addr_shape, seed=1):
    rng = np.random.default_rng(seed)
    g = Graph("rstore")
    t = g.tensor("t", shape, dtype)
    wa = L.Source(g, StreamType(Tile(int32, 1, 1), addr_shape), name="wa")
    wd = L.Source(g, StreamType(Tile(dtype, *tile), (*addr_shape, *fetch)), name="wd")
    node = L.RandomOffChipStore(wa.out, wd.out, t, fetch=fetch, name="rs")
    L.Sink(node.out, name="sink")
    arr = tiles(rng, dtype, shape)
    atoks = to_tokens(_one_by_one(addrs), wa.out.rank)
    blocks = [tiles(rng, dtype, (*fetch, *tile)) for x in atoks if is_data(x)]
    return g, {"t": arr}, {"wa": atoks, "wd": block_stream(atoks, blocks, wa.out.rank)}, node


O4 = HwConfig(max_outstanding=4)
# name: (tensor shape, dtype, tile, fetch, addresses, address stream shape, config)
PROFILE_CASES = {
    "nr=1, rank 1 with empty vector": ((8, 16), int16, (4, 4), (1, 2), [[3, 0], [], [1, 3]], (3, R), CFG),
    "full width, rank 0": ((16, 8), int16, (4, 4), (2, 2), [1, 0, 1], (3,), CFG),
    "full-width tiles, rank 0": ((16, 4), int16, (4, 4), (2, 1), [1, 0, 1], (3,), CFG),
    "3-D tensor, rank 2": ((2, 8, 8), int16, (4, 4), (2, 2), [[[1], [0]], [[], [1]]], (2, R, R), CFG),
    "narrow beats": ((4, 8), int8, (2, 2), (1, 4), [[1, 0], [1]], (2, R), CFG),
    "1x1 blocks, more addresses than the queue holds": ((16, 4), int16, (4, 4), (1, 1), [[2, 3, 1, 0, 2, 3, 1, 0]], (1, R), CFG),
    "four bursts in flight": ((8, 16), int16, (4, 4), (1, 2), [[3, 0], [1, 2]], (2, R), O4),
}  # fmt: skip
# The bench's cycle counts of the Amaranth simulation (and the rtl profile's): load, store.
PROFILE_CYCLES = {
    "nr=1, rank 1 with empty vector": (63, 94),
    "full width, rank 0": (87, 133),
    "full-width tiles, rank 0": (40, 40),
    "3-D tensor, rank 2": (87, 134),
    "narrow beats": (51, 74),
    "1x1 blocks, more addresses than the queue holds": (48, 49),
    "four bursts in flight": (48, 56),
}


@pytest.mark.parametrize("name", PROFILE_CASES)
def test_rtl_profile_times_block_loads_as_the_hardware(name: str):
    shape, dtype, tile, fetch, addrs, addr_shape, cfg = PROFILE_CASES[name]
    g, tensors, inputs, node = load_graph(shape, dtype, tile, fetch, addrs, addr_shape)
    cycles, got, _, _ = hardware_cycles(g, tensors, inputs, cfg)
    res = interpret(g, tensors, inputs=inputs)
    assert norm(got["sink"]) == norm(res.tokens(node.out))
    assert (cycles, profile_cycles(g, tensors, inputs, cfg)) == (PROFILE_CYCLES[name][0],) * 2


@pytest.mark.parametrize("name", PROFILE_CASES)
def test_rtl_profile_times_block_stores_as_the_hardware(name: str):
    shape, dtype, tile, fetch, addrs, addr_shape, cfg = PROFILE_CASES[name]
    g, tensors, inputs, node = store_graph(shape, dtype, tile, fetch, addrs, addr_shape)
    cycles, got, mem, memory_map = hardware_cycles(g, tensors, inputs, cfg)
    res = interpret(g, {n: a.copy() for n, a in tensors.items()}, inputs=inputs)
    assert norm(got["sink"]) == norm(res.tokens(node.out))
    assert np.array_equal(tensor_at(mem, memory_map["t"]["addr"], tensors["t"]), res.memory["t"])
    assert (cycles, profile_cycles(g, tensors, inputs, cfg)) == (PROFILE_CYCLES[name][1],) * 2


def test_rtl_profile_runs_block_loads_on_a_shared_port():
    # Two block loads behind one arbiter (HwConfig(axi_ports=1)): the port model reads every
    # block's tiles (not compared with the hardware: the test memory does not echo AXI IDs).
    from sim import simulate as sim_simulate
    from sim.profiles import RtlProfile

    cfg = HwConfig(axi_ports=1)
    g = Graph("two")
    t, u = g.tensor("t", (8, 16), int16), g.tensor("u", (16, 8), int16)
    a = L.Source(g, StreamType(Tile(int32, 1, 1), (2, R)), name="a")
    b = L.Source(g, StreamType(Tile(int32, 1, 1), (3,)), name="b")
    l1 = L.RandomOffChipLoad(a.out, t, tile=(4, 4), fetch=(1, 2), name="l1")
    l2 = L.RandomOffChipLoad(b.out, u, tile=(4, 4), fetch=(2, 2), name="l2")
    L.Sink(l1.out, name="s1")
    L.Sink(l2.out, name="s2")
    rng = np.random.default_rng(0)
    mem = {"t": tiles(rng, int16, (8, 16)), "u": tiles(rng, int16, (16, 8))}
    inputs = {"a": _one_by_one([[3, 0], [1, 2]]), "b": _one_by_one([1, 0, 1])}
    res = interpret(g, {k: v.copy() for k, v in mem.items()}, inputs=inputs)
    shared = sim_simulate(g, mem, inputs=inputs, profile=RtlProfile(cfg))
    alone = sim_simulate(g, mem, inputs=inputs, profile=RtlProfile())
    assert shared.offchip_read_bytes == (4 * 2 + 3 * 4) * 32
    assert shared.queue_curves["l1.out"].n == len(res.tokens(l1.out))
    assert shared.queue_curves["l2.out"].n == len(res.tokens(l2.out))
    assert (alone.cycles, shared.cycles) == (87, 104)  # one port: the loads take turns


# A RandomStore without fetch blocks, its acks to a Sink: (addresses, address stream shape) and
# the bench's cycles, on the Amaranth simulation and in the rtl profile. The acks, the address
# stream's stops and its done leave in order, one per cycle, so done follows the last ack by one
# cycle per stop between them (the profile used to send it one cycle after the last B).
PLAIN_STORE_CASES = {
    "rank 1": ([2, 0, 1], (3,), 27),
    "ragged, a stop after the last tile": ([[1, 3], [0]], (2, R), 28),
    "one tile": ([3], (1,), 19),
    "one row of four": ([[2, 0, 1, 3]], (1, R), 32),
}


@pytest.mark.parametrize("name", PLAIN_STORE_CASES)
def test_rtl_profile_times_plain_random_store_done_as_the_hardware(name: str):
    addrs, addr_shape, want = PLAIN_STORE_CASES[name]
    g = Graph("rs_plain")
    t = g.tensor("t", (16, 4), int16)
    wa = L.Source(g, StreamType(Tile(int32, 1, 1), addr_shape), name="wa")
    wd = L.Source(g, StreamType(Tile(int16, 4, 4), addr_shape), name="wd")
    L.Sink(L.RandomOffChipStore(wa.out, wd.out, t, name="rs").out, name="sink")

    def tiles_like(a):
        return [tiles_like(b) for b in a] if isinstance(a, list) else np.full((4, 4), 7, np.int16)

    inputs = {"wa": _one_by_one(addrs), "wd": tiles_like(addrs)}
    tensors = {"t": np.zeros((16, 4), np.int16)}
    cycles, _, mem, memory_map = hardware_cycles(g, tensors, inputs)
    res = interpret(g, {"t": tensors["t"].copy()}, inputs=inputs)
    assert np.array_equal(tensor_at(mem, memory_map["t"]["addr"], tensors["t"]), res.memory["t"])
    assert (cycles, profile_cycles(g, tensors, inputs)) == (want, want)
