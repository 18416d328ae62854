"""Rules of single blocks that depend only on a node's types and parameters.

A block's ``from_node`` calls its rule here before it builds the block, and
:func:`step_hw.graph_rules.check_graph` calls :func:`check_node` for every node, so that the
``rtl`` timing profile refuses such a node with the elaborator's message instead of timing
hardware that cannot be built. The blocks' other checks (widths and parameters of the
constructors) are still made only when the block is built. No Amaranth here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from step_lang import ops
from step_lang.dims import is_static
from step_lang.types import TupleType

from .config import HwConfig

__all__ = ["check_node", "reshape_rule", "zip_rule"]


def reshape_rule(node: ops.Reshape, config: HwConfig) -> None:
    """A Reshape that splits the innermost dim (``rank == 0``) of dynamic size needs ``pad``:
    the hardware cannot report a short last vector at run time."""
    x = node.inputs[0]
    if node.rank == 0 and node.pad is None and not is_static(x.shape[-1]):
        raise node.error(
            "in",
            f"no hardware block: the innermost dim {x.shape[-1]} is dynamic and no pad is "
            "given; hardware cannot report a short vector at run time, give pad=",
        )


def zip_rule(node: ops.Zip, config: HwConfig) -> None:
    """A Zip's inputs are not tuples themselves: nested tuples have no hardware encoding."""
    for port, s in zip(node.input_names, node.inputs, strict=True):
        if isinstance(s.elem, TupleType):
            raise node.error(port, "no hardware block: nested tuples have no hardware encoding")


#: node class -> its block's rule
RULES: dict[type, Callable[[Any, HwConfig], None]] = {
    ops.Reshape: reshape_rule,
    ops.Zip: zip_rule,
}


def check_node(node: Any, config: HwConfig) -> None:
    """Raise :class:`~step_lang.errors.StepTypeError` naming the node and the port if the rule
    of ``node``'s block refuses it."""
    for cls, rule in RULES.items():
        if isinstance(node, cls):
            rule(node, config)
