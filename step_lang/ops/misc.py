"""Graph plumbing: Sink (drain a stream) and Feedback (close a loop)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..dims import dims_equal, shape_str
from ..graph import Graph, Node, Stream
from ..tokens import DONE
from ..types import StreamType

__all__ = ["Feedback", "Sink", "Source"]


class Source(Node):
    """An external input stream of a declared type; its tokens are given when the graph runs.

    ``interpret(graph, inputs={name: tokens})`` feeds it (a token list ending with ``DONE``, or
    nested lists, which are converted). In hardware it becomes a top-level stream input port.
    """

    kind = "Source"
    zero_costs = frozenset({"onchip_bytes", "offchip_bytes", "flops"})

    def __init__(self, graph: Graph, stype: StreamType, *, name: str | None = None):
        super().__init__(graph, name)
        if not isinstance(stype, StreamType):
            raise self.error("out", f"expected a StreamType, got {stype!r}")
        self._finish([], [("out", stype)])

    def execute(self, io: Any) -> Iterator[Any]:
        for tok in io.source_tokens():
            yield from io.send(0, tok)


class Sink(Node):
    """Consume and discard a stream (an explicit end for outputs nobody reads)."""

    kind = "Sink"
    zero_costs = frozenset({"onchip_bytes", "offchip_bytes", "flops"})

    def __init__(self, x: Stream, *, name: str | None = None):
        graph = x.graph if isinstance(x, Stream) else None
        super().__init__(graph, name)
        self._finish([("in", self._stream(x, "in"))], [])

    def execute(self, io: Any) -> Iterator[Any]:
        while (yield from io.recv(0)) is not DONE:
            pass


class Feedback(Node):
    """A stream used before it is produced: the back edge of a loop.

    Create it with the type the loop will carry, read ``.out`` where needed, then :meth:`bind` it to
    the stream that closes the loop. Tokens pass through unchanged.
    """

    kind = "Feedback"
    zero_costs = frozenset({"onchip_bytes", "offchip_bytes", "flops"})
    forwards_tiles = True
    is_feedback = True

    def __init__(self, graph: Graph, stype: StreamType, *, name: str | None = None):
        super().__init__(graph, name)
        if not isinstance(stype, StreamType):
            raise self.error(None, f"expected a StreamType, got {stype!r}")
        self._finish([], [("out", stype)])

    def bind(self, source: Stream) -> None:
        """Close the loop with ``source``; its type must match the declared one."""
        if self.inputs:
            raise self.error("in", f"already bound to {self.inputs[0].name}")
        source = self._stream(source, "in")
        want = self.out_types[0]
        if (
            source.elem != want.elem
            or source.rank != want.rank
            or any(dims_equal(a, b) is False for a, b in zip(source.shape, want.shape, strict=True))
        ):
            raise self.error(
                "in",
                f"stream {source.type} does not match the declared {want} ({shape_str(want.shape)})",
            )
        self.inputs = [source]
        self.input_names = ["in"]

    def execute(self, io: Any) -> Iterator[Any]:
        while True:
            tok = yield from io.recv(0)
            yield from io.send(0, tok)
            if tok is DONE:
                return
