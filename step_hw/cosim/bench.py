"""cocotb testbench of a whole elaborated graph (driven by :func:`step_hw.cosim.run`).

cocotb imports this module by name (``step_hw.cosim.bench``) inside the simulator; nothing else
imports it.

Every ``m_axi_<node>`` port gets a cocotbext-axi RAM front end (read or write half) over one
shared memory, loaded with the input tensors at the addresses of the graph's memory map. The bench
pulses ``start``, waits for ``done``, records the cycles from ``start`` to ``done`` and writes the
output tensors (read back from the memory) and the cycle count to ``GRAPH_RESULT`` (an ``.npz``).

Environment (set by :func:`step_hw.cosim.run`):

* ``GRAPH_DESC``: the design's description JSON (memory map with this run's tensor shapes and
  each tensor's ``raw_dtype``, AXI ports, queue instances with this run's depths, and the
  values of the run-time settings the design has, ``queue_limits`` and ``geometry``:
  ``fast_top.RUN_TIME_INPUTS``); the bench imports
  neither the language nor the harness, so a run does not pay for loading them;
* ``GRAPH_DATA``: ``.npz`` of input tensors; ``GRAPH_OUTPUTS``: comma-separated tensors to read;
* ``GRAPH_PAUSES`` (``always``/``periodic``/``random``) and ``GRAPH_SEED``: AXI back-pressure;
* ``GRAPH_AXI_ERRORS``: comma-separated tensors whose reads and writes the memory answers with
  ``SLVERR`` (to test that the error is reported by node);
* ``GRAPH_WATCHDOG``: fail after this many cycles without a handshake on any queue (the failure
  lists the full and the empty queues: where a deadlock or a lost token sits);
* ``GRAPH_SOURCES``: JSON of each ``src_<node>`` port's payloads (hex strings), offered in order
  with the pause pattern; ``GRAPH_SINKS``: where the payloads each ``snk_<node>`` port took are
  written (JSON, hex strings);
* ``GRAPH_REPORT``: where the bench writes what went wrong (JSON: the watchdog's queue levels,
  the raised flags), for :func:`step_hw.cosim.run` to turn into the :class:`CosimError` message;
* ``GRAPH_TRACE`` (optional): write every queue's input handshake cycles there (JSON), to compare
  the simulator's timing with the RTL's stream by stream. Slow: it samples every queue each cycle.
"""

from __future__ import annotations

import json
import os
import random
import time

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge
from cocotbext.axi import AxiRamRead, AxiRamWrite, AxiReadBus, AxiWriteBus
from cocotbext.axi.sparse_memory import SparseMemory

from step_hw.cosim.fast_top import RUN_TIME_INPUTS
from step_hw.cosim.streams import StreamMonitor, StreamSink, StreamSource, reset
from step_hw.testing import pauses

#: Queue state is compared every this many cycles (reading every queue each cycle is slow).
_CHECK_EVERY = 16


class _QueueWatch:
    """Handles of the queue instances of an elaborated graph (public signals under Verilator)."""

    def __init__(self, dut, queues: dict):
        self.names = sorted(queues)
        self.info = queues
        self.handles = []
        for name in self.names:
            q = getattr(dut, name)
            fifo = q.fifo
            self.handles.append((q.i__valid, q.i__ready, q.o__valid, q.o__ready, fifo.level))
        # produce/consume pointers change on every handshake; level alone would miss a push and
        # a pop in the same cycle.
        self.pointers = []
        for name in self.names:
            fifo = getattr(dut, name).fifo
            self.pointers.append(
                tuple(
                    getattr(fifo, p)
                    for p in ("inner_level", "w_port__addr", "r_port__addr", "r_rdy")
                    if hasattr(fifo, p)
                )
            )

    def fingerprint(self) -> tuple:
        out = []
        for hs, ptrs in zip(self.handles, self.pointers, strict=True):
            out.append(int(hs[4].value))
            out.extend(int(p.value) for p in ptrs)
        return tuple(out)

    def levels(self) -> dict:
        """Each queue's stream, consumer, depth, level and output valid (for the report)."""
        return {
            name: {**self.info[name], "level": int(hs[4].value), "out_valid": int(hs[2].value)}
            for name, hs in zip(self.names, self.handles, strict=True)
        }


