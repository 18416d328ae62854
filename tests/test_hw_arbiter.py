# amaranth: UnusedElaboratable=no
# (Arbiters built only to test their constructors or ports are never elaborated.)
"""Amaranth-simulator tests of `step_hw.memory.arbiter`: AXI4 read and write arbiters.

``n`` simulated managers issue random bursts through the arbiter to a small AXI4 subordinate
model that pauses every channel (the three traffic patterns of `step_hw.testing`), answers after
a random latency and, in its out-of-order mode, returns responses of different IDs in any order
and interleaves read beats of different bursts. Every manager must get exactly its own data, in
order, with its own ID; written memory must hold every manager's data; the shared port must obey
the AXI4 handshake rules (checkers) and never interleave write data.
"""

from __future__ import annotations

import random
import re
from collections import deque
from dataclasses import dataclass, field

import pytest
from amaranth.hdl import ClockDomain, Module
from amaranth.sim import Simulator

from examples import swiglu
from step_hw.config import HwConfig
from step_hw.elaborate import ElaboratedGraph
from step_hw.memory import AXI4Signature, AxiReadArbiter, AxiWriteArbiter
from step_hw.testing import PATTERNS, pauses

CFG = HwConfig()
BUS = CFG.axi_data_width // 8
MASK = (1 << CFG.axi_data_width) - 1
SIZE = BUS.bit_length() - 1
#: Each manager's fixed ID (two managers share ID 5: the index prefix must tell them apart).
IDS = (5, 5, 9)


def word(addr: int) -> int:
    """The memory word at byte ``addr`` of the read model (a hash of the address)."""
    return (addr * 0x9E3779B97F4A7C15 + 0x1234567) & MASK


@dataclass
class Burst:
    mgr: int
    id: int
    addr: int
    beats: int
    data: list[int] = field(default_factory=list)  # write data
    done: int = 0
    due: int = 0


def bursts_for(rng: random.Random, n: int, per_manager: int, *, write: bool) -> list[list[Burst]]:
    """Random bursts for each manager; each burst owns a distinct 128-byte region (at most 16
    beats), so written memory can be checked exactly."""
    regions = list(range(n * per_manager))
    rng.shuffle(regions)
    out = []
    for i in range(n):
        mine = []
        for _ in range(per_manager):
            beats = rng.choice([1, 1, 2, 4, rng.randint(1, 16)])
            addr = regions.pop() * 128
            data = [rng.getrandbits(CFG.axi_data_width) for _ in range(beats)] if write else []
            mine.append(Burst(i, IDS[i], addr, beats, data))
        out.append(mine)
    return out


def checker(name: str, valid, ready, payload: list, cycles: dict | None = None):
    """One channel of the shared port: once valid, valid and payload hold until the handshake.
    With ``cycles``, records the handshake cycles in ``cycles[name]``."""

    async def process(ctx) -> None:
        stalled = None
        cycle = 0
        async for sampled in ctx.tick().sample(valid, ready, *payload):
            v, r, *p = sampled[2:]
            if stalled is not None:
                assert v, f"{name}valid dropped in cycle {cycle} before the handshake"
                assert tuple(p) == stalled, f"{name} payload changed in cycle {cycle}"
            stalled = tuple(p) if v and not r else None
            if cycles is not None and v and r:
                cycles.setdefault(name, []).append(cycle)
            cycle += 1

    return process


# -- managers ---------------------------------------------------------------------------------


def address_source(mgr, prefix: str, bursts: list[Burst], pause):
    """Offers one AR/AW per burst, holding it until the handshake."""

    async def bench(ctx) -> None:
        for b in bursts:
            while next(pause):
                await ctx.tick()
            for sig, value in (("id", b.id), ("addr", b.addr), ("len", b.beats - 1),
                               ("size", SIZE), ("burst", 1), ("valid", 1)):  # fmt: skip
                ctx.set(getattr(mgr, prefix + sig), value)
            while not (await ctx.tick().sample(getattr(mgr, f"{prefix}ready")))[2]:
                pass
            ctx.set(getattr(mgr, f"{prefix}valid"), 0)

    return bench


