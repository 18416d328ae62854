"""Helpers shared by the language tests: scalar tiles, paper-notation tokens, one-op graphs."""

from __future__ import annotations

import numpy as np

from step_lang import DONE, Graph, Sink, Source, Stop, StreamType, Tile, format_tokens, interpret
from step_lang.types import int32

SCALAR = Tile(int32, 1, 1)


def sc(v: int) -> np.ndarray:
    """A [1,1] int32 tile holding ``v``."""
    return np.array([[v]], dtype=np.int32)


def show(tokens) -> str:
    """Paper notation with scalar tiles shown as their value."""

    def fmt(t):
        if isinstance(t, np.ndarray) and t.size == 1:
            return str(t.reshape(-1)[0])
        if isinstance(t, np.ndarray) and t.dtype == np.bool_:
            return "[" + "".join("1" if b else "0" for b in t.reshape(-1)) + "]"
        return repr(t)

    return format_tokens(tokens, fmt)


def parse(text: str) -> list:
    """Tokens from paper notation: ints become scalar tiles, ``S<k>`` stops, ``D`` done,
    ``[101]`` selectors."""
    out = []
    for word in text.split():
        if word == "D":
            out.append(DONE)
        elif word.startswith("S") and word[1:].isdigit():
            out.append(Stop(int(word[1:])))
        elif word.startswith("["):
            out.append(np.array([c == "1" for c in word[1:-1]], dtype=bool))
        else:
            out.append(sc(int(word)))
    return out


def run_op(build, inputs: dict[str, tuple[StreamType, str]], **kw):
    """Build a graph of Sources (name -> (type, tokens text)), apply ``build(**streams)``, run it.

    Returns the output token strings (one per output) and the interpreter result.
    """
    g = Graph("t")
    streams = {name: Source(g, st, name=name).out for name, (st, _) in inputs.items()}
    outs = build(**streams)
    outs = outs if isinstance(outs, list) else [outs]
    for o in outs:
        Sink(o)
    result = interpret(
        g, kw.pop("memory", None), inputs={n: parse(t) for n, (_, t) in inputs.items()}, **kw
    )
    return [show(result.tokens(o)) for o in outs], result


def centred(n: int = 8) -> Graph:
    """x - sum(x): the sum needs the whole vector while the direct paths wait in queues (x fans
    out three ways, two of them reconverging after the sum)."""
    from step_lang import Accum, Expand, Map, Promote
    from step_lang import functions as F

    g = Graph("reconv")
    x = Source(g, StreamType(SCALAR, (1, n)), name="x").out
    total = Accum(x, fn=F.accum_add, rank=1, name="total").out
    spread = Expand(Promote(total, 0, name="lift").out, x, 1, name="spread").out
    Sink(Map(x, spread, fn=F.sub, name="center").out, name="sink")
    return g
