"""Compute units: Map, Accum, Scan and RetileStreamify as stream components.

Every unit is a :class:`amaranth.lib.wiring.Component` with token streams (``step_hw.payload``)
named after the node's ports (``in0``, ``in1``, ``out``), listed in node order by ``in_ports``
and ``out_ports``, and a ``from_node(node, config)`` constructor. Their arithmetic is that of
:mod:`step_lang.numerics` (build graphs with ``step_lang.numerics.functions(config)``), so the
interpreter predicts their outputs bit for bit. :func:`compute_unit` picks the unit for a node.
"""

from __future__ import annotations

from typing import Any

from step_lang.errors import StepTypeError, op_message

from ..config import HwConfig
from ..unit_functions import ACCUM_OPS, BINARY_OPS, MAP_OPS, SCAN_OPS, UNARY_OPS, block_for
from .accum import AccumUnit, ScanUnit
from .elementwise import MapUnit
from .matmul import MatmulUnit
from .retile import RetileUnit
from .rowops import (
    CountUnit,
    RegionIdUnit,
    RegionSelectUnit,
    RowAppendPartUnit,
    RowAppendUnit,
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
    """The compute unit of a Map, Accum, Scan or RetileStreamify node: ``from_node`` of the
    class :func:`step_hw.unit_functions.block_for` names by the node's function (which it
    checks); other nodes raise :class:`StepTypeError`."""
    from ..select import ToSelector

    units = {
        cls.__name__: cls
        for cls in (
            AccumUnit,
            CountUnit,
            MapUnit,
            MatmulUnit,
            RegionIdUnit,
            RegionSelectUnit,
            RetileUnit,
            RowAppendPartUnit,
            RowAppendUnit,
            ScanUnit,
            ToSelector,
        )
    }
    block = block_for(node, config)  # None for a node without a function
    if block not in units:
        kind, name = getattr(node, "kind", type(node).__name__), getattr(node, "name", "?")
        raise StepTypeError(op_message(str(kind), name, None, "has no compute unit"))
    return units[block].from_node(node, config)
