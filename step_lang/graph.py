"""The graph IR: named nodes, typed streams, off-chip tensors and feedback edges.

Operators (``step_lang.ops``) are :class:`Node` subclasses. Constructing one checks its inputs,
infers its output :class:`~step_lang.types.StreamType` s and adds it to the graph of its inputs.
A :class:`Stream` is a handle on one output port. Fan-out is allowed while building; every
reader runs :func:`~step_lang.passes.lower` first, which makes it explicit on a copy.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import sympy as sp

from .dims import IDENTIFIER, Dim, RaggedSymbol, as_dim, product, ragged, regular, shape_str
from .errors import StepGraphError, StepTypeError, op_message
from .types import DType, StreamType
from .types import dtype as as_dtype

if TYPE_CHECKING:
    from .interpret import NodeIO

__all__ = ["Graph", "Node", "OffChipTensor", "Stream"]

_NAME = IDENTIFIER


@dataclass(frozen=True, eq=False)
class OffChipTensor:
    """A named tensor in off-chip memory with a static shape and dtype."""

    graph: Graph
    name: str
    shape: tuple[int, ...]
    dtype: DType

    @property
    def size_bytes(self) -> int:
        return int(product(self.shape)) * self.dtype.nbytes

    def __repr__(self) -> str:
        return f"OffChipTensor({self.name!r}, {list(self.shape)}, {self.dtype})"


@dataclass(frozen=True, eq=False)
class Stream:
    """Handle on output ``port`` of ``node``."""

    node: Node
    port: int

    @property
    def type(self) -> StreamType:
        return self.node.out_types[self.port]

    @property
    def shape(self) -> tuple[Dim, ...]:
        return self.type.shape

    @property
    def rank(self) -> int:
        return self.type.rank

    @property
    def elem(self):
        return self.type.elem

    @property
    def graph(self) -> Graph:
        return self.node.graph

    @property
    def name(self) -> str:
        """``node.port_name``, unique in the graph."""
        return f"{self.node.name}.{self.node.output_names[self.port]}"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream) and other.node is self.node and other.port == self.port

    def __hash__(self) -> int:
        return hash((id(self.node), self.port))

    def __repr__(self) -> str:
        return f"<Stream {self.name}: {self.type}>"


class Node:
    """Base class of every operator.

    Subclasses validate their inputs in ``__init__`` and finish with :meth:`_finish`. They implement
    :meth:`execute` (the functional semantics, a generator driven by the interpreter) and the cost
    hooks :meth:`onchip_bytes`, :meth:`offchip_bytes` and :meth:`flops`, or name the hooks whose
    cost is zero in :attr:`zero_costs`. The other readers register their behaviour per class
    (:mod:`step_lang.registry`; ``docs/architecture.md``).
    """

    kind: ClassVar[str] = "Node"
    #: The cost hooks this operator declares to cost nothing (``"onchip_bytes"``,
    #: ``"offchip_bytes"``, ``"flops"``); every other hook is defined by the class.
    zero_costs: ClassVar[frozenset[str]] = frozenset()
    #: Whether the operator passes its input's tiles on unchanged (routers, shape operators;
    #: which inputs: :meth:`forwarded_inputs`), so tiles that sit in a memory unit stay there
    #: (the paper profile's loads).
    forwards_tiles: ClassVar[bool] = False
    #: Whether the operator's consumers read its output tiles out of a memory unit (the staging
    #: of off-chip loads): the paper profile charges them the read. A Streamify is itself its
    #: buffer's read and pays it per element, so its tiles are not counted again.
    tiles_in_memory: ClassVar[bool] = False
    #: Whether the operator computes on a compute unit (Map, Accum, Scan): the timing profiles
    #: allocate it compute bandwidth.
    is_compute: ClassVar[bool] = False
    #: Whether the operator closes a loop (its input edge is not a dependency; ``Feedback``).
    is_feedback: ClassVar[bool] = False
    #: Whether the operator's function takes its one input's tuples apart (``Map(Zip(a, b), fn)``
    #: with a two-argument ``fn``; Accum, Scan and FlatMap alike): its ``arg_types`` are the
    #: tuple's items. Set per instance by those operators (``step_lang.ops.higher_order``).
    unpacks_tuple: bool = False

    def __init__(self, graph: Graph, name: str | None):
        if not isinstance(graph, Graph):
            text = f"expected a Graph, got {graph!r}"
            if graph is None:  # the operator found no Stream (or tensor) to take the graph from
                text = (
                    "cannot tell which graph it belongs to: its first input must be a Stream "
                    "(a Graph for Source and Feedback, an OffChipTensor for LinearOffChipLoad)"
                )
            raise StepTypeError(op_message(type(self).kind, name or "?", None, text))
        self.graph = graph
        self.name = graph._propose_name(self.kind, name)
        self.inputs: list[Stream] = []
        self.input_names: list[str] = []
        self.out_types: list[StreamType] = []
        self.output_names: list[str] = []

    def forwarded_inputs(self) -> tuple[int, ...]:
        """The inputs whose tiles a node that :attr:`forwards_tiles` passes on: its first (a
        router's data, a shape operator's stream); a merge's every merged input."""
        return (0,) if self.forwards_tiles and self.inputs else ()

    # -- construction helpers -------------------------------------------------------------------

    def error(self, port: str | None, text: str) -> StepTypeError:
        """A :class:`StepTypeError` naming this operator and ``port``."""
        return StepTypeError(op_message(self.kind, self.name, port, text))

    def _stream(self, value: Any, port: str) -> Stream:
        if not isinstance(value, Stream):
            raise self.error(port, f"expected a Stream, got {type(value).__name__}")
        if value.graph is not self.graph:
            raise self.error(
                port,
                f"stream {value.name} belongs to graph '{value.graph.name}', not '{self.graph.name}'",
            )
        return value

    def _sequence(self, value: Any, param: str) -> tuple:
        """``value`` of parameter ``param`` as a tuple; a string or a scalar (``out_shape=2``)
        is refused, its items are the caller's to check."""
        if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
            raise self.error(param, f"{param} must be a sequence of integers, not {value!r}")
        return tuple(value)

    def _finish(
        self, inputs: Sequence[tuple[str, Stream]], outputs: Sequence[tuple[str, StreamType]]
    ) -> None:
        self.input_names = [p for p, _ in inputs]
        self.inputs = [s for _, s in inputs]
        self.output_names = [p for p, _ in outputs]
        self.out_types = [t for _, t in outputs]
        self.graph._register(self)

    def fresh_regular(self, tag: str) -> sp.Symbol:
        """A regular symbol named after this node, e.g. ``route_n003``."""
        return regular(f"{self.name}_{tag}")

    def fresh_ragged(self, tag: str) -> RaggedSymbol:
        """A ragged symbol named after this node, e.g. ``flat_r0``."""
        return ragged(f"{self.name}_{tag}")

    # -- accessors ------------------------------------------------------------------------------

    @property
    def outputs(self) -> list[Stream]:
        return [Stream(self, i) for i in range(len(self.out_types))]

    @property
    def out(self) -> Stream:
        """The only output of a single-output node."""
        if len(self.out_types) != 1:
            raise StepGraphError(
                f"{self.kind} '{self.name}' has {len(self.out_types)} outputs; use .outputs[i]"
            )
        return Stream(self, 0)

    def output(self, port: str) -> Stream:
        """The output named ``port``."""
        try:
            return Stream(self, self.output_names.index(port))
        except ValueError:
            raise StepGraphError(
                f"{self.kind} '{self.name}' has no output '{port}'; it has {self.output_names}"
            ) from None

    def params(self) -> dict[str, Any]:
        """Parameters shown in DOT export and ``repr``."""
        return {}

    def __repr__(self) -> str:
        ps = ", ".join(f"{k}={v}" for k, v in self.params().items())
        return f"{self.kind}('{self.name}'{', ' + ps if ps else ''})"

    # -- semantics and costs --------------------------------------------------------------------

    def execute(self, io: NodeIO) -> Iterator[Any]:  # pragma: no cover - abstract
        """Functional semantics as a generator; see :mod:`step_lang.interpret`."""
        raise NotImplementedError(f"{self.kind} has no functional semantics")

    def onchip_bytes(self, convention: str) -> Dim:
        """On-chip memory this node needs, under ``"paper"`` or ``"artifact"`` accounting."""
        return self._zero_cost("onchip_bytes")

    def offchip_bytes(self, convention: str) -> Dim:
        """Bytes this node moves between off-chip memory and the chip."""
        return self._zero_cost("offchip_bytes")

    def flops(self) -> Dim:
        """Arithmetic operations this node performs over the whole stream."""
        return self._zero_cost("flops")

    def _zero_cost(self, hook: str) -> int:
        if hook in self.zero_costs:
            return 0
        raise NotImplementedError(
            f"{self.kind} '{self.name}': defines no {hook} cost (nor lists it in zero_costs)"
        )


