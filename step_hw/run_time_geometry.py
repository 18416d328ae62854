"""Tiling as a run-time setting (``HwConfig.geometry_bounds``): one build of a design serves a
graph at several tilings.

A graph tiled two ways (Fig. 8's ``tile_b x tile_i`` on 16 x 16 hardware tiles) differs, in its
hardware, only in a few numbers: the walks of its loads and buffer reads, the size of its
buffers, and how many partial sums its Accums hold (and queue depths, which
``HwConfig.queue_capacity`` already makes run-time settings). A node named in
``HwConfig.geometry_bounds`` is built for the bound given there and takes those numbers, its
*geometry*, from the elaborated graph's top-level input ``geometry`` (set before ``start`` and
held), cycle for cycle the block built for them. Which nodes can, and what their geometry is:

* a ``LinearOffChipLoad``: its walk over the tensor's tiles (``out_shape``, ``stride``, ``base``);
  the bound is the largest ``out_shape``;
* a ``Streamify`` with an affine read, or a read of the whole buffer in stored order, of a static
  buffer: its walk over the buffer (``repeat`` dims then the read); the bound is the largest walk
  shape. Its ``Bufferize`` must be named too (the pair shares the buffer's memory);
* a static ``Bufferize``: its buffer's element count; the bound is the largest buffer shape (the
  memory holds ``slots`` buffers of that shape; a buffer of another shape lies at the start of
  its slot);
* an ``Accum`` with held accumulators: their extents; the bound is the largest held shape.

A walk's numbers are, per dim ``d``, its last index ``end<d>`` and the index step ``delta<d>``
(``stride[d] - sum_{e > d} (shape[e] - 1) * stride[e]``, modulo the index width), and its
``base``; a buffer's, its ``size``; held accumulators', per held dim its last index ``end<d>``,
and the last position ``last`` (their product less one). :func:`walk_fields`,
:func:`buffer_fields` and :func:`held_fields` name them and give their widths (the blocks build
their ports from them), :func:`geometry_values` reads a node's from the graph, and the
description of a design (``ElaboratedGraph.description``, ``"geometry_fields"``) gives each
field's bits in the input, so that a run packs its graph's geometry (:func:`run_description`) without
elaborating it. Pure Python on the lowered graph, no Amaranth.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from step_lang import ops
from step_lang.graph import Graph, Node
from step_lang.passes import lower

from .config import HwConfig
from .contract import feedback_input

__all__ = [
    "GEOMETRY_KINDS",
    "buffer_fields",
    "buffer_of",
    "check_geometry",
    "geometry_extents",
    "geometry_values",
    "held_fields",
    "pack_geometry",
    "params_layout",
    "run_description",
    "shared_bounds",
    "walk_fields",
    "walk_values",
]

#: The operators whose geometry can be a run-time setting.
GEOMETRY_KINDS = (ops.LinearOffChipLoad, ops.Streamify, ops.Bufferize, ops.Accum)


def _bits(n: int) -> int:
    """Bits of an unsigned field that holds ``0..n`` (at least one)."""
    return max(1, int(n).bit_length())


def walk_fields(bounds: Sequence[int], index_width: int) -> list[tuple[str, int]]:
    """The fields of a walk built for ``bounds`` (the largest extent of each dim) whose indices
    are ``index_width`` bits: ``(name, width)`` in their order in the block's port."""
    ends = [(f"end{d}", _bits(b - 1)) for d, b in enumerate(bounds)]
    deltas = [(f"delta{d}", index_width) for d in range(len(bounds))]
    return [*ends, *deltas, ("base", index_width)]


def walk_values(shape: Sequence[int], stride: Sequence[int], base: int) -> dict[str, int]:
    """The fields of the walk over ``shape`` with ``stride`` from ``base`` (a ``delta`` may be
    negative: it is packed modulo its field, as the walk's adder wraps)."""
    n = len(shape)
    out = {f"end{d}": shape[d] - 1 for d in range(n)}
    for d in range(n):
        out[f"delta{d}"] = stride[d] - sum((shape[e] - 1) * stride[e] for e in range(d + 1, n))
    out["base"] = base
    return out


def params_layout(fields: Sequence[tuple[str, int]]) -> Any:
    """A block's ``params`` port layout (an Amaranth ``StructLayout``) from its ``(name, width)``
    fields, in their order. (Amaranth is imported here only: the rest of the module is pure
    Python.)"""
    from amaranth.hdl import unsigned
    from amaranth.lib import data

    return data.StructLayout({name: unsigned(width) for name, width in fields})


