"""cocotb testbench of the AXI4 arbiters on Verilator (run by test_arbiter_verilator.py).

The design (built there) holds an :class:`~step_hw.memory.AxiReadArbiter` for ``ARB_READS``
managers, ports ``s_axi_rd<i>_*``, onto ``m_axi_rd_*``, and an
:class:`~step_hw.memory.AxiWriteArbiter` for ``ARB_WRITES`` managers, ``s_axi_wr<i>_*``, onto
``m_axi_wr_*``. cocotbext-axi's ``AxiRamRead`` and ``AxiRamWrite`` share one memory behind the
two ports, with pause generators on every channel (random latency and back-pressure). Each
manager is a few coroutines here: an address source (AR or AW), a W source, and a response sink
(R or B), all with their own pauses. The checker compares every manager's R beats with the memory
and, at the end, the memory with every manager's write data.

Not named ``test_*.py``: pytest must not collect it; the cocotb runner imports it inside the
simulator.
"""

from __future__ import annotations

import os
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge
from cocotbext.axi import AxiRamRead, AxiRamWrite, AxiReadBus, AxiWriteBus
from cocotbext.axi.sparse_memory import SparseMemory

from step_hw.cosim.streams import PATTERNS, pauses, reset

READS = int(os.environ.get("ARB_READS", "3"))
WRITES = int(os.environ.get("ARB_WRITES", "2"))
BUS = 8  # bytes per beat (64-bit bus)
READ_IDS = (5, 5, 9, 1)
WRITE_IDS = (3, 3, 12, 0)
REGION = 128  # bytes per burst region: at most 16 beats


async def _offer(dut, prefix: str, items: list[dict], pause) -> None:
    """Offers ``items`` (field -> value) on channel ``prefix`` (e.g. ``s_axi_rd0_ar``), holding
    each until its handshake; ``valid`` never waits for ``ready``."""
    valid, ready = getattr(dut, f"{prefix}valid"), getattr(dut, f"{prefix}ready")
    for item in items:
        while next(pause):
            valid.value = 0
            await RisingEdge(dut.clk)
        for name, value in item.items():
            getattr(dut, prefix + name).value = value
        valid.value = 1
        while True:
            await ReadOnly()
            taken = bool(ready.value)
            await RisingEdge(dut.clk)
            if taken:
                break
    valid.value = 0


async def _take(dut, prefix: str, fields: tuple[str, ...], count: int, pause, got: list) -> None:
    """Takes ``count`` transfers (tuples of ``fields``) on channel ``prefix``, pausing ``ready``."""
    valid, ready = getattr(dut, f"{prefix}valid"), getattr(dut, f"{prefix}ready")
    while len(got) < count:
        ready.value = 0 if next(pause) else 1
        await ReadOnly()
        if ready.value and valid.value:
            got.append(tuple(int(getattr(dut, prefix + f).value) for f in fields))
        await RisingEdge(dut.clk)
    ready.value = 0


def _bursts(rng: random.Random, regions: list[int], count: int) -> list[tuple[int, int]]:
    """``count`` bursts ``(addr, beats)``, each in its own region."""
    return [
        (regions.pop() * REGION, rng.choice([1, 2, 4, rng.randint(1, 16)])) for _ in range(count)
    ]