def _raised_flags(dut, desc: dict) -> list[dict]:
    """The (node, flag) of every bit of the ``flags`` port that is set."""
    bits = desc.get("flag_bits", [])
    if not bits or not hasattr(dut, "flags"):
        return []
    value = int(dut.flags.value)
    return [b for i, b in enumerate(bits) if value >> i & 1]


def _write_report(report: dict) -> None:
    path = os.environ.get("GRAPH_REPORT")
    if path:
        with open(path, "w") as f:
            json.dump(report, f)


_AXI_CHANNELS = ("ar", "r", "aw", "w", "b")


def _fail_accesses(ram, ranges: list[tuple[int, int]]) -> None:
    """Make ``ram`` answer SLVERR to every beat inside ``ranges`` (cocotbext-axi's RAM does when
    its memory access raises)."""
    write = isinstance(ram, AxiRamWrite)
    access = ram._write if write else ram._read

    async def failing(address: int, data_or_length):
        if any(lo <= address < hi for lo, hi in ranges):
            raise OSError(f"injected SLVERR at {address:#x}")
        return await access(address, data_or_length)

    if write:
        ram._write = failing
    else:
        ram._read = failing


async def _trace(dut, watch: _QueueWatch, ports: list[str], events: dict) -> None:
    """Record each queue's input handshakes and each AXI channel's (cycles after ``start``)."""
    axi = []
    for port in ports:
        for ch in _AXI_CHANNELS:
            if hasattr(dut, f"{port}_{ch}valid"):
                valid, ready = getattr(dut, f"{port}_{ch}valid"), getattr(dut, f"{port}_{ch}ready")
                events[f"{port}.{ch}"] = []
                axi.append((f"{port}.{ch}", valid, ready))
    cycle = 0
    while True:
        await ReadOnly()
        for name, hs in zip(watch.names, watch.handles, strict=True):
            if int(hs[0].value) and int(hs[1].value):
                events[name].append(cycle)
        for name, valid, ready in axi:
            if int(valid.value) and int(ready.value):
                events[name].append(cycle)
        await RisingEdge(dut.clk)
        cycle += 1


