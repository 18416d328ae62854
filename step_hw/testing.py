"""Helpers for testing stream blocks: traffic patterns, and Amaranth-simulator stream drivers.

The traffic patterns are plain Python and shared with the cocotb stream drivers
(`step_hw.cosim.streams`), so the Amaranth-simulator tier and the Verilator tier exercise blocks
the same way. Payloads are handled as raw bits (``Value.cast(port.payload)``), so one driver works
for any payload shape, including ``data.Layout`` payloads (STeP tokens).
"""

import random
from collections.abc import Callable, Coroutine, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from amaranth.hdl import Value
from amaranth.lib import stream

from .patterns import PATTERNS, pauses

__all__ = [
    "PATTERNS",
    "Transfer",
    "pauses",
    "stream_checker",
    "stream_sink",
    "stream_source",
]

_Bench = Callable[[Any], Coroutine[Any, Any, None]]


@dataclass(frozen=True)
class Transfer:
    """One transfer on a stream: the cycle (counted from the start of simulation) and payload."""

    cycle: int
    payload: int


def stream_source(port: stream.Interface, payloads: Iterable[int], pause: Iterator[bool]) -> _Bench:
    """A testbench offering ``payloads`` on ``port`` (raw bits), idling when ``pause`` says so.

    Obeys the stream rules: once ``valid``, it holds the payload until the transfer.
    """

    async def bench(ctx) -> None:
        for payload in payloads:
            while next(pause):
                await ctx.tick()
            ctx.set(port.valid, 1)
            ctx.set(Value.cast(port.payload), payload)
            # Plain ticks rather than `ctx.tick().until(...)`: a source abandoned mid-wait (the
            # harness stops once every output is done) must not leave an async generator that
            # Amaranth reports as "already running" when it is collected.
            while not (await ctx.tick().sample(port.ready))[2]:
                pass
            ctx.set(port.valid, 0)

    return bench


def stream_sink(
    port: stream.Interface, count: int, pause: Iterator[bool], received: list[int]
) -> _Bench:
    """A testbench taking ``count`` payloads from ``port`` into ``received``, stalling when
    ``pause`` says so (``ready`` may change in any cycle)."""

    async def bench(ctx) -> None:
        while len(received) < count:
            ready = not next(pause)
            ctx.set(port.ready, ready)
            _, _, valid, payload = await ctx.tick().sample(port.valid, Value.cast(port.payload))
            if ready and valid:
                received.append(payload)
        ctx.set(port.ready, 0)

    return bench


def stream_checker(port: stream.Interface, transfers: list[Transfer]) -> _Bench:
    """A process that records every transfer on ``port`` and checks the producer's side of the
    stream protocol: once ``valid`` is asserted, ``valid`` stays high and ``payload`` stays
    stable until the transfer. Raises ``AssertionError`` on a violation.

    Add it with ``sim.add_process`` (it runs forever in the background).
    """

    async def process(ctx) -> None:
        stalled: int | None = None  # payload offered but not taken at the previous edge
        cycle = 0
        async for _, _, valid, ready, payload in ctx.tick().sample(
            port.valid, port.ready, Value.cast(port.payload)
        ):
            if stalled is not None:
                assert valid, f"valid dropped in cycle {cycle} before the transfer"
                assert payload == stalled, (
                    f"payload changed from {stalled:#x} to {payload:#x} in cycle {cycle} "
                    "before the transfer"
                )
            if valid and ready:
                transfers.append(Transfer(cycle, payload))
            stalled = payload if valid and not ready else None
            cycle += 1

    return process


# -- token-level helpers ----------------------------------------------------------------------


def token_sink(port: stream.Interface, fmt: Any, pause: Iterator[bool], received: list) -> _Bench:
    """A testbench taking tokens from ``port`` (decoded with ``fmt.unpack``) until the done token."""
    from step_lang.tokens import DONE

    async def bench(ctx) -> None:
        while not received or received[-1] is not DONE:
            ready = not next(pause)
            ctx.set(port.ready, ready)
            _, _, valid, payload = await ctx.tick().sample(port.valid, Value.cast(port.payload))
            if ready and valid:
                received.append(fmt.unpack(payload))
        ctx.set(port.ready, 0)

    return bench


@dataclass
class BlockRun:
    """What :func:`run_block` observed: tokens and transfers per output port, the cycles, and
    the block's sticky flags (``error``, ``misaligned``, ``overflow``: whichever it has) at the
    end."""

    outputs: dict[str, list]
    transfers: dict[str, list[Transfer]]
    cycles: int
    flags: dict[str, int] = field(default_factory=dict)


def run_block(
    dut: Any,
    inputs: dict[str, tuple[Any, Any, list]],
    outputs: dict[str, tuple[Any, Any]],
    *,
    pattern: str = "always",
    seed: int = 0,
    max_cycles: int = 10_000,
) -> BlockRun:
    """Drive a stream block in the Amaranth simulator with protocol checkers on every port.

    ``inputs`` maps a name to ``(port, TokenFormat, tokens)`` (tokens end with ``DONE``);
    ``outputs`` maps a name to ``(port, TokenFormat)``. Sources and sinks pause by ``pattern``
    (independent random streams per port for ``"random"``). Fails if a sink has not seen its done
    token within ``max_cycles`` or a checker sees a protocol violation.
    """
    from amaranth.sim import Simulator

    rng = random.Random(seed)
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    transfers: dict[str, list[Transfer]] = {}
    for name, (port, fmt, tokens) in inputs.items():
        payloads = [fmt.pack(t) for t in tokens]
        sim.add_testbench(
            stream_source(port, payloads, pauses(pattern, rng=random.Random(rng.getrandbits(32))))
        )
        transfers[name] = []
        sim.add_process(stream_checker(port, transfers[name]))
    received: dict[str, list] = {}
    for name, (port, fmt) in outputs.items():
        received[name] = []
        sim.add_testbench(
            token_sink(
                port, fmt, pauses(pattern, rng=random.Random(rng.getrandbits(32))), received[name]
            )
        )
        transfers[name] = []
        sim.add_process(stream_checker(port, transfers[name]))
    cycle_counter = {"n": 0}
    members = getattr(getattr(dut, "signature", None), "members", {})
    flags = {name: 0 for name in ("error", "misaligned", "overflow") if name in members}

    signals = [getattr(dut, name) for name in flags]

    async def clock(ctx) -> None:
        async for _, _, *values in ctx.tick().sample(*signals):
            cycle_counter["n"] += 1
            flags.update(zip(flags, values, strict=True))

    sim.add_process(clock)
    steps = 0
    while any(not r or r[-1] is not _done() for r in received.values()):
        if cycle_counter["n"] > max_cycles:
            short = {k: len(v) for k, v in received.items()}
            raise AssertionError(
                f"no done token on every output after {max_cycles} cycles; tokens so far: {short}"
            )
        sim.advance()
        steps += 1
    end = cycle_counter["n"] + 2  # a flag set by the last token is visible a cycle later
    while cycle_counter["n"] < end:
        sim.advance()
    return BlockRun(received, transfers, cycle_counter["n"], dict(flags))


def _done():
    from step_lang.tokens import DONE

    return DONE
