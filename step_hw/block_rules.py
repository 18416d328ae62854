"""Rules of single blocks that depend only on a node's types and parameters.

A block's ``from_node`` calls its rule here before it builds the block, and
:func:`step_hw.graph_rules.check_graph` calls :func:`check_node` for every node, so that the
``rtl`` timing profile refuses such a node with the elaborator's message instead of timing
hardware that cannot be built; with it, for a node with a function, the rules of the block that
computes it (``step_hw.unit_functions``, ``step_hw.function_params``, :func:`unit_tiles_rule`).
The compute units' other checks (widths and shapes of the constructors) are still made only when
the block is built. No Amaranth here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from step_lang import functions, numerics, ops
from step_lang.dims import is_ragged, is_static
from step_lang.errors import StepTypeError
from step_lang.types import TupleType

from .checks import int_tuple, node_call, node_formats, operand_ports, where
from .config import HwConfig
from .dyntile import dim_bound, symbol_bounds
from .function_params import FUNCTION_PARAMS
from .payload import TokenFormat
from .unit_functions import block_for

#: a graph's dimension symbols -> their bounds (:func:`step_hw.dyntile.symbol_bounds`)
Bounds = dict[Any, int]

__all__ = [
    "RETILE_FUNCTIONS",
    "TUPLE_MOVERS",
    "buffer_extent",
    "bufferize_rule",
    "check_fetch",
    "check_node",
    "fetch_rule",
    "fetch_tile",
    "merge_rule",
    "reshape_rule",
    "streamify_rule",
    "tuple_rule",
    "unit_tiles_rule",
    "zip_rule",
]


def reshape_rule(node: ops.Reshape, config: HwConfig, bounds: Bounds | None = None) -> None:
    """A Reshape that splits the innermost dim (``rank == 0``) of dynamic size needs ``pad``:
    the hardware cannot report a short last vector at run time."""
    x = node.inputs[0]
    if node.rank == 0 and node.pad is None and not is_static(x.shape[-1]):
        raise node.error(
            "in",
            f"no hardware block: the innermost dim {x.shape[-1]} is dynamic and no pad is "
            "given; hardware cannot report a short vector at run time, give pad=",
        )


def zip_rule(node: ops.Zip, config: HwConfig, bounds: Bounds | None = None) -> None:
    """A Zip's inputs are not tuples themselves: nested tuples have no hardware encoding."""
    for port, s in zip(node.input_names, node.inputs, strict=True):
        if isinstance(s.elem, TupleType):
            raise node.error(port, "no hardware block: nested tuples have no hardware encoding")


#: The blocks that move a Zip's tuples without looking into them (the shape blocks of
#: ``step_hw.shape``, which rewrite stop tokens; Broadcast, which copies them; the routers of
#: ``step_hw.router``, which steer them by selectors) and the Zip itself (:func:`zip_rule`);
#: besides them only a unit whose function takes the tuples apart reads them (:func:`tuple_rule`).
TUPLE_MOVERS = (
    ops.Flatten,
    ops.Reshape,
    ops.Promote,
    ops.Expand,
    ops.RepeatStatic,
    ops.Zip,
    ops.Broadcast,
    ops.Partition,
    ops.Reassemble,
    ops.EagerMerge,
    ops.Parallelize,
)


def tuple_rule(node: Any, config: HwConfig) -> None:
    """Only :data:`TUPLE_MOVERS`, a Sink (its top-level port carries the tuple whole) and a unit
    whose function takes the tuple apart (``Map(Zip(a, b), fn)`` with a two-argument ``fn``,
    :attr:`step_lang.graph.Node.unpacks_tuple`) read a stream of tuples (a Zip's output); a
    buffer, a store, and a unit whose function wants the tuple whole, have no tuple encoding.
    The message is the one the block's ``from_node`` gives (:meth:`TokenFormat.for_elem`)."""
    if isinstance(node, (*TUPLE_MOVERS, ops.Sink)) or node.is_feedback or node.unpacks_tuple:
        return
    for port, s in zip(node.input_names, node.inputs, strict=True):
        if isinstance(s.elem, TupleType):
            TokenFormat.for_elem(s.elem, config, where=where(node, port))


def _formats(elem: Any, config: HwConfig, at: str) -> list[TokenFormat]:
    """The token format of ``elem``, or of each item of a Zip's tuple."""
    items = elem.items if isinstance(elem, TupleType) else (elem,)
    return [TokenFormat.for_elem(e, config, where=at) for e in items]