@cocotb.test()
async def run_graph(dut) -> None:
    with open(os.environ["GRAPH_DESC"]) as f:
        desc = json.load(f)
    data = np.load(os.environ["GRAPH_DATA"])
    outputs = [o for o in os.environ.get("GRAPH_OUTPUTS", "").split(",") if o]
    pattern = os.environ.get("GRAPH_PAUSES", "always")
    rng = random.Random(int(os.environ.get("GRAPH_SEED", "0")))
    watchdog = int(os.environ.get("GRAPH_WATCHDOG", "20000"))
    sources: dict = {}
    if os.environ.get("GRAPH_SOURCES"):
        with open(os.environ["GRAPH_SOURCES"]) as f:
            sources = json.load(f)
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    layout = desc["memory_map"]
    end = max((info["addr"] + info["bytes"] for info in layout.values()), default=0)
    memory = SparseMemory(max(2**20, 1 << max(end - 1, 1).bit_length()))
    failing = [
        (layout[name]["addr"], layout[name]["addr"] + layout[name]["bytes"])
        for name in os.environ.get("GRAPH_AXI_ERRORS", "").split(",")
        if name
    ]
    for port in desc["axi_ports"]:
        if hasattr(dut, f"{port}_arvalid"):
            ram = AxiRamRead(AxiReadBus.from_prefix(dut, port), dut.clk, dut.rst, mem=memory)
            channels = (ram.ar_channel, ram.r_channel)
        else:
            ram = AxiRamWrite(AxiWriteBus.from_prefix(dut, port), dut.clk, dut.rst, mem=memory)
            channels = (ram.aw_channel, ram.w_channel, ram.b_channel)
        if failing:
            _fail_accesses(ram, failing)
        if pattern != "always":
            for channel in channels:
                channel.set_pause_generator(pauses(pattern, rng=random.Random(rng.getrandbits(32))))
    # Sink nodes are top-level `snk_<node>` streams (e.g. a random store's acks): drain them,
    # pausing by the same pattern, under a protocol monitor that records their tokens; `done`
    # waits for their done tokens.
    monitors = {}
    for port in desc.get("streams", {}):
        if port.startswith("snk_"):
            pause = pauses(pattern, rng=random.Random(rng.getrandbits(32)))
            cocotb.start_soon(StreamSink(dut, port, dut.clk, pause).run())
            monitors[port] = StreamMonitor(dut, port, dut.clk)
            cocotb.start_soon(monitors[port].run())
    drivers = {
        port: StreamSource(
            dut, port, dut.clk, pauses(pattern, rng=random.Random(rng.getrandbits(32)))
        )
        for port in desc.get("streams", {})
        if port.startswith("src_")
    }
    for name, info in layout.items():
        if f"in_{name}" in data.files:
            array = data[f"in_{name}"].astype(info["raw_dtype"])
            memory.write(info["addr"], array.tobytes())
    watch = _QueueWatch(dut, desc.get("queues", {}))
    dut.start.value = 0
    for name in RUN_TIME_INPUTS:
        if name in desc:  # run-time queue depths and geometry, held from before the reset
            getattr(dut, name).value = int(desc[name])
    await reset(dut.clk, dut.rst)
    dut.start.value = 1
    for port, driver in drivers.items():
        cocotb.start_soon(driver.send(int(p, 16) for p in sources.get(port, [])))
    trace_path = os.environ.get("GRAPH_TRACE")
    events: dict = {name: [] for name in watch.names}
    if trace_path:
        cocotb.start_soon(_trace(dut, watch, desc["axi_ports"], events))
    t0 = time.perf_counter()
    await RisingEdge(dut.clk)
    dut.start.value = 0
    cycles = 1
    last_print, last_change = None, 0
    every = max(1, min(_CHECK_EVERY, watchdog // 2))
    while not dut.done.value:
        await RisingEdge(dut.clk)
        cycles += 1
        if cycles % every == 0:
            print_ = watch.fingerprint()
            if print_ != last_print:
                last_print, last_change = print_, cycles
            elif cycles - last_change >= watchdog:
                _write_report({
                    "watchdog": {"from": last_change, "to": cycles, "cycles": watchdog},
                    "queues": watch.levels(),
                    "flags": _raised_flags(dut, desc),
                })  # fmt: skip
                raise AssertionError(
                    f"no progress: no queue handshake from cycle {last_change} to {cycles} "
                    f"(GRAPH_WATCHDOG={watchdog}); a deadlock or a lost token"
                )
    sim_s = time.perf_counter() - t0
    flags = _raised_flags(dut, desc)
    if os.environ.get("GRAPH_SINKS"):
        with open(os.environ["GRAPH_SINKS"], "w") as f:
            json.dump({p: [hex(t.payload) for t in m.transfers] for p, m in monitors.items()}, f)
    if dut.error.value:
        _write_report({"error": True, "flags": flags})
        raise AssertionError("a block raised its error flag")
    result = {
        "cycles": np.array(cycles),
        "sim_s": np.array(sim_s),
        "flags": np.array(json.dumps(flags)),
    }
    for name in outputs:
        info = layout[name]
        dt = np.dtype(info["raw_dtype"])
        raw = memory.read(info["addr"], info["bytes"])
        result[f"out_{name}"] = np.frombuffer(raw, dtype=dt).reshape(info["shape"])
    np.savez(os.environ["GRAPH_RESULT"], **result)
    if trace_path:
        with open(trace_path, "w") as f:
            json.dump(
                {n: {**watch.info.get(n, {}), "push": events[n]} for n in events}, f, indent=0
            )