def write_data_source(mgr, bursts: list[Burst], pause):
    """Offers every burst's W beats in order, independently of AW (AXI4 allows W first)."""

    async def bench(ctx) -> None:
        for b in bursts:
            for k, value in enumerate(b.data):
                while next(pause):
                    await ctx.tick()
                ctx.set(mgr.wdata, value)
                ctx.set(mgr.wstrb, (1 << BUS) - 1)
                ctx.set(mgr.wlast, k == b.beats - 1)
                ctx.set(mgr.wvalid, 1)
                while not (await ctx.tick().sample(mgr.wready))[2]:
                    pass
                ctx.set(mgr.wvalid, 0)

    return bench


def response_sink(mgr, prefix: str, fields: tuple[str, ...], count: int, pause, got: list):
    """Takes ``count`` R beats or B responses (as tuples of ``fields``) with ``ready`` pauses."""

    async def bench(ctx) -> None:
        while len(got) < count:
            ready = not next(pause)
            ctx.set(getattr(mgr, f"{prefix}ready"), ready)
            sampled = await ctx.tick().sample(
                getattr(mgr, f"{prefix}valid"), *(getattr(mgr, prefix + f) for f in fields)
            )
            if ready and sampled[2]:
                got.append(tuple(sampled[3:]))
        ctx.set(getattr(mgr, f"{prefix}ready"), 0)

    return bench


# -- the subordinate model ----------------------------------------------------------------------


def _pick(pending: list[Burst], cycle: int, rng: random.Random, ooo: bool) -> Burst | None:
    """The next burst to answer: in order, the oldest; out of order, any due burst that is the
    oldest of its ID (AXI4 keeps one ID's responses in order)."""
    if not ooo:
        return pending[0] if pending and pending[0].due <= cycle else None
    seen, eligible = set(), []
    for b in pending:
        if b.id not in seen and b.due <= cycle:
            eligible.append(b)
        seen.add(b.id)
    return rng.choice(eligible) if eligible else None


@dataclass
class Subordinate:
    """An AXI4 memory behind the shared port, pausing by ``pattern``, answering after 1 to 6
    cycles; ``ooo``: responses of different IDs in random order, read beats interleaved."""

    pattern: str
    rng: random.Random
    ooo: bool = False
    latency: tuple[int, int] = (1, 6)
    mem: dict[int, int] = field(default_factory=dict)
    log: list[tuple[str, int, int, int]] = field(default_factory=list)  # (channel, cycle, id, addr)

    def _pause(self):
        return pauses(self.pattern, rng=random.Random(self.rng.getrandbits(32)))

    def _due(self, cycle: int) -> int:
        return cycle + 1 + self.rng.randint(*self.latency)

    def reader(self, axi):
        async def process(ctx) -> None:
            ar_pause, r_pause = self._pause(), self._pause()
            pending: list[Burst] = []
            offering = None
            cycle = 0
            while True:
                ctx.set(axi.arready, not next(ar_pause))
                if offering is None:
                    b = _pick(pending, cycle, self.rng, self.ooo)
                    if b is not None and not next(r_pause):
                        ctx.set(axi.rid, b.id)
                        ctx.set(axi.rdata, word(b.addr + b.done * BUS))
                        ctx.set(axi.rlast, b.done == b.beats - 1)
                        ctx.set(axi.rresp, 0)
                        offering = b
                    ctx.set(axi.rvalid, offering is not None)
                sampled = await ctx.tick().sample(
                    axi.arvalid, axi.arready, axi.arid, axi.araddr, axi.arlen, axi.arsize,
                    axi.arburst, axi.rready,
                )  # fmt: skip
                valid, ready, arid, addr, length, size, burst, rready = sampled[2:]
                if valid and ready:
                    assert (size, burst) == (SIZE, 1)
                    pending.append(Burst(-1, arid, addr, length + 1, due=self._due(cycle)))
                    self.log.append(("ar", cycle, arid, addr))
                if offering is not None and rready:
                    offering.done += 1
                    if offering.done == offering.beats:
                        pending.remove(offering)
                    offering = None
                cycle += 1

        return process

    def writer(self, axi):
        async def process(ctx) -> None:
            aw_pause, w_pause, b_pause = self._pause(), self._pause(), self._pause()
            bursts: deque[Burst] = deque()  # AW order: W data arrives in this order
            responses: list[Burst] = []
            offering = None
            cycle = 0
            while True:
                ctx.set(axi.awready, not next(aw_pause))
                ctx.set(axi.wready, bool(bursts) and not next(w_pause))
                if offering is None:
                    b = _pick(responses, cycle, self.rng, self.ooo)
                    if b is not None and not next(b_pause):
                        ctx.set(axi.bid, b.id)
                        ctx.set(axi.bresp, 0)
                        offering = b
                    ctx.set(axi.bvalid, offering is not None)
                sampled = await ctx.tick().sample(
                    axi.awvalid, axi.awready, axi.awid, axi.awaddr, axi.awlen, axi.awsize,
                    axi.awburst, axi.wvalid, axi.wready, axi.wdata, axi.wstrb, axi.wlast,
                    axi.bready,
                )  # fmt: skip
                awvalid, awready, awid, addr, length, size, burst = sampled[2:9]
                wvalid, wready, wdata, wstrb, wlast, bready = sampled[9:]
                if awvalid and awready:
                    assert (size, burst) == (SIZE, 1)
                    bursts.append(Burst(-1, awid, addr, length + 1))
                    self.log.append(("aw", cycle, awid, addr))
                if wvalid and wready:
                    b = bursts[0]
                    assert wstrb == (1 << BUS) - 1
                    a = b.addr + b.done * BUS
                    assert a not in self.mem, f"address {a:#x} written twice"
                    self.mem[a] = wdata
                    b.done += 1
                    assert wlast == (b.done == b.beats), (
                        f"wlast {wlast} on beat {b.done} of a {b.beats}-beat burst (interleaved?)"
                    )
                    if wlast:
                        bursts.popleft()
                        b.due = self._due(cycle)
                        responses.append(b)
                if offering is not None and bready:
                    responses.remove(offering)
                    offering = None
                cycle += 1

        return process


