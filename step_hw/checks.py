"""Parameter and node checks shared by every hardware block.

Constructors validate their keyword parameters here, and ``from_node`` checks that it was given
a node of its operator class (an ``isinstance`` test against :mod:`step_lang.ops`, never a kind
string). Messages follow Amaranth's: the block (``owner``), the parameter, the rule and the
value, e.g. "Partition n must be a positive integer, not 0". Their wording is part of the
interface (tests match it with anchored regexes), so each check keeps the text its blocks have
always given; where blocks word the same rule differently, the variants sit side by side below.

No Amaranth here: the checks only look at Python values, token formats and step_lang nodes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from step_lang.errors import StepTypeError, op_message
from step_lang.graph import Node
from step_lang.numerics import HW_DTYPES
from step_lang.types import DTYPES

from .config import MAX_OUTSTANDING_BURSTS, HwConfig
from .payload import TokenFormat, max_level

__all__ = [
    "INT_BITS",
    "address_format",
    "address_tile",
    "build_for_node",
    "check_bool",
    "check_choice",
    "check_config",
    "check_format",
    "check_int",
    "check_int_bits",
    "check_level",
    "check_node",
    "check_node_class",
    "check_shape",
    "check_shapes",
    "expect_node",
    "int_tuple",
    "levels_fit",
    "memory_tile",
    "no_cost_width",
    "node_call",
    "node_formats",
    "operand_ports",
    "outstanding",
    "rank_levels_fit",
    "where",
]

#: Integer widths of the hardware's fixed-point elements and of scalar metadata tokens (ids,
#: counts, addresses): those of the language's hardware dtypes.
INT_BITS = tuple(DTYPES[name].nbytes * 8 for name in HW_DTYPES)


# -- plain parameters ---------------------------------------------------------------------------


def check_config(owner: str | None, value: Any) -> HwConfig:
    """A :class:`HwConfig` (``owner`` ``None``: the message names no block)."""
    if not isinstance(value, HwConfig):
        who = "config" if owner is None else f"{owner} config"
        raise TypeError(f"{who} must be a HwConfig, not {value!r}")
    return value


def check_int(owner: str, name: str, value: Any, lo: int = 1, hi: int | None = None) -> int:
    """An integer in ``[lo, hi]`` (``hi`` ``None``: ``lo`` 1 is "a positive integer", 0 "a
    non-negative integer"). ``bool`` is refused: ``n=True`` is surely a mistake."""
    if hi is not None:
        rule = f"an integer in [{lo}, {hi}]"
    else:
        rule = {0: "a non-negative integer", 1: "a positive integer"}[lo]
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{owner} {name} must be {rule}, not {value!r}")
    if value < lo or (hi is not None and value > hi):
        raise ValueError(f"{owner} {name} must be {rule}, not {value!r}")
    return value


def check_int_bits(owner: str, name: str, value: Any) -> int:
    """``value`` if it is one of :data:`INT_BITS`, else a ``ValueError`` naming ``owner``."""
    if isinstance(value, bool) or value not in INT_BITS:
        raise ValueError(f"{owner} {name} must be one of 8, 16, 32, not {value!r}")
    return value


def check_choice(owner: str, name: str, value: Any, choices: Sequence[Any]) -> Any:
    if isinstance(value, bool) or value not in choices:
        shown = ", ".join(repr(c) if isinstance(c, str) else str(c) for c in choices)
        raise ValueError(f"{owner} {name} must be one of {shown}, not {value!r}")
    return value


def check_bool(owner: str, name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{owner} {name} must be a bool, not {value!r}")
    return value


def int_tuple(owner: str, name: str, value: Any, *, minimum: int) -> tuple[int, ...]:
    """A sequence of integers ``>= minimum`` (1: positive, 0: non-negative)."""
    kind = "positive" if minimum == 1 else "non-negative"
    if not isinstance(value, (tuple, list)) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= minimum for v in value
    ):
        raise ValueError(f"{owner} {name} must be a sequence of {kind} integers, not {value!r}")
    return tuple(value)


def check_shape(owner: str, name: str, value: Any) -> tuple[int, int]:
    """A tile shape: a pair of positive integers ``(rows, cols)``."""
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise TypeError(f"{owner} {name} must be a (rows, cols) pair, not {value!r}")
    if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in value):
        raise ValueError(f"{owner} {name} must be a pair of positive integers, not {value!r}")
    return (value[0], value[1])