def merge_rule(
    node: ops.EagerMerge | ops.Reassemble, config: HwConfig, bounds: Bounds | None = None
) -> None:
    """The merged inputs of an EagerMerge or a Reassemble share the output's payload format: a
    dynamic tile on the output, whose rows unify inputs of different rows, needs dynamic tiles on
    every input (static and dynamic tiles do not merge)."""
    out = node.out_types[0].elem
    fmt = _formats(out, config, where(node, node.output_names[0]))
    n = len(node.inputs) - (1 if isinstance(node, ops.Reassemble) else 0)  # and its selector
    for port, x in zip(node.input_names[:n], node.inputs[:n], strict=True):
        if _formats(x.elem, config, where(node, port)) != fmt:
            raise node.error(
                port,
                f"tile {x.elem} and the output's {out} have different hardware formats "
                "(static and dynamic tiles do not merge)",
            )


def buffer_extent(
    node: Any, port: str, shape: Sequence[Any], bounds: Bounds | None = None
) -> tuple[tuple[int, ...], int | None]:
    """The max-extent shape of a Bufferize's or Streamify's buffers and its dynamic dim (``None``:
    static); the dynamic dim's extent is its bound (:func:`step_hw.dyntile.dim_bound`) among
    ``bounds`` (the graph's :func:`~step_hw.dyntile.symbol_bounds`; ``None``: computed here). A
    hardware buffer has a fixed size: at most one dynamic dim, and that one bounded."""
    dynamic = [d for d, n in enumerate(shape) if not isinstance(n, int)]
    if not dynamic:
        return tuple(shape), None
    names = list(map(str, shape))
    if len(dynamic) > 1:
        raise StepTypeError(
            f"{where(node, port)}: buffer shape {names} has {len(dynamic)} dynamic dims; "
            "hardware buffers have at most one (sized by its bound)"
        )
    bound = dim_bound(shape[dynamic[0]], symbol_bounds(node.graph) if bounds is None else bounds)
    if bound is None:  # nothing bounds the memory
        raise StepTypeError(
            f"{where(node, port)}: buffer shape {names} is dynamic; "
            "hardware buffers are statically sized"
        )
    # A bound of 0 (an empty graph input) still gets one row: the extent is 0 at run time.
    return tuple(max(1, bound) if d == dynamic[0] else n for d, n in enumerate(shape)), dynamic[0]


def bufferize_rule(node: ops.Bufferize, config: HwConfig, bounds: Bounds | None = None) -> None:
    """A Bufferize's buffer has a fixed size (:func:`buffer_extent`)."""
    buffer_extent(node, "out", node.out_types[0].elem.shape, bounds)


def streamify_rule(node: ops.Streamify, config: HwConfig, bounds: Bounds | None = None) -> None:
    """A Streamify's buffer has a fixed size (:func:`buffer_extent`), and one with a ragged
    inner dynamic dim is read with ``order``: the hardware walks full grids, it cannot replay a
    ragged buffer in its stored order."""
    shape = node.inputs[0].elem.shape
    _, dynamic = buffer_extent(node, "in", shape, bounds)
    if dynamic is not None and node.order is None and dynamic > 0 and is_ragged(shape[dynamic]):
        raise StepTypeError(
            f"{where(node, 'in')}: buffer shape {list(map(str, shape))} has a "
            "ragged inner dim; hardware reads it as a full grid only with order"
        )


def fetch_tile(block: Any, k: Any, block_tiles: int) -> Any:
    """The tile number of tile ``k`` (row-major in its block) of fetch block ``block`` of
    ``block_tiles`` tiles: ``block * block_tiles + k``, consecutive as :func:`check_fetch`
    requires. Integers or Amaranth values."""
    return block * block_tiles + k


def check_fetch(
    who: str, tensor_shape: Sequence[int], tile: tuple[int, int], fetch: Any
) -> tuple[int, int] | None:
    """``fetch=(nr, nc)`` tiles of ``tile`` per index, checked against the tensor: the block, or
    None without ``fetch``; ``ValueError`` starting with ``who`` otherwise.

    The random-access controllers address tile ``k`` of block ``a`` as tile ``a*nr*nc + k``
    (:func:`fetch_tile`):
    right only when a block's tiles are consecutive in the tensor's tile numbering, i.e. one
    block row (``nr == 1``) or blocks spanning the tensor's full width. Other blocks are
    rejected, never misread.
    """
    if fetch is None:
        return None
    pair = int_tuple(who, "fetch", fetch, minimum=1)
    if len(pair) != 2:
        raise ValueError(f"{who} fetch must be a pair (rows, cols) of tiles, not {fetch!r}")
    nr, nc = pair
    rows, cols = tensor_shape[-2:]
    tr, tc = tile
    if rows % (nr * tr) or cols % (nc * tc):
        raise ValueError(
            f"{who} fetch block of {nr}x{nc} tiles of {tr}x{tc} must divide the last two dims "
            f"{rows}x{cols} of the tensor"
        )
    if nr != 1 and nc * tc != cols:
        raise ValueError(
            f"{who} fetch block of {nr}x{nc} tiles of {tr}x{tc} is not consecutive in tensor "
            f"{list(tensor_shape)}: it needs one row of tiles or the tensor's full width"
        )
    return nr, nc


