"""cocotb test of the fast co-simulation tier (driven by :func:`step_hw.cosim.run` with
``tier="fast"``); cocotb imports it by name inside the simulator, nothing else imports it.

The top module is :data:`~step_hw.cosim.fast_top.FAST_TOP` (memory, Source ROMs and Sink recorders
in the simulation, loaded and dumped through plusargs that the harness sets). Python runs only to
reset, pulse ``start``, wait for ``done`` (in steps of at most ``GRAPH_CHECK`` cycles, checking the
watchdog between them), pulse ``dump`` and write ``GRAPH_RESULT``: no coroutine runs per clock
cycle.

Environment: ``GRAPH_DESC`` (the design's description with this run's queue depths and the
values of its run-time settings, ``queue_limits`` and ``geometry``), ``GRAPH_WATCHDOG`` (cycles without a
queue handshake before the run fails, reporting every queue's level to ``GRAPH_REPORT``),
``GRAPH_RESULT`` (``.npz``: cycles and raised flags).
"""

from __future__ import annotations

import json
import os
import time

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import First, RisingEdge, Timer

from step_hw.cosim.fast_top import QUEUE_LEVEL_BITS, RUN_TIME_INPUTS
from step_hw.cosim.streams import reset

_PERIOD_NS = 10


def _flags(dut, desc: dict) -> list[dict]:
    bits = desc.get("flag_bits", [])
    if not bits or not hasattr(dut, "flags"):
        return []
    value = int(dut.flags.value)
    return [b for i, b in enumerate(bits) if value >> i & 1]


def _levels(dut, desc: dict) -> dict:
    queues = desc.get("queues", {})
    names = sorted(queues)
    levels, ovalid = int(dut.q_levels.value), int(dut.q_ovalid.value)
    mask = (1 << QUEUE_LEVEL_BITS) - 1
    return {
        name: {
            **queues[name],
            "level": levels >> (QUEUE_LEVEL_BITS * i) & mask,
            "out_valid": ovalid >> i & 1,
        }
        for i, name in enumerate(names)
    }


def _report(report: dict) -> None:
    path = os.environ.get("GRAPH_REPORT")
    if path:
        with open(path, "w") as f:
            json.dump(report, f)


@cocotb.test()
async def run_graph_fast(dut) -> None:
    with open(os.environ["GRAPH_DESC"]) as f:
        desc = json.load(f)
    watchdog = int(os.environ.get("GRAPH_WATCHDOG", "20000"))
    check = max(1, min(watchdog // 2, int(os.environ.get("GRAPH_CHECK", "100000"))))
    cocotb.start_soon(Clock(dut.clk, _PERIOD_NS, unit="ns").start())
    dut.start.value = 0
    dut.dump.value = 0
    for name in RUN_TIME_INPUTS:
        if name in desc:  # run-time queue depths and geometry, held from before the reset
            getattr(dut, name).value = int(desc[name])
    await reset(dut.clk, dut.rst)
    dut.start.value = 1
    t0 = time.perf_counter()
    await RisingEdge(dut.clk)
    dut.start.value = 0
    while not dut.done.value:
        await First(RisingEdge(dut.done), Timer(check * _PERIOD_NS, unit="ns"))
        if dut.done.value:
            break
        cycles, last = int(dut.cycles.value), int(dut.last_hs.value)
        if cycles - last >= watchdog:
            _report({
                "watchdog": {"from": last, "to": cycles, "cycles": watchdog},
                "queues": _levels(dut, desc),
                "flags": _flags(dut, desc),
            })  # fmt: skip
            raise AssertionError(
                f"no progress: no queue handshake from cycle {last} to {cycles} "
                f"(GRAPH_WATCHDOG={watchdog}); a deadlock or a lost token"
            )
    sim_s = time.perf_counter() - t0
    # `cycles` stops counting at the edge after `done` rises; dump one edge later
    await RisingEdge(dut.clk)
    dut.dump.value = 1
    await RisingEdge(dut.clk)
    dut.dump.value = 0
    await RisingEdge(dut.clk)
    cycles = int(dut.cycles.value)
    flags = _flags(dut, desc)
    if int(dut.mem_error.value):
        _report({"memory_error": True, "flags": flags})
        raise AssertionError("the memory answered SLVERR (an access outside the memory map)")
    if int(dut.sink_overflow.value):
        _report({"sink_overflow": True, "flags": flags})
        raise AssertionError("a Sink took more payloads than its recorder holds")
    if dut.error.value:
        _report({"error": True, "flags": flags})
        raise AssertionError("a block raised its error flag")
    counts = {
        p: int(getattr(dut, f"{p}_count").value)
        for p in desc.get("streams", {})
        if p.startswith("snk_")
    }
    np.savez(
        os.environ["GRAPH_RESULT"],
        cycles=np.array(cycles),
        sim_s=np.array(sim_s),
        flags=np.array(json.dumps(flags)),
        sinks=np.array(json.dumps(counts)),
    )
