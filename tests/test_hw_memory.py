# amaranth: UnusedElaboratable=no
# (Blocks built only to test their constructors or ports are never elaborated.)
"""Amaranth-simulator tests of `step_hw.memory`: Bufferize/Streamify and the AXI4 controllers.

Every block is compared with the interpreter (`step_lang.interpret`) on a case table and on
Hypothesis-generated streams, under the three traffic patterns of `step_hw.testing`, with protocol
checkers on every stream and on the manager side of every AXI channel. The AXI4 subordinate is a
small Python model (below) with random ready/valid pauses and response latency.
"""

from __future__ import annotations

import random
import zlib
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import Out
from amaranth.sim import Simulator
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from step_hw.config import HwConfig
from step_hw.memory import (
    AXI4Signature,
    Bufferize,
    BurstGenerator,
    LinearLoad,
    LinearStore,
    RandomLoad,
    RandomStore,
    Streamify,
    TileGeometry,
    axi_ports,
)
from step_hw.payload import TokenFormat
from step_hw.testing import (
    PATTERNS,
    Transfer,
    pauses,
    run_block,
    stream_checker,
    stream_source,
    token_sink,
)
from step_lang import (
    DONE,
    Graph,
    Selector,
    StepTypeError,
    Stop,
    StreamType,
    Tile,
    interpret,
    ragged,
    regular,
)
from step_lang import ops as L
from step_lang.tokens import is_data
from step_lang.types import float32, int8, int16, int32

CFG = HwConfig()


def norm(tokens: list) -> list:
    """Tokens in a comparable form: stops and done as strings, data as nested lists."""
    out = []
    for t in tokens:
        if isinstance(t, Stop) or t is DONE:
            out.append(repr(t))
        else:
            out.append(np.asarray(t).astype(np.int64).tolist())
    return out


def tiles(rng: np.random.Generator, dtype, shape=(4, 4)) -> np.ndarray:
    info = np.iinfo(dtype.numpy)
    return rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype.numpy)


# -- the AXI4 subordinate model -------------------------------------------------------------------


@dataclass
class _Burst:
    addr: int
    beats: int
    size: int
    due: int
    done: int = 0


@dataclass
class AxiModel:
    """An AXI4 memory: accepts bursts with random pauses, answers after ``latency`` cycles.

    Checks the manager's bursts (INCR, aligned, within the bus, no 4 KiB crossing, correct
    ``wlast``/``wstrb``) and logs AR/AW handshakes and burst completions by cycle.
    """

    mem: bytearray
    bus_bytes: int
    pattern: str
    rng: random.Random
    latency: int = 3
    log: list[tuple[str, int]] = field(default_factory=list)

    def _pause(self):
        return pauses(self.pattern, rng=random.Random(self.rng.getrandbits(32)))

    def _check_burst(self, addr: int, length: int, size: int, burst: int) -> _Burst:
        nbytes = 1 << size
        assert burst == 1, f"burst type {burst}, expected INCR"
        assert nbytes <= self.bus_bytes, f"size {nbytes} bytes exceeds the bus"
        assert addr % nbytes == 0, f"unaligned burst at {addr:#x} of {nbytes}-byte beats"
        beats = length + 1
        assert addr // 4096 == (addr + beats * nbytes - 1) // 4096, (
            f"burst {addr:#x}+{beats}x{nbytes} crosses a 4 KiB boundary"
        )
        return _Burst(addr, beats, nbytes, 0)

    def reader(self, axi):
        async def bench(ctx) -> None:
            ar_pause, r_pause = self._pause(), self._pause()
            pending: deque[_Burst] = deque()
            offering = False
            cycle = 0
            while True:
                ctx.set(axi.arready, not next(ar_pause))
                if not offering and pending and pending[0].due <= cycle and not next(r_pause):
                    b = pending[0]
                    a = b.addr + b.done * b.size
                    word = a - a % self.bus_bytes
                    ctx.set(
                        axi.rdata, int.from_bytes(self.mem[word : word + self.bus_bytes], "little")
                    )
                    ctx.set(axi.rlast, b.done == b.beats - 1)
                    ctx.set(axi.rresp, 0)
                    ctx.set(axi.rvalid, 1)
                    offering = True
                elif not offering:
                    ctx.set(axi.rvalid, 0)
                _, _, arvalid, arready, addr, length, size, burst, rready = await ctx.tick().sample(
                    axi.arvalid,
                    axi.arready,
                    axi.araddr,
                    axi.arlen,
                    axi.arsize,
                    axi.arburst,
                    axi.rready,
                )
                if arvalid and arready:
                    b = self._check_burst(addr, length, size, burst)
                    b.due = cycle + 1 + self.latency
                    pending.append(b)
                    self.log.append(("ar", cycle))
                if offering and rready:
                    offering = False
                    b = pending[0]
                    b.done += 1
                    if b.done == b.beats:
                        pending.popleft()
                        self.log.append(("r", cycle))
                cycle += 1

        return bench

    def writer(self, axi):
        async def bench(ctx) -> None:
            aw_pause, w_pause, b_pause = self._pause(), self._pause(), self._pause()
            bursts: deque[_Burst] = deque()  # addresses whose data is still arriving
            responses: deque[int] = deque()  # due cycles of B responses
            offering = False
            cycle = 0
            while True:
                ctx.set(axi.awready, not next(aw_pause))
                ctx.set(axi.wready, bool(bursts) and not next(w_pause))
                if not offering and responses and responses[0] <= cycle and not next(b_pause):
                    ctx.set(axi.bvalid, 1)
                    ctx.set(axi.bresp, 0)
                    offering = True
                elif not offering:
                    ctx.set(axi.bvalid, 0)
                sampled = await ctx.tick().sample(
                    axi.awvalid, axi.awready, axi.awaddr, axi.awlen, axi.awsize, axi.awburst,
                    axi.wvalid, axi.wready, axi.wdata, axi.wstrb, axi.wlast, axi.bready,
                )  # fmt: skip
                awvalid, awready, addr, length, size, burst = sampled[2:8]
                wvalid, wready, wdata, wstrb, wlast, bready = sampled[8:]
                if wvalid and wready:
                    b = bursts[0]
                    a = b.addr + b.done * b.size
                    lanes = range(a % self.bus_bytes, a % self.bus_bytes + b.size)
                    want = sum(1 << i for i in lanes)
                    assert wstrb == want, (
                        f"wstrb {wstrb:#x} for a beat at {a:#x}, expected {want:#x}"
                    )
                    raw = wdata.to_bytes(self.bus_bytes, "little")
                    word = a - a % self.bus_bytes
                    for i in lanes:
                        self.mem[word + i] = raw[i]
                    b.done += 1
                    assert wlast == (b.done == b.beats), f"wlast {wlast} on beat {b.done}/{b.beats}"
                    if b.done == b.beats:
                        bursts.popleft()
                        responses.append(cycle + 1 + self.latency)
                if awvalid and awready:
                    bursts.append(self._check_burst(addr, length, size, burst))
                    self.log.append(("aw", cycle))
                if offering and bready:
                    offering = False
                    responses.popleft()
                    self.log.append(("b", cycle))
                cycle += 1

        return bench

    def in_flight(self, start: str, end: str) -> int:
        """The most bursts seen between their address handshake and their completion."""
        most = now = 0
        for kind, _ in sorted(self.log, key=lambda e: (e[1], e[0] != end)):
            now += 1 if kind == start else -1 if kind == end else 0
            most = max(most, now)
        return most


