"""The hardware's rules for a whole graph: what the elaborator refuses before it builds a block,
and what the ``rtl`` timing profile (``sim.profiles.rtl``) refuses before it times one, so that
the simulator never predicts the cycles of hardware that cannot be built.

* every stream's stop levels fit the payload's level field (``HwConfig.level_bits``);
* every off-chip tensor's dtype has a hardware encoding (integers; BF16 and float32 on a
  floating-point configuration);
* every off-chip tensor lies within the AXI address space (``HwConfig.axi_addr_width``) at its
  address in the memory map (:func:`step_hw.contract.memory_map`);
* every stream of tiles or selectors has a hardware encoding under the configuration
  (:meth:`TokenFormat.for_elem`: a tile within ``tile_rows x tile_cols`` with static columns, a
  dtype the hardware has);
* every dynamic tile has a bound within ``HwConfig.dyn_tile_rows``
  (:func:`step_hw.dyntile.check_dynamic_tiles`);
* every queue's depth fits its run-time capacity (:func:`step_hw.run_time_depths.check_capacities`);
* every buffer stream goes from a Bufferize straight into one Streamify, the pair that shares the
  buffer memory (:func:`check_buffer_readers`);
* every node meets its block's rule of types and parameters (:func:`step_hw.block_rules.check_node`:
  a Reshape of a dynamic innermost dim has ``pad``, a Zip's inputs are not tuples, an
  EagerMerge's or Reassemble's inputs are all static or all dynamic tiles as its output, a
  Bufferize's or Streamify's buffer has a fixed size, a random load's or store's ``fetch``
  block is consecutive in its tensor);
* every Map, Accum, Scan and FlatMap has a block that computes its function, with the
  configuration's numerics (:func:`step_hw.unit_functions.block_for`), and a block built from
  the function's parameters gets parameters that fit it (``step_hw.function_params``: a
  ``region_id`` region, ``pad_bias`` values, ``expert_addr`` addresses within their elements),
  and a compute unit gets dynamic tiles only where it has hardware for them
  (:func:`step_hw.block_rules.unit_tiles_rule`); all through
  :func:`~step_hw.block_rules.check_node`.

The blocks' constructors check their other widths and parameters as they are built
(``from_node``); those rules are the elaborator's alone. No Amaranth here.
"""

from __future__ import annotations

from step_lang import ops
from step_lang.errors import StepTypeError
from step_lang.graph import Graph
from step_lang.types import BufferType, Selector, Tile

from .block_rules import check_node
from .checks import where
from .config import HwConfig
from .contract import feedback_input, memory_map
from .dyntile import check_dynamic_tiles
from .payload import UNSIGNED_HINT, TokenFormat
from .run_time_depths import check_capacities

__all__ = ["check_buffer_readers", "check_graph"]


def check_buffer_readers(graph: Graph) -> None:
    """Raise :class:`~step_lang.errors.StepTypeError` unless every stream of buffers in the
    lowered ``graph`` runs from a Bufferize straight into one Streamify: the two blocks share the
    buffer memory's read port (``step_hw.memory.buffer``), and a buffer reference has no token
    encoding of its own to be queued, copied or reshaped on the way."""
    for node in graph.topo_order():
        for port, s in zip(node.input_names, node.inputs, strict=True):
            if not isinstance(s.elem, BufferType):
                continue
            carrier = feedback_input(s)
            src = carrier.node
            if isinstance(node, ops.Broadcast):  # the lowering's copy for a fan-out
                readers = [n.name for out in node.outputs for n, _ in graph.consumers(out)]
                raise src.error(
                    src.output_names[carrier.port],
                    f"read by {len(readers)} nodes ({', '.join(readers)}); in hardware one "
                    "Streamify reads a Bufferize's buffers (Bufferize once per reader)",
                )
            if not isinstance(node, ops.Streamify):
                raise node.error(
                    port,
                    f"element {s.elem} has no hardware encoding: only a Streamify reads buffers",
                )
            if not isinstance(src, ops.Bufferize):
                raise node.error(port, "must read a Bufferize directly in hardware")


def check_graph(graph: Graph, config: HwConfig) -> None:
    """Raise :class:`~step_lang.errors.StepTypeError` (``ValueError`` for a queue's capacity)
    naming the operator, the port and the offending type or value if the hardware cannot build
    ``graph`` (a lowered graph: ``step_lang.passes.lower``) under ``config``."""
    order = graph.topo_order()
    for node in order:
        for port, t in zip(node.output_names, node.out_types, strict=True):
            if t.rank > config.max_level:
                raise node.error(
                    port,
                    f"a stream of rank {t.rank} has stop levels up to {t.rank}, but "
                    f"HwConfig.level_bits={config.level_bits} holds at most {config.max_level}",
                )
    check_capacities(graph, config)
    check_buffer_readers(graph)
    bounds = check_dynamic_tiles(graph, config)
    for name, t in graph.tensors.items():
        if t.dtype.kind not in ("int", "bool") and t.dtype.name not in config.float_dtypes:
            hint = (
                UNSIGNED_HINT
                if t.dtype.kind == "uint"
                else ""
                if config.is_float
                else " (floating point needs HwConfig(elem_dtype='bfloat16'))"
            )
            raise StepTypeError(
                f"tensor '{name}': dtype {t.dtype} has no hardware encoding under "
                f"{config.elem_dtype}{hint}"
            )
    top = 2**config.axi_addr_width
    for name, t in memory_map(graph).items():
        if t["addr"] + t["bytes"] > top:
            raise StepTypeError(
                f"tensor '{name}': {t['bytes']} bytes at address {t['addr']:#x} do not fit the "
                f"{config.axi_addr_width}-bit AXI address space (HwConfig.axi_addr_width)"
            )
    for node in order:
        for port, t in zip(node.output_names, node.out_types, strict=True):
            if isinstance(t.elem, (Tile, Selector)):
                top = isinstance(node, ops.Source)  # a top-level port: named by its node alone
                TokenFormat.for_elem(t.elem, config, where=where(node, None if top else port))
    for node in order:
        check_node(node, config, bounds)
