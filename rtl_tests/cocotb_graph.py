"""cocotb testbench of a whole elaborated graph (run by rtl_tests/test_graph_verilator.py).

Every ``m_axi_<node>`` port gets a cocotbext-axi RAM (read or write half) over one shared memory,
loaded with the input tensors at the addresses of the graph's memory map. The bench pulses
``start``, waits for ``done`` (a watchdog fails the run if it does not come), reads the output
tensors back and compares them with the interpreter's, bit for bit. It records the cycles from
``start`` to ``done``.
"""

from __future__ import annotations

import json
import os
import random

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import RisingEdge
from cocotbext.axi import AxiRamRead, AxiRamWrite, AxiReadBus, AxiWriteBus
from cocotbext.axi.sparse_memory import SparseMemory

from rtl_tests.harness import reset
from step_hw.testing import pauses


@cocotb.test()
async def graph_matches_interpreter(dut) -> None:
    with open(os.environ["GRAPH_DESC"]) as f:
        desc = json.load(f)
    data = np.load(os.environ["GRAPH_DATA"])
    pattern = os.environ.get("GRAPH_PAUSES", "always")
    rng = random.Random(int(os.environ.get("GRAPH_SEED", "0")))
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    memory = SparseMemory(2**20)
    for port in desc["axi_ports"]:
        if hasattr(dut, f"{port}_arvalid"):
            ram = AxiRamRead(AxiReadBus.from_prefix(dut, port), dut.clk, dut.rst, mem=memory)
            channels = (ram.ar_channel, ram.r_channel)
        else:
            ram = AxiRamWrite(AxiWriteBus.from_prefix(dut, port), dut.clk, dut.rst, mem=memory)
            channels = (ram.aw_channel, ram.w_channel, ram.b_channel)
        if pattern != "always":
            for channel in channels:
                channel.set_pause_generator(pauses(pattern, rng=random.Random(rng.getrandbits(32))))
    layout = desc["memory_map"]
    for name, info in layout.items():
        if f"in_{name}" in data.files:
            array = data[f"in_{name}"].astype(np.dtype(info["dtype"]).newbyteorder("<"))
            memory.write(info["addr"], array.tobytes())
    dut.start.value = 0
    await reset(dut.clk, dut.rst)
    dut.start.value = 1
    await RisingEdge(dut.clk)
    dut.start.value = 0
    limit = int(os.environ.get("GRAPH_WATCHDOG", "200000"))
    cycles = 1
    while not dut.done.value:
        await RisingEdge(dut.clk)
        cycles += 1
        assert cycles < limit, (
            f"no done after {limit} cycles (no progress: a deadlock or a lost token)"
        )
    assert not dut.error.value, "a block raised its error flag"
    for key in data.files:
        if not key.startswith("out_"):
            continue
        name = key[len("out_") :]
        info = layout[name]
        dt = np.dtype(info["dtype"]).newbyteorder("<")
        raw = memory.read(info["addr"], info["bytes"])
        got = np.frombuffer(raw, dtype=dt).reshape(info["shape"])
        want = data[key]
        assert np.array_equal(got, want), f"tensor '{name}' differs:\n{got}\nwant\n{want}"
    report = os.environ.get("GRAPH_REPORT")
    if report:
        with open(report, "a") as f:
            f.write(f"{pattern} {cycles}\n")