def channel_checker(name: str, valid, ready, payload: list):
    """The manager side of an AXI channel: once valid, valid and payload hold until the handshake."""

    async def process(ctx) -> None:
        stalled = None
        cycle = 0
        async for sampled in ctx.tick().sample(valid, ready, *payload):
            v, r, *p = sampled[2:]
            if stalled is not None:
                assert v, f"{name}valid dropped in cycle {cycle} before the handshake"
                assert tuple(p) == stalled, (
                    f"{name} payload changed in cycle {cycle} before the handshake"
                )
            stalled = tuple(p) if v and not r else None
            cycle += 1

    return process


@dataclass
class AxiRun:
    outputs: dict[str, list]
    transfers: dict[str, list[Transfer]]
    cycles: int
    model: AxiModel
    flags: dict[str, int]


def simulate(
    dut: Any,
    *,
    inputs: dict[str, tuple[Any, TokenFormat, list]],
    outputs: dict[str, tuple[Any, TokenFormat]],
    mem: bytearray,
    pattern: str,
    seed: int = 0,
    latency: int = 3,
    until: Any = None,
    flags: dict[str, Any] | None = None,
    max_cycles: int = 5000,
) -> AxiRun:
    """Run an AXI block with stream sources/sinks and the AXI model; stop when every sink has its
    done token (and ``until``, a signal, is high). ``flags`` (name to signal) are sampled every
    cycle; their last values are returned."""
    rng = random.Random(seed)
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    transfers: dict[str, list[Transfer]] = {}
    for name, (port, fmt, tokens) in inputs.items():
        pause = pauses(pattern, rng=random.Random(rng.getrandbits(32)))
        sim.add_testbench(stream_source(port, [fmt.pack(t) for t in tokens], pause))
        transfers[name] = []
        sim.add_process(stream_checker(port, transfers[name]))
    received: dict[str, list] = {}
    for name, (port, fmt) in outputs.items():
        received[name] = []
        pause = pauses(pattern, rng=random.Random(rng.getrandbits(32)))
        sim.add_testbench(token_sink(port, fmt, pause, received[name]))
        transfers[name] = []
        sim.add_process(stream_checker(port, transfers[name]))
    model = AxiModel(mem, dut.axi.signature.data_width // 8, pattern, rng, latency)
    axi = dut.axi
    if axi.signature.read:
        sim.add_testbench(model.reader(axi))
        sim.add_process(
            channel_checker("ar", axi.arvalid, axi.arready, [axi.araddr, axi.arlen, axi.arsize])
        )
    if axi.signature.write:
        sim.add_testbench(model.writer(axi))
        sim.add_process(
            channel_checker("aw", axi.awvalid, axi.awready, [axi.awaddr, axi.awlen, axi.awsize])
        )
        sim.add_process(
            channel_checker("w", axi.wvalid, axi.wready, [axi.wdata, axi.wstrb, axi.wlast])
        )
    state = {"cycles": 0, "until": until is None}
    flags = dict(flags or {})
    if until is not None:
        flags["__until"] = until
    seen = dict.fromkeys(flags, 0)

    async def clock(ctx) -> None:
        async for sampled in ctx.tick().sample(*flags.values()):
            state["cycles"] += 1
            seen.update(zip(flags, sampled[2:], strict=True))
            if seen.get("__until"):
                state["until"] = True

    sim.add_process(clock)
    while not (state["until"] and all(r and r[-1] is DONE for r in received.values())):
        assert state["cycles"] <= max_cycles, (
            f"not finished after {max_cycles} cycles: {[len(r) for r in received.values()]} tokens"
        )
        sim.advance()
    seen.pop("__until", None)
    return AxiRun(received, transfers, state["cycles"], model, seen)


def memory_with(arrays: dict[int, np.ndarray], size: int = 1 << 14) -> bytearray:
    mem = bytearray(random.Random(1).randbytes(size))  # garbage around the tensors
    for addr, arr in arrays.items():
        raw = np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<")).tobytes()
        mem[addr : addr + len(raw)] = raw
    return mem


def tensor_at(mem: bytearray, addr: int, like: np.ndarray) -> np.ndarray:
    dt = like.dtype.newbyteorder("<")
    return np.frombuffer(bytes(mem[addr : addr + like.nbytes]), dtype=dt).reshape(like.shape)


# -- LinearLoad -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoadCase:
    shape: tuple[int, ...]
    dtype: Any
    tile: tuple[int, int]
    out_shape: tuple[int, ...] | None = None
    stride: tuple[int, ...] | None = None
    base: int = 0
    addr: int = 0x100
    ref: list | None = None  # nested reference data (contents ignored)
    ref_shape: tuple | None = None
    config: HwConfig = CFG
    max_outstanding: int | None = None


R = ragged("R")
LOAD_CASES = {
    # Tiles narrower than the tensor: one 8-byte burst per tile row.
    "whole tensor": LoadCase((8, 16), int16, (4, 4)),
    # docs/semantics.md: t0..t3, stride (0,0,1), out_shape (3,1,4).
    "stride 0 re-reads": LoadCase((8, 8), int16, (4, 4), (3, 1, 4), (0, 0, 1)),
    # Full-width tiles are contiguous: one 4-beat burst per tile.
    "full-width tiles": LoadCase((16, 4), int16, (4, 4), (2, 2), (1, 2), base=0),
    # 2-byte tile rows on a 64-bit bus: narrow beats on moving lanes.
    "narrow beats": LoadCase((4, 8), int8, (2, 2), (2, 3), (4, 1), base=1, addr=0x102),
    # Tile 0 spans 0xFF0..0x100F: the burst is split at the 4 KiB boundary.
    "crosses 4 KiB": LoadCase((16, 4), int16, (4, 4), addr=0xFF0),
    "3-D tensor": LoadCase((2, 8, 8), int16, (4, 4)),
    "128-bit bus, int32": LoadCase((8, 8), int32, (4, 4), config=HwConfig(axi_data_width=128)),
    "one burst in flight": LoadCase((8, 16), int16, (4, 4), max_outstanding=1),
    # With a reference: one walk per element, the walk's S1 merged with the reference's stops.
    "reference rank 1": LoadCase((8, 8), int16, (4, 4), (2,), (2,), base=1, ref=[[0, 0, 0], [0]], ref_shape=(2, R)),
    "reference rank 0": LoadCase((8, 8), int16, (4, 4), (2, 2), (0, 1), ref=[0, 0, 0], ref_shape=(3,)),
    "reference, empty vector": LoadCase((8, 8), int16, (4, 4), (1, 3), (1, 1), ref=[[], [0, 0]], ref_shape=(2, R)),
    "reference rank 2": LoadCase((8, 8), int16, (4, 4), (4,), (1,), ref=[[[0], [0, 0]], [[0]]], ref_shape=(2, R, R)),
}  # fmt: skip


def build_load(case: LoadCase, seed: int = 0):
    """The graph, its interpreter result, and the controller built from the node."""
    rng = np.random.default_rng(seed)
    g = Graph("load")
    t = g.tensor("t", case.shape, case.dtype)
    inputs = {}
    src = None
    if case.ref is not None:
        src = L.Source(g, StreamType(Tile(int32, 1, 1), case.ref_shape), name="r")
        inputs["r"] = _one_by_one(case.ref)
    node = L.LinearOffChipLoad(
        t, tile=case.tile, out_shape=case.out_shape, stride=case.stride, base=case.base,
        ref=src.out if src is not None else None, name="ld",
    )  # fmt: skip
    L.Sink(node.out)
    arr = tiles(rng, case.dtype, case.shape)
    res = interpret(g, {"t": arr}, inputs=inputs)
    dut = LinearLoad.from_node(
        node, case.config, addr=case.addr, max_outstanding=case.max_outstanding
    )
    return node, src, res, arr, dut


def _one_by_one(nested):
    """Nested lists of ints -> the same nesting of [1,1] int32 tiles."""
    if isinstance(nested, list):
        return [_one_by_one(x) for x in nested]
    return np.full((1, 1), nested, dtype=np.int32)


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("name", LOAD_CASES)
def test_linear_load_matches_interpreter(name: str, pattern: str):
    case = LOAD_CASES[name]
    node, src, res, arr, dut = build_load(case)
    fmt = TokenFormat.for_elem(node.tile_type, case.config)
    inputs = {}
    if src is not None:
        ref_fmt = TokenFormat.for_elem(src.out.elem, case.config)
        inputs["ref"] = (dut.ref, ref_fmt, res.tokens(src.out))
    run = simulate(dut, inputs=inputs, outputs={"o": (dut.o, fmt)},
                   mem=memory_with({case.addr: arr}), pattern=pattern, seed=zlib.crc32(name.encode()))  # fmt: skip
    assert norm(run.outputs["o"]) == norm(res.tokens(node.out))
    geo = dut.geometry
    tiles_read = sum(1 for t in res.tokens(node.out) if is_data(t))
    assert sum(1 for kind, _ in run.model.log if kind == "ar") == tiles_read * len(
        geo.bursts(0)
    ) or (name == "crosses 4 KiB")
    assert run.model.in_flight("ar", "r") <= dut.max_outstanding


@pytest.mark.parametrize("outstanding", [1, 2, 4, 8])
def test_linear_load_bursts_in_flight_and_throughput(outstanding: int):
    """Measured. A 4x4 int16 tile of a wider tensor is 4 one-beat bursts. The memory model answers
    an AR accepted in cycle c in cycle c + 4, and the controller reuses a burst's slot the cycle
    after its last beat: N bursts in flight move min(1, N/5) beats per cycle, so 8 reach the bus
    limit of one tile per 4 cycles."""
    case = LoadCase(
        (8, 16), int16, (4, 4), out_shape=(8,), stride=(1,), max_outstanding=outstanding
    )
    node, _, res, arr, dut = build_load(case)
    fmt = TokenFormat.for_elem(node.tile_type, CFG)
    run = simulate(dut, inputs={}, outputs={"o": (dut.o, fmt)}, mem=memory_with({case.addr: arr}),
                   pattern="always", latency=3)  # fmt: skip
    assert norm(run.outputs["o"]) == norm(res.tokens(node.out))
    cycles = [t.cycle for t in run.transfers["o"]][:8]  # the 8 tiles
    per_tile = (cycles[-1] - cycles[0]) / 7
    assert per_tile == 4 * max(1, 5 / outstanding)
    # Counted as the controller does: a burst stops being in flight the cycle after its last beat.
    assert run.model.in_flight("ar", "r") == min(outstanding, 4)
    # Latency: the first AR leaves in cycle 4, the memory answers 4 cycles later, the tile's four
    # beats arrive one per cycle (8..11) and it leaves 2 cycles after its last beat.
    if outstanding >= 4:
        assert cycles[0] == 13


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (dict(config="cfg"), TypeError, r"^LinearLoad config must be a HwConfig, not 'cfg'$"),
        (dict(tile_format=3), TypeError, r"^LinearLoad tile_format must be a TokenFormat, not 3$"),
        (dict(tile_format=TokenFormat.for_elem(Selector(3), CFG)), ValueError,
         r"^LinearLoad tile_format must be a tile format, not a selector format$"),
        (dict(tile_format=TokenFormat("tile", 1, 1, elem_bits=1)), ValueError,
         r"^LinearLoad tile_format elements must be 8, 16 or 32 bits wide to have a byte layout in memory, not 1$"),
        (dict(tensor_shape=(8,)), ValueError,
         r"^LinearLoad tensor shape must be at least two positive integers, not \(8,\)$"),
        (dict(tensor_shape=(8, 6)), ValueError,
         r"^LinearLoad tile 4x4 must divide the last two dims 8x6 of the tensor$"),
        (dict(addr=3), ValueError,
         r"^LinearLoad tensor address must be a non-negative multiple of the element size \(2 bytes\), not 3$"),
        (dict(addr=2**32 - 64), ValueError,
         r"^LinearLoad tensor of 128 bytes at address 0xffffffc0 does not fit the 32-bit AXI address space$"),
        (dict(out_shape=(2, 0)), ValueError,
         r"^LinearLoad out_shape must be a sequence of positive integers, not \(2, 0\)$"),
        (dict(out_shape=(2, 2), stride=(1,)), ValueError,
         r"^LinearLoad stride \[1\] must have as many entries as out_shape \[2, 2\]$"),
        (dict(out_shape=(2,), stride=(-1,)), ValueError,
         r"^LinearLoad stride must be a sequence of non-negative integers, not \(-1,\)$"),
        (dict(out_shape=(3,), stride=(1,), base=2), ValueError,
         r"^LinearLoad read reaches tile #4 but the tensor has 4 tiles$"),
        (dict(base=-1), ValueError, r"^LinearLoad base must be a non-negative integer, not -1$"),
        (dict(ref_rank=1), ValueError, r"^LinearLoad ref_rank needs a ref_format$"),
        (dict(ref_format=TokenFormat.for_elem(Tile(int32, 1, 1), CFG), ref_rank=6), ValueError,
         r"^LinearLoad output has rank 8, whose stop tokens do not fit 3 level bits$"),
        (dict(max_outstanding=0), ValueError,
         r"^LinearLoad max_outstanding must be a positive integer, not 0$"),
        (dict(max_outstanding=300), ValueError, r"^LinearLoad max_outstanding must be at most 256, not 300$"),
    ],
)  # fmt: skip
def test_linear_load_validation(kwargs, error, message):
    params = dict(
        config=CFG, tensor_shape=(8, 8), tile_format=TokenFormat.for_elem(Tile(int16, 4, 4), CFG)
    )
    params.update(kwargs)
    with pytest.raises(error, match=message):
        LinearLoad(**params)


