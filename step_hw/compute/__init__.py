"""Compute units: Map, Accum, Scan and RetileStreamify as stream components.

Every unit is a :class:`amaranth.lib.wiring.Component` with token streams (``step_hw.payload``)
named after the node's ports (``in0``, ``in1``, ``out``), listed in node order by ``in_ports``
and ``out_ports``, and a ``from_node(node, config)`` constructor. Their arithmetic is that of
:mod:`step_lang.numerics` (build graphs with ``step_lang.numerics.functions(config)``), so the
interpreter predicts their outputs bit for bit. :func:`compute_unit` picks the unit for a node.
"""

from __future__ import annotations

from typing import Any

from step_lang import ops
from step_lang.errors import StepTypeError, op_message

from ..config import HwConfig
from .accum import ACCUM_OPS, SCAN_OPS, AccumUnit, ScanUnit
from .elementwise import BINARY_OPS, MAP_OPS, UNARY_OPS, MapUnit
from .matmul import MatmulUnit
from .retile import RetileUnit
from .rowops import (
    CountUnit,
    RegionIdUnit,
    RegionSelectUnit,
    RowAppendPartUnit,
    RowAppendUnit,
    row_op_unit,
)

__all__ = [
    "ACCUM_OPS",
    "BINARY_OPS",
    "MAP_OPS",
    "SCAN_OPS",
    "UNARY_OPS",
    "AccumUnit",
    "CountUnit",
    "MapUnit",
    "MatmulUnit",
    "RegionIdUnit",
    "RegionSelectUnit",
    "RetileUnit",
    "RowAppendPartUnit",
    "RowAppendUnit",
    "ScanUnit",
    "compute_unit",
]


def compute_unit(node: Any, config: HwConfig) -> Any:
    """The compute unit of a Map, Accum, Scan or RetileStreamify node (``from_node`` of the
    right class, by the node's function); other nodes raise :class:`StepTypeError`."""
    unit = row_op_unit(node, config)  # row_append(_part), region_id, region_select, count
    if unit is not None:
        return unit
    fn_name = getattr(getattr(node, "fn", None), "name", None)
    if isinstance(node, ops.Map):
        if fn_name == "to_selector":
            from ..select import ToSelector

            return ToSelector.from_node(node, config)
        if getattr(node.fn, "op", None) == "matmul":
            return MatmulUnit.from_node(node, config)
        return MapUnit.from_node(node, config)
    if isinstance(node, ops.Accum):
        return AccumUnit.from_node(node, config)
    if isinstance(node, ops.Scan):
        return ScanUnit.from_node(node, config)
    if isinstance(node, ops.FlatMap):  # RetileStreamify, or a FlatMap of retile_*
        return RetileUnit.from_node(node, config)
    kind, name = getattr(node, "kind", type(node).__name__), getattr(node, "name", "?")
    raise StepTypeError(op_message(str(kind), name, None, "has no compute unit"))
