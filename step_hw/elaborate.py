"""Graph elaboration: a STeP graph as one Amaranth component, and its Verilog.

:class:`ElaboratedGraph` has one named submodule per node (the node's block, built with the
block's ``from_node``), a :class:`~step_hw.queue.Queue` on every edge (depth from
``Graph.set_queue_depth``, else ``HwConfig.queue_depth``; or a run-time depth, below), and these
top-level ports:

* ``start`` (in) and ``done`` (out): every block is held in reset until ``start`` is seen high;
  ``done`` rises once every linear store has written its last tile and every sink has taken its
  done token, and stays high;
* ``error`` (out): the OR of the blocks' sticky error flags (contract violations, misaligned
  zipped inputs, AXI error responses); ``overflow`` (out): the OR of the compute units' sticky
  overflow flags (a fixed-point result wrapped or saturated, where the interpreter with
  ``overflow="raise"`` numerics raises); ``flags`` (out, one bit per flag, when any block has
  one): every flag, bit ``i`` being :attr:`ElaboratedGraph.flag_bits` ``[i]`` (node, flag),
  listed in the description's ``flag_bits`` so a test bench can name the node that raised it;
* ``src_<node>`` (in) for each Source node and ``snk_<node>`` (out) for each Sink node: token
  streams (``docs/stop_tokens.md``); a Source's ``ready`` is low until the cycle after ``start``;
* ``queue_limits`` (in, when ``HwConfig.queue_capacity`` names streams): the depth of each of their
  queues, set before ``start`` and held (``step_hw.run_time_depths``; the description's ``queues``
  entry of such a queue has its ``capacity`` and its field, ``limit``: first bit and width);
* ``geometry`` (in, when ``HwConfig.geometry_bounds`` names nodes): their run-time geometry
  (walks, buffer sizes, held accumulators), set before ``start`` and held
  (``step_hw.run_time_geometry``; the description's ``geometry_fields`` entry gives each node's
  fields, their first bit and width);
* ``m_axi_<node>`` (out): one AXI4 manager per memory operator, named for cocotbext-axi
  (``AxiBus.from_prefix(dut, "m_axi_<node>")``); or, with ``HwConfig.axi_ports = k``, loads
  spread round-robin over up to ``k`` read ports ``m_axi_rd<i>`` and stores over up to ``k``
  write ports ``m_axi_wr<i>``, each behind an :class:`~step_hw.memory.AxiReadArbiter` /
  :class:`~step_hw.memory.AxiWriteArbiter` when it serves several operators
  (:attr:`ElaboratedGraph.axi_managers`, from :func:`axi_managers`).

Off-chip tensors get byte addresses in one address space (:attr:`ElaboratedGraph.memory_map`,
from :func:`step_hw.contract.memory_map`), 4 KiB aligned, so that one memory model can serve every
port. Nodes without hardware support are rejected with a :class:`~step_lang.errors.StepTypeError`
that names them.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from amaranth.hdl import Cat, Module, ResetInserter, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from step_lang import ops
from step_lang.errors import StepTypeError
from step_lang.graph import Graph, Node, Stream
from step_lang.passes import lower
from step_lang.registry import NodeRegistry, Unsupported

from . import contract, conversions
from .checks import where
from .compute import fp_cells
from .config import HwConfig, config_for
from .contract import axi_managers
from .field_wires import omittable, omitted
from .graph_rules import check_graph
from .payload import Kind, TokenFormat
from .queue import Queue
from .run_time_depths import limit_fields, pack_limits, queues
from .run_time_geometry import check_geometry, pack_geometry
from .tuple_format import TupleFormat, connect_items, stream_format
from .verilog_modules import instance_module, module_bodies

__all__ = ["HARDWARE", "ElaboratedGraph", "axi_managers", "convert", "supported_kinds", "write"]

DEFAULT_CONFIG = HwConfig()

#: Each operator's block: ``build(node, config, memory_map) -> Component`` (``memory_map`` as
#: :attr:`ElaboratedGraph.memory_map`, for the memory operators' base addresses).
HARDWARE: NodeRegistry = NodeRegistry("hardware")


def _register_blocks() -> None:
    from . import addrgen, router, shape
    from .broadcast import Broadcast
    from .compute import compute_unit
    from .memory import buffer, load, store

    def plain(from_node: Any) -> Any:
        return lambda node, config, memory_map: from_node(node, config)

    def memory(from_node: Any) -> Any:
        return lambda node, config, memory_map: from_node(
            node, config, addr=memory_map[node.tensor.name]["addr"]
        )

    HARDWARE.add(plain(Broadcast.from_node), ops.Broadcast)
    HARDWARE.add(plain(router.Partition.from_node), ops.Partition)
    HARDWARE.add(plain(router.Reassemble.from_node), ops.Reassemble)
    HARDWARE.add(plain(router.EagerMerge.from_node), ops.EagerMerge)
    HARDWARE.add(plain(router.Parallelize.from_node), ops.Parallelize)
    HARDWARE.add(plain(shape.Flatten.from_node), ops.Flatten)
    HARDWARE.add(plain(shape.Reshape.from_node), ops.Reshape)
    HARDWARE.add(plain(shape.Promote.from_node), ops.Promote)
    HARDWARE.add(plain(shape.Expand.from_node), ops.Expand)
    HARDWARE.add(plain(shape.RepeatStatic.from_node), ops.RepeatStatic)
    HARDWARE.add(plain(shape.Zip.from_node), ops.Zip)
    HARDWARE.add(plain(addrgen.flatmap_unit), ops.FlatMap)
    HARDWARE.add(plain(compute_unit), ops.Map, ops.Accum, ops.Scan, ops.RetileStreamify)
    HARDWARE.add(memory(load.LinearLoad.from_node), ops.LinearOffChipLoad)
    HARDWARE.add(memory(load.RandomLoad.from_node), ops.RandomOffChipLoad)
    HARDWARE.add(memory(store.LinearStore.from_node), ops.LinearOffChipStore)
    HARDWARE.add(memory(store.RandomStore.from_node), ops.RandomOffChipStore)
    HARDWARE.add(plain(buffer.Bufferize.from_node), ops.Bufferize)
    HARDWARE.add(plain(buffer.Streamify.from_node), ops.Streamify)
    # The graph's plumbing is the top level's ports and wires, not blocks.
    HARDWARE.add(Unsupported("is a top-level stream port (src_<node>)"), ops.Source)
    HARDWARE.add(Unsupported("is a top-level stream port (snk_<node>)"), ops.Sink)
    HARDWARE.add(Unsupported("is a wire: its output aliases its input"), ops.Feedback)


_register_blocks()
_PORTS = (ops.Source, ops.Sink)
# Sticky flags a block may have: a contract violation or AXI error response (``error``), tokens
# of zipped inputs that do not line up (``misaligned``), a fixed-point result that wrapped or
# saturated (``overflow``). The first two are errors (the interpreter would have raised).
_FLAGS = ("error", "misaligned", "overflow")
_ERRORS = ("error", "misaligned")


def supported_kinds() -> list[str]:
    """Operator kinds the elaborator maps to hardware (plus Source, Sink and Feedback)."""
    from step_lang.registry import node_classes

    return sorted(c.kind for c in node_classes() if c in HARDWARE)


class ElaboratedGraph(wiring.Component):
    """A whole STeP graph in hardware; see the module docstring for its ports."""

    def __init__(
        self,
        graph: Graph,
        config: HwConfig | None = None,
        *,
        instances: dict[str, str] | None = None,
    ):
        # Refused graphs leave no warning behind: the top and the blocks built so far are never
        # elaborated (Amaranth's UnusedElaboratable fires when they are collected, in whatever
        # code runs then); the silence is lifted once the construction succeeds.
        self._MustUse__silence = True
        config = config_for(graph) if config is None else config
        if not isinstance(config, HwConfig):
            raise TypeError(f"config must be a HwConfig, not {config!r}")
        graph = lower(graph)
        #: node name -> Verilog instance name, where they differ (:func:`convert` picks them).
        self.instances = dict(instances or {})
        check_graph(graph, config)  # the graph-level rules, the rtl profile's too
        check_geometry(graph, config)
        self.graph, self.config = graph, config
        self.memory_map = contract.memory_map(graph)
        order = graph.topo_order()
        self.blocks: dict[str, Any] = {}
        members: dict[str, Any] = {
            "start": In(1),
            "done": Out(1),
            "error": Out(1),
            "overflow": Out(1),
        }
        self._formats: dict[str, TokenFormat | TupleFormat] = {}
        try:
            for node in order:
                if isinstance(node, _PORTS):
                    source = isinstance(node, ops.Source)
                    s = node.outputs[0] if source else node.inputs[0]
                    # a Sink takes a Zip's tuples whole; a Source's tokens are single items
                    formats = TokenFormat.for_elem if source else stream_format
                    fmt = formats(s.elem, config, where=where(node, None))
                    self._formats[node.name] = fmt
                    members[_port_name(node)] = (In if source else Out)(fmt.signature())
                    continue
                if node.is_feedback:
                    continue
                self.blocks[node.name] = HARDWARE.entry(node)(node, config, self.memory_map)
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
        #: The blocks' sticky flags in ``flags`` bit order: (node, flag name).
        self.flag_bits = [
            (name, flag)
            for name, block in self.blocks.items()
            for flag in _FLAGS
            if flag in block.signature.members
        ]
        if self.flag_bits:
            members["flags"] = Out(len(self.flag_bits))
        #: Queues whose depth is a run-time setting: instance -> (first bit, width, capacity)
        #: of its depth in the ``queue_limits`` input.
        self.limit_fields = limit_fields(graph, config)
        if self.limit_fields:
            width = sum(w for _, w, _ in self.limit_fields.values())
            # the depths of this graph when nothing drives the input (Amaranth simulation)
            starts = {name: at for name, (at, _, _) in self.limit_fields.items()}
            members["queue_limits"] = In(width, init=pack_limits(graph, config, starts))
        #: Nodes whose geometry is a run-time setting: node -> field -> (first bit, width) in
        #: the ``geometry`` input (their blocks' ``params``).
        self.geometry_fields: dict[str, dict[str, tuple[int, int]]] = {}
        #: ... and each such block's ``params`` as a whole: node -> (first bit, width)
        self._params_bits: dict[str, tuple[int, int]] = {}
        at = 0
        for name, block in self.blocks.items():
            if "params" in block.signature.members:
                layout = block.signature.members["params"].shape
                self.geometry_fields[name] = {
                    field: (at + f.offset, f.width) for field, f in layout
                }
                self._params_bits[name] = (at, layout.size)
                at += layout.size
        if self.geometry_fields:
            # this graph's geometry when nothing drives the input (Amaranth simulation)
            members["geometry"] = In(at, init=pack_geometry(graph, self.geometry_fields))
        super().__init__(members)
        del self._MustUse__silence  # back to the class's setting (a caller may silence them all)

    def elaborate(self, platform) -> Module:
        m = Module()
        running = Signal()
        with m.If(self.start):
            m.d.sync += running.eq(1)
        holder = {"sync": ~running}
        for name, block in self.blocks.items():
            m.submodules[self.instances.get(name, name)] = ResetInserter(holder)(block)

        # Streams: a queue from each producer port; Feedback nodes alias their input.
        producer = contract.feedback_input

        done_bits = []
        for name, s, node, i in queues(self.graph):
            src = producer(s)
            depth = contract.queue_depth(self.graph, s, self.config)
            capacity = contract.queue_capacity(s, self.config)
            if isinstance(src.node, ops.Source):
                out_port = wiring.flipped(getattr(self, f"src_{src.node.name}"))
                shape = self._formats[src.node.name].layout()
            else:
                out_port = self.blocks[src.node.name].out_ports[src.port]
                shape = out_port.payload.shape()
            if capacity is None:
                q = Queue(shape=shape, depth=depth)
            else:
                q = Queue(shape=shape, capacity=capacity)
            if name in self.limit_fields:
                at, width, _ = self.limit_fields[name]
                m.d.comb += q.limit.eq(self.queue_limits[at : at + width])
            m.submodules[name] = ResetInserter(holder)(q)
            if isinstance(src.node, ops.Source):
                # A queue held in reset may show `ready` and then forget what it took: a
                # Source's tokens enter only from the cycle after `start`.
                m.d.comb += [
                    q.i.payload.eq(out_port.payload),
                    q.i.valid.eq(out_port.valid & running),
                    out_port.ready.eq(q.i.ready & running),
                ]
            else:
                wiring.connect(m, out_port, q.i)
            if isinstance(node, ops.Sink):
                sink = wiring.flipped(getattr(self, f"snk_{node.name}"))
                wiring.connect(m, q.o, sink)
                seen = Signal(name=f"done_{node.name}")
                with m.If(sink.valid & sink.ready & (sink.payload.kind == Kind.DONE)):
                    m.d.sync += seen.eq(1)
                done_bits.append(seen)
            elif node.unpacks_tuple:  # Map(Zip(a, b), fn): the tuple's items to in0, in1
                connect_items(m, q.o, self.blocks[node.name].in_ports)
            else:
                wiring.connect(m, q.o, self.blocks[node.name].in_ports[i])
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
        for name, (at, width) in self._params_bits.items():
            m.d.comb += self.blocks[name].params.eq(self.geometry[at : at + width])
        for name, block in self.blocks.items():
            node = self.graph.nodes[name]
            if isinstance(node, ops.LinearOffChipStore):
                done_bits.append(block.done)
            if isinstance(node, ops.Streamify):
                upstream = producer(node.inputs[0]).node  # a Bufferize (check_buffer_readers)
                wiring.connect(m, block.rd, self.blocks[upstream.name].rd)
        done_expr = running
        for bit in done_bits:
            done_expr = done_expr & bit
        m.d.comb += self.done.eq(done_expr if done_bits else 0)
        flags = [getattr(self.blocks[name], flag) for name, flag in self.flag_bits]
        if flags:
            m.d.comb += self.flags.eq(Cat(*flags))
        errors = [v for v, (_, f) in zip(flags, self.flag_bits, strict=True) if f in _ERRORS]
        overflows = [v for v, (_, f) in zip(flags, self.flag_bits, strict=True) if f == "overflow"]
        m.d.comb += self.error.eq(Cat(*errors).any() if errors else 0)
        m.d.comb += self.overflow.eq(Cat(*overflows).any() if overflows else 0)
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
            streams[_port_name(self.graph.nodes[name])] = {
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
            # Blocks whose instance name in the Verilog is not their node's name (a node named
            # like a signal inside its own block, which Verilog tools read as hiding it).
            "instances": dict(self.instances),
            # bit i of the flags port: the node and its flag
            "flag_bits": [{"node": n, "flag": f} for n, f in self.flag_bits],
            # Queue instances (top-level submodules), for testbenches that watch their levels.
            # A queue with a run-time depth has its capacity and (capacity 2 or more) the bits
            # of its depth in `queue_limits` instead: the description serves every graph that
            # runs on the design (`run_time_depths.run_description` gives their depths).
            "queues": {
                name: self._queue_entry(name, s, node) for name, s, node, _ in queues(self.graph)
            },
            # Nodes with run-time geometry: node -> field -> [first bit, width] in `geometry`
            # (`run_time_geometry.run_description` packs a run's graph into it).
            **({"geometry_fields": {
                name: {f: list(bits) for f, bits in fields.items()}
                for name, fields in self.geometry_fields.items()
            }} if self.geometry_fields else {}),
        }  # fmt: skip

    def _queue_entry(self, name: str, s: Stream, node: Node) -> dict[str, Any]:
        entry: dict[str, Any] = {"stream": s.name, "consumer": node.name}
        capacity = contract.queue_capacity(s, self.config)
        if capacity is None:
            entry["depth"] = contract.queue_depth(self.graph, s, self.config)
        else:
            entry["capacity"] = capacity
            if name in self.limit_fields:
                entry["limit"] = list(self.limit_fields[name][:2])
        return entry


def _port_name(node: Node) -> str:
    """The top-level stream port of a Source (``src_<node>``) or Sink (``snk_<node>``)."""
    return f"{'src' if isinstance(node, ops.Source) else 'snk'}_{node.name}"


def convert(
    graph: Graph, config: HwConfig | None = None, *, name: str | None = None
) -> tuple[str, dict[str, Any]]:
    """Verilog text of ``graph`` and its description (ports, parameters, memory map; as JSON
    gives it back: lists, string keys).

    ``config`` defaults to ``HwConfig()`` in the number format of the graph's functions
    (:func:`step_hw.config.config_for`), as for :class:`ElaboratedGraph` and :func:`write`. A
    design converted before, in this process or another, is read from
    :mod:`step_hw.conversions` instead of being elaborated again (:func:`conversion`)."""
    c = conversion(graph, config, name=name)
    return c.text, c.desc


def conversion(
    graph: Graph,
    config: HwConfig | None = None,
    *,
    name: str | None = None,
    field_wires: bool = True,
) -> conversions.Conversion:
    """As :func:`convert`, with the seconds the elaboration took (when it was done) and whether
    the design was read from :mod:`step_hw.conversions`. ``field_wires=False``: without the
    wires that name the fields of structured signals (:mod:`step_hw.field_wires`; a build that
    nobody reads by name), stored under a key of its own."""
    import time

    from .design_key import design_key

    config = config_for(graph) if config is None else config
    top_name = name or graph.name
    # (a config of another type gets its one-line error from the elaboration)
    key = design_key(graph, config, top_name) if isinstance(config, HwConfig) else None
    omit = not field_wires and omittable()
    if key is not None and omit:
        key += "-nofields"

    def elaborated() -> conversions.Conversion:
        t0 = time.perf_counter()
        with omitted(omit):
            text, desc = _convert(graph, config, top_name)
        desc = json.loads(json.dumps(desc))  # as a stored entry reads back
        return conversions.Conversion(text, desc, round(time.perf_counter() - t0, 2), cached=False)

    if key is None:
        return elaborated()
    if (entry := conversions.lookup(key)) is not None:
        return entry
    with conversions.claim(key):  # another process may be converting it right now
        if (entry := conversions.lookup(key)) is not None:
            return entry
        done = elaborated()
        conversions.store(key, done)
    return done


def _convert(graph: Graph, config: HwConfig, top_name: str) -> tuple[str, dict[str, Any]]:
    from .gc_pacing import fewer_full_collections

    with fewer_full_collections():  # a quarter of a large design's CPU (step_hw/gc_pacing.py)
        return _convert_rounds(graph, config, top_name)


def _convert_rounds(graph: Graph, config: HwConfig, top_name: str) -> tuple[str, dict[str, Any]]:
    from . import netlist_speed, signal_formats, verilog_backend

    netlist_speed.install()  # the same Verilog, sooner (step_hw/netlist_speed.py)
    signal_formats.install()  # and the formats of layout signals only where they are read
    instances: dict[str, str] = {}
    for _ in range(3):  # a renamed instance could hide a signal too; in practice one round
        top = ElaboratedGraph(graph, config, instances=instances)
        with fp_cells.shared() as cells:
            text = verilog_backend.convert(
                top, name=top_name, ports=top.port_names(), emit_src=False,
                strip_internal_attrs=True, merge_modules=True,
            )  # fmt: skip
        hidden = _hidden_instances(text, top_name, {instances.get(n, n): n for n in top.blocks})
        if top_name in cells:
            raise StepTypeError(
                f"graph '{graph.name}': top module name '{top_name}' is the name of a "
                "floating-point cell module; choose another"
            )
        if not hidden:
            return text + fp_cells.library(cells), top.description()
        used = set(top.blocks) | set(instances.values())
        for node in hidden:
            name = f"{instances.get(node, node)}_node"
            while name in used:
                name += "_"
            instances[node] = name
            used.add(name)
    raise StepTypeError(f"graph '{graph.name}': could not find safe HDL names for {sorted(hidden)}")


def _hidden_instances(text: str, top: str, instances: dict[str, str]) -> list[str]:
    """The nodes whose block instance (``instances``: instance name -> node) is named like a
    signal declared inside its module: Verilator's VARHIDDEN ("declaration hides declaration in
    upper scope"), harmless to simulation but a lint error under ``-Wall``. An instance's module
    is found by its instantiation (:mod:`step_hw.verilog_modules`: identical modules are
    merged, so it may be named after another instance)."""
    import re

    decl = re.compile(
        r"^\s*(?:input|output|inout|reg|wire)\s+(?:signed\s+)?(?:\[[^\]]*\]\s+)?\\?(\S+?)\s*[;=,]",
        re.M,
    )
    bodies = module_bodies(text)
    hidden = set()
    for name, node in instances.items():
        module = instance_module(bodies, f"{top}.{name}")
        if module is not None and name in {d.group(1) for d in decl.finditer(bodies[module])}:
            hidden.add(node)
    return sorted(hidden)


def write(graph: Graph, path_stem: str, config: HwConfig | None = None) -> None:
    """Write ``<path_stem>.v`` (the Verilog module, named after the file) and ``<path_stem>.json``
    (:meth:`ElaboratedGraph.description`) of ``graph`` under ``config``. The file's name must be
    a plain Verilog identifier (letters, digits, ``_``; not a digit first)."""
    import pathlib

    from step_lang.dims import IDENTIFIER

    name = pathlib.Path(path_stem).name
    if not IDENTIFIER.match(name):
        raise ValueError(
            f"write: the file name {name!r} names the Verilog module; use letters, digits and _ "
            "(not a digit first)"
        )
    text, desc = convert(graph, config, name=name)
    pathlib.Path(f"{path_stem}.v").write_text(text)
    pathlib.Path(f"{path_stem}.json").write_text(json.dumps(desc, indent=2) + "\n")