def check_shapes(owner: str, value: Any, count: int, what: str) -> tuple[tuple[int, int], ...]:
    """``count`` tile shapes (``in_shapes``) for ``what``."""
    # A bare pair, `in_shapes=(2, 2)`, is the likely mistake: say so rather than "2 shapes".
    if not isinstance(value, (tuple, list)) or (
        value and all(isinstance(v, int) for v in value) and len(value) == 2
    ):
        raise TypeError(
            f"{owner} in_shapes must be a sequence of (rows, cols) pairs, not {value!r}"
        )
    if len(value) != count:
        raise ValueError(
            f"{owner} in_shapes must hold {count} shape(s) for {what}, not {len(value)}"
        )
    return tuple(check_shape(owner, f"in_shapes[{i}]", s) for i, s in enumerate(value))


# -- token formats and stop levels -------------------------------------------------------------


def check_format(
    owner: str,
    name: str,
    value: Any,
    *,
    types: tuple[type, ...] = (TokenFormat,),
    kinds: tuple[str, ...] | None = None,
) -> Any:
    """A payload format: an instance of one of ``types`` (``TokenFormat``; shape blocks also
    take Zip's ``TupleFormat``) and, with ``kinds``, of one of those ``TokenFormat.kind``."""
    if not isinstance(value, types):
        names = " or ".join(t.__name__ for t in types)
        raise TypeError(f"{owner} {name} must be a {names}, not {value!r}")
    if kinds is not None and value.kind not in kinds:
        raise ValueError(
            f"{owner} {name} must be a {' or '.join(kinds)} format, not a {value.kind} format"
        )
    return value


def check_level(owner: str, what: str, level: int, level_bits: int) -> None:
    """Stop level ``level`` fits ``level_bits`` (the routers' wording: "rank S8 does not fit")."""
    top = max_level(level_bits)
    if level > top:
        raise ValueError(
            f"{owner} {what} S{level} does not fit the format's {level_bits} level bits "
            f"(levels up to S{top})"
        )


def rank_levels_fit(owner: str, what: str, rank: int, level_bits: int) -> None:
    """A rank-``rank`` stream's stops (up to level ``rank``) fit ``level_bits`` (the shape
    blocks' wording)."""
    if rank > max_level(level_bits):
        raise ValueError(
            f"{owner} {what} rank {rank} needs stop levels up to {rank}, which do not fit "
            f"{level_bits} level bits"
        )


def levels_fit(owner: str, what: str, rank: int, level_bits: int) -> None:
    """As :func:`rank_levels_fit`, in the memory blocks' wording."""
    if rank > max_level(level_bits):
        raise ValueError(
            f"{owner} {what} has rank {rank}, whose stop tokens do not fit {level_bits} level bits"
        )


# -- memory controllers -------------------------------------------------------------------------


def memory_tile(owner: str, name: str, value: Any) -> TokenFormat:
    """A tile format whose elements are whole bytes (so they have a memory layout)."""
    fmt = check_format(owner, name, value, kinds=("tile",))
    if fmt.dynamic:
        # Memory layouts are static tilings; a dynamic tile reaches memory as its rows
        # (RetileStreamify) or through Bufferize of those rows.
        raise ValueError(
            f"{owner} {name} is a dynamic tile (up to {fmt.rows} rows); memory operators move "
            "static tiles"
        )
    if fmt.elem_bits not in (8, 16, 32):
        raise ValueError(
            f"{owner} {name} elements must be 8, 16 or 32 bits wide to have a byte layout in "
            f"memory, not {fmt.elem_bits}"
        )
    return fmt


def address_tile(owner: str, name: str, value: Any) -> TokenFormat:
    fmt = check_format(owner, name, value, kinds=("tile",))
    if (fmt.rows, fmt.cols) != (1, 1) or fmt.elem_bits < 2:
        raise ValueError(
            f"{owner} {name} must be a 1x1 tile of integers, not {fmt.rows}x{fmt.cols} of "
            f"{fmt.elem_bits}-bit elements"
        )
    return fmt


def address_format(owner: str, value: Any, fmt: TokenFormat) -> TokenFormat:
    """A random controller's address format; its stop levels must match the tiles'."""
    addr_fmt = address_tile(owner, "addr_format", value)
    if addr_fmt.level_bits != fmt.level_bits:
        raise ValueError(
            f"{owner} addr_format has {addr_fmt.level_bits} level bits but tile_format has "
            f"{fmt.level_bits}"
        )
    return addr_fmt


def outstanding(owner: str, value: Any, config: HwConfig) -> int:
    """Bursts in flight: ``config.max_outstanding`` by default, at most
    :data:`~step_hw.config.MAX_OUTSTANDING_BURSTS`."""
    if value is None:
        return config.max_outstanding
    value = check_int(owner, "max_outstanding", value)
    if value > MAX_OUTSTANDING_BURSTS:
        raise ValueError(
            f"{owner} max_outstanding must be at most {MAX_OUTSTANDING_BURSTS}, not {value}"
        )
    return value


