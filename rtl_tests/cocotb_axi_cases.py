"""The AXI controller configurations of the Verilator tier, and their stimulus and expected results.

Pure Python (no cocotb): the pytest side (`test_axi_verilator.py`) builds each controller from a
step_lang node with ``from_node``; the cocotb side (`cocotb_axi.py`) builds the same graph with
random streams and tensor contents and takes the expected tokens and memory from
`step_lang.interpret`. Both import the case from here, so the RTL and the reference cannot drift.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from step_hw.config import HwConfig
from step_hw.payload import TokenFormat
from step_lang import Graph, StreamType, Tile, interpret, ragged
from step_lang import ops as L
from step_lang.types import DType, int8, int16, int32

__all__ = ["CASES", "AxiCase", "Stimulus"]


@dataclass(frozen=True)
class Stimulus:
    """One run: input streams and the expected output streams (by DUT port), and memory."""

    inputs: dict[str, tuple[TokenFormat, list]]
    outputs: dict[str, tuple[TokenFormat, list]]
    memory: dict[int, np.ndarray]  # byte address -> array written before the run
    expected: dict[int, np.ndarray]  # byte address -> array expected after the run


DEFAULT_CONFIG = HwConfig()


@dataclass(frozen=True)
class AxiCase:
    """A controller configuration: one Verilog build, many runs with random data."""

    name: str
    kind: str  # the step_lang operator
    tensor_shape: tuple[int, ...]
    dtype: DType
    tile: tuple[int, int]
    addr: int
    config: HwConfig = DEFAULT_CONFIG
    walk: dict[str, Any] = field(default_factory=dict)  # LinearOffChipLoad out_shape/stride/base
    max_outstanding: int | None = None

    @property
    def top(self) -> str:
        return f"axi_{self.name}"

    def graph(
        self, rng: random.Random, rows: list[int] | None = None
    ) -> tuple[Graph, Any, dict[str, Any], dict[str, Any]]:
        """The graph with random stream data: ``(graph, node, sources by DUT port, source data)``.

        Address and reference streams have shape ``[len(rows), R]`` with ``rows[i]`` elements in
        row ``i`` (random when not given).
        """
        g = Graph(self.name)
        t = g.tensor("t", self.tensor_shape, self.dtype)
        n_tiles = int(np.prod(self.tensor_shape)) // (self.tile[0] * self.tile[1])
        if rows is None:
            rows = [rng.randint(0, 5) for _ in range(rng.randint(2, 4))]
        addr_type = StreamType(Tile(int32, 1, 1), (len(rows), ragged("R")))
        one = lambda k: np.full((1, 1), k, np.int32)  # noqa: E731
        if self.kind == "LinearOffChipLoad":
            ref = L.Source(g, addr_type, name="r")
            node = L.LinearOffChipLoad(t, tile=self.tile, ref=ref.out, name="ld", **self.walk)
            L.Sink(node.out)
            return g, node, {"ref": ref}, {"r": [[one(0)] * n for n in rows]}
        if self.kind == "RandomOffChipLoad":
            raddr = L.Source(g, addr_type, name="a")
            node = L.RandomOffChipLoad(raddr.out, t, tile=self.tile, name="rl")
            L.Sink(node.out)
            return (
                g,
                node,
                {"raddr": raddr},
                {"a": [[one(rng.randrange(n_tiles)) for _ in range(n)] for n in rows]},
            )
        tile = Tile(self.dtype, *self.tile)
        if self.kind == "LinearOffChipStore":
            x = L.Source(g, StreamType(tile, (2, n_tiles // 2)), name="x")
            node = L.LinearOffChipStore(x.out, t, name="st")
            data = [[self._tile(rng) for _ in range(n_tiles // 2)] for _ in range(2)]
            return g, node, {"i": x}, {"x": data}
        waddr = L.Source(g, addr_type, name="wa")
        wdata = L.Source(g, StreamType(tile, addr_type.shape), name="wd")
        node = L.RandomOffChipStore(waddr.out, wdata.out, t, name="rs")
        L.Sink(node.out)
        addrs = [[one(rng.randrange(n_tiles)) for _ in range(n)] for n in rows]
        data = [[self._tile(rng) for _ in row] for row in addrs]
        return g, node, {"waddr": waddr, "wdata": wdata}, {"wa": addrs, "wd": data}

    def _tile(self, rng: random.Random) -> np.ndarray:
        return self._array(rng, self.tile)

    def _array(self, rng: random.Random, shape) -> np.ndarray:
        info = np.iinfo(self.dtype.numpy)
        count = int(np.prod(shape))
        return np.array(
            [rng.randint(info.min, info.max) for _ in range(count)], self.dtype.numpy
        ).reshape(shape)

    def dut(self) -> Any:
        """The controller, built from the node with ``from_node``."""
        from step_hw.memory import LinearLoad, LinearStore, RandomLoad, RandomStore

        block = {
            "LinearOffChipLoad": LinearLoad,
            "RandomOffChipLoad": RandomLoad,
            "LinearOffChipStore": LinearStore,
            "RandomOffChipStore": RandomStore,
        }[self.kind]
        _, node, _, _ = self.graph(random.Random(0))
        return block.from_node(
            node, self.config, addr=self.addr, max_outstanding=self.max_outstanding
        )

    def stimulus(self, rng: random.Random, rows: list[int] | None = None) -> Stimulus:
        """Random tensor contents and streams, with the interpreter's outputs and memory."""
        g, node, sources, data = self.graph(rng, rows)
        tensor = self._array(rng, self.tensor_shape)
        res = interpret(g, {"t": tensor}, inputs=data)
        inputs = {
            port: (TokenFormat.for_elem(src.out.elem, self.config), res.tokens(src.out))
            for port, src in sources.items()
        }
        outputs = {}
        if node.outputs:
            port = "ack" if self.kind == "RandomOffChipStore" else "o"
            out = node.outputs[0]
            outputs[port] = (TokenFormat.for_elem(out.elem, self.config), res.tokens(out))
        return Stimulus(inputs, outputs, {self.addr: tensor}, {self.addr: res.memory["t"]})


#: One Verilog build each. Together they cover: a reference-driven walk with re-reads and
#: one-beat bursts (tiles narrower than the tensor) with 4 bursts in flight; narrow 2-byte beats
#: on moving lanes and a non-power-of-two tiles-per-row (the constant divider); a store whose
#: first tile crosses a 4 KiB boundary (split bursts); and a 128-bit bus.
CASES = {
    c.name: c
    for c in [
        AxiCase("lload", "LinearOffChipLoad", (16, 16), int16, (4, 4), 0x1000,
                walk=dict(out_shape=(2, 2), stride=(4, 1), base=5), max_outstanding=4),
        AxiCase("rload", "RandomOffChipLoad", (8, 12), int8, (2, 2), 0x1002),
        AxiCase("lstore", "LinearOffChipStore", (32, 4), int16, (4, 4), 0xFF0),
        AxiCase("rstore", "RandomOffChipStore", (8, 8), int32, (4, 4), 0x2000,
                config=HwConfig(axi_data_width=128)),
    ]
}  # fmt: skip
