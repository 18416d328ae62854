"""Graph elaboration: a STeP graph as one Amaranth component, and its Verilog.

:class:`ElaboratedGraph` has one named submodule per node (the node's block, built with the
block's ``from_node``), a :class:`~step_hw.queue.Queue` on every edge (depth from
``Graph.set_queue_depth``, else ``HwConfig.queue_depth``), and these top-level ports:

* ``start`` (in) and ``done`` (out): every block is held in reset until ``start`` is seen high;
  ``done`` rises once every linear store has written its last tile and every sink has taken its
  done token, and stays high;
* ``error`` (out): the OR of the blocks' sticky error flags (contract violations, AXI errors);
* ``src_<node>`` (in) for each Source node and ``snk_<node>`` (out) for each Sink node: token
  streams (``docs/stop_tokens.md``); a Source's ``ready`` is low until the cycle after ``start``;
* ``m_axi_<node>`` (out): one AXI4 manager per memory operator, named for cocotbext-axi
  (``AxiBus.from_prefix(dut, "m_axi_<node>")``); or, with ``HwConfig.axi_ports = k``, loads
  spread round-robin over up to ``k`` read ports ``m_axi_rd<i>`` and stores over up to ``k``
  write ports ``m_axi_wr<i>``, each behind an :class:`~step_hw.memory.AxiReadArbiter` /
  :class:`~step_hw.memory.AxiWriteArbiter` when it serves several operators
  (:attr:`ElaboratedGraph.axi_managers`, from :func:`axi_managers`).

Off-chip tensors get byte addresses in one address space (:attr:`ElaboratedGraph.memory_map`),
4 KiB aligned, so that one memory model can serve every port. Nodes without hardware support are
rejected with a :class:`~step_lang.errors.StepTypeError` that names them.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from amaranth.hdl import Module, ResetInserter, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from step_lang.errors import StepTypeError, op_message
from step_lang.graph import Graph, Stream
from step_lang.passes import insert_broadcasts

from .config import HwConfig
from .dyntile import check_dynamic_tiles
from .payload import Kind, TokenFormat
from .queue import Queue
from .select import ToSelector

__all__ = ["ElaboratedGraph", "axi_managers", "convert", "supported_kinds"]

_ALIGN = 4096
DEFAULT_CONFIG = HwConfig()


def _builders() -> dict[str, Any]:
    from . import addrgen, router, shape
    from .broadcast import Broadcast
    from .compute import compute_unit
    from .memory import buffer, load, store

    return {
        "Broadcast": Broadcast.from_node,
        "Partition": router.Partition.from_node,
        "Reassemble": router.Reassemble.from_node,
        "EagerMerge": router.EagerMerge.from_node,
        "Parallelize": router.Parallelize.from_node,
        "Flatten": shape.Flatten.from_node,
        "Reshape": shape.Reshape.from_node,
        "Promote": shape.Promote.from_node,
        "Expand": shape.Expand.from_node,
        "RepeatStatic": shape.RepeatStatic.from_node,
        "Zip": shape.Zip.from_node,
        "FlatMap": addrgen.flatmap_unit,
        "Map": compute_unit,
        "Accum": compute_unit,
        "Scan": compute_unit,
        "RetileStreamify": compute_unit,
        "LinearOffChipLoad": load.LinearLoad.from_node,
        "RandomOffChipLoad": load.RandomLoad.from_node,
        "LinearOffChipStore": store.LinearStore.from_node,
        "RandomOffChipStore": store.RandomStore.from_node,
        "Bufferize": buffer.Bufferize.from_node,
        "Streamify": buffer.Streamify.from_node,
    }


_LOADS = ("LinearOffChipLoad", "RandomOffChipLoad")
_MEMORY = (*_LOADS, "LinearOffChipStore", "RandomOffChipStore")
_PLUMBING = ("Source", "Sink", "Feedback")


def _queue_name(s: Stream, consumer: str, port: int) -> str:
    """Instance name of the queue that feeds input ``port`` of ``consumer`` from stream ``s``."""
    return f"q_{s.name.replace('.', '_')}_{consumer}_{port}"


def axi_managers(graph: Graph, config: HwConfig = DEFAULT_CONFIG) -> dict[str, list[str]]:
    """AXI port name -> the memory operators behind it, in graph (topological) order.

    With ``config.axi_ports`` unset, one ``m_axi_<node>`` port per memory operator; with
    ``axi_ports = k``, the loads round-robin over ``m_axi_rd0`` .. ``m_axi_rd<k-1>`` and the stores
    over ``m_axi_wr0`` .. ``m_axi_wr<k-1>`` (only the ports that get an operator). A port's list
    order is its arbiter's manager order (manager ``i`` is ``ID`` prefix ``i``). Pure: the
    elaborator (:attr:`ElaboratedGraph.axi_managers`) and the simulator's ``rtl`` profile
    (``sim.profiles.rtl``) both use it. ``graph`` should have had
    :func:`~step_lang.passes.insert_broadcasts` applied, as both do.
    """
    memory = [n for n in graph.topo_order() if n.kind in _MEMORY]
    if config.axi_ports is None:
        return {f"m_axi_{n.name}": [n.name] for n in memory}
    out: dict[str, list[str]] = {}
    for half, read in (("rd", True), ("wr", False)):
        names = [n.name for n in memory if (n.kind in _LOADS) == read]
        for j, name in enumerate(names):
            out.setdefault(f"m_axi_{half}{j % config.axi_ports}", []).append(name)
    return out


def supported_kinds() -> list[str]:
    """Operator kinds the elaborator maps to hardware (plus Source, Sink and Feedback)."""
    return sorted([*_builders(), *_PLUMBING])


class ElaboratedGraph(wiring.Component):
    """A whole STeP graph in hardware; see the module docstring for its ports."""

    def __init__(self, graph: Graph, config: HwConfig = DEFAULT_CONFIG):
        if not isinstance(config, HwConfig):
            raise TypeError(f"config must be a HwConfig, not {config!r}")
        insert_broadcasts(graph)
        graph.validate()
        check_dynamic_tiles(graph, config)  # every dynamic tile fits HwConfig.dyn_tile_rows
        self.graph, self.config = graph, config
        builders = _builders()
        self.memory_map = self._allocate(graph)
        order = graph.topo_order()
        self.blocks: dict[str, Any] = {}
        members: dict[str, Any] = {"start": In(1), "done": Out(1), "error": Out(1)}
        self._formats: dict[str, TokenFormat] = {}
        try:
            for node in order:
                if node.kind in _PLUMBING:
                    if node.kind in ("Source", "Sink"):
                        s = node.outputs[0] if node.kind == "Source" else node.inputs[0]
                        fmt = TokenFormat.for_elem(
                            s.elem, config, where=f"{node.kind} '{node.name}'"
                        )
                        self._formats[node.name] = fmt
                        flow = In if node.kind == "Source" else Out
                        members[f"{'src' if node.kind == 'Source' else 'snk'}_{node.name}"] = flow(
                            fmt.signature()
                        )
                    continue
                if node.kind not in builders:
                    raise StepTypeError(
                        op_message(node.kind, node.name, None, "has no hardware implementation")
                    )
                if node.kind in _MEMORY:
                    block = builders[node.kind](
                        node, config, addr=self.memory_map[node.tensor.name]["addr"]
                    )
                elif node.kind == "Map" and getattr(node.fn, "name", None) == "to_selector":
                    block = ToSelector.from_node(node, config)
                else:
                    block = builders[node.kind](node, config)
                self.blocks[node.name] = block
        except Exception:
            for block in self.blocks.values():  # never elaborated: do not warn about them
                block._MustUse__silence = True
            raise
        #: AXI port name -> the memory operators behind it, in graph order.
        self.axi_managers = axi_managers(graph, config)
        self._arbiters: dict[str, Any] = {}
        for port, names in self.axi_managers.items():
            if len(names) == 1:
                members[port] = Out(self.blocks[names[0]].axi.signature)
                continue
            from .memory.arbiter import AxiReadArbiter, AxiWriteArbiter

            read = self.blocks[names[0]].axi.signature.read
            kind = AxiReadArbiter if read else AxiWriteArbiter
            self._arbiters[port] = arbiter = kind(n=len(names), config=config)
            members[port] = Out(arbiter.axi.signature)
        super().__init__(members)

    @staticmethod
    def _allocate(graph: Graph) -> dict[str, dict[str, Any]]:
        out, addr = {}, _ALIGN
        for name, t in graph.tensors.items():
            if t.dtype.kind not in ("int", "uint", "bool"):
                raise StepTypeError(f"tensor '{name}': dtype {t.dtype} has no hardware encoding")
            out[name] = {
                "addr": addr,
                "shape": list(t.shape),
                "dtype": t.dtype.name,
                "bytes": t.size_bytes,
            }
            addr += -(-t.size_bytes // _ALIGN) * _ALIGN
        return out

    def elaborate(self, platform) -> Module:
        m = Module()
        running = Signal()
        with m.If(self.start):
            m.d.sync += running.eq(1)
        holder = {"sync": ~running}
        for name, block in self.blocks.items():
            m.submodules[name] = ResetInserter(holder)(block)

        # Streams: a queue from each producer port; Feedback nodes alias their input.
        def producer(s: Stream) -> Stream:
            while s.node.kind == "Feedback":
                s = s.node.inputs[0]
            return s

        queues: dict[Stream, Queue] = {}
        done_bits = []
        errors = []
        for node in self.graph.nodes.values():
            for i, s in enumerate(node.inputs):
                if node.kind == "Feedback":
                    continue
                src = producer(s)
                depth = self.graph.queue_depths.get(s.name, self.config.queue_depth)
                if src.node.kind == "Source":
                    out_port = wiring.flipped(getattr(self, f"src_{src.node.name}"))
                    shape = self._formats[src.node.name].layout()
                else:
                    out_port = self.blocks[src.node.name].out_ports[src.port]
                    shape = out_port.payload.shape()
                q = Queue(shape=shape, depth=depth)
                m.submodules[_queue_name(s, node.name, i)] = ResetInserter(holder)(q)
                if src.node.kind == "Source":
                    # A queue held in reset may show `ready` and then forget what it took: a
                    # Source's tokens enter only from the cycle after `start`.
                    m.d.comb += [
                        q.i.payload.eq(out_port.payload),
                        q.i.valid.eq(out_port.valid & running),
                        out_port.ready.eq(q.i.ready & running),
                    ]
                else:
                    wiring.connect(m, out_port, q.i)
                if node.kind == "Sink":
                    sink = wiring.flipped(getattr(self, f"snk_{node.name}"))
                    wiring.connect(m, q.o, sink)
                    seen = Signal(name=f"done_{node.name}")
                    with m.If(sink.valid & sink.ready & (sink.payload.kind == Kind.DONE)):
                        m.d.sync += seen.eq(1)
                    done_bits.append(seen)
                else:
                    wiring.connect(m, q.o, self.blocks[node.name].in_ports[i])
                queues[s] = q
        for port, names in self.axi_managers.items():
            outer = wiring.flipped(getattr(self, port))
            if port in self._arbiters:
                arbiter = self._arbiters[port]
                m.submodules[f"arbiter_{port}"] = ResetInserter(holder)(arbiter)
                for i, name in enumerate(names):
                    wiring.connect(m, self.blocks[name].axi, arbiter.managers[i])
                wiring.connect(m, arbiter.axi, outer)
            else:
                wiring.connect(m, self.blocks[names[0]].axi, outer)
        for name, block in self.blocks.items():
            node = self.graph.nodes[name]
            if node.kind == "LinearOffChipStore":
                done_bits.append(block.done)
            for flag in ("error", "misaligned"):
                if flag in block.signature.members:
                    errors.append(getattr(block, flag))
            if node.kind == "Streamify":
                upstream = producer(node.inputs[0]).node
                if upstream.kind != "Bufferize":
                    raise StepTypeError(
                        op_message(
                            node.kind, node.name, "in", "must read a Bufferize directly in hardware"
                        )
                    )
                wiring.connect(m, block.rd, self.blocks[upstream.name].rd)
        done_expr = running
        for bit in done_bits:
            done_expr = done_expr & bit
        m.d.comb += self.done.eq(done_expr if done_bits else 0)
        err = 0
        for e in errors:
            err = err | e
        m.d.comb += self.error.eq(err)
        return m

    def port_names(self) -> dict[str, tuple[Any, Any]]:
        """``ports=`` for Verilog conversion: AXI members named ``m_axi_<node>_<signal>``."""
        from amaranth.hdl import ValueCastable
        from amaranth.hdl._ir import PortDirection

        ports = {}
        for path, member, value in self.signature.flatten(self):
            if isinstance(value, ValueCastable):
                value = value.as_value()
            direction = PortDirection.Input if member.flow == In else PortDirection.Output
            head = str(path[0])
            name = (
                f"{head}_{'_'.join(map(str, path[1:]))}"
                if head.startswith("m_axi_")
                else "__".join(map(str, path))
            )
            ports[name] = (value, direction)
        return ports

    def description(self) -> dict[str, Any]:
        """Ports, parameters and the memory map, for ``<example>.json``."""
        streams = {}
        for name, fmt in self._formats.items():
            kind = self.graph.nodes[name].kind
            streams[f"{'src' if kind == 'Source' else 'snk'}_{name}"] = {
                "format": asdict(fmt),
                "width": fmt.width,
            }
        return {
            "top": self.graph.name,
            "config": asdict(self.config),
            "memory_map": self.memory_map,
            "streams": streams,
            "axi_ports": list(self.axi_managers),
            "axi_managers": self.axi_managers,
            "nodes": {n: self.graph.nodes[n].kind for n in self.blocks},
            # Queue instances (top-level submodules), for testbenches that watch their levels.
            "queues": {
                _queue_name(s, node.name, i): {
                    "stream": s.name,
                    "consumer": node.name,
                    "depth": self.graph.queue_depths.get(s.name, self.config.queue_depth),
                }
                for node in self.graph.nodes.values()
                if node.kind != "Feedback"
                for i, s in enumerate(node.inputs)
            },
        }


def convert(
    graph: Graph, config: HwConfig = DEFAULT_CONFIG, *, name: str | None = None
) -> tuple[str, dict[str, Any]]:
    """Verilog text of ``graph`` and its description (ports, parameters, memory map)."""
    from amaranth.back import verilog

    top = ElaboratedGraph(graph, config)
    text = verilog.convert(
        top,
        name=name or graph.name,
        ports=top.port_names(),
        emit_src=False,
        strip_internal_attrs=True,
    )
    return text, top.description()


def write(graph: Graph, path_stem: str, config: HwConfig = DEFAULT_CONFIG) -> None:
    """Write ``<path_stem>.v`` and ``<path_stem>.json``."""
    import pathlib

    text, desc = convert(graph, config, name=pathlib.Path(path_stem).name)
    pathlib.Path(path_stem).with_suffix(".v").write_text(text)
    pathlib.Path(path_stem).with_suffix(".json").write_text(json.dumps(desc, indent=2) + "\n")