def buffer_fields(bound_size: int) -> list[tuple[str, int]]:
    """The field of a buffer built for ``bound_size`` elements: its element count."""
    return [("size", _bits(bound_size))]


def held_fields(bounds: Sequence[int]) -> list[tuple[str, int]]:
    """The fields of held accumulators built for ``bounds``: each held dim's last index, and
    the last position (their count less one)."""
    return [*((f"end{d}", _bits(b - 1)) for d, b in enumerate(bounds)),
            ("last", _bits(math.prod(bounds) - 1))]  # fmt: skip


def _streamify_walk(node: ops.Streamify) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """The walk of a Streamify's reads: its repeat dims, then its affine read or its buffer in
    stored order; refused (one line) for a permuted read or a dynamic buffer."""
    shape = node.inputs[0].elem.shape
    if node.order is not None or not all(isinstance(d, int) for d in shape):
        raise ValueError(
            f"Streamify '{node.name}': only an affine read or a stored-order read of a static "
            "buffer takes its geometry at run time (HwConfig.geometry_bounds)"
        )
    if node.affine:
        read, stride, base = tuple(node.read_shape), tuple(node.stride), node.base
    else:
        read = tuple(int(d) for d in shape)
        stride, base = tuple(math.prod(read[d + 1 :]) for d in range(len(read))), 0
    repeat = tuple(node.repeat)
    return (*repeat, *read), (0,) * len(repeat) + stride, base


def buffer_of(node: ops.Streamify) -> Node:
    """The Bufferize whose buffers a Streamify reads (through any Feedback)."""
    return feedback_input(node.inputs[0]).node


def _readers(low: Graph, buffers: Node) -> list[Node]:
    """The Streamifys of the lowered graph ``low`` that read ``buffers``' buffers."""
    return [
        n for n in low.nodes.values()
        if isinstance(n, ops.Streamify) and buffer_of(n) is buffers
    ]  # fmt: skip


def geometry_extents(node: Node) -> tuple[int, ...]:
    """The extents of ``node``'s geometry that a bound bounds: a load's ``out_shape``, a
    Streamify's walk shape, a Bufferize's buffer shape, an Accum's held shape. Raises
    ``ValueError`` (one line, naming the node) for a node whose geometry cannot be a run-time
    setting."""
    if isinstance(node, ops.LinearOffChipLoad):
        return tuple(int(d) for d in node.out_shape)
    if isinstance(node, ops.Streamify):
        return _streamify_walk(node)[0]
    if isinstance(node, ops.Bufferize):
        shape = node.out_types[0].elem.shape
        if not all(isinstance(d, int) for d in shape):
            raise ValueError(
                f"Bufferize '{node.name}': a dynamic buffer shape {list(map(str, shape))} "
                "cannot take its geometry at run time (HwConfig.geometry_bounds)"
            )
        return tuple(shape)
    if isinstance(node, ops.Accum) and getattr(node, "held", 0):
        return tuple(int(d) for d in node.held_shape)
    raise ValueError(
        f"{node.kind} '{node.name}': its geometry cannot be a run-time setting "
        "(HwConfig.geometry_bounds takes LinearOffChipLoad, Streamify, Bufferize and an Accum "
        "with held accumulators)"
    )


def geometry_values(node: Node) -> dict[str, int]:
    """``node``'s geometry as the fields of its block (:func:`walk_fields`,
    :func:`buffer_fields`, :func:`held_fields`)."""
    if isinstance(node, ops.LinearOffChipLoad):
        return walk_values(tuple(node.out_shape), tuple(node.stride), node.base)
    if isinstance(node, ops.Streamify):
        return walk_values(*_streamify_walk(node))
    if isinstance(node, ops.Bufferize):
        return {"size": math.prod(geometry_extents(node))}
    held = geometry_extents(node)
    return {**{f"end{d}": e - 1 for d, e in enumerate(held)}, "last": math.prod(held) - 1}