# -- running ------------------------------------------------------------------------------------


def _simulator(dut) -> Simulator:
    """A simulator with a ``sync`` clock (a one-manager arbiter is wires, without a domain)."""
    m = Module()
    m.domains.sync = ClockDomain()
    m.submodules.dut = dut
    sim = Simulator(m)
    sim.add_clock(1e-6)
    return sim


def _run(sim: Simulator, done, max_cycles: int = 20_000) -> int:
    state = {"cycles": 0}

    async def clock(ctx) -> None:
        async for _ in ctx.tick():
            state["cycles"] += 1

    sim.add_process(clock)
    while not done():
        assert state["cycles"] <= max_cycles, f"not finished after {max_cycles} cycles"
        sim.advance()
    return state["cycles"]


def run_reads(n: int, bursts: list[list[Burst]], pattern: str, seed: int, *, ooo: bool = False,
              latency=(1, 6), cycles: dict | None = None):  # fmt: skip
    rng = random.Random(seed)
    dut = AxiReadArbiter(n=n, config=CFG)
    sub = Subordinate(pattern, random.Random(rng.getrandbits(32)), ooo, latency)
    sim = _simulator(dut)
    got: list[list] = []
    for i, mgr in enumerate(dut.managers):
        got.append([])
        beats = sum(b.beats for b in bursts[i])
        sim.add_testbench(address_source(mgr, "ar", bursts[i], pauses(pattern, rng=rng)))
        sim.add_testbench(
            response_sink(mgr, "r", ("id", "data", "last", "resp"), beats,
                          pauses(pattern, rng=random.Random(rng.getrandbits(32))), got[i])
        )  # fmt: skip
    axi = dut.axi
    sim.add_process(sub.reader(axi))
    sim.add_process(
        checker("ar", axi.arvalid, axi.arready, [axi.arid, axi.araddr, axi.arlen], cycles)
    )
    sim.add_process(checker("r", axi.rvalid, axi.rready, [axi.rid, axi.rdata], cycles))
    want = [sum(b.beats for b in bursts[i]) for i in range(n)]
    _run(sim, lambda: [len(g) for g in got] == want)
    return got, sub


