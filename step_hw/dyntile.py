"""Bounds of dynamic tiles: every dynamically sized tile of a graph must fit
``HwConfig.dyn_tile_rows`` rows.

A dynamic tile's rows are a sympy expression over the graph's dimension symbols (dynamic
tiling's ``[route_n000, D]``). :func:`symbol_bounds` gives each symbol an upper bound from the
node that minted it, walking the graph in topological order:

* Partition ``<node>_nXXX`` (chunks routed to one output): at most the number of selector
  elements, the product of the bounds of the selector stream's shape;
* Flatten ``<node>_n`` (a ragged product): the product of the merged dims' bounds;
* Accum ``<node>_rows`` / ``<node>_cols`` (a ragged accumulator, e.g. ``retile_row`` over a
  ragged dim): the input tile's extent times the reduced dims' bounds;
* EagerMerge ``<node>_rows`` (the rows of a merged dynamic tile): the largest bound of its
  inputs' tile rows.

A node bounds only the symbols it mints (not those its inputs carry): a symbol its minting node
leaves unbounded stays unbounded rather than taking the bound of a later node.

Other symbols (Reassemble's ``_k``, RetileStreamify's masked count, FlatMap sub-streams, ...)
have no bound here; a dynamic tile that depends on one is rejected. :func:`dim_bound` evaluates an
expression at its symbols' bounds, which bounds it because shape expressions are monotone (sums,
products, ``ceiling``, ``Min``, ``Max`` of non-negative terms); one with a negative constant is
treated as unbounded rather than guessed.

:func:`check_dynamic_tiles` is one of the graph rules (``step_hw.graph_rules``, which the
elaborator checks before it builds a block and the rtl profile before it times one): a
:class:`~step_lang.errors.StepTypeError` naming the producing node for a dynamic tile whose bound
is unknown or exceeds ``HwConfig.dyn_tile_rows``.
"""

from __future__ import annotations

from typing import Any

import sympy as sp

from step_lang import ops
from step_lang.dims import Dim, product
from step_lang.errors import StepTypeError, op_message
from step_lang.graph import Graph
from step_lang.types import Selector, Tile

from .config import HwConfig

__all__ = ["check_dynamic_tiles", "dim_bound", "symbol_bounds", "tile_row_bound"]


def dim_bound(d: Dim, bounds: dict[sp.Symbol, int]) -> int | None:
    """An upper bound of ``d`` given its symbols' bounds; ``None`` when one is unknown."""
    if isinstance(d, int):
        return d
    expr = sp.sympify(d)
    free = expr.free_symbols
    if any(s not in bounds for s in free):
        return None
    if any(a.is_negative for a in expr.atoms(sp.Number)):
        return None  # not monotone in its symbols: no safe bound
    value = expr.subs({s: bounds[s] for s in free})  # its own symbols: subs walks the mapping
    return int(value) if value.is_Integer else None


def _product_bound(dims, bounds) -> int | None:
    values = [dim_bound(d, bounds) for d in dims]
    return None if None in values else int(product(values))


def _minted_bound(node: Any, bounds: dict[sp.Symbol, int]) -> int | None:
    """The bound of the symbols a node mints (one rule per kind; module docstring)."""
    if isinstance(node, ops.Partition):
        sel = next((s for s in node.inputs if isinstance(s.elem, Selector)), None)
        return None if sel is None else _product_bound(sel.shape, bounds)
    if isinstance(node, ops.Flatten):
        x = node.inputs[0]
        lo, hi = node.lo, node.hi
        merged = x.shape[len(x.shape) - 1 - hi : len(x.shape) - lo]
        return _product_bound(merged, bounds)
    if isinstance(node, ops.EagerMerge):  # a merged tile is one of its inputs' tiles
        rows = [
            dim_bound(x.elem.rows, bounds) if isinstance(x.elem, Tile) else None
            for x in node.inputs
        ]
        return None if None in rows or not rows else max(rows)
    if isinstance(node, ops.Accum) and isinstance(node.inputs[0].elem, Tile):
        x = node.inputs[0]
        reduced = x.shape[len(x.shape) - node.rank :]
        # Concatenating rows or columns: the larger extent times the reduced elements.
        extents = [dim_bound(x.elem.rows, bounds), dim_bound(x.elem.cols, bounds)]
        if None in extents:
            return None
        return _product_bound((max(extents), *reduced), bounds)
    return None


def _symbols(types) -> set[sp.Symbol]:
    out: set[sp.Symbol] = set()
    for t in types:
        dims = list(t.shape)
        if isinstance(t.elem, Tile):
            dims += [t.elem.rows, t.elem.cols]
        for d in dims:
            if not isinstance(d, int):
                out |= sp.sympify(d).free_symbols
    return out


def symbol_bounds(graph: Graph) -> dict[sp.Symbol, int]:
    """Upper bounds of the graph's dimension symbols that a rule of this module covers. A node
    bounds only the symbols it mints (those its inputs do not carry): a symbol left unbounded
    by the node that minted it stays unbounded."""
    bounds: dict[sp.Symbol, int] = {}
    for node in graph.topo_order():
        inherited = _symbols(s.type for s in node.inputs)
        fresh = {s for s in _symbols(node.out_types) if s not in bounds and s not in inherited}
        if fresh:
            b = _minted_bound(node, bounds)
            if b is not None:
                bounds.update(dict.fromkeys(fresh, b))
    return bounds


def tile_row_bound(tile: Tile, bounds: dict[sp.Symbol, int]) -> int | None:
    """The most rows ``tile`` can have (its rows for a static tile)."""
    return dim_bound(tile.rows, bounds)


def check_dynamic_tiles(graph: Graph, config: HwConfig) -> dict[sp.Symbol, int]:
    """Reject dynamic tiles without a bound or beyond ``config.dyn_tile_rows``; the bounds."""
    bounds = symbol_bounds(graph)
    for node in graph.topo_order():
        for port, t in zip(node.output_names, node.out_types, strict=True):
            elem = t.elem
            if not isinstance(elem, Tile) or isinstance(elem.rows, int):
                continue
            rows = tile_row_bound(elem, bounds)
            if rows is None:
                raise StepTypeError(
                    op_message(node.kind, node.name, port,
                               f"dynamic tile {elem} has no known bound on its rows "
                               f"(hardware tiles hold at most HwConfig.dyn_tile_rows="
                               f"{config.dyn_tile_rows})")
                )  # fmt: skip
            if rows > config.dyn_tile_rows:
                raise StepTypeError(
                    op_message(node.kind, node.name, port,
                               f"dynamic tile {elem} has up to {rows} rows; the hardware holds "
                               f"HwConfig.dyn_tile_rows={config.dyn_tile_rows}")
                )  # fmt: skip
    return bounds
