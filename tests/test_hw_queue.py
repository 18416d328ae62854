# amaranth: UnusedElaboratable=no
# (Queues built only to test their constructor or `connect` are never elaborated.)
"""Amaranth-simulator tests of `step_hw.queue.Queue`."""

import itertools
import random

import pytest
from amaranth.hdl import Elaboratable, Module, Signal, signed
from amaranth.lib import data, fifo, wiring
from amaranth.sim import Simulator
from hypothesis import given, settings
from hypothesis import strategies as st

from step_hw.queue import LimitedFIFO, Queue
from step_hw.testing import (
    PATTERNS,
    Transfer,
    pauses,
    stream_checker,
    stream_sink,
    stream_source,
)

# A token-like payload (the real one comes from step_hw.payload): the queue must not care.
TOKEN = data.StructLayout({"data": 16, "stop": 3, "kind": 2})


def run_with_watchdog(sim: Simulator, *, cycles: int) -> None:
    """``sim.run()``, but a hang (e.g. a lost payload the sink waits for) fails the test.

    Not ``run_until``: it always simulates up to the deadline, even when the testbenches are done.
    """
    steps = 4 * cycles  # a clock cycle is two edges, plus testbench wake-ups
    for _ in range(steps):
        if not sim.advance():
            return
    raise AssertionError(f"simulation still running after {steps} steps")


def run_queue(
    dut: Queue,
    payloads: list[int],
    source_pause,
    sink_pause,
) -> tuple[list[int], list[Transfer], list[Transfer]]:
    """Push ``payloads`` through ``dut``; return what the sink got and both sides' transfers.

    Protocol checkers watch both ports: the testbench's source on ``i``, the queue on ``o``.
    """
    received: list[int] = []
    accepted: list[Transfer] = []
    delivered: list[Transfer] = []
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(stream_source(dut.i, payloads, source_pause))
    sim.add_testbench(stream_sink(dut.o, len(payloads), sink_pause, received))
    sim.add_process(stream_checker(dut.i, accepted))
    sim.add_process(stream_checker(dut.o, delivered))
    run_with_watchdog(sim, cycles=20 * len(payloads) + 100)
    assert len(received) == len(payloads), f"only {len(received)} of {len(payloads)} arrived"
    return received, accepted, delivered


@pytest.mark.parametrize("depth", [1, 2, 3, 5])
@pytest.mark.parametrize("sink_pattern", PATTERNS)
@pytest.mark.parametrize("source_pattern", PATTERNS)
def test_data_arrive_in_order(source_pattern: str, sink_pattern: str, depth: int):
    rng = random.Random(f"{source_pattern}/{sink_pattern}/{depth}")
    payloads = [0, 0xFF, 0x80, *(rng.getrandbits(8) for _ in range(150))]
    dut = Queue(shape=8, depth=depth)
    received, accepted, delivered = run_queue(
        dut,
        payloads,
        pauses(source_pattern, rng=random.Random(rng.getrandbits(32))),
        pauses(sink_pattern, rng=random.Random(rng.getrandbits(32))),
    )
    assert received == payloads
    assert [t.payload for t in accepted] == payloads
    assert [t.payload for t in delivered] == payloads
    for entered, left in zip(accepted, delivered, strict=True):
        assert left.cycle > entered.cycle


@pytest.mark.parametrize(
    ("depth", "latency", "interval"),
    [
        # Measured; see the Queue docstring. Depth <= 2 halves the throughput.
        (1, 1, 2),
        (2, 2, 2),
        (3, 2, 1),
        (4, 2, 1),
        (8, 2, 1),
    ],
)
def test_latency_and_throughput(depth: int, latency: int, interval: int):
    """Source always valid, sink always ready: cycle of each transfer on both sides."""
    count = 32
    _, accepted, delivered = run_queue(
        Queue(shape=8, depth=depth),
        list(range(count)),
        pauses("always"),
        pauses("always"),
    )
    assert [t.cycle for t in accepted] == [interval * n for n in range(count)]
    assert [t.cycle for t in delivered] == [latency + interval * n for n in range(count)]


@pytest.mark.parametrize("depth", [1, 2, 3, 4, 7])
def test_capacity(depth: int):
    """With the sink stalled, the queue accepts exactly ``depth`` payloads and then pushes back."""
    dut = Queue(shape=8, depth=depth)
    accepted: list[Transfer] = []

    async def bench(ctx):
        ctx.set(dut.o.ready, 0)
        ctx.set(dut.i.valid, 1)
        await ctx.tick().repeat(4 * depth + 4)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.add_process(stream_checker(dut.i, accepted))
    sim.run()
    assert len(accepted) == depth