def test_keyword_only():
    with pytest.raises(TypeError, match=r"takes 1 positional argument but 2 were given$"):
        LinearLoad(CFG)  # type: ignore[misc]


def test_from_node_rejects_what_hardware_lacks():
    g = Graph()
    t = g.tensor("f", (8, 8), float32)
    node = L.LinearOffChipLoad(t, tile=(4, 4), name="ldf")
    L.Sink(node.out)
    with pytest.raises(
        StepTypeError,
        match=r"^LinearOffChipLoad 'ldf', port 'out': dtype float32 is not supported by the hardware \(int16/int32\)$",
    ):
        LinearLoad.from_node(node, CFG)
    t2 = g.tensor("b", (16, 16), int16)
    big = L.LinearOffChipLoad(t2, tile=(8, 8), name="ldb")
    L.Sink(big.out)
    with pytest.raises(
        StepTypeError,
        match=r"^LinearOffChipLoad 'ldb', port 'out': tile Tile<int16, 8x8> does not fit",
    ):
        LinearLoad.from_node(big, CFG)
    narrow = L.LinearOffChipLoad(t2, tile=(4, 4), elem_bytes=1, name="ldn")
    L.Sink(narrow.out)
    with pytest.raises(
        StepTypeError,
        match=r"^LinearOffChipLoad 'ldn': elem_bytes=1 models a 1-byte memory type, but the hardware moves the tensor's int16 elements$",
    ):
        LinearLoad.from_node(narrow, CFG)
    with pytest.raises(
        StepTypeError, match=r"^expected a LinearOffChipLoad node, not Sink 'sink0'$"
    ):
        LinearLoad.from_node(g.nodes["sink0"], CFG)
    with pytest.raises(
        StepTypeError,
        match=r"^LinearOffChipLoad 'ldc': LinearLoad tensor address must be a non-negative multiple of the element size \(2 bytes\), not 1$",
    ):
        LinearLoad.from_node(L.LinearOffChipLoad(t2, tile=(4, 4), name="ldc"), CFG, addr=1)


