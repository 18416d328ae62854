"""cocotb testbench for the Verilated AXI4 controllers of `step_hw.memory` (run by
test_axi_verilator.py; the case is named by ``AXI_CASE``, see `cocotb_axi_cases.py`).

Not named ``test_*.py``: pytest must not collect it; the cocotb runner imports it inside the
simulator. Structure: sources drive the controller's input streams, cocotbext-axi's ``AxiRamRead``
/ ``AxiRamWrite`` is the memory (with pause generators on every channel: random latency and
back-pressure), sinks and monitors take the output streams, the model is `step_lang.interpret`
on the same graph and data (`cocotb_axi_cases.AxiCase.stimulus`), and the checker compares tokens
and memory at the end.
"""

from __future__ import annotations

import os
import random

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.handle import SimHandleBase
from cocotb.triggers import ReadOnly, RisingEdge
from cocotbext.axi import AxiRamRead, AxiRamWrite, AxiReadBus, AxiWriteBus

from rtl_tests.cocotb_axi_cases import CASES, Stimulus
from step_hw.cosim.streams import PATTERNS, StreamMonitor, StreamSink, StreamSource, pauses, reset
from step_lang import DONE
from step_lang.tokens import Stop

CASE = CASES[os.environ["AXI_CASE"]]
MEMORY_BYTES = 1 << 16


def _norm(tokens: list) -> list:
    return [
        repr(t) if isinstance(t, Stop) or t is DONE else np.asarray(t).astype(np.int64).tolist()
        for t in tokens
    ]


def _bytes(array: np.ndarray) -> bytes:
    return np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes()


class AxiBench:
    """The memory side: an AXI4 RAM on the controller's ``m_axi_*`` ports, with pauses."""

    def __init__(self, dut: SimHandleBase, pattern: str, rng: random.Random):
        self.dut = dut
        write = CASE.kind.endswith("Store")
        if write:
            self.ram = AxiRamWrite(
                AxiWriteBus.from_prefix(dut, "m_axi"), dut.clk, dut.rst, size=MEMORY_BYTES
            )
            channels = (self.ram.aw_channel, self.ram.w_channel, self.ram.b_channel)
        else:
            self.ram = AxiRamRead(
                AxiReadBus.from_prefix(dut, "m_axi"), dut.clk, dut.rst, size=MEMORY_BYTES
            )
            channels = (self.ram.ar_channel, self.ram.r_channel)
        if pattern != "always":
            for channel in channels:
                channel.set_pause_generator(pauses(pattern, rng=random.Random(rng.getrandbits(32))))

    def load(self, stim: Stimulus, rng: random.Random) -> None:
        """Garbage around every tensor, then the tensors."""
        self.garbage = {}
        for addr, array in stim.memory.items():
            self.garbage[addr] = rng.randbytes(array.nbytes + 512)
            self.ram.write(addr - 256, self.garbage[addr])
            self.ram.write(addr, _bytes(array))

    def check_untouched(self, stim: Stimulus) -> None:
        """The 256 bytes on either side of every tensor still hold their garbage."""
        for addr, array in stim.memory.items():
            junk = self.garbage[addr]
            assert self.ram.read(addr - 256, 256) == junk[:256], f"bytes below {addr:#x} changed"
            assert self.ram.read(addr + array.nbytes, 256) == junk[-256:], (
                f"bytes above the tensor at {addr:#x} changed"
            )


async def _run(dut: SimHandleBase, stim: Stimulus, stream_pattern: str, rng: random.Random) -> dict:
    """Feed the inputs, collect the outputs until their done tokens (and ``done`` for a
    LinearStore); return the monitors by port."""
    sources = {
        port: StreamSource(
            dut, port, dut.clk, pauses(stream_pattern, rng=random.Random(rng.getrandbits(32)))
        )
        for port in stim.inputs
    }
    monitors = {}
    for port in stim.outputs:
        sink = StreamSink(
            dut, port, dut.clk, pauses(stream_pattern, rng=random.Random(rng.getrandbits(32)))
        )
        monitors[port] = StreamMonitor(dut, port, dut.clk)
        cocotb.start_soon(sink.run())
    for port in stim.inputs:
        monitors[port] = StreamMonitor(dut, port, dut.clk)
    await reset(dut.clk, dut.rst)
    for monitor in monitors.values():
        cocotb.start_soon(monitor.run())
    for port, (fmt, tokens) in stim.inputs.items():
        cocotb.start_soon(sources[port].send([fmt.pack(t) for t in tokens]))

    def finished() -> bool:
        for port, (fmt, _) in stim.outputs.items():
            transfers = monitors[port].transfers
            if not transfers or fmt.unpack(transfers[-1].payload) is not DONE:
                return False
        return not hasattr(dut, "done") or bool(dut.done.value)

    while not finished():
        await RisingEdge(dut.clk)
    return monitors


def _check(dut: SimHandleBase, stim: Stimulus, monitors: dict, bench: AxiBench) -> None:
    for port, (fmt, want) in stim.outputs.items():
        got = [fmt.unpack(t.payload) for t in monitors[port].transfers]
        assert _norm(got) == _norm(want), f"{port}: {got} != {want}"
    for port, (fmt, sent) in stim.inputs.items():
        assert [t.payload for t in monitors[port].transfers] == [fmt.pack(t) for t in sent]
    for addr, array in stim.expected.items():
        assert bench.ram.read(addr, array.nbytes) == _bytes(array), f"memory at {addr:#x} differs"
    assert int(dut.error.value) == 0