def run_writes(n: int, bursts: list[list[Burst]], pattern: str, seed: int, *, ooo: bool = False,
               latency=(1, 6), cycles: dict | None = None):  # fmt: skip
    rng = random.Random(seed)
    dut = AxiWriteArbiter(n=n, config=CFG)
    sub = Subordinate(pattern, random.Random(rng.getrandbits(32)), ooo, latency)
    sim = _simulator(dut)
    got: list[list] = []
    for i, mgr in enumerate(dut.managers):
        got.append([])
        sim.add_testbench(address_source(mgr, "aw", bursts[i], pauses(pattern, rng=rng)))
        sim.add_testbench(
            write_data_source(mgr, bursts[i], pauses(pattern, rng=random.Random(rng.getrandbits(32))))
        )  # fmt: skip
        sim.add_testbench(
            response_sink(mgr, "b", ("id", "resp"), len(bursts[i]),
                          pauses(pattern, rng=random.Random(rng.getrandbits(32))), got[i])
        )  # fmt: skip
    axi = dut.axi
    sim.add_process(sub.writer(axi))
    sim.add_process(
        checker("aw", axi.awvalid, axi.awready, [axi.awid, axi.awaddr, axi.awlen], cycles)
    )
    sim.add_process(checker("w", axi.wvalid, axi.wready, [axi.wdata, axi.wlast], cycles))
    want = [len(b) for b in bursts]
    _run(sim, lambda: [len(g) for g in got] == want)
    return got, sub


def read_beats(b: Burst) -> list[tuple]:
    return [(b.id, word(b.addr + k * BUS), k == b.beats - 1, 0) for k in range(b.beats)]


# -- tests ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("ooo", [False, True], ids=["in-order", "out-of-order"])
@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("n", [1, 2, 3])
def test_reads_reach_their_manager(n, pattern, ooo):
    seed = 100 * n + PATTERNS.index(pattern) + 7 * ooo
    bursts = bursts_for(random.Random(seed), n, 12, write=False)
    got, sub = run_reads(n, bursts, pattern, seed, ooo=ooo)
    for i in range(n):
        want = [beat for b in bursts[i] for beat in read_beats(b)]
        assert got[i] == want, f"manager {i}"
    # The shared port's ID is {index, id}; each manager's requests, in order, with its index.
    issued = [(arid >> CFG.axi_id_width, arid & 15, addr) for _, _, arid, addr in sub.log]
    for i in range(n):
        mine = [(a, ident) for idx, ident, a in issued if idx == i]
        assert mine == [(b.addr, b.id) for b in bursts[i]]


@pytest.mark.parametrize("ooo", [False, True], ids=["in-order", "out-of-order"])
@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("n", [1, 2, 3])
def test_writes_land_and_answer_their_manager(n, pattern, ooo):
    seed = 200 * n + PATTERNS.index(pattern) + 7 * ooo
    bursts = bursts_for(random.Random(seed), n, 12, write=True)
    got, sub = run_writes(n, bursts, pattern, seed, ooo=ooo)
    for i in range(n):
        assert got[i] == [(IDS[i], 0)] * len(bursts[i]), f"manager {i}"
    want = {b.addr + k * BUS: v for bs in bursts for b in bs for k, v in enumerate(b.data)}
    assert sub.mem == want
    issued = [(awid >> CFG.axi_id_width, addr) for _, _, awid, addr in sub.log]
    for i in range(n):
        assert [a for idx, a in issued if idx == i] == [b.addr for b in bursts[i]]


def test_round_robin_grants():
    """Three managers that always have a request are granted in turn, from manager 0."""
    bursts = bursts_for(random.Random(5), 3, 6, write=False)
    _, sub = run_reads(3, bursts, "always", 5)
    order = [arid >> CFG.axi_id_width for _, _, arid, _ in sub.log]
    assert order[:12] == [0, 1, 2] * 4