def test_ports_for_an_elaborator():
    case = LOAD_CASES["reference rank 1"]
    _, _, _, _, dut = build_load(case)
    assert dut.in_ports == [dut.ref] and dut.out_ports == [dut.o]
    assert dut.axi.signature == AXI4Signature(addr_width=32, data_width=64, id_width=4, write=False)
    names = set(axi_ports(dut))
    assert {
        "m_axi_arvalid",
        "m_axi_araddr",
        "m_axi_rdata",
        "m_axi_rready",
        "o__payload",
        "ref__valid",
    } <= names
    assert not any(n.startswith("m_axi_aw") for n in names)


# -- RandomLoad ------------------------------------------------------------------------------------

RANDOM_CASES = {
    # name: (tensor shape, dtype, tile, config, addresses as nested lists, address stream shape)
    "rank 1 with empty vector": ((8, 16), int16, (4, 4), CFG, [[5, 2, 2], [], [7, 0]], (3, R)),
    "narrow beats": ((4, 8), int8, (2, 2), CFG, [[3, 7, 1, 0, 6]], (1, R)),
    "full-width tiles, rank 0": ((16, 4), int16, (4, 4), CFG, [3, 0, 1, 3], (4,)),
    "3-D tensor, rank 2": ((2, 4, 8), int32, (2, 4), HwConfig(axi_data_width=32), [[[7, 6], [0]], [[3]]], (2, R, R)),
}  # fmt: skip


def build_random_load(name: str, seed: int = 0):
    shape, dtype, tile, cfg, addrs, addr_shape = RANDOM_CASES[name]
    g = Graph("rload")
    t = g.tensor("t", shape, dtype)
    src = L.Source(g, StreamType(Tile(int32, 1, 1), addr_shape), name="a")
    node = L.RandomOffChipLoad(src.out, t, tile=tile, name="rl")
    L.Sink(node.out)
    arr = tiles(np.random.default_rng(seed), dtype, shape)
    res = interpret(g, {"t": arr}, inputs={"a": _one_by_one(addrs)})
    return node, src, res, arr, cfg


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("name", RANDOM_CASES)
def test_random_load_matches_interpreter(name: str, pattern: str):
    node, src, res, arr, cfg = build_random_load(name)
    dut = RandomLoad.from_node(node, cfg, addr=0x200)
    fmt = TokenFormat.for_elem(node.tile_type, cfg)
    afmt = TokenFormat.for_elem(src.out.elem, cfg)
    run = simulate(dut, inputs={"raddr": (dut.raddr, afmt, res.tokens(src.out))},
                   outputs={"o": (dut.o, fmt)}, mem=memory_with({0x200: arr}), pattern=pattern)  # fmt: skip
    assert norm(run.outputs["o"]) == norm(res.tokens(node.out))
    assert dut.in_ports == [dut.raddr] and dut.out_ports == [dut.o]


def test_random_load_out_of_range_reads_nothing():
    # The interpreter raises; the hardware answers with a zero tile and raises `error`.
    cfg = CFG
    fmt = TokenFormat.for_elem(Tile(int16, 4, 4), cfg)
    afmt = TokenFormat.for_elem(Tile(int32, 1, 1), cfg)
    dut = RandomLoad(config=cfg, tensor_shape=(8, 8), tile_format=fmt, addr_format=afmt)
    arr = tiles(np.random.default_rng(0), int16, (8, 8))
    addrs = [np.full((1, 1), k, np.int32) for k in (1, 4, -1, 3)]
    run = simulate(dut, inputs={"raddr": (dut.raddr, afmt, [*addrs, Stop(1), DONE])},
                   outputs={"o": (dut.o, fmt)}, mem=memory_with({0: arr}), pattern="random",
                   flags={"error": dut.error})  # fmt: skip
    zero = np.zeros((4, 4), np.int64)
    want = [arr[0:4, 4:8], zero, zero, arr[4:8, 4:8], Stop(1), DONE]
    assert norm(run.outputs["o"]) == norm(want)
    assert sum(1 for kind, _ in run.model.log if kind == "ar") == 2 * 4
    assert run.flags == {"error": 1}


# -- LinearStore and RandomStore -------------------------------------------------------------------

STORE_CASES = {
    # name: (tensor shape, dtype, tile, config, stream shape of the tiles, address)
    "rank 2 stream": ((8, 16), int16, (4, 4), CFG, (2, 2, 2), 0x300),
    "narrow beats": ((4, 8), int8, (2, 2), CFG, (8,), 0x302),
    "crosses 4 KiB": ((16, 4), int16, (4, 4), CFG, (2, 2), 0xFF0),
    "128-bit bus, int32": ((8, 8), int32, (4, 4), HwConfig(axi_data_width=128), (1, 4), 0x400),
}  # fmt: skip


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("name", STORE_CASES)
def test_linear_store_matches_interpreter(name: str, pattern: str):
    shape, dtype, tile, cfg, stream_shape, addr = STORE_CASES[name]
    rng = np.random.default_rng(1)
    g = Graph("store")
    t = g.tensor("t", shape, dtype)
    src = L.Source(g, StreamType(Tile(dtype, *tile), stream_shape), name="x")
    node = L.LinearOffChipStore(src.out, t, name="st")
    data = tiles(rng, dtype, (*stream_shape, *tile))
    res = interpret(g, {}, inputs={"x": _nest(data, len(stream_shape))})
    dut = LinearStore.from_node(node, cfg, addr=addr)
    assert dut.in_ports == [dut.i] and dut.out_ports == []
    mem = memory_with({})
    before = bytes(mem)
    fmt = TokenFormat.for_elem(src.out.elem, cfg)
    run = simulate(dut, inputs={"i": (dut.i, fmt, res.tokens(src.out))}, outputs={}, mem=mem,
                   pattern=pattern, until=dut.done, flags={"error": dut.error})  # fmt: skip
    want = res.memory["t"]
    assert np.array_equal(tensor_at(mem, addr, want), want)
    # Nothing else was touched.
    assert mem[:addr] == before[:addr] and mem[addr + want.nbytes :] == before[addr + want.nbytes :]
    assert run.flags == {"error": 0}
    # `done` rises only after the last B response.
    assert run.model.log[-1][0] == "b" and run.model.log[-1][1] < run.cycles


def _nest(array: np.ndarray, depth: int):
    if depth == 0:
        return array
    return [_nest(a, depth - 1) for a in array]


