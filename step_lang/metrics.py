"""Symbolic cost metrics: on-chip memory, off-chip traffic and FLOPs per node and in total.

Two accounting conventions are available (``STEP_REFERENCE`` §2):

* ``"paper"`` — the paper's formulas: off-chip operators double-buffer one tile (``2 x tile``);
  Bufferize holds ``tile + 2 x buffer``; Accum, Scan, Expand and RepeatStatic hold one output
  element; a matmul Map holds ``16 x K`` input bytes plus the weight tile (Accum adds its output
  tile); Streamify holds nothing (Bufferize owns the storage);
* ``"artifact"`` — what the authors' scripts computed for their figures: one tile per off-chip
  operator, Streamify counts ``buffer + tile``, matmuls no staging term.

Values stay sympy expressions over the graph's dynamic dims until :meth:`Metrics.evaluate`
substitutes numbers (for example ``InterpretResult.bindings.regular``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import sympy as sp

from .dims import Dim
from .errors import StepValueError
from .graph import Graph
from .integers import is_integer
from .passes import lower

__all__ = ["CONVENTIONS", "Metrics", "NodeCost", "metrics"]

CONVENTIONS = ("paper", "artifact")


@dataclass(frozen=True)
class NodeCost:
    """Costs of one node."""

    name: str
    kind: str
    onchip_bytes: Dim
    offchip_bytes: Dim
    flops: Dim


@dataclass(frozen=True)
class Metrics:
    """Per-node and total costs of a graph under one convention."""

    convention: str
    nodes: tuple[NodeCost, ...]

    @property
    def onchip_bytes(self) -> Dim:
        return _sum(n.onchip_bytes for n in self.nodes)

    @property
    def offchip_bytes(self) -> Dim:
        return _sum(n.offchip_bytes for n in self.nodes)

    @property
    def flops(self) -> Dim:
        return _sum(n.flops for n in self.nodes)

    @property
    def free_symbols(self) -> set[sp.Symbol]:
        syms: set[sp.Symbol] = set()
        for n in self.nodes:
            for v in (n.onchip_bytes, n.offchip_bytes, n.flops):
                if not isinstance(v, int):
                    syms |= v.free_symbols
        return syms

    def node(self, name: str) -> NodeCost:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(f"no node named {name!r}")

    def table(self, *, by_kind: bool = False) -> str:
        """A plain-text table of per-node (or per-kind) costs and totals."""
        rows: list[tuple[str, str, Dim, Dim, Dim]] = []
        if by_kind:
            kinds: dict[str, list[NodeCost]] = {}
            for n in self.nodes:
                kinds.setdefault(n.kind, []).append(n)
            for kind, ns in kinds.items():
                rows.append(
                    (
                        f"{len(ns)} node(s)",
                        kind,
                        _sum(n.onchip_bytes for n in ns),
                        _sum(n.offchip_bytes for n in ns),
                        _sum(n.flops for n in ns),
                    )
                )
        else:
            rows = [(n.name, n.kind, n.onchip_bytes, n.offchip_bytes, n.flops) for n in self.nodes]
        rows.append(("total", "", self.onchip_bytes, self.offchip_bytes, self.flops))
        head = ("node", "kind", f"on-chip B ({self.convention})", "off-chip B", "FLOPs")
        cells = [head] + [tuple(str(v) for v in r) for r in rows]
        widths = [max(len(r[i]) for r in cells) for i in range(5)]
        lines = [
            "  ".join(
                c.ljust(w) if i < 2 else c.rjust(w)
                for i, (c, w) in enumerate(zip(r, widths, strict=True))
            )
            for r in cells
        ]
        lines.insert(1, "  ".join("-" * w for w in widths))
        lines.insert(len(lines) - 1, "  ".join("-" * w for w in widths))
        return "\n".join(lines)

    def evaluate(self, values: Mapping[sp.Symbol | str, int]) -> Metrics:
        """Substitute dim values (symbols or their names); returns metrics with the results.

        Values are non-negative integers (Python, numpy or sympy ``Integer``)."""
        if not isinstance(values, Mapping):
            raise StepValueError(
                f"Metrics.evaluate: values must be a mapping of dims (symbols or names) to "
                f"integers, not {type(values).__name__}"
            )
        by_name = {str(k): int(v) if isinstance(v, sp.Integer) else v for k, v in values.items()}
        for k, v in by_name.items():
            if not is_integer(v) or v < 0:
                raise StepValueError(
                    f"Metrics.evaluate: value of dim {k} must be a non-negative integer, not {v!r}"
                )
        subs = {s: sp.Integer(by_name[str(s)]) for s in self.free_symbols if str(s) in by_name}

        def ev(x: Dim) -> Dim:
            if isinstance(x, int):
                return x
            y = x.xreplace({s: subs[s] for s in x.free_symbols if s in subs})
            return int(y) if y.is_Integer else y

        return Metrics(
            self.convention,
            tuple(
                NodeCost(n.name, n.kind, ev(n.onchip_bytes), ev(n.offchip_bytes), ev(n.flops))
                for n in self.nodes
            ),
        )


def _sum(values) -> Dim:
    total = sp.Integer(0)
    for v in values:
        total += v
    return int(total) if total.is_Integer else total


def _norm(x: Dim) -> Dim:
    if isinstance(x, int):
        return x
    x = sp.sympify(x)
    return int(x) if x.is_Integer else x


def metrics(graph: Graph, convention: str = "paper") -> Metrics:
    """Symbolic costs of every node of ``graph`` under ``convention`` (``"paper"`` or ``"artifact"``)."""
    if convention not in CONVENTIONS:
        raise ValueError(f"convention must be one of {CONVENTIONS}, not {convention!r}")
    graph = lower(graph)
    nodes = tuple(
        NodeCost(
            n.name,
            n.kind,
            _norm(n.onchip_bytes(convention)),
            _norm(n.offchip_bytes(convention)),
            _norm(n.flops()),
        )
        for n in graph.nodes.values()
    )
    return Metrics(convention, nodes)