def no_cost_width(node: Any) -> None:
    """Hardware moves the tensor's own dtype; a narrower cost-model width has no hardware meaning."""
    elem_bytes = getattr(node, "elem_bytes", None)
    if elem_bytes is not None and elem_bytes != node.tensor.dtype.nbytes:
        raise StepTypeError(
            f"{node.kind} '{node.name}': elem_bytes={elem_bytes} models a {elem_bytes}-byte memory "
            f"type, but the hardware moves the tensor's {node.tensor.dtype} elements"
        )


# -- from_node: the node's class ----------------------------------------------------------------


def where(node: Any, port: str | None) -> str:
    """``Kind 'name', port 'p'``: the ``where`` of :meth:`TokenFormat.for_elem` for a port;
    ``Kind 'name'`` without one (a top-level stream port, named by its node)."""
    return f"{node.kind} '{node.name}'" + ("" if port is None else f", port '{port}'")


def operand_ports(node: Any) -> list[str]:
    """The node's port behind each of its block's input ports (:func:`node_formats`' order):
    its input names, or its one input's name once per item of a tuple its function takes apart."""
    if node.unpacks_tuple:
        return [node.input_names[0]] * len(node.arg_types)
    return list(node.input_names)


def node_formats(node: Any, config: HwConfig) -> tuple[list[TokenFormat], TokenFormat]:
    """The token formats of ``node``'s block's input ports and of its output: one per input, or
    one per item of a tuple its function takes apart (:attr:`step_lang.graph.Node.unpacks_tuple`);
    unsupported elements raise a :class:`StepTypeError` naming the node and the port."""
    check_config(None, config)
    elems = node.arg_types if node.unpacks_tuple else [s.elem for s in node.inputs]
    ins = [
        TokenFormat.for_elem(e, config, where=where(node, p))
        for p, e in zip(operand_ports(node), elems, strict=True)
    ]
    (out_type,) = node.out_types
    return ins, TokenFormat.for_elem(out_type.elem, config, where=where(node, node.output_names[0]))


def check_node(node: Any, classes: Sequence[type[Node]], unit: str) -> None:
    """``node`` is an instance of one of ``classes`` (the compute units' wording)."""
    if not isinstance(node, Node):
        raise TypeError(f"{unit}.from_node needs a step_lang node, not {node!r}")
    if not isinstance(node, tuple(classes)):
        names = " or ".join(c.kind for c in classes)
        raise node.error(None, f"{unit} builds {names} nodes only")


def check_node_class(node: Any, cls: type[Node], block: str) -> None:
    """``node`` is a ``cls`` (the routers' wording: "needs a node of kind ...")."""
    if not isinstance(node, cls):
        if isinstance(node, Node):
            raise StepTypeError(
                op_message(
                    node.kind, node.name, None, f"{block}.from_node needs a node of kind {cls.kind}"
                )
            )
        raise StepTypeError(f"{block}.from_node needs a node of kind {cls.kind}, not {node!r}")


def expect_node(block: type, node: Any, cls: type[Node]) -> None:
    """``node`` is a ``cls`` (the shape blocks' wording: "needs a ... node, not ...")."""
    if not isinstance(node, cls):
        got = f"{node.kind} '{node.name}'" if isinstance(node, Node) else repr(node)
        raise StepTypeError(f"{block.__name__}.from_node needs a {cls.kind} node, not {got}")


def build_for_node(node: Any, cls: type[Node], build: Callable[[], Any]) -> Any:
    """Run ``build`` for a ``cls`` node; rejections become :class:`StepTypeError` naming the
    node (the memory blocks' wording, :func:`node_call`'s). Its own ``try`` rather than a call of
    :func:`node_call`: with that extra frame a refused memory block was collected later, outside
    the tests that silence Amaranth's unused-block warning (3 of ``tests/test_hw_memory.py``)."""
    if not isinstance(node, cls):
        raise StepTypeError(
            f"expected a {cls.kind} node, not {getattr(node, 'kind', type(node).__name__)} "
            f"'{getattr(node, 'name', '?')}'"
        )
    try:
        return build()
    except StepTypeError:
        raise
    except (TypeError, ValueError) as exc:
        raise StepTypeError(op_message(node.kind, node.name, None, str(exc))) from exc


def node_call(node: Any, make: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``make(*args, **kwargs)``, a block's constructor or a check of its parameters; a
    ``TypeError`` or ``ValueError`` it raises becomes a :class:`StepTypeError` naming ``node``
    (one that already is a :class:`StepTypeError` passes unchanged)."""
    try:
        return make(*args, **kwargs)
    except StepTypeError:
        raise
    except (TypeError, ValueError) as exc:
        raise StepTypeError(op_message(node.kind, node.name, None, str(exc))) from exc