@pytest.mark.parametrize(("count", "error"), [(3, 1), (4, 0), (5, 1)])
def test_linear_store_counts_tiles(count: int, error: int):
    fmt = TokenFormat.for_elem(Tile(int16, 4, 4), CFG)
    dut = LinearStore(config=CFG, tensor_shape=(8, 8), tile_format=fmt)
    data = tiles(np.random.default_rng(2), int16, (count, 4, 4))
    mem = memory_with({})
    run = simulate(dut, inputs={"i": (dut.i, fmt, [*data, Stop(1), DONE])}, outputs={}, mem=mem,
                   pattern="always", until=dut.done, flags={"error": dut.error})  # fmt: skip
    assert run.flags == {"error": error}
    written = tensor_at(mem, 0, np.zeros((8, 8), np.int16))
    for k in range(min(count, 4)):  # extra tiles are dropped, not written past the tensor
        assert np.array_equal(
            written[4 * (k // 2) : 4 * (k // 2) + 4, 4 * (k % 2) : 4 * (k % 2) + 4], data[k]
        )
    assert sum(1 for kind, _ in run.model.log if kind == "aw") == 4 * min(count, 4)


RANDOM_STORE_CASES = {
    # name: (tensor shape, dtype, tile, config, addresses (nested), address stream shape)
    "rank 1, repeated index": ((8, 16), int16, (4, 4), CFG, [[5, 2], [], [5, 0, 7]], (3, R)),
    "narrow beats": ((4, 8), int8, (2, 2), CFG, [1, 6, 3], (3,)),
    "full-width tiles": ((16, 4), int16, (4, 4), CFG, [[3, 0], [1]], (2, R)),
}  # fmt: skip


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("name", RANDOM_STORE_CASES)
def test_random_store_matches_interpreter(name: str, pattern: str):
    shape, dtype, tile, cfg, addrs, addr_shape = RANDOM_STORE_CASES[name]
    rng = np.random.default_rng(3)
    g = Graph("rstore")
    t = g.tensor("t", shape, dtype)
    wa = L.Source(g, StreamType(Tile(int32, 1, 1), addr_shape), name="wa")
    wd = L.Source(g, StreamType(Tile(dtype, *tile), addr_shape), name="wd")
    node = L.RandomOffChipStore(wa.out, wd.out, t, name="rs")
    L.Sink(node.out)
    arr = tiles(rng, dtype, shape)

    def data_like(n):
        return [data_like(x) for x in n] if isinstance(n, list) else tiles(rng, dtype, tile)

    res = interpret(g, {"t": arr}, inputs={"wa": _one_by_one(addrs), "wd": data_like(addrs)})
    dut = RandomStore.from_node(node, cfg, addr=0x200)
    assert dut.in_ports == [dut.waddr, dut.wdata] and dut.out_ports == [dut.ack]
    mem = memory_with({0x200: arr})
    afmt = TokenFormat.for_elem(wa.out.elem, cfg)
    fmt = TokenFormat.for_elem(wd.out.elem, cfg)
    run = simulate(
        dut,
        inputs={"waddr": (dut.waddr, afmt, res.tokens(wa.out)), "wdata": (dut.wdata, fmt, res.tokens(wd.out))},
        outputs={"ack": (dut.ack, dut.ack_format)},
        mem=mem, pattern=pattern, flags={"error": dut.error},
    )  # fmt: skip
    assert norm(run.outputs["ack"]) == norm(res.tokens(node.out))
    assert np.array_equal(tensor_at(mem, 0x200, arr), res.memory["t"])
    assert run.flags == {"error": 0}
    # Every ack follows the B response that completed its tile.
    b_cycles = [c for kind, c in run.model.log if kind == "b"]
    acks = [tr.cycle for tr in run.transfers["ack"] if (tr.payload & 3) == 0]
    per_tile = len(dut.geometry.bursts(0))
    assert all(ack > b_cycles[per_tile * (i + 1) - 1] for i, ack in enumerate(acks))


def test_random_store_rejects_out_of_range():
    fmt = TokenFormat.for_elem(Tile(int16, 4, 4), CFG)
    afmt = TokenFormat.for_elem(Tile(int32, 1, 1), CFG)
    dut = RandomStore(config=CFG, tensor_shape=(8, 8), tile_format=fmt, addr_format=afmt)
    data = tiles(np.random.default_rng(4), int16, (2, 4, 4))
    mem = memory_with({})
    before = bytes(mem)
    run = simulate(
        dut,
        inputs={"waddr": (dut.waddr, afmt, [np.full((1, 1), 9, np.int32), np.full((1, 1), 2, np.int32), DONE]),
                "wdata": (dut.wdata, fmt, [data[0], data[1], DONE])},
        outputs={"ack": (dut.ack, dut.ack_format)}, mem=mem, pattern="periodic",
        flags={"error": dut.error},
    )  # fmt: skip
    assert norm(run.outputs["ack"]) == [[[0]], [[1]], "D"]
    assert run.flags == {"error": 1}
    assert np.array_equal(tensor_at(mem, 0, np.zeros((8, 8), np.int16))[4:8, 0:4], data[1])
    # Only tile 2 (rows 4..7, columns 0..3: 8 bytes of each 16-byte row) was written.
    changed = {i for i in range(len(mem)) if mem[i] != before[i]}
    assert changed <= {r * 16 + c for r in range(4, 8) for c in range(8)}


# -- Bufferize and Streamify -----------------------------------------------------------------------


class BufferPair(wiring.Component):
    """Bufferize -> Streamify, connected as an elaborator would: ``o`` to ``i`` and ``rd``;
    ``error`` is either block's sticky error flag."""

    def __init__(self, bufferize: Bufferize, streamify: Streamify):
        self.bufferize, self.streamify = bufferize, streamify
        members = {
            "i": bufferize.signature.members["i"],
            "o": streamify.signature.members["o"],
            "error": Out(1),
        }
        if "ref" in streamify.signature.members:
            members["ref"] = streamify.signature.members["ref"]
        super().__init__(members)

    def elaborate(self, platform) -> Module:
        m = Module()
        m.submodules.bufferize = bz = self.bufferize
        m.submodules.streamify = sf = self.streamify
        wiring.connect(m, wiring.flipped(self.i), bz.i)
        wiring.connect(m, bz.o, sf.i)
        wiring.connect(m, sf.rd, bz.rd)
        wiring.connect(m, sf.o, wiring.flipped(self.o))
        if "ref" in self.signature.members:
            wiring.connect(m, wiring.flipped(self.ref), sf.ref)
        m.d.comb += self.error.eq(bz.error | sf.error)
        return m


TILE_2X2 = Tile(int16, 2, 2)
CFG_2X2 = HwConfig(tile_rows=2, tile_cols=2)


@dataclass(frozen=True)
class BufCase:
    shape: tuple  # the input stream's shape (static outer and buffer dims)
    rank: int  # Bufferize rank
    repeat: tuple = ()
    read: tuple | None = None  # (read_shape, stride, base)
    ref: list | None = None  # nested reference data
    ref_shape: tuple | None = None
    elem: Any = TILE_2X2
    config: HwConfig = CFG_2X2
    slots: int = 2


BUFFER_CASES = {
    # docs/semantics.md: B0 B1 S1 D with repeat [2] -> a b S1 a b S2 c d S1 c d S3 D.
    "repeat, rank-1 refs": BufCase((1, 2, 2), 1, repeat=(2,)),
    "repeat, rank-0 refs (eager)": BufCase((2, 3), 1, repeat=(2,)),
    "two repeat dims": BufCase((2, 2, 2), 1, repeat=(2, 1)),
    "replay in order": BufCase((3, 2, 2), 2),
    # A 2x2 buffer read with stride (1, 2) is its transpose.
    "affine transpose": BufCase((2, 2, 2), 2, read=((2, 2), (1, 2), 0)),
    "affine, stride 0 and base": BufCase((2, 4), 1, read=((2, 3), (0, 1), 1)),
    # One buffer [a, b], ref r r r S1 D -> a b S1 a b S1 a b S2 D.
    "ref re-reads": BufCase((1, 2), 1, ref=[[0, 0, 0]], ref_shape=(1, R)),
    "ref pairs one to one": BufCase((3, 2), 1, ref=[0, 0, 0], ref_shape=(3,)),
    "ref with an empty vector": BufCase((2, 3), 1, ref=[[], [0, 0]], ref_shape=(2, R)),
    "ref one level deeper than buffers": BufCase((2, 2, 2), 1, ref=[[[0, 0], [0]], [[0], [0, 0, 0]]], ref_shape=(2, 2, R)),
    "ref two levels deeper": BufCase((2, 2), 1, ref=[[[0], [0, 0]], [[0]]], ref_shape=(2, R, R)),
    "ref with rank-1 buffer stream, c = 0": BufCase((2, 2, 2), 1, ref=[[0, 0], [0, 0]], ref_shape=(2, 2)),
    "selectors": BufCase((2, 3), 1, repeat=(2,), elem=Selector(5)),
    "one slot": BufCase((3, 2), 1, repeat=(2,), slots=1),
    # A 4x4 tile through a 4-element port: four memory words per element.
    "multi-word elements": BufCase((2, 3), 1, repeat=(2,), elem=Tile(int16, 4, 4), config=HwConfig(mem_port_elems=4)),
    "empty stream": BufCase((0, 2), 1, repeat=(2,)),
}  # fmt: skip


def _elements(rng: np.random.Generator, elem, shape):
    if not shape:
        if isinstance(elem, Selector):
            return rng.integers(0, 2, elem.n).astype(bool)
        return tiles(rng, elem.dtype, (elem.rows, elem.cols))
    return [_elements(rng, elem, shape[1:]) for _ in range(shape[0])]


def build_buffers(case: BufCase, seed: int = 0):
    rng = np.random.default_rng(seed)
    g = Graph("buffers")
    src = L.Source(g, StreamType(case.elem, case.shape), name="x")
    bz = L.Bufferize(src.out, case.rank, name="bz")
    inputs = {"x": _elements(rng, case.elem, case.shape)}
    ref = None
    kwargs: dict[str, Any] = {"repeat": case.repeat}
    if case.read is not None:
        kwargs.update(out_shape=case.read[0], stride=case.read[1], base=case.read[2])
    if case.ref is not None:
        ref = L.Source(g, StreamType(Tile(int32, 1, 1), case.ref_shape), name="r")
        inputs["r"] = _one_by_one(case.ref)
        kwargs["ref"] = ref.out
    sf = L.Streamify(bz.out, name="sf", **kwargs)
    L.Sink(sf.out)
    res = interpret(g, {}, inputs=inputs)
    dut = BufferPair(
        Bufferize.from_node(bz, case.config, slots=case.slots),
        Streamify.from_node(sf, case.config, slots=case.slots),
    )
    fmt = TokenFormat.for_elem(case.elem, case.config)
    ins = {"i": (dut.i, fmt, res.tokens(src.out))}
    if ref is not None:
        ins["ref"] = (dut.ref, TokenFormat.for_elem(ref.out.elem, case.config), res.tokens(ref.out))
    return dut, ins, {"o": (dut.o, fmt)}, res.tokens(sf.out)


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("name", BUFFER_CASES)
def test_buffers_match_interpreter(name: str, pattern: str):
    dut, ins, outs, want = build_buffers(BUFFER_CASES[name])
    run = run_block(
        dut, ins, outs, pattern=pattern, seed=zlib.crc32(name.encode()), max_cycles=2000
    )
    assert norm(run.outputs["o"]) == norm(want)


@st.composite
def buffer_cases(draw) -> BufCase:
    rank = draw(st.integers(1, 3))
    b = draw(st.integers(1, rank))
    inner = tuple(draw(st.lists(st.integers(1, 3), min_size=b, max_size=b)))
    outer = tuple(draw(st.lists(st.integers(1, 2), min_size=rank + 1 - b, max_size=rank + 1 - b)))
    if draw(st.booleans()):
        outer = (draw(st.integers(0, 3)), *outer[1:])  # possibly an empty stream
    shape = (*outer, *inner)
    read = None
    if draw(st.booleans()):
        size = int(np.prod(inner))
        n = draw(st.integers(0, 2))
        read_shape = tuple(draw(st.lists(st.integers(1, 3), min_size=n, max_size=n)))
        stride = tuple(draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)))
        reach = sum((k - 1) * s for k, s in zip(read_shape, stride, strict=True))
        if reach < size:
            read = (read_shape, stride, draw(st.integers(0, size - 1 - reach)))
    mode = draw(st.sampled_from(["repeat", "ref"]))
    slots = draw(st.integers(1, 3))
    if mode == "repeat":
        repeat = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
        return BufCase(shape, b, repeat=repeat, read=read, slots=slots)
    # A reference with the buffer stream's outer dims (static) and c ragged inner dims.
    c = draw(st.integers(0, 2))
    if c + (rank - b) + (len(read[0]) if read else b) > 7:
        c = 0

    def ref_data(dims, extra):
        if dims:
            return [ref_data(dims[1:], extra) for _ in range(dims[0])]
        if extra == 0:
            return 0
        k = draw(st.integers(0 if extra == 1 else 1, 2))
        return [ref_data((), extra - 1) for _ in range(k)]

    ref = ref_data(outer, c)
    ref_shape = (*outer, *(ragged(f"q{i}") for i in range(c)))
    return BufCase(shape, b, read=read, ref=ref, ref_shape=ref_shape, slots=slots)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=buffer_cases(), pattern=st.sampled_from(PATTERNS), seed=st.integers(0, 2**16))
