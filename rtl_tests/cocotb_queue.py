"""cocotb testbench for the Verilated `step_hw.queue.Queue` (run by test_queue_verilator.py).

Not named ``test_*.py``: pytest must not collect it; the cocotb runner imports it inside the
simulator. Source -> DUT -> sink, a monitor on each side, the model (a queue is the identity on
the sequence of payloads) and the checker at the end of each test.
"""

import os
import random

import cocotb
from cocotb.clock import Clock
from cocotb.handle import SimHandleBase
from cocotb.triggers import RisingEdge

from step_hw.cosim.streams import PATTERNS, StreamMonitor, StreamSink, StreamSource, pauses, reset

# Set by the pytest side from the Queue it converted.
WIDTH = int(os.environ["QUEUE_WIDTH"])
DEPTH = int(os.environ["QUEUE_DEPTH"])
COUNT = int(os.environ.get("QUEUE_COUNT", "500"))


@cocotb.test(timeout_time=1, timeout_unit="ms")
@cocotb.parametrize(source_pattern=PATTERNS, sink_pattern=PATTERNS)
async def queue_passes_data_in_order(
    dut: SimHandleBase, source_pattern: str, sink_pattern: str
) -> None:
    Clock(dut.clk, 10, unit="ns").start()
    # `random` is seeded by cocotb (COCOTB_RANDOM_SEED); independent streams for each side.
    source_rng, sink_rng = (random.Random(random.getrandbits(32)) for _ in range(2))
    source = StreamSource(dut, "i", dut.clk, pauses(source_pattern, rng=source_rng))
    sink = StreamSink(dut, "o", dut.clk, pauses(sink_pattern, rng=sink_rng))
    await reset(dut.clk, dut.rst)

    sent = StreamMonitor(dut, "i", dut.clk)
    received = StreamMonitor(dut, "o", dut.clk)
    for coroutine in (sent.run(), received.run(), sink.run()):
        cocotb.start_soon(coroutine)

    # Extremes first, so that every bit toggles, then random words.
    stimulus = [0, (1 << WIDTH) - 1, 1 << (WIDTH - 1)]
    stimulus += [random.getrandbits(WIDTH) for _ in range(COUNT - len(stimulus))]
    await source.send(stimulus)
    while len(received.transfers) < len(stimulus):
        await RisingEdge(dut.clk)

    # Model: a queue delivers exactly what it accepted, in order.
    assert [t.payload for t in sent.transfers] == stimulus
    assert [t.payload for t in received.transfers] == stimulus
    # Causality: nothing leaves before it has entered (latency is at least one cycle).
    for entered, left in zip(sent.transfers, received.transfers, strict=True):
        assert left.cycle > entered.cycle, (entered, left)
    if source_pattern == sink_pattern == "always" and DEPTH >= 3:
        # Without stalls a Queue of depth >= 3 moves one payload per cycle (II = 1).
        cycles = [t.cycle for t in received.transfers]
        assert cycles == list(range(cycles[0], cycles[0] + len(cycles)))
    dut._log.info(
        "%d payloads in %d cycles (source %s, sink %s)",
        len(stimulus),
        received.transfers[-1].cycle + 1,
        source_pattern,
        sink_pattern,
    )
