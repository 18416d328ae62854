"""Helpers shared by the operators' functional semantics."""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from typing import Any

from ..tokens import DONE, Stop, Token, is_data


def recv_aligned(io: Any) -> Generator[Any, Any, list[Token]]:
    """Receive one token from every input; they must agree (all data, the same stop, or all done)."""
    toks = []
    for i in range(len(io.inputs)):
        toks.append((yield from io.recv(i)))
    first = toks[0]
    for port, t in enumerate(toks[1:], start=1):
        same = (
            (is_data(first) and is_data(t))
            or (first is DONE and t is DONE)
            or (isinstance(first, Stop) and isinstance(t, Stop) and first.level == t.level)
        )
        if not same:

            def show(tok: Token) -> str:  # a tile's repr would flood the message
                return "a data element" if is_data(tok) else f"token {tok!r}"

            raise io.fail(
                io.node.input_names[port],
                f"{show(t)} does not line up with {show(first)} on port '{io.node.input_names[0]}' "
                "(inputs must have the same shape, token by token)",
            )
    return toks


def expand_each(
    io: Any, writer: Any, expand: Callable[[Token], Iterator[Any]]
) -> Generator[Any, Any, None]:
    """Drive ``writer`` (a :class:`~step_lang.stoprules.BlockWriter` on output 0) from input 0:
    every data token is written by ``expand(token)`` (a generator of ``writer`` calls), a stop
    becomes the writer's outer stop, done ends the stream."""
    while True:
        tok = yield from io.recv(0)
        if tok is DONE:
            yield from writer.done()
            return
        if isinstance(tok, Stop):
            yield from writer.outer_stop(tok.level)
            continue
        yield from expand(tok)