def test_buffers_match_interpreter_on_random_streams(case: BufCase, pattern: str, seed: int):
    dut, ins, outs, want = build_buffers(case, seed)
    run = run_block(dut, ins, outs, pattern=pattern, seed=seed, max_cycles=4000)
    assert norm(run.outputs["o"]) == norm(want)


@pytest.mark.parametrize(
    ("case", "words", "first"),
    [
        # 4 buffers of 8 elements, each read 3 times: 96 elements and 13 stop tokens.
        (BufCase((4, 8), 1, repeat=(3,)), 1, 13),
        # A 4x4 tile through a 4-element memory port: four memory words per element.
        (BufCase((4, 8), 1, repeat=(3,), elem=Tile(int16, 4, 4), config=HwConfig(mem_port_elems=4)), 4, 40),
    ],
)  # fmt: skip
def test_buffer_throughput_and_latency(case: BufCase, words: int, first: int):
    """Measured, always valid / always ready. Buffer n + 1 fills while buffer n drains."""
    dut, ins, outs, want = build_buffers(case)
    run = run_block(dut, ins, outs, pattern="always", max_cycles=4000)
    assert norm(run.outputs["o"]) == norm(want)
    cycles = [t.cycle for t in run.transfers["o"]]
    span = cycles[-1] - cycles[0] + 1
    elements = sum(1 for t in want if is_data(t))
    if words == 1:
        assert span == len(cycles) == 109  # one token per cycle, stops and buffer starts included
    else:
        assert span == words * elements + 2  # the port is the bottleneck; stops overlap reads
    # Latency: the first buffer's closing stop is taken in cycle 8 * words (after its elements),
    # its reference is offered a cycle later, the first element 3 + words cycles after that.
    assert cycles[0] == first == 8 * words + 1 + 3 + words