@pytest.mark.parametrize("n", [1, 2, 3])
def test_one_manager_streams_one_beat_per_cycle(n):
    """Manager 0 alone, memory without pauses: R and W carry a beat every cycle (16-beat bursts;
    for W also 1-beat bursts, where the next burst's AW must overtake the W beats)."""
    empty = [[] for _ in range(n - 1)]
    reads = [Burst(0, 3, k * 128, 16) for k in range(8)]
    cycles: dict = {}
    got, _ = run_reads(n, [reads, *empty], "always", 1, latency=(2, 2), cycles=cycles)
    assert len(got[0]) == 128
    r = cycles["r"]
    assert r[-1] - r[0] + 1 == len(r) == 128, f"{len(r)} R beats in {r[-1] - r[0] + 1} cycles"
    for beats in (16, 1):
        writes = [Burst(0, 3, k * 128, beats, list(range(beats))) for k in range(128 // beats)]
        cycles = {}
        run_writes(n, [writes, *empty], "always", 1, latency=(2, 2), cycles=cycles)
        w = cycles["w"]
        assert w[-1] - w[0] + 1 == len(w) == 128, f"{len(w)} W beats in {w[-1] - w[0] + 1} cycles"


def test_port_signatures():
    rd = AxiReadArbiter(n=3, config=CFG)
    assert rd.axi.signature == AXI4Signature(addr_width=32, data_width=64, id_width=6, write=False)
    assert rd.managers[2].signature.flip() == AXI4Signature.for_config(CFG, write=False)
    wr = AxiWriteArbiter(n=2, config=CFG)
    assert wr.axi.signature == AXI4Signature(addr_width=32, data_width=64, id_width=5, read=False)
    assert wr.max_outstanding == 4
    assert AxiWriteArbiter(n=1, config=CFG).axi.signature.id_width == 4


@pytest.mark.parametrize(("make", "error", "message"), [
    (lambda: AxiReadArbiter(n=0, config=CFG), ValueError,
     "AxiReadArbiter manager count must be a positive integer, not 0"),
    (lambda: AxiReadArbiter(n=True, config=CFG), TypeError,
     "AxiReadArbiter manager count must be a positive integer, not True"),
    (lambda: AxiWriteArbiter(n="2", config=CFG), TypeError,
     "AxiWriteArbiter manager count must be a positive integer, not '2'"),
    (lambda: AxiReadArbiter(n=2, config=None), TypeError,
     "AxiReadArbiter config must be a HwConfig, not None"),
    (lambda: AxiWriteArbiter(n=2, config=CFG, max_outstanding=0), ValueError,
     "AxiWriteArbiter max_outstanding must be a positive integer, not 0"),
    (lambda: AxiReadArbiter(2, CFG), TypeError, None),
    (lambda: HwConfig(axi_ports=0), ValueError,
     "HwConfig.axi_ports must be a positive integer, not 0"),
])  # fmt: skip
def test_constructor_misuse(make, error, message):
    with pytest.raises(error, match=None if message is None else f"^{re.escape(message)}$"):
        make()


@pytest.mark.parametrize(("ports", "want"), [
    (None, {"m_axi_load_x": 4, "m_axi_load_gate": 4, "m_axi_load_up": 4, "m_axi_load_down": 4,
            "m_axi_store": 4}),
    (1, {"m_axi_rd0": 6, "m_axi_wr0": 4}),
    (2, {"m_axi_rd0": 5, "m_axi_rd1": 5, "m_axi_wr0": 4}),
    (8, {"m_axi_rd0": 4, "m_axi_rd1": 4, "m_axi_rd2": 4, "m_axi_rd3": 4, "m_axi_wr0": 4}),
])  # fmt: skip
def test_elaborated_graph_shares_ports(ports, want):
    """SwiGLU's four loads and one store on ``axi_ports`` read and write ports: the ports present,
    their ID widths, and the description ``convert`` writes."""
    top = ElaboratedGraph(swiglu.hardware(), HwConfig(axi_ports=ports))
    for block in [top, *top.blocks.values(), *top._arbiters.values()]:
        block._MustUse__silence = True  # built to inspect, never elaborated
    axi = {
        name: member.signature.id_width
        for name, member in top.signature.members.items()
        if name.startswith("m_axi_")
    }
    assert axi == want
    desc = top.description()
    assert desc["axi_ports"] == list(want)
    managers = [n for names in desc["axi_managers"].values() for n in names]
    assert sorted(managers) == ["load_down", "load_gate", "load_up", "load_x", "store"]
    if ports is not None:
        assert all(p.startswith(("m_axi_rd", "m_axi_wr")) for p in desc["axi_ports"])
    for name in want:
        reads = getattr(top, name).signature.read if hasattr(top, name) else None
        assert reads == name.startswith(("m_axi_rd", "m_axi_load"))