class Graph:
    """A STeP program: nodes, the streams between them and the off-chip tensors they touch."""

    def __init__(self, name: str = "graph"):
        if not isinstance(name, str) or not _NAME.match(name):
            raise StepGraphError(
                f"graph name must be an identifier (letters, digits, _; it names the Verilog "
                f"module), not {name!r}"
            )
        self.name = name
        self.nodes: dict[str, Node] = {}
        self.tensors: dict[str, OffChipTensor] = {}
        self.queue_depths: dict[str, int] = {}
        #: Streams whose tokens are parts of a larger element (a big tile as hardware tiles,
        #: ``hier_tiling``): a queue without a depth of its own holds ``scale`` times the
        #: reader's default depth, so that it holds the bytes it held before (``queue_depth``).
        self.queue_scale: dict[str, int] = {}
        self._counters: dict[str, int] = {}
        self._prefix = ""

    # -- building -------------------------------------------------------------------------------

    @contextlib.contextmanager
    def name_scope(self, prefix: str) -> Iterator[None]:
        """Give the names of the nodes and tensors created inside the ``with`` block the prefix
        ``prefix`` (e.g. ``"attn_"``), so that builders that name their nodes can be composed
        into one graph; scopes nest (their prefixes concatenate). Generated names
        (``map3``) are not prefixed."""
        if not isinstance(prefix, str) or (prefix and not _NAME.match(prefix)):
            raise StepGraphError(f"name_scope prefix must be an identifier, not {prefix!r}")
        old, self._prefix = self._prefix, self._prefix + prefix
        try:
            yield
        finally:
            self._prefix = old

    def tensor(
        self, name: str, shape: Sequence[int], dtype: DType | str = "float32"
    ) -> OffChipTensor:
        """Declare a named off-chip tensor (an input, an output or both)."""
        if isinstance(name, str) and self._prefix:
            name = self._prefix + name
        if not isinstance(name, str) or not _NAME.match(name):
            raise StepGraphError(f"tensor name must be an identifier, not {name!r}")
        if name in self.tensors:
            raise StepGraphError(f"graph '{self.name}' already has a tensor named '{name}'")
        if isinstance(shape, (str, bytes)) or not isinstance(shape, (Sequence, np.ndarray)):
            raise StepGraphError(f"tensor '{name}' shape must be a sequence of ints, not {shape!r}")
        dims = tuple(as_dim(d, what=f"tensor '{name}' dimension") for d in shape)
        if not dims or not all(isinstance(d, int) for d in dims):
            raise StepGraphError(
                f"tensor '{name}' needs a non-empty static shape, got {shape_str(dims)}"
            )
        t = OffChipTensor(self, name, dims, as_dtype(dtype))
        self.tensors[name] = t
        return t

    def set_queue_depth(self, stream: Stream, depth: int) -> None:
        """Ask every backend for a queue of ``depth`` tokens on ``stream`` (default: the backend's).

        Streams that fan out keep the depth on each Broadcast output.
        """
        if not isinstance(stream, Stream) or stream.graph is not self:
            raise StepGraphError(
                f"set_queue_depth needs a stream of graph '{self.name}', not {stream!r}"
            )
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise StepGraphError(
                f"queue depth of {stream.name} must be a positive integer, not {depth!r}"
            )
        self.queue_depths[stream.name] = depth

    def queue_depth(self, stream: Stream | str, default: int) -> int:
        """The depth of ``stream``'s queue for a reader whose default depth is ``default``:
        the graph's depth for it (``set_queue_depth``), else ``default`` times its
        ``queue_scale``. Every reader (simulator, hardware, queue sizing) sizes queues so."""
        name = stream if isinstance(stream, str) else stream.name
        if name in self.queue_depths:
            return self.queue_depths[name]
        return self.default_queue_depth(name, default)

    def default_queue_depth(self, stream: Stream | str, default: int) -> int:
        """The depth of ``stream``'s queue without ``set_queue_depth``: ``default`` times its
        ``queue_scale``."""
        name = stream if isinstance(stream, str) else stream.name
        return default * self.queue_scale.get(name, 1)

    def _propose_name(self, kind: str, name: str | None) -> str:
        if isinstance(name, str) and self._prefix:
            name = self._prefix + name
        if name is None:
            base = kind.lower()
            n = self._counters.get(base, 0)
            while f"{base}{n}" in self.nodes:
                n += 1
            return f"{base}{n}"
        if not isinstance(name, str) or not _NAME.match(name):
            raise StepGraphError(f"{kind}: node name must be an identifier, not {name!r}")
        if name in self.nodes:
            raise StepGraphError(f"{kind}: graph '{self.name}' already has a node named '{name}'")
        return name

    def _register(self, node: Node) -> None:
        if node.name in self.nodes:
            raise StepGraphError(
                f"{node.kind}: graph '{self.name}' already has a node named '{node.name}'"
            )
        base = node.kind.lower()
        if node.name.startswith(base) and node.name[len(base) :].isdigit():
            self._counters[base] = max(self._counters.get(base, 0), int(node.name[len(base) :]) + 1)
        self.nodes[node.name] = node

    # -- queries --------------------------------------------------------------------------------

    def edges(self) -> list[tuple[Stream, Node, int]]:
        """Every edge as ``(producer stream, consumer node, consumer input index)``."""
        return [(s, n, i) for n in self.nodes.values() for i, s in enumerate(n.inputs)]

    def consumers(self, stream: Stream) -> list[tuple[Node, int]]:
        """The ``(node, input index)`` pairs that read ``stream``."""
        return [(n, i) for s, n, i in self.edges() if s == stream]

    def topo_order(self) -> list[Node]:
        """Nodes in a topological order; feedback edges (into ``Feedback`` nodes) are ignored."""
        indeg = {name: 0 for name in self.nodes}
        succ: dict[str, list[str]] = {name: [] for name in self.nodes}
        for s, n, _ in self.edges():
            if n.is_feedback:
                continue
            indeg[n.name] += 1
            succ[s.node.name].append(n.name)
        ready = [name for name, d in indeg.items() if d == 0]
        order: list[Node] = []
        while ready:
            name = ready.pop(0)
            order.append(self.nodes[name])
            for m in succ[name]:
                indeg[m] -= 1
                if indeg[m] == 0:
                    ready.append(m)
        if len(order) != len(self.nodes):
            stuck = sorted(set(self.nodes) - {n.name for n in order})
            raise StepGraphError(
                f"graph '{self.name}' has a cycle without a Feedback node through {', '.join(stuck)}"
            )
        return order

    def validate(self) -> None:
        """Check that the graph is complete: feedback bound, every output consumed exactly once or more."""
        for node in self.nodes.values():
            if node.is_feedback and not node.inputs:
                raise StepGraphError(
                    f"Feedback '{node.name}' is never bound to a stream (call .bind)"
                )
            for i, s in enumerate(node.inputs):
                if s.node.graph is not self or self.nodes.get(s.node.name) is not s.node:
                    raise StepGraphError(
                        f"{node.kind} '{node.name}', port '{node.input_names[i]}': reads {s.name}, "
                        f"which is not a node of graph '{self.name}'"
                    )
        consumed = {s for s, _, _ in self.edges()}
        for node in self.nodes.values():
            for s in node.outputs:
                if s not in consumed:
                    raise StepGraphError(
                        f"{node.kind} '{node.name}', port '{node.output_names[s.port]}': output "
                        f"{s.type} is never consumed; connect it or drain it with Sink"
                    )
        self.topo_order()

    def to_dot(self) -> str:
        """The graph in Graphviz DOT: one box per node, one edge per stream labelled with its type."""
        lines = [
            f'digraph "{self.name}" {{',
            "  rankdir=TB;",
            '  node [shape=box, fontname="monospace"];',
        ]
        for node in self.nodes.values():
            ps = "\\n".join(f"{k}={v}" for k, v in node.params().items())
            label = f"{node.name}\\n{node.kind}" + (f"\\n{ps}" if ps else "")
            lines.append(f'  "{node.name}" [label="{_dot_escape(label)}"];')
        for s, n, i in self.edges():
            style = ", style=dashed" if n.is_feedback else ""
            label = _dot_escape(f"{s.node.output_names[s.port]}→{n.input_names[i]}\\n{s.type}")
            lines.append(f'  "{s.node.name}" -> "{n.name}" [label="{label}"{style}];')
        lines.append("}")
        return "\n".join(lines) + "\n"

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, {len(self.nodes)} nodes, {len(self.tensors)} tensors)"


def _dot_escape(text: str) -> str:
    return text.replace('"', '\\"')