@cocotb.test(timeout_time=1, timeout_unit="ms")
@cocotb.parametrize(stream_pattern=PATTERNS, axi_pattern=PATTERNS)
async def controller_matches_interpreter(
    dut: SimHandleBase, stream_pattern: str, axi_pattern: str
) -> None:
    """Random streams and tensor contents; random stream and AXI back-pressure; compared with
    the interpreter (tokens and memory)."""
    Clock(dut.clk, 10, unit="ns").start()
    rng = random.Random(random.getrandbits(32))  # cocotb seeds `random` (COCOTB_RANDOM_SEED)
    stim = CASE.stimulus(rng)
    bench = AxiBench(dut, axi_pattern, rng)
    bench.load(stim, rng)
    monitors = await _run(dut, stim, stream_pattern, rng)
    _check(dut, stim, monitors, bench)
    bench.check_untouched(stim)
    dut._log.info(
        "%s: %s in, %s out, memory checked",
        CASE.name,
        {port: len(tokens) for port, (_, tokens) in stim.inputs.items()},
        {port: len(tokens) for port, (_, tokens) in stim.outputs.items()},
    )


@cocotb.test(timeout_time=1, timeout_unit="ms")
async def bursts_in_flight(dut: SimHandleBase) -> None:
    """LinearLoad without any pauses: measured R beats per cycle and bursts in flight."""
    Clock(dut.clk, 10, unit="ns").start()
    rng = random.Random(random.getrandbits(32))
    stim = CASE.stimulus(rng, rows=[8, 8])  # 16 walks of 4 tiles, 4 one-beat bursts per tile
    bench = AxiBench(dut, "always", rng)
    bench.load(stim, rng)
    stats = {"in_flight": 0, "most": 0, "beats": []}

    async def watch() -> None:
        cycle = 0
        while True:
            await ReadOnly()
            if dut.m_axi_arvalid.value and dut.m_axi_arready.value:
                stats["in_flight"] += 1
            stats["most"] = max(stats["most"], stats["in_flight"])
            if dut.m_axi_rvalid.value and dut.m_axi_rready.value:
                stats["beats"].append(cycle)
                if dut.m_axi_rlast.value:
                    stats["in_flight"] -= 1
            await RisingEdge(dut.clk)
            cycle += 1

    cocotb.start_soon(watch())
    monitors = await _run(dut, stim, "always", rng)
    _check(dut, stim, monitors, bench)
    beats = stats["beats"]
    rate = len(beats) / (beats[-1] - beats[0] + 1)
    tiles = [t.cycle for t in monitors["o"].transfers]
    dut._log.info(
        "%d R beats in %d cycles (%.2f beats/cycle), at most %d bursts in flight (limit %d); "
        "%d output tokens in %d cycles",
        len(beats), beats[-1] - beats[0] + 1, rate, stats["most"], CASE.max_outstanding,
        len(tiles), tiles[-1] - tiles[0] + 1,
    )  # fmt: skip
    assert len(beats) == 16 * 4 * 4
    assert 2 <= stats["most"] <= CASE.max_outstanding
    # For the pytest side, which reports the measurement.
    with open(os.environ["AXI_REPORT"], "w") as f:
        f.write(f"{rate:.4f} {stats['most']} {len(tiles)} {tiles[-1] - tiles[0] + 1}\n")


@cocotb.test(timeout_time=1, timeout_unit="ms")
@cocotb.parametrize(resp=["SLVERR", "DECERR"])
async def axi_error_response(dut: SimHandleBase, resp: str) -> None:
    """The memory answers the first tensor's reads (writes) with ``resp``: the controller still
    finishes its streams, and raises its sticky ``error`` flag, which stays high."""
    from cocotbext.axi import AxiResp

    Clock(dut.clk, 10, unit="ns").start()
    rng = random.Random(random.getrandbits(32))
    stim = CASE.stimulus(rng, rows=[2, 3])  # every case moves at least one tile
    bench = AxiBench(dut, "always", rng)
    bench.load(stim, rng)
    ram, code = bench.ram, AxiResp[resp]
    ((addr, array),) = stim.memory.items()
    lo, hi = addr, addr + array.nbytes
    write = CASE.kind.endswith("Store")
    access = ram._write if write else ram._read

    async def failing(address: int, data_or_length):  # AxiRam answers SLVERR where this raises
        if lo <= address < hi:
            raise OSError(f"injected {resp} at {address:#x}")
        return await access(address, data_or_length)

    channel = ram.b_channel if write else ram.r_channel
    send = channel.send

    async def send_code(beat) -> None:  # SLVERR as AxiRam gives it, or rewritten to DECERR
        field = "bresp" if write else "rresp"
        if getattr(beat, field) == AxiResp.SLVERR:
            setattr(beat, field, code)
        await send(beat)

    if write:
        ram._write = failing
    else:
        ram._read = failing
    channel.send = send_code
    await reset(dut.clk, dut.rst)  # (_run resets too) the flag of an earlier test is cleared
    assert int(dut.error.value) == 0
    await _run(dut, stim, "always", rng)
    assert int(dut.error.value) == 1, f"{resp} did not raise the error flag"
    for _ in range(20):  # sticky
        await RisingEdge(dut.clk)
        assert int(dut.error.value) == 1