@pytest.mark.parametrize(
    ("shape", "payloads"),
    [
        (signed(7), [-64, 63, -1, 0, 1]),
        # Tiles, stop tokens and done tokens are all just bits to the queue.
        (
            TOKEN,
            [
                TOKEN.const({"data": d, "stop": s, "kind": k}).as_bits()
                for d, s, k in [(0xBEEF, 0, 0), (0, 1, 1), (0, 7, 1), (0xFFFF, 0, 0), (0, 0, 3)]
            ],
        ),
    ],
)
def test_payload_shapes(shape, payloads: list[int]):
    # Raw bits on both sides (signed payloads sample as signed ints).
    received, _, _ = run_queue(
        Queue(shape=shape, depth=3), payloads, pauses("periodic"), pauses("random")
    )
    assert received == payloads


def test_chains_with_connect():
    m = Module()
    m.submodules.a = a = Queue(shape=TOKEN, depth=2)
    m.submodules.b = b = Queue(shape=TOKEN, depth=2)
    wiring.connect(m, a.o, b.i)
    # Amaranth 0.5 `connect` compares payload widths (not layouts): a width mismatch fails.
    with pytest.raises(
        wiring.ConnectionError,
        match=r"^Cannot connect the member 'arg1\.payload' with shape unsigned\(16\) to the "
        r"member 'arg0\.payload' with shape unsigned\(8\) because the shape widths \(16 and 8\) "
        r"do not match$",
    ):
        wiring.connect(Module(), Queue(shape=8, depth=2).o, Queue(shape=16, depth=2).i)


@settings(max_examples=25, deadline=None)
@given(
    depth=st.integers(1, 6),
    payloads=st.lists(st.integers(0, 15), max_size=40),
    source_stalls=st.lists(st.booleans(), min_size=1, max_size=16),
    sink_stalls=st.lists(st.booleans(), min_size=1, max_size=16),
)
def test_order_under_any_stall_pattern(depth, payloads, source_stalls, sink_stalls):
    # Repeating stall patterns of at most 16 cycles; at least one cycle of each must not stall.
    source_stalls = [*source_stalls, False]
    sink_stalls = [*sink_stalls, False]
    received, _, _ = run_queue(
        Queue(shape=4, depth=depth),
        payloads,
        itertools.cycle(source_stalls),
        itertools.cycle(sink_stalls),
    )
    assert received == payloads


def test_watchdog_catches_lost_payload():
    # A sink waiting for a payload that never comes fails instead of hanging.
    dut = Queue(shape=8, depth=3)
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(stream_source(dut.i, [1, 2], pauses("always")))
    sim.add_testbench(stream_sink(dut.o, 3, pauses("always"), []))
    with pytest.raises(AssertionError, match=r"^simulation still running after 400 steps$"):
        run_with_watchdog(sim, cycles=100)


@pytest.mark.parametrize(
    ("violation", "message"),
    [
        ("drop", r"^valid dropped in cycle \d+ before the transfer$"),
        ("change", r"^payload changed from 0x12 to 0x34 in cycle \d+ before the transfer$"),
    ],
)
def test_checker_catches_violations(violation: str, message: str):
    # The protocol checker must be able to fail: a producer breaking the rules is reported.
    dut = Queue(shape=8, depth=2)

    async def bad_producer(ctx):
        ctx.set(dut.o.ready, 1)
        ctx.set(dut.i.payload, 0x12)
        ctx.set(dut.i.valid, 1)
        # Depth 2 stalls every other cycle: break the rules right after an edge where the payload
        # was offered but not taken. Plain ticks, not `until`/`repeat`: the simulation stops at
        # the checker's assertion with this coroutine suspended, and their async generators
        # complain when collected later.
        while True:
            _, _, ready = await ctx.tick().sample(dut.i.ready)
            if not ready:
                break
        if violation == "drop":
            ctx.set(dut.i.valid, 0)
        else:
            ctx.set(dut.i.payload, 0x34)
        for _ in range(2):
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bad_producer)
    sim.add_process(stream_checker(dut.i, []))
    with pytest.raises(AssertionError, match=message):
        sim.run()


@pytest.mark.parametrize(
    ("depth", "error", "message"),
    [
        (0, ValueError, r"^Queue depth must be a positive integer, not 0$"),
        (-3, ValueError, r"^Queue depth must be a positive integer, not -3$"),
        (2.0, TypeError, r"^Queue depth must be a positive integer, not 2\.0$"),
        (True, TypeError, r"^Queue depth must be a positive integer, not True$"),
        ("4", TypeError, r"^Queue depth must be a positive integer, not '4'$"),
    ],
)
def test_depth_validation(depth, error, message):
    with pytest.raises(error, match=message):
        Queue(shape=8, depth=depth)


def test_shape_validation():
    with pytest.raises(
        TypeError, match=r"^Object 'wide' cannot be converted to an Amaranth shape$"
    ):
        Queue(shape="wide", depth=4)


def test_keyword_only():
    with pytest.raises(TypeError, match=r"takes 1 positional argument but 3 were given$"):
        Queue(8, 4)  # type: ignore[misc]


# -- run-time depths ------------------------------------------------------------------------------