@pytest.mark.parametrize(
    ("build", "error", "message"),
    [
        (lambda: Bufferize(config=CFG, elem_format=FMT16, rank=2, in_rank=1, buffer_shape=(2, 2)),
         ValueError, r"^Bufferize rank must be in \[1, in_rank=1\], not 2$"),
        (lambda: Bufferize(config=CFG, elem_format=FMT16, rank=0, in_rank=1, buffer_shape=()),
         ValueError, r"^Bufferize rank must be a positive integer, not 0$"),
        (lambda: Bufferize(config=CFG, elem_format=FMT16, rank=1, in_rank=1, buffer_shape=(2, 2)),
         ValueError, r"^Bufferize buffer_shape \[2, 2\] must have rank=1 dimensions$"),
        (lambda: Bufferize(config=CFG, elem_format=FMT16, rank=1, in_rank=1, buffer_shape=(0,)),
         ValueError, r"^Bufferize buffer_shape must be a sequence of positive integers, not \(0,\)$"),
        (lambda: Bufferize(config=CFG, elem_format=FMT16, rank=1, in_rank=1, buffer_shape=(regular("n"),)),
         ValueError, r"^Bufferize buffer shape must be static; a dynamic shape such as \['n'\] has no fixed memory size$"),
        (lambda: Bufferize(config=CFG, elem_format=FMT16, rank=1, in_rank=1, buffer_shape=(2,), slots=0),
         ValueError, r"^Bufferize slots must be a positive integer, not 0$"),
        (lambda: Bufferize(config=CFG, elem_format="t", rank=1, in_rank=1, buffer_shape=(2,)),
         TypeError, r"^Bufferize elem_format must be a TokenFormat, not 't'$"),
        (lambda: Bufferize(config=CFG, elem_format=FMT16, rank=1, in_rank=8, buffer_shape=(2,)),
         ValueError, r"^Bufferize input has rank 8, whose stop tokens do not fit 3 level bits$"),
        (lambda: Streamify(config=CFG, elem_format=FMT16, buffer_shape=(4,), in_rank=0, read_shape=(2,), read_stride=(2,), base=2),
         ValueError, r"^Streamify read reaches element #4 of a buffer of 4 elements$"),
        (lambda: Streamify(config=CFG, elem_format=FMT16, buffer_shape=(4,), in_rank=0, read_shape=(2,)),
         ValueError, r"^Streamify an affine read needs both read_shape and read_stride$"),
        (lambda: Streamify(config=CFG, elem_format=FMT16, buffer_shape=(4,), in_rank=0, base=1),
         ValueError, r"^Streamify base needs an affine read \(read_shape and read_stride\)$"),
        (lambda: Streamify(config=CFG, elem_format=FMT16, buffer_shape=(4,), in_rank=0, repeat=(2,), ref_format=FMT16, ref_rank=1),
         ValueError, r"^Streamify takes either repeat or ref_format, not both$"),
        (lambda: Streamify(config=CFG, elem_format=FMT16, buffer_shape=(4,), in_rank=2, ref_format=FMT16, ref_rank=1),
         ValueError, r"^Streamify ref_rank must be at least in_rank=2, not 1$"),
        (lambda: Streamify(config=CFG, elem_format=FMT16, buffer_shape=(4,), in_rank=3, repeat=(2, 2, 2, 2)),
         ValueError, r"^Streamify output has rank 8, whose stop tokens do not fit 3 level bits$"),
        (lambda: Streamify(config=CFG, elem_format=FMT16, buffer_shape=(4,), in_rank=0, repeat=(0,)),
         ValueError, r"^Streamify repeat must be a sequence of positive integers, not \(0,\)$"),
    ],
)  # fmt: skip
def test_buffer_validation(build, error, message):
    with pytest.raises(error, match=message):
        build()


FMT16 = TokenFormat.for_elem(Tile(int16, 4, 4), CFG)


def test_buffers_reject_dynamic_shapes():
    g = Graph()
    n = regular("n")
    src = L.Source(g, StreamType(Tile(int16, 2, 2), (2, n)), name="x")
    bz = L.Bufferize(src.out, 1, name="bz")
    sf = L.Streamify(bz.out, repeat=(2,), name="sf")
    L.Sink(sf.out)
    with pytest.raises(
        StepTypeError,
        match=r"^Bufferize 'bz', port 'out': buffer shape \['n'\] is dynamic; hardware buffers are statically sized$",
    ):
        Bufferize.from_node(bz, CFG)
    with pytest.raises(
        StepTypeError,
        match=r"^Streamify 'sf', port 'in': buffer shape \['n'\] is dynamic; hardware buffers are statically sized$",
    ):
        Streamify.from_node(sf, CFG)
    with pytest.raises(StepTypeError, match=r"^expected a Streamify node, not Bufferize 'bz'$"):
        Streamify.from_node(bz, CFG)


def test_buffer_ports_for_an_elaborator():
    case = BUFFER_CASES["ref re-reads"]
    dut, *_ = build_buffers(case)
    bz, sf = dut.bufferize, dut.streamify
    assert bz.in_ports == [bz.i] and bz.out_ports == [bz.o]
    assert sf.in_ports == [sf.i, sf.ref] and sf.out_ports == [sf.o]
    assert (
        sf.rd.signature == bz.rd.signature.flip().flip()
        or sf.rd.signature == bz.geometry.port_signature()
    )
    # Mismatched geometries do not connect.
    other = Streamify(config=case.config, elem_format=TokenFormat.for_elem(case.elem, case.config),
                      buffer_shape=(3,), in_rank=1, repeat=(1,))  # fmt: skip
    with pytest.raises(wiring.ConnectionError):
        wiring.connect(Module(), other.rd, bz.rd)


# -- burst generation and address arithmetic --------------------------------------------------------