async def _exercise(dut, pattern: str, rng: random.Random, per_manager: int) -> dict:
    memory = SparseMemory(1 << 16)
    memory.write(0, rng.randbytes(1 << 16))
    rd = AxiRamRead(AxiReadBus.from_prefix(dut, "m_axi_rd"), dut.clk, dut.rst, mem=memory)
    wr = AxiRamWrite(AxiWriteBus.from_prefix(dut, "m_axi_wr"), dut.clk, dut.rst, mem=memory)
    if pattern != "always":
        for ch in (rd.ar_channel, rd.r_channel, wr.aw_channel, wr.w_channel, wr.b_channel):
            ch.set_pause_generator(pauses(pattern, rng=random.Random(rng.getrandbits(32))))

    def pause():
        return pauses(pattern, rng=random.Random(rng.getrandbits(32)))

    regions = list(range((READS + WRITES) * per_manager))
    rng.shuffle(regions)
    reads = [_bursts(rng, regions, per_manager) for _ in range(READS)]
    writes = [_bursts(rng, regions, per_manager) for _ in range(WRITES)]
    data = [[rng.randbytes(beats * BUS) for _, beats in w] for w in writes]
    expected_reads = [
        [memory.read(a + k * BUS, BUS) for a, beats in r for k in range(beats)] for r in reads
    ]
    for ch in ("ar", "aw", "w"):
        for i in range(READS if ch == "ar" else WRITES):
            getattr(dut, f"s_axi_{'rd' if ch == 'ar' else 'wr'}{i}_{ch}valid").value = 0
    await reset(dut.clk, dut.rst)

    tasks, got_r, got_b = [], [[] for _ in range(READS)], [[] for _ in range(WRITES)]
    for i, bursts in enumerate(reads):
        p = f"s_axi_rd{i}_"
        items = [{"id": READ_IDS[i], "addr": a, "len": n - 1, "size": 3, "burst": 1}
                 for a, n in bursts]  # fmt: skip
        beats = sum(n for _, n in bursts)
        tasks.append(cocotb.start_soon(_offer(dut, p + "ar", items, pause())))
        tasks.append(cocotb.start_soon(
            _take(dut, p + "r", ("id", "data", "last", "resp"), beats, pause(), got_r[i])
        ))  # fmt: skip
    for i, bursts in enumerate(writes):
        p = f"s_axi_wr{i}_"
        items = [{"id": WRITE_IDS[i], "addr": a, "len": n - 1, "size": 3, "burst": 1}
                 for a, n in bursts]  # fmt: skip
        beats = [
            {"data": int.from_bytes(d[k * BUS : (k + 1) * BUS], "little"), "strb": 0xFF,
             "last": int(k == n - 1)}
            for (_, n), d in zip(bursts, data[i], strict=True) for k in range(n)
        ]  # fmt: skip
        tasks.append(cocotb.start_soon(_offer(dut, p + "aw", items, pause())))
        tasks.append(cocotb.start_soon(_offer(dut, p + "w", beats, pause())))
        tasks.append(cocotb.start_soon(
            _take(dut, p + "b", ("id", "resp"), len(bursts), pause(), got_b[i])
        ))  # fmt: skip
    for t in tasks:
        await t

    for i in range(READS):
        words = [int.from_bytes(w, "little") for w in expected_reads[i]]
        lasts = [k == n - 1 for _, n in reads[i] for k in range(n)]
        want = [(READ_IDS[i], w, int(last), 0) for w, last in zip(words, lasts, strict=True)]
        assert got_r[i] == want, f"read manager {i}: {len(got_r[i])} beats differ"
    for i in range(WRITES):
        assert got_b[i] == [(WRITE_IDS[i], 0)] * per_manager, f"write manager {i}: {got_b[i]}"
        for (a, _), d in zip(writes[i], data[i], strict=True):
            assert memory.read(a, len(d)) == d, f"write manager {i}: memory at {a:#x} differs"
    return {"reads": sum(len(g) for g in got_r), "writes": sum(len(d) for w in data for d in w)}


@cocotb.test(timeout_time=2, timeout_unit="ms")
@cocotb.parametrize(pattern=PATTERNS)
async def managers_get_their_data(dut, pattern: str) -> None:
    """Every read manager gets exactly its beats with its ID; every write lands; B per manager."""
    Clock(dut.clk, 10, unit="ns").start()
    rng = random.Random(random.getrandbits(32))
    counts = await _exercise(dut, pattern, rng, per_manager=12)
    dut._log.info("%s: %d R beats, %d bytes written, all checked", pattern, *counts.values())


@cocotb.test(timeout_time=1, timeout_unit="ms")
async def read_beats_per_cycle(dut) -> None:
    """Read manager 0 alone, 16-beat bursts, no pauses: R beats per cycle on the shared port."""
    Clock(dut.clk, 10, unit="ns").start()
    memory = SparseMemory(1 << 16)
    AxiRamRead(AxiReadBus.from_prefix(dut, "m_axi_rd"), dut.clk, dut.rst, mem=memory)
    for i in range(READS):
        getattr(dut, f"s_axi_rd{i}_arvalid").value = 0
    for i in range(WRITES):
        for ch in ("aw", "w"):
            getattr(dut, f"s_axi_wr{i}_{ch}valid").value = 0
    await reset(dut.clk, dut.rst)
    items = [{"id": 1, "addr": k * REGION, "len": 15, "size": 3, "burst": 1} for k in range(8)]
    cycles: list[int] = []

    async def watch() -> None:
        cycle = 0
        while True:
            await ReadOnly()
            if dut.m_axi_rd_rvalid.value and dut.m_axi_rd_rready.value:
                cycles.append(cycle)
            await RisingEdge(dut.clk)
            cycle += 1

    cocotb.start_soon(watch())
    cocotb.start_soon(_offer(dut, "s_axi_rd0_ar", items, pauses("always")))
    got: list = []
    await _take(dut, "s_axi_rd0_r", ("data",), 128, pauses("always"), got)
    rate = len(cycles) / (cycles[-1] - cycles[0] + 1)
    dut._log.info("%d R beats in %d cycles: %.3f beats/cycle", len(cycles),
                  cycles[-1] - cycles[0] + 1, rate)  # fmt: skip
    with open(os.environ["ARB_REPORT"], "w") as f:
        f.write(f"{rate:.4f}\n")