class _Pair(Elaboratable):
    """A LimitedFIFO at ``limit`` beside the SyncFIFOBuffered of that depth, fed the same inputs."""

    def __init__(self, capacity: int, limit: int):
        self.ref = fifo.SyncFIFOBuffered(width=8, depth=limit)
        self.dut = LimitedFIFO(width=8, capacity=capacity)
        self.limit = limit
        self.w_data, self.w_en, self.r_en = Signal(8), Signal(), Signal()

    def elaborate(self, platform):
        m = Module()
        m.submodules.ref, m.submodules.dut = self.ref, self.dut
        for f in (self.ref, self.dut):
            m.d.comb += [f.w_data.eq(self.w_data), f.w_en.eq(self.w_en), f.r_en.eq(self.r_en)]
        m.d.comb += self.dut.limit.eq(self.limit)
        return m


@pytest.mark.parametrize(
    ("capacity", "limit"), [(c, n) for c in (2, 3, 5, 8) for n in range(1, c + 1)]
)
def test_a_limited_fifo_is_cycle_equal_to_the_buffered_fifo_of_its_limit(capacity, limit):
    """Every cycle of 600, with writes and reads requested at random (full and empty included):
    the same ``w_rdy``, ``r_rdy``, ``level`` and, when readable, ``r_data``."""
    pair = _Pair(capacity, limit)
    rng = random.Random(f"{capacity}/{limit}")
    seen = {"full": 0, "empty": 0, "moves": 0}

    async def bench(ctx):
        for cycle in range(600):
            # phases that fill and drain it, and phases of random traffic
            phase = (cycle // 50) % 3
            w = rng.random() < (0.9 if phase == 0 else 0.1 if phase == 1 else 0.5)
            r = rng.random() < (0.1 if phase == 0 else 0.9 if phase == 1 else 0.5)
            ctx.set(pair.w_data, rng.getrandbits(8))
            ctx.set(pair.w_en, w)
            ctx.set(pair.r_en, r)
            ref, dut = pair.ref, pair.dut
            got = [ctx.get(s) for s in (dut.w_rdy, dut.r_rdy, dut.level)]
            want = [ctx.get(s) for s in (ref.w_rdy, ref.r_rdy, ref.level)]
            assert got == want, f"cycle {cycle}: (w_rdy, r_rdy, level) {got}, want {want}"
            if want[1]:
                assert ctx.get(dut.r_data) == ctx.get(ref.r_data), f"cycle {cycle}: r_data"
            seen["full"] += want[2] == limit
            seen["empty"] += want[2] == 0
            seen["moves"] += (w and want[0]) + (r and want[1])
            await ctx.tick()

    sim = Simulator(pair)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    # the comparison covered a full and an empty FIFO and moved payloads
    assert seen["full"] > 10 and seen["empty"] > 10 and seen["moves"] > 150


@pytest.mark.parametrize(("capacity", "limit"), [(1, 1), (4, 1), (4, 2), (4, 3), (4, 4), (7, 3)])
def test_a_queue_with_a_run_time_depth_moves_like_the_queue_of_that_depth(capacity, limit):
    """The stream-level timing (latency, interval) and order under back-pressure of a
    ``Queue(capacity=...)`` at ``limit`` are those of ``Queue(depth=limit)``."""

    def transfers(make, pattern):
        class Top(Elaboratable):
            def __init__(self):
                self.q = make()
                self.i, self.o = self.q.i, self.q.o

            def elaborate(self, platform):
                m = Module()
                m.submodules.q = self.q
                if "limit" in self.q.signature.members:
                    m.d.comb += self.q.limit.eq(limit)
                return m

        rng = random.Random(f"{pattern}/{capacity}/{limit}")
        payloads = [rng.getrandbits(8) for _ in range(60)]
        received, accepted, delivered = run_queue(
            Top(), payloads,
            pauses(pattern, rng=random.Random(rng.getrandbits(32))),
            pauses(pattern, rng=random.Random(rng.getrandbits(32))),
        )  # fmt: skip
        assert received == payloads
        return accepted, delivered

    for pattern in PATTERNS:
        assert transfers(lambda: Queue(shape=8, capacity=capacity), pattern) == transfers(
            lambda: Queue(shape=8, depth=limit), pattern
        ), pattern


def test_a_queue_takes_a_depth_or_a_capacity():
    with pytest.raises(TypeError, match=r"^Queue needs a depth or a capacity"):
        Queue(shape=8)
    with pytest.raises(TypeError, match=r"^Queue needs a depth or a capacity"):
        Queue(shape=8, depth=2, capacity=3)
    with pytest.raises(ValueError, match=r"^Queue capacity must be a positive integer, not 0$"):
        Queue(shape=8, capacity=0)
    assert Queue(shape=8, capacity=4).capacity == 4 and Queue(shape=8, capacity=4).depth is None
    assert "limit" not in Queue(shape=8, capacity=1).signature.members
    with pytest.raises(ValueError, match=r"^LimitedFIFO capacity must be 2 or more, not 1 "):
        LimitedFIFO(width=8, capacity=1)
