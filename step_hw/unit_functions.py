"""Which hardware block computes a node's function, and the rules that function must meet.

A Map, Accum, Scan or FlatMap node becomes the block its function names: an arithmetic unit
(``MapUnit``, ``MatmulUnit``, ``AccumUnit``, ``ScanUnit``) for a function of
:func:`step_lang.numerics.functions` whose operation the unit has and whose numerics are the
configuration's, a row unit or a selector for the named functions of ``step_lang.functions``
(``row_append``, ``region_id``, ``count``, ``to_selector``, ...), an address generator or the
``RetileUnit`` for a FlatMap's function. :func:`block_for` picks the block and checks the
function; the elaborator builds the block it names (``step_hw.compute.compute_unit``,
``step_hw.addrgen.flatmap_unit``), and :func:`step_hw.graph_rules.check_graph` calls it for every
node, so that the ``rtl`` timing profile refuses a function no block computes as the elaborator
does. The blocks check their own shapes and parameters as they are built. No Amaranth here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from step_lang import numerics, ops

from .config import HwConfig

__all__ = [
    "ACCUM_OPS",
    "BINARY_OPS",
    "FLATMAP_BLOCKS",
    "FLOAT_MAP_OPS",
    "MAP_OPS",
    "SCAN_OPS",
    "UNARY_OPS",
    "block_for",
    "node_fn",
]

#: Operations of two zipped tiles (size-1 rows or columns broadcast, as in step_lang).
BINARY_OPS = ("add", "sub", "mul", "div", "max")
#: Operations of one tile (``row_sum`` makes an ``[R, 1]`` tile). Floating-point tiles also
#: convert (``to_bf16``, ``to_f32``: :data:`FLOAT_MAP_OPS`).
UNARY_OPS = ("exp", "silu", "recip", "row_sum")
#: Map operations of the fixed-point unit.
MAP_OPS = BINARY_OPS + UNARY_OPS
#: Map operations of the floating-point unit (``to_bf16``/``to_f32`` convert).
FLOAT_MAP_OPS = (*MAP_OPS, "to_bf16", "to_f32")
#: Accum operations: ``numerics`` ``accum_add``, ``accum_max``, ``matmul_acc`` (and
#: ``matmul_t_acc``; ``matmul_sum_out`` with ``exact``), ``retile_row`` and (floating point only)
#: ``float_numerics.row_sum_acc``.
ACCUM_OPS = ("add", "max", "matmul", "retile_row", "row_sum")
#: Scan operations (``retile_row`` would grow the tile at every element).
SCAN_OPS = ("add", "max", "matmul")

#: FlatMap function name -> the block that builds it (``step_hw.addrgen``'s generators, the
#: ``RetileUnit``, time-multiplexing's ``ExpertAddr``).
FLATMAP_BLOCKS = {
    "cache_read_addr": "CacheReadAddr",
    "last_tile_flags": "LastTileFlags",
    "block_row_offsets": "BlockRowOffsets",
    "pad_bias": "PadTiles",
    "pad_mask": "PadTiles",
    "retile_rows": "RetileUnit",
    "retile_cols": "RetileUnit",
    "retile_rows_masked": "RetileUnit",
    "expert_addr": "ExpertAddr",
}
#: Map function name -> its row unit or selector (``region_id`` by prefix: its name carries
#: the region).
_NAMED_MAPS = {
    "row_append": "RowAppendUnit",
    "row_append_part": "RowAppendPartUnit",
    "region_select": "RegionSelectUnit",
    "to_selector": "ToSelector",
}


def node_fn(node: Any, config: HwConfig, ops: Sequence[str], unit: str) -> Any:
    """The node's function, checked against the unit's operations ``ops`` and ``config``'s
    numerics; raises :class:`~step_lang.errors.StepTypeError` naming the node otherwise."""
    fn = node.fn
    if not numerics.is_hardware_function(fn):
        raise node.error(
            None,
            f"function '{fn.name}' has no hardware arithmetic; build the graph with "
            "step_lang.numerics.functions(config)",
        )
    op = "retile_row" if fn is numerics.retile_row else fn.op
    if op not in ops:
        raise node.error(
            None, f"function '{fn.name}' is not one of {unit}'s operations ({', '.join(ops)})"
        )
    if fn is not numerics.retile_row and fn.numerics.is_float != config.is_float:
        raise node.error(
            None,
            f"function '{fn.name}' computes in {fn.numerics.elem_dtype}, "
            f"the hardware in {config.elem_dtype}; build the graph with "
            "step_lang.numerics.functions(config)",
        )
    if op == "matmul" and fn.numerics.acc_dtype != config.acc_dtype:
        raise node.error(
            None,
            f"function '{fn.name}' accumulates in {fn.numerics.acc_dtype}, "
            f"the hardware in {config.acc_dtype}",
        )
    if fn is not numerics.retile_row and fn.numerics.frac_bits != config.frac_bits:
        raise node.error(
            None,
            f"function '{fn.name}' computes with {fn.numerics.frac_bits} fraction bits, "
            f"the hardware with {config.frac_bits}",
        )
    return fn


def block_for(node: Any, config: HwConfig) -> str | None:
    """The name of the block class that computes ``node``'s function (a Map, Accum, Scan,
    FlatMap or RetileStreamify node), after :func:`node_fn` has checked an arithmetic unit's
    function; ``None`` for a node without a function. A function that no block computes raises
    :class:`~step_lang.errors.StepTypeError` naming the node and the function."""
    fn = getattr(node, "fn", None)
    name = getattr(fn, "name", None) or ""
    if isinstance(node, ops.RetileStreamify):
        return "RetileUnit"
    if isinstance(node, ops.FlatMap):
        if name not in FLATMAP_BLOCKS:
            raise node.error(
                None,
                f"function '{name}' has no hardware block (FlatMap blocks: "
                f"{', '.join(FLATMAP_BLOCKS)})",
            )
        return FLATMAP_BLOCKS[name]
    if isinstance(node, ops.Map):
        if name in _NAMED_MAPS:
            return _NAMED_MAPS[name]
        if name.startswith("region_id"):
            return "RegionIdUnit"
        if getattr(fn, "op", None) == "matmul":
            node_fn(node, config, ("matmul",), "MatmulUnit")
            return "MatmulUnit"
        node_fn(node, config, FLOAT_MAP_OPS if config.is_float else MAP_OPS, "MapUnit")
        return "MapUnit"
    if isinstance(node, ops.Accum):
        if name == "count":
            return "CountUnit"
        node_fn(node, config, ACCUM_OPS, "AccumUnit")
        return "AccumUnit"
    if isinstance(node, ops.Scan):
        node_fn(node, config, SCAN_OPS, "ScanUnit")
        return "ScanUnit"
    return None