#: the block of each random-access node class, as its messages name it
_RANDOM_BLOCKS = {ops.RandomOffChipLoad: "RandomLoad", ops.RandomOffChipStore: "RandomStore"}


def fetch_rule(
    node: ops.RandomOffChipLoad | ops.RandomOffChipStore,
    config: HwConfig,
    bounds: Bounds | None = None,
) -> None:
    """A random load's or store's ``fetch`` block is consecutive in its tensor
    (:func:`check_fetch`)."""
    if node.fetch is None:
        return
    tile = node.tile_type if isinstance(node, ops.RandomOffChipLoad) else node.inputs[1].elem
    shape, block = node.tensor.shape, (tile.rows, tile.cols)
    node_call(node, check_fetch, _RANDOM_BLOCKS[type(node)], shape, block, node.fetch)


#: the RetileUnit's functions: how it splits a tile (``"rows"`` or ``"cols"``) and whether it drops
#: the rows a second input flags (padding)
RETILE_FUNCTIONS = {
    functions.retile_rows: ("rows", False),
    functions.retile_cols: ("cols", False),
    functions.retile_rows_masked: ("rows", True),
}


def _static_only(node: Any, config: HwConfig, what: str, first: int) -> None:
    """Reject dynamic tiles on inputs ``first..`` of a unit without dynamic-row support there."""
    ins, _ = node_formats(node, config)
    for port, f in list(zip(operand_ports(node), ins, strict=True))[first:]:
        if f.dynamic:
            raise node.error(port, f"{what} has no hardware for dynamically sized tiles")


def unit_tiles_rule(node: Any, config: HwConfig, block: str) -> None:
    """Dynamically sized tiles only on the compute unit inputs that have hardware for them: an
    AccumUnit's matmul takes a dynamic ``a`` (not ``b``), a MatmulUnit a dynamic ``a``, the
    RetileUnit a dynamic tile to split into rows (without a mask); AccumUnit's and ScanUnit's
    other operations none. ``block`` is the unit :func:`step_hw.unit_functions.block_for` names
    (other blocks: nothing to check here). A RetileUnit's function is one of
    :data:`RETILE_FUNCTIONS`."""
    if block == "RetileUnit":
        split = RETILE_FUNCTIONS.get(node.fn)
        if split is None:
            raise node.error(None, f"function '{node.fn.name}' has no RetileUnit")
        ins, _ = node_formats(node, config)
        if ins[0].dynamic and split != ("rows", False):
            raise node.error(
                node.input_names[0],
                f"function '{node.fn.name}' has no hardware for dynamically sized tiles",
            )
        _static_only(node, config, "RetileUnit", 1)
    elif block == "MatmulUnit":
        _static_only(node, config, "MatmulUnit operand b", 1)
    elif block in ("AccumUnit", "ScanUnit"):
        op = "retile_row" if node.fn is numerics.retile_row else node.fn.op
        _static_only(node, config, block, 1 if (op, block) == ("matmul", "AccumUnit") else 0)


#: node class -> its block's rule
RULES: dict[type, Callable[[Any, HwConfig, Bounds | None], None]] = {
    ops.Reshape: reshape_rule,
    ops.Zip: zip_rule,
    ops.EagerMerge: merge_rule,
    ops.Reassemble: merge_rule,
    ops.Bufferize: bufferize_rule,
    ops.Streamify: streamify_rule,
    ops.RandomOffChipLoad: fetch_rule,
    ops.RandomOffChipStore: fetch_rule,
}


def check_node(node: Any, config: HwConfig, bounds: Bounds | None = None) -> None:
    """Raise :class:`~step_lang.errors.StepTypeError` naming the node and the port if the rule
    of ``node``'s block refuses it: a tuple input outside :data:`TUPLE_MOVERS`
    (:func:`tuple_rule`); the rule of its class (:data:`RULES`); for a node with a
    function, that a block computes it with the configuration's numerics
    (:func:`step_hw.unit_functions.block_for`); for a block built from the function's
    parameters, that they fit it (:data:`step_hw.function_params.FUNCTION_PARAMS`); for a compute
    unit, that it has hardware for the dynamic tiles it gets (:func:`unit_tiles_rule`).

    ``bounds``: the graph's symbol bounds (:func:`step_hw.dyntile.symbol_bounds`), which a
    caller that checks every node computes once (a graph of 321 nodes took 0.5 s when each
    buffer's rule computed them); ``None``: computed where a rule needs them."""
    tuple_rule(node, config)
    for cls, rule in RULES.items():
        if isinstance(node, cls):
            rule(node, config, bounds)
    block = block_for(node, config) or ""
    if block in FUNCTION_PARAMS:
        FUNCTION_PARAMS[block](node, config)
    unit_tiles_rule(node, config, block)