@st.composite
def geometries(draw) -> TileGeometry:
    elem_bytes = draw(st.sampled_from([1, 2, 4]))
    tr, tc = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    rows = tr * draw(st.integers(1, 3))
    cols = tc * draw(st.integers(1, 300 // tc))  # wide rows reach 4 KiB boundaries
    outer = tuple(draw(st.lists(st.integers(1, 2), max_size=1)))
    addr = elem_bytes * draw(st.integers(0, 5000))
    cfg = HwConfig(axi_data_width=draw(st.sampled_from([32, 64, 128])))
    return TileGeometry.build(tensor_shape=(*outer, rows, cols), tile=(tr, tc), elem_bytes=elem_bytes,
                              addr=addr, config=cfg, who="test")  # fmt: skip


@settings(max_examples=40, deadline=None)
@given(geo=geometries(), data=st.data())
def test_burst_generator_matches_reference(geo: TileGeometry, data):
    ks = data.draw(st.lists(st.integers(0, geo.n_tiles - 1), min_size=1, max_size=4))
    dut = BurstGenerator(geo)
    got: list = []
    want = [(a, n, (a % geo.bus_bytes) // geo.transfer_bytes, i == len(bs) - 1)
            for k in ks for bs in [geo.bursts(k)] for i, (a, n) in enumerate(bs)]  # fmt: skip

    async def source(ctx):
        for k in ks:
            ctx.set(dut.tiles.valid, 1)
            ctx.set(dut.tiles.payload, k)
            await ctx.tick().until(dut.tiles.ready)
        ctx.set(dut.tiles.valid, 0)

    async def sink(ctx):
        ctx.set(dut.bursts.ready, 1)
        while len(got) < len(want):
            _, _, valid, addr, length, lane, last = await ctx.tick().sample(
                dut.bursts.valid, dut.bursts.payload.addr, dut.bursts.payload.len,
                dut.bursts.payload.lane, dut.bursts.payload.last,
            )  # fmt: skip
            if valid:
                got.append((addr, length + 1, lane if geo.lanes > 1 else 0, bool(last)))

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(source)
    sim.add_testbench(sink)
    sim.run_until(1e-6 * (len(want) + 4 * len(ks) + 10))
    assert got == want
    # The reference itself keeps every burst legal and covers each tile exactly once.
    for k in ks:
        beats = geo.bursts(k)
        assert sum(n for _, n in beats) == geo.beats_per_tile
        assert all(
            a // 4096 == (a + n * geo.transfer_bytes - 1) // 4096 and n <= 256 for a, n in beats
        )
        addrs = {a + i * geo.transfer_bytes for a, n in beats for i in range(n)}
        q, t = divmod(k, geo.tiles_per_row)
        rows = range(q * geo.tile[0], (q + 1) * geo.tile[0])
        elems = [(r * geo.cols + t * geo.tile[1] + c) * geo.elem_bytes + geo.addr
                 for r in rows for c in range(geo.tile[1])]  # fmt: skip
        assert {e - e % geo.transfer_bytes for e in elems} == addrs


@pytest.mark.parametrize("divisor", [1, 2, 3, 5, 6, 7, 8, 12, 100, 255])
def test_constant_division_is_exact(divisor: int):
    from amaranth.hdl import Signal

    geo = TileGeometry((4 * 16, divisor), (4, 1), 1, 0, 64, 32)  # tiles_per_row == divisor
    k = Signal(geo.index_width)
    q, r = geo.divmod_const(k)
    m = Module()
    qs, rs = Signal(len(k)), Signal(max(1, len(r)))
    m.d.comb += [qs.eq(q), rs.eq(r)]
    sim = Simulator(m)

    async def bench(ctx):
        for value in range(geo.n_tiles):
            ctx.set(k, value)
            assert (ctx.get(qs), ctx.get(rs) if divisor > 1 else 0) == divmod(value, divisor)

    sim.add_testbench(bench)
    sim.run()


def test_axi_signature():
    sig = AXI4Signature(addr_width=32, data_width=64, id_width=4)
    assert set(sig.members) >= {"arvalid", "rdata", "awaddr", "wstrb", "bresp"}
    assert sig.members["wstrb"].shape == 8 and sig.members["rready"].flow == wiring.Out
    assert AXI4Signature.for_config(CFG, write=False) == AXI4Signature(
        addr_width=32, data_width=64, id_width=4, write=False
    )
    assert "awvalid" not in AXI4Signature.for_config(CFG, write=False).members
    assert repr(sig) == "AXI4Signature(read+write, addr_width=32, data_width=64, id_width=4)"
    with pytest.raises(
        ValueError, match=r"^AXI4 data width must be a power of two from 8 to 1024, not 48$"
    ):
        AXI4Signature(addr_width=32, data_width=48, id_width=4)
    with pytest.raises(TypeError, match=r"^AXI4 address width must be a positive integer, not 0$"):
        AXI4Signature(addr_width=0, data_width=64, id_width=4)
    with pytest.raises(ValueError, match=r"^AXI4 signature needs a read or a write half, or both$"):
        AXI4Signature(addr_width=32, data_width=64, id_width=4, read=False, write=False)
    fmt = TokenFormat.for_elem(Tile(int16, 4, 4), CFG)
    with pytest.raises(
        ValueError, match=r"^Component has no member 'm' to name with prefix 'm_axi'$"
    ):
        axi_ports(LinearStore(config=CFG, tensor_shape=(8, 8), tile_format=fmt), member="m")


@pytest.mark.parametrize(
    ("build", "error", "message"),
    [
        (lambda: RandomLoad(config=CFG, tensor_shape=(8, 8), tile_format=FMT16, addr_format=FMT16),
         ValueError, r"^RandomLoad addr_format must be a 1x1 tile of integers, not 4x4 of 16-bit elements$"),
        (lambda: RandomLoad(config=CFG, tensor_shape=(8, 8), tile_format=FMT16,
                            addr_format=TokenFormat.for_elem(Tile(int32, 1, 1), HwConfig(level_bits=4))),
         ValueError, r"^RandomLoad addr_format has 4 level bits but tile_format has 3$"),
        (lambda: RandomStore(config=CFG, tensor_shape=(8, 8), tile_format=FMT16,
                             addr_format=TokenFormat.for_elem(Selector(2), CFG)),
         ValueError, r"^RandomStore addr_format must be a tile format, not a selector format$"),
        (lambda: LinearStore(config=CFG, tensor_shape=(6, 8), tile_format=FMT16),
         ValueError, r"^LinearStore tile 4x4 must divide the last two dims 6x8 of the tensor$"),
        (lambda: LinearStore(config=CFG, tensor_shape=(8, 8), tile_format=FMT16, max_outstanding=True),
         TypeError, r"^LinearStore max_outstanding must be a positive integer, not True$"),
    ],
)  # fmt: skip
def test_controller_validation(build, error, message):
    with pytest.raises(error, match=message):
        build()


def test_store_from_node_errors():
    g = Graph()
    t = g.tensor("t", (8, 8), float32)
    src = L.Source(g, StreamType(Tile(float32, 4, 4), (4,)), name="x")
    node = L.LinearOffChipStore(src.out, t, name="st")
    with pytest.raises(
        StepTypeError,
        match=r"^LinearOffChipStore 'st', port 'in': dtype float32 is not supported by the hardware \(int16/int32\)$",
    ):
        LinearStore.from_node(node, CFG)
    with pytest.raises(
        StepTypeError, match=r"^expected a RandomOffChipStore node, not LinearOffChipStore 'st'$"
    ):
        RandomStore.from_node(node, CFG)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_linear_load_on_random_walks(data):
    """Random walks over a 4x4-tile tensor, with or without a reference, against the interpreter."""
    shape = (8, 8) if data.draw(st.booleans()) else (4, 16)
    n = data.draw(st.integers(0, 3))
    out_shape = tuple(data.draw(st.lists(st.integers(1, 3), min_size=n, max_size=n)))
    stride = tuple(data.draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)))
    reach = sum((k - 1) * s for k, s in zip(out_shape, stride, strict=True))
    if reach >= 4:
        out_shape, stride = tuple(min(k, 2) for k in out_shape), tuple(min(s, 1) for s in stride)
        reach = sum((k - 1) * s for k, s in zip(out_shape, stride, strict=True))
    base = data.draw(st.integers(0, 3 - reach))
    ref = ref_shape = None
    if data.draw(st.booleans()):
        ref = data.draw(st.lists(st.lists(st.just(0), max_size=3), min_size=1, max_size=3))
        ref_shape = (len(ref), R)
    case = LoadCase(
        shape, int16, (4, 4), out_shape, stride, base, addr=0x40, ref=ref, ref_shape=ref_shape
    )
    node, src, res, arr, dut = build_load(case, seed=data.draw(st.integers(0, 99)))
    fmt = TokenFormat.for_elem(node.tile_type, CFG)
    inputs = {}
    if src is not None:
        inputs["ref"] = (dut.ref, TokenFormat.for_elem(src.out.elem, CFG), res.tokens(src.out))
    run = simulate(dut, inputs=inputs, outputs={"o": (dut.o, fmt)}, mem=memory_with({0x40: arr}),
                   pattern=data.draw(st.sampled_from(PATTERNS)), seed=data.draw(st.integers(0, 99)))  # fmt: skip
    assert norm(run.outputs["o"]) == norm(res.tokens(node.out))


@pytest.mark.parametrize("outstanding", [1, 2, 4, 8])
def test_linear_store_bursts_in_flight_and_throughput(outstanding: int):
    """Measured. 8 tiles of a wider tensor, 4 one-beat bursts each, into a memory that answers a
    burst's last W beat with B 4 cycles later. A burst's W beat leaves 2 cycles after its AW (the
    W-information queue), so a slot is reusable 7 cycles after its AW: N bursts in flight issue
    min(1, N/7) bursts per cycle."""
    fmt = TokenFormat.for_elem(Tile(int16, 4, 4), CFG)
    dut = LinearStore(
        config=CFG, tensor_shape=(8, 16), tile_format=fmt, max_outstanding=outstanding
    )
    data = tiles(np.random.default_rng(5), int16, (8, 4, 4))
    mem = memory_with({})
    run = simulate(dut, inputs={"i": (dut.i, fmt, [*data, Stop(1), DONE])}, outputs={}, mem=mem,
                   pattern="always", until=dut.done, latency=3)  # fmt: skip
    want = np.concatenate([np.concatenate(list(data[r * 4 : r * 4 + 4]), axis=1) for r in range(2)])
    assert np.array_equal(tensor_at(mem, 0, want), want)
    aw = [c for kind, c in run.model.log if kind == "aw"]
    per_burst = (aw[-1] - aw[0]) / 31
    assert 7 / outstanding - 0.1 <= per_burst <= max(1, 7 / outstanding)
    assert run.model.in_flight("aw", "b") == min(outstanding, 6)