def _check(low: Graph, config: HwConfig) -> None:
    for name, bound in config.geometry_bounds:
        node = low.nodes.get(name)
        if node is None:
            raise ValueError(
                f"HwConfig.geometry_bounds names node '{name}', which graph '{low.name}' does not "
                "have"
            )
        extents = geometry_extents(node)
        if len(extents) != len(bound) or any(e > b for e, b in zip(extents, bound, strict=False)):
            raise ValueError(
                f"{node.kind} '{name}': geometry {list(extents)} exceeds its bound {list(bound)} "
                "(HwConfig.geometry_bounds)"
            )
        if isinstance(node, ops.Streamify):
            buffers = buffer_of(node)
            if buffers.name not in dict(config.geometry_bounds):
                raise ValueError(
                    f"Streamify '{name}': its Bufferize '{buffers.name}' must take its geometry "
                    "at run time too (HwConfig.geometry_bounds)"
                )
        if isinstance(node, ops.Bufferize):
            for reader in _readers(low, node):
                if reader.name not in dict(config.geometry_bounds):
                    raise ValueError(
                        f"Bufferize '{name}': its Streamify '{reader.name}' must take its "
                        "geometry at run time too (HwConfig.geometry_bounds)"
                    )


def check_geometry(graph: Graph, config: HwConfig) -> None:
    """Raise ``ValueError`` (one line) if ``config.geometry_bounds`` names a node ``graph`` does
    not have, one whose geometry cannot be a run-time setting, or one whose geometry exceeds
    its bound (or has another rank)."""
    if config.geometry_bounds:
        _check(lower(graph), config)


def pack_geometry(low: Graph, fields: dict[str, dict[str, Sequence[int]]]) -> int:
    """The ``geometry`` value of the lowered graph ``low`` on a design whose description gives
    ``fields`` (node -> field -> (first bit, width)). Raises ``ValueError`` naming the node or
    field the graph lacks, or a value that does not fit its field."""
    value = 0
    for name, node_fields in fields.items():
        node = low.nodes.get(name)
        if node is None:
            raise ValueError(f"graph '{low.name}' has no node '{name}' of the design it runs on")
        values = geometry_values(node)
        for field, (at, width) in node_fields.items():
            v = values[field]
            if field.startswith("delta"):
                v %= 1 << width
            elif not 0 <= v < 1 << width:
                raise ValueError(
                    f"{node.kind} '{name}': geometry field {field} = {v} does not fit its "
                    f"{width} bits"
                )
            value |= v << at
    return value


def run_description(graph: Graph, config: HwConfig, desc: dict[str, Any]) -> dict[str, Any]:
    """``desc`` (the design's description) for a run of ``graph``: when the design has the input
    ``geometry``, with its value (``"geometry"``, :func:`pack_geometry`, from the description's
    ``geometry_fields``; the geometry checked against the bounds first)."""
    fields = desc.get("geometry_fields")
    if not fields:
        return desc
    low = lower(graph)
    if config.geometry_bounds:
        _check(low, config)
    return {**desc, "geometry": pack_geometry(low, fields)}


def shared_bounds(graphs: list[Graph], config: HwConfig) -> dict[str, tuple[int, ...]]:
    """``HwConfig.geometry_bounds`` for one build that runs every graph of ``graphs`` (one
    design at several tilings): each node of a run-time kind whose geometry differs between
    them, with the largest extent of each dim, and every Bufferize that such a Streamify reads.
    Raises ``ValueError`` if the graphs do not have the same nodes, or a differing node's rank
    differs."""
    lows = [lower(g) for g in graphs]
    names = set(lows[0].nodes)
    for low in lows[1:]:
        if set(low.nodes) != names:
            extra = sorted(set(low.nodes) ^ names)
            raise ValueError(
                f"graphs '{lows[0].name}' and '{low.name}' differ in nodes {extra}: one build "
                "runs graphs with the same nodes"
            )
    bounds: dict[str, tuple[int, ...]] = {}
    for name in sorted(names):
        node = lows[0].nodes[name]
        if not isinstance(node, GEOMETRY_KINDS) or (
            isinstance(node, ops.Accum) and not getattr(node, "held", 0)
        ):
            continue
        extents = [geometry_extents(low.nodes[name]) for low in lows]
        if len({len(e) for e in extents}) > 1:
            raise ValueError(f"{node.kind} '{name}': geometry ranks differ between the graphs")
        if (
            len(set(extents)) > 1
            or len({str(geometry_values(low.nodes[name])) for low in lows}) > 1
        ):
            bounds[name] = tuple(max(e[d] for e in extents) for d in range(len(extents[0])))
    # a buffer pair shares its memory: both run-time, or neither
    for name in list(bounds):
        node = lows[0].nodes[name]
        if isinstance(node, ops.Streamify):
            buf = buffer_of(node)
            bounds.setdefault(buf.name, geometry_extents(buf))
    for name in list(bounds):
        node = lows[0].nodes[name]
        if isinstance(node, ops.Bufferize):
            for reader in _readers(lows[0], node):
                bounds.setdefault(reader.name, geometry_extents(reader))
    return dict(sorted(bounds.items()))
