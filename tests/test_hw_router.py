# amaranth: UnusedElaboratable=no
# (Blocks built only to test their constructors or `from_node` are never elaborated.)
"""Amaranth-simulator tests of the routing blocks: `step_hw.broadcast` and `step_hw.router`.

Every block is built from a one-node step_lang graph with `from_node`, driven by
`step_hw.testing.run_block` (protocol checkers on every port) under each traffic pattern, and its
output tokens must equal the interpreter's for the same graph: nothing lost, duplicated or
reordered except as the semantics say. EagerMerge is compared with the interpreter run under a
`FixedOrder` policy replaying the order the hardware chose (its `sel` output).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from amaranth.back import rtlil
from amaranth.sim import Simulator
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lang_helpers import SCALAR, parse, show
from test_lang_properties import merge_cases, partition_cases, reassemble_cases, streams

from step_hw.block_rules import check_node
from step_hw.broadcast import Broadcast
from step_hw.config import HwConfig
from step_hw.payload import TokenFormat
from step_hw.router import EagerMerge, Parallelize, Partition, Reassemble
from step_hw.testing import (
    PATTERNS,
    BlockRun,
    Transfer,
    pauses,
    run_block,
    stream_checker,
    stream_source,
    token_sink,
)
from step_lang import (
    DONE,
    FixedOrder,
    Graph,
    LowestIndexFirst,
    Selector,
    Sink,
    Source,
    StepTypeError,
    Stop,
    StreamType,
    Tile,
    interpret,
    ops,
    ragged,
    regular,
    to_tokens,
)
from step_lang import functions as F
from step_lang.types import float32, int8, int16, int32

# run_block stops the simulation as soon as every output has its done token, which can leave a
# source testbench suspended in `ctx.tick().until()`. When the garbage collector finalises it,
# Amaranth's async-generator cleanup raises "aclose(): asynchronous generator is already running"
# (unraisable: an error under `filterwarnings = error`, and, when it fires inside the traceback
# formatting of a failing test, a pytest INTERNALERROR). Until step_hw.testing's source avoids
# `until`, run_block uses this one, which waits with plain ticks (as test_hw_queue's
# bad_producer does for the same reason).


CFG = HwConfig()
FMT = TokenFormat.for_elem(SCALAR, CFG)
BLOCKS = {
    "Broadcast": Broadcast,
    "Partition": Partition,
    "Reassemble": Reassemble,
    "EagerMerge": EagerMerge,
    "Parallelize": Parallelize,
}


# -- running a block next to the interpreter ----------------------------------------------------


def stype(rank: int, tag: str = "x", elem: Any = SCALAR) -> StreamType:
    """A stream type of ``rank`` that any data of that rank satisfies: a regular outermost dim
    and ragged inner ones, named from the outside in so that a lower-rank stream with the same
    ``tag`` has the outer dims of a higher-rank one (Partition's selector)."""
    return StreamType(elem, (regular(f"{tag}_n"), *(ragged(f"{tag}_d{k}") for k in range(1, rank + 1))))  # fmt: skip


def norm(tokens: list) -> list:
    """Tokens in a comparable form (hardware tiles come back as int64, selectors as bool)."""
    return [t if isinstance(t, Stop) or t is DONE else np.asarray(t).astype(int).tolist() for t in tokens]  # fmt: skip


def fmt_of(elem: Any) -> TokenFormat:
    return TokenFormat.for_elem(elem, CFG)


def check(
    kind: str,
    build: Callable[..., Any],
    sources: dict[str, tuple[StreamType, list]],
    pattern: str,
    *,
    seed: int = 0,
) -> tuple[Any, BlockRun]:
    """Run block ``kind`` (built with ``from_node`` from the node ``build(**source streams)``) in
    the Amaranth simulator and the graph in the interpreter; assert equal outputs and that every
    input token was taken in order. Returns the block and what the simulation observed."""
    g = Graph("hw")
    srcs = {name: Source(g, t, name=name).out for name, (t, _) in sources.items()}
    node = build(**srcs)
    for s in node.outputs:
        Sink(s)
    dut = BLOCKS[kind].from_node(node, CFG)
    tokens = {name: toks for name, (_, toks) in sources.items()}
    feeds = {
        name: (port, fmt_of(s.elem), tokens[s.node.name])
        for name, port, s in zip(node.input_names, dut.in_ports, node.inputs, strict=True)
    }
    drains = {
        name: (port, fmt_of(t.elem))
        for name, port, t in zip(node.output_names, dut.out_ports, node.out_types, strict=True)
    }
    assert not feeds.keys() & drains.keys()
    run = run_block(dut, feeds, drains, pattern=pattern, seed=seed, max_cycles=5_000)

    policy = None
    if kind == "EagerMerge":  # replay the hardware's arrival order
        policy = FixedOrder.from_selectors(run.outputs["sel"])
    res = interpret(g, inputs=tokens, merge_policy=policy)
    for name, s in zip(node.output_names, node.outputs, strict=True):
        assert norm(run.outputs[name]) == norm(res.tokens(s)), f"output {name}"
    for name, (_, fmt, toks) in feeds.items():
        # run_block stops when every output has its done token; Partition and Reassemble take
        # their inputs' done tokens only after that (test_done_is_sent_before_inputs_end).
        sent = [fmt.pack(t) for t in toks]
        taken = [t.payload for t in run.transfers[name]]
        assert taken == sent[: len(taken)], f"input {name}: tokens taken out of order"
        assert len(taken) >= len(sent) - 1, f"input {name}: only {len(taken)} of {len(sent)} taken"
    return dut, run


def src(text: str, rank: int, tag: str = "x", elem: Any = SCALAR) -> tuple[StreamType, list]:
    return stype(rank, tag, elem), parse(text)


def sel(text: str, rank: int, n: int, tag: str = "x") -> tuple[StreamType, list]:
    return src(text, rank, tag, Selector(n))


# -- the worked examples ------------------------------------------------------------------------

CASES = [
    # (block, build, sources); expected tokens come from the interpreter.
    ("Broadcast", lambda x: ops.Broadcast(x, 3), {"x": src("1 2 S1 3 S2 4 S2 D", 2)}),
    ("Broadcast", lambda x: ops.Broadcast(x, 1), {"x": src("D", 0)}),
    ("Broadcast", lambda x: ops.Broadcast(x, 2), {"x": src("S1 5 S1 D", 1)}),
    # docs/semantics.md: `x0 x1 x2 D`, sel `[10] [01] [11] D` -> `x0 x2 D`, `x1 x2 D`.
    ("Partition", lambda x, s: ops.Partition(x, s, 0),
     {"x": src("1 2 3 D", 0), "s": sel("[10] [01] [11] D", 0, 2)}),
    # docs/semantics.md: `a b S1 c S1 d e S2 D`, sel `e0 e1 e0 S1 D`.
    ("Partition", lambda x, s: ops.Partition(x, s, 1),
     {"x": src("1 2 S1 3 S1 4 5 S2 D", 2), "s": sel("[10] [01] [10] S1 D", 1, 2)}),
    # Stops line up with the selector's at b = 0; an all-zero selector drops its element.
    ("Partition", lambda x, s: ops.Partition(x, s, 0),
     {"x": src("1 2 S1 3 S1 D", 1), "s": sel("[11] [00] S1 [01] S1 D", 1, 2)}),
    # Empty chunks, a chunk closing above b (S2 -> S1 plus a selector S1), all-zero, multicast.
    ("Partition", lambda x, s: ops.Partition(x, s, 1),
     {"x": src("S1 1 S2 2 3 S1 S2 D", 2), "s": sel("[11] [10] S1 [00] [01] S1 D", 1, 2)}),
    ("Partition", lambda x, s: ops.Partition(x, s, 2),
     {"x": src("1 S1 2 S2 3 S2 D", 2), "s": sel("[01] [11] D", 0, 2)}),
    ("Partition", lambda x, s: ops.Partition(x, s, 1),
     {"x": src("D", 1), "s": sel("D", 0, 3)}),
    # docs/semantics.md: b = 0, sel `[110] [001] S1 D` -> `p r S1 s S2 D`.
    ("Reassemble", lambda a, b, c, s: ops.Reassemble([a, b, c], s),
     {"a": src("1 D", 0, "a"), "b": src("2 D", 0, "b"), "c": src("3 D", 0, "c"),
      "s": sel("[110] [001] S1 D", 1, 3, "s")}),
    # Rank-1 chunks kept whole; a rank-0 selector writes the closing stop at once.
    ("Reassemble", lambda a, b, s: ops.Reassemble([a, b], s),
     {"a": src("1 2 S1 D", 1, "a"), "b": src("3 4 S1 D", 1, "b"), "s": sel("[11] D", 0, 2, "s")}),
    # All-zero selector (an empty vector) and an empty selector vector (consecutive stops).
    ("Reassemble", lambda a, b, s: ops.Reassemble([a, b], s),
     {"a": src("1 D", 0, "a"), "b": src("2 D", 0, "b"),
      "s": sel("[00] S1 S1 [11] S1 D", 1, 2, "s")}),
    # Empty chunks; the held closing stop merging with the selector's stops at two levels.
    ("Reassemble", lambda a, b, s: ops.Reassemble([a, b], s),
     {"a": src("S1 1 2 S1 D", 1, "a"), "b": src("3 S1 D", 1, "b"),
      "s": sel("[11] S1 [10] S2 D", 2, 2, "s")}),
    ("Reassemble", lambda a, b, s: ops.Reassemble([a, b], s, count=1),
     {"a": src("1 2 S1 3 S1 D", 1, "a"), "b": src("4 S1 D", 1, "b"),
      "s": sel("[10] [01] S1 [10] S1 D", 1, 2, "s")}),
    ("Reassemble", lambda a, b, s: ops.Reassemble([a, b], s),
     {"a": src("D", 1, "a"), "b": src("D", 1, "b"), "s": sel("D", 1, 2, "s")}),
    # test_lang_examples: `1 2 D` and `3 D`; rank-1 chunks; rank 2 with an empty input.
    ("EagerMerge", lambda a, b: ops.EagerMerge([a, b]),
     {"a": src("1 2 D", 0, "a"), "b": src("3 D", 0, "b")}),
    ("EagerMerge", lambda a, b: ops.EagerMerge([a, b]),
     {"a": src("1 2 S1 D", 1, "a"), "b": src("3 4 S1 D", 1, "b")}),
    ("EagerMerge", lambda a, b, c: ops.EagerMerge([a, b, c]),
     {"a": src("S1 1 S2 D", 2, "a"), "b": src("D", 2, "b"), "c": src("2 S2 5 S1 S2 D", 2, "c")}),
    # docs/semantics.md and test_lang_examples.
    ("Parallelize", lambda x: ops.Parallelize(x, 2, rank=0), {"x": src("1 2 3 4 5 S1 D", 1)}),
    ("Parallelize", lambda x: ops.Parallelize(x, 2), {"x": src("1 2 S1 3 4 S1 5 6 S1 D", 1)}),
    ("Parallelize", lambda x: ops.Parallelize(x, 3, rank=1),
     {"x": src("1 S1 S2 2 3 S1 4 S2 D", 2)}),
    ("Parallelize", lambda x: ops.Parallelize(x, 1, rank=0), {"x": src("D", 2)}),
]  # fmt: skip


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize(
    ("kind", "build", "sources"),
    [pytest.param(*c, id=f"{c[0]}-{i}") for i, c in enumerate(CASES)],
)
def test_worked_examples(kind, build, sources, pattern):
    check(kind, build, sources, pattern, seed=CASES.index((kind, build, sources)))


def tiles(text: str, elem: Tile, rng: np.random.Generator) -> list:
    """``text`` in paper notation, with every element replaced by a random ``elem`` tile."""
    lo, hi = -(2 ** (elem.dtype.nbytes * 8 - 1)), 2 ** (elem.dtype.nbytes * 8 - 1)
    return [t if isinstance(t, Stop) or t is DONE else rng.integers(lo, hi, (elem.rows, elem.cols)).astype(elem.dtype.numpy) for t in parse(text)]  # fmt: skip


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("elem", [Tile(int8, 2, 3), Tile(int16, 4, 4), Tile(int32, 1, 4)], ids=str)
def test_whole_tiles_pass(elem, pattern):
    # Multi-element tiles of every width pass through each block bit for bit.
    rng = np.random.default_rng(7)
    x = {"x": (stype(1, elem=elem), tiles("1 2 S1 S1 3 S1 D", elem, rng))}
    check("Broadcast", lambda x: ops.Broadcast(x, 2), x, pattern)
    check("Parallelize", lambda x: ops.Parallelize(x, 2, rank=0), x, pattern)
    check("Partition", lambda x, s: ops.Partition(x, s, 1),
          {**x, "s": sel("[01] [11] [10] D", 0, 2)}, pattern)  # fmt: skip
    ins = {"a": (stype(1, "a", elem), tiles("1 S1 2 3 S1 D", elem, rng)),
           "b": (stype(1, "b", elem), tiles("4 S1 D", elem, rng))}  # fmt: skip
    check("EagerMerge", lambda a, b: ops.EagerMerge([a, b]), ins, pattern)
    check("Reassemble", lambda a, b, s: ops.Reassemble([a, b], s),
          {**ins, "s": sel("[11] [10] S1 D", 1, 2, "s")}, pattern)  # fmt: skip


def test_worked_examples_give_the_documented_tokens():
    # The case table relies on the interpreter; pin the documented outputs of a few, so that a
    # block and the interpreter cannot drift together unnoticed.
    def outs(i: int) -> list[str]:
        _, run = check(*CASES[i], "always")
        return [show(v) for v in run.outputs.values()]

    assert outs(3) == ["1 3 D", "2 3 D"]
    assert outs(4) == ["1 2 S1 4 5 S1 D", "3 S1 D"]
    assert outs(9) == ["1 2 S1 3 S2 D"]
    assert outs(12) == ["S1 3 S3 1 2 S4 D"]
    assert outs(18) == ["1 3 5 D", "2 4 D"]


# -- random streams -----------------------------------------------------------------------------

PROPS = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
seeds = st.integers(0, 2**16)


def feed(sd) -> tuple[StreamType, list]:
    return sd.stype, to_tokens(sd.data, sd.rank)


@pytest.mark.parametrize("pattern", PATTERNS)
@PROPS
@given(streams(), st.integers(1, 3), seeds)
def test_broadcast_random(pattern, x, n, seed):
    check("Broadcast", lambda x: ops.Broadcast(x, n), {"x": feed(x)}, pattern, seed=seed)


@pytest.mark.parametrize("pattern", PATTERNS)
@PROPS
@given(partition_cases(), seeds)
def test_partition_random(pattern, case, seed):
    x, s, b, _n = case
    check("Partition", lambda x, s: ops.Partition(x, s, b), {"x": feed(x), "s": feed(s)}, pattern, seed=seed)  # fmt: skip


@pytest.mark.parametrize("pattern", PATTERNS)
@PROPS
@given(reassemble_cases(), seeds)
def test_reassemble_random(pattern, case, seed):
    s, inputs, _a, count = case
    sources = {f"i{k}": feed(sd) for k, sd in enumerate(inputs)}
    sources["s"] = feed(s)

    def build(s, **ins):
        return ops.Reassemble([ins[f"i{k}"] for k in range(len(inputs))], s, count=count)

    check("Reassemble", build, sources, pattern, seed=seed)


@pytest.mark.parametrize("pattern", PATTERNS)
@PROPS
@given(merge_cases(), seeds)
def test_eager_merge_random(pattern, case, seed):
    inputs, _a, _policy = case  # the hardware decides the order; the interpreter replays it
    sources = {f"i{k}": feed(sd) for k, sd in enumerate(inputs)}

    def build(**ins):
        return ops.EagerMerge([ins[f"i{k}"] for k in range(len(inputs))])

    _, run = check("EagerMerge", build, sources, pattern, seed=seed)
    if pattern == "always":
        # Every input offers its next token at once, so ties decide: lowest index first.
        g = Graph("m")
        node = build(**{k: Source(g, t, name=k).out for k, (t, _) in sources.items()})
        for o in node.outputs:
            Sink(o)
        res = interpret(g, inputs={k: v for k, (_, v) in sources.items()}, merge_policy=LowestIndexFirst())  # fmt: skip
        assert norm(run.outputs["sel"]) == norm(res.tokens(node.outputs[1]))


@pytest.mark.parametrize("pattern", PATTERNS)
@PROPS
@given(streams(), st.integers(1, 3), st.data(), seeds)
def test_parallelize_random(pattern, x, n, data, seed):
    b = data.draw(st.integers(0, x.rank))
    check("Parallelize", lambda x: ops.Parallelize(x, n, rank=b), {"x": feed(x)}, pattern, seed=seed)  # fmt: skip


# -- throughput and latency ---------------------------------------------------------------------


def cycles(run: BlockRun, name: str) -> list[int]:
    return [t.cycle for t in run.transfers[name]]


def back_to_back(cs: list[int]) -> bool:
    """One transfer per cycle from the first to the last."""
    return cs == list(range(cs[0], cs[0] + len(cs)))


def elems(count: int, per_vector: int) -> str:
    """A rank-1 stream of ``count`` elements, ``per_vector`` to a vector."""
    words = []
    for k in range(count):
        words.append(str(k))
        if k % per_vector == per_vector - 1 or k == count - 1:
            words.append("S1")
    return " ".join([*words, "D"])


def test_broadcast_throughput_and_latency():
    _, run = check("Broadcast", lambda x: ops.Broadcast(x, 3), {"x": src(elems(40, 5), 1)}, "always")  # fmt: skip
    assert back_to_back(cycles(run, "in"))
    for j in range(3):
        assert cycles(run, f"out{j}") == cycles(run, "in")  # latency 0, II 1


def test_partition_rank0_throughput():
    rng = np.random.default_rng(1)
    sels = " ".join("[" + "".join(rng.choice(["0", "1"], 3)) + "]" for _ in range(40))
    _, run = check(
        "Partition",
        lambda x, s: ops.Partition(x, s, 0),
        {"x": src(" ".join(map(str, range(40))) + " D", 0), "s": sel(sels + " D", 0, 3)},
        "always",
    )
    # One element (with its selector) per cycle; the done tokens follow in two more cycles.
    taken = cycles(run, "in")[:40]
    assert back_to_back(taken) and cycles(run, "sel")[:40] == taken
    for j in range(3):  # each element reaches its outputs in the cycle it is taken (latency 0)
        assert set(cycles(run, f"out{j}")[:-1]) <= set(taken)


@pytest.mark.parametrize("rank", [0, 1])
def test_parallelize_throughput(rank):
    _, run = check("Parallelize", lambda x: ops.Parallelize(x, 3, rank=rank), {"x": src(elems(40, 4), 1)}, "always")  # fmt: skip
    assert back_to_back(cycles(run, "in"))
    assert len(cycles(run, "in")) == len(parse(elems(40, 4)))


@pytest.mark.parametrize("rank", [0, 1])
def test_eager_merge_single_input_throughput(rank):
    text = elems(30, 3) if rank else " ".join(map(str, range(30))) + " D"
    _, run = check(
        "EagerMerge",
        lambda a, b, c: ops.EagerMerge([a, b, c]),
        {"a": src("D", rank, "a"), "b": src(text, rank, "b"), "c": src("D", rank, "c")},
        "always",
    )
    # Chunk after chunk without a bubble; the selector in each chunk's first cycle; the done
    # tokens one cycle after the last input's.
    assert back_to_back(cycles(run, "in1")) and len(cycles(run, "in1")) == len(parse(text))
    assert back_to_back(cycles(run, "data")[:-1])
    assert cycles(run, "data")[-1] == cycles(run, "in1")[-1] + 1
    starts = cycles(run, "data")[:: 4 if rank else 1][: len(cycles(run, "sel")) - 1]
    assert cycles(run, "sel")[:-1] == starts


@pytest.mark.parametrize("sel_rank", [0, 1])
def test_reassemble_throughput(sel_rank):
    rng = np.random.default_rng(2)
    picks = [rng.choice([0, 1], 3) for _ in range(24)]
    picks = [p if p.any() else np.array([1, 0, 0]) for p in picks]
    words = []
    for k, p in enumerate(picks):
        words.append("[" + "".join(map(str, p)) + "]")
        if sel_rank and k % 5 == 4:
            words.append("S1")
    if sel_rank and words[-1] != "S1":
        words.append("S1")
    counts = np.sum(picks, axis=0)
    sources = {
        f"i{j}": src(" ".join(f"{j}{k}" for k in range(counts[j])) + " D", 0, f"i{j}")
        for j in range(3)
    }
    sources["s"] = sel(" ".join([*words, "D"]), sel_rank, 3, "s")
    _, run = check("Reassemble", lambda i0, i1, i2, s: ops.Reassemble([i0, i1, i2], s), sources, "always")  # fmt: skip
    # One output token per cycle, the merged stops included, from the first to the done token.
    assert back_to_back(cycles(run, "out"))
    assert cycles(run, "out")[0] == cycles(run, "sel")[0]  # latency 0


# -- done tokens, errors ------------------------------------------------------------------------


def run_to_end(dut, feeds: dict, drains: dict, *, pattern: str, cycles: int, strict: bool = True):
    """Like run_block, but until every source has delivered everything (done tokens included),
    or for ``cycles`` cycles when not ``strict``. Returns the transfers per port and whether
    ``dut.error`` was ever high."""
    rng = random.Random(0)
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    transfers: dict[str, list[Transfer]] = {}
    for name, (port, fmt, toks) in {**feeds, **drains}.items():
        transfers[name] = []
        sim.add_process(stream_checker(port, transfers[name]))
        pause = pauses(pattern, rng=random.Random(rng.getrandbits(32)))
        if name in feeds:
            sim.add_testbench(stream_source(port, [fmt.pack(t) for t in toks], pause))
        else:
            sim.add_testbench(token_sink(port, fmt, pause, toks))
    error = [0]
    if hasattr(dut, "error"):

        async def watch(ctx):
            async for _, _, err in ctx.tick().sample(dut.error):
                error[0] |= err

        sim.add_process(watch)
    for _ in range(4 * cycles):  # two edges per cycle, plus testbench wake-ups
        if not sim.advance():
            return transfers, error[0]
    assert not strict, f"still running after {cycles} cycles"
    return transfers, error[0]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_done_is_sent_before_inputs_end(pattern):
    # docs/semantics.md: Partition and Reassemble close their outputs when the selector ends,
    # before they take the inputs' done tokens (for feedback loops); then they take them.
    dut = Partition(fmt=FMT, n=2, rank=0)
    tr, err = run_to_end(
        dut,
        {"i": (dut.i, FMT, parse("1 2 D")), "sel": (dut.sel, dut.sel_fmt, parse("[01] [11] D"))},
        {"o0": (dut.o[0], FMT, []), "o1": (dut.o[1], FMT, [])},
        pattern=pattern,
        cycles=100,
    )
    assert [len(tr["i"]), len(tr["sel"])] == [3, 3] and not err
    assert max(tr["o0"][-1].cycle, tr["o1"][-1].cycle) < tr["i"][-1].cycle
    assert tr["i"][-1].cycle == tr["sel"][-1].cycle

    dut = Reassemble(fmt=FMT, n=2, rank=0, sel_rank=0)
    tr, err = run_to_end(
        dut,
        {
            "i0": (dut.i[0], FMT, parse("1 D")),
            "i1": (dut.i[1], FMT, parse("2 3 D")),
            "sel": (dut.sel, dut.sel_fmt, parse("[11] [01] D")),
        },
        {"o": (dut.o, FMT, [])},
        pattern=pattern,
        cycles=100,
    )
    assert [len(tr["i0"]), len(tr["i1"]), len(tr["sel"])] == [2, 3, 3] and not err
    assert tr["o"][-1].cycle < min(tr["i0"][-1].cycle, tr["i1"][-1].cycle)


def test_outputs_end_without_the_inputs_done():
    # In a feedback loop the data input can only end after the outputs have: the selector's
    # done token alone must close them (docs/semantics.md).
    dut = Partition(fmt=FMT, n=2, rank=0)
    outs: list[list] = [[], []]
    run_to_end(
        dut,
        {"i": (dut.i, FMT, parse("5")), "sel": (dut.sel, dut.sel_fmt, parse("[10] D"))},
        {"o0": (dut.o[0], FMT, outs[0]), "o1": (dut.o[1], FMT, outs[1])},
        pattern="periodic",
        cycles=30,
        strict=False,
    )
    assert norm(outs[0]) == norm(parse("5 D")) and outs[1] == [DONE]

    dut = Reassemble(fmt=FMT, n=1, rank=0, sel_rank=1)
    out: list = []
    run_to_end(
        dut,
        {"i0": (dut.i[0], FMT, parse("5")), "sel": (dut.sel, dut.sel_fmt, parse("[1] S1 D"))},
        {"o": (dut.o, FMT, out)},
        pattern="periodic",
        cycles=30,
        strict=False,
    )
    assert norm(out) == norm(parse("5 S2 D"))


def test_reassemble_rank0_selector_closes_groups_at_once():
    # A rank-0 selector has no stops, so nothing can merge with a group's closing stop: it is
    # written without waiting for the next selector token (BlockWriter's eager mode), which in
    # a feedback loop may depend on this very output.
    dut = Reassemble(fmt=FMT, n=2, rank=1, sel_rank=0)
    out: list = []
    run_to_end(
        dut,
        {
            "i0": (dut.i[0], FMT, parse("1 S1")),
            "i1": (dut.i[1], FMT, parse("2 3 S1")),
            "sel": (dut.sel, dut.sel_fmt, parse("[11]")),  # and nothing after it, yet
        },
        {"o": (dut.o, FMT, out)},
        pattern="random",
        cycles=40,
        strict=False,
    )
    assert norm(out) == norm(parse("1 S1 2 3 S2"))


def _partition(rank):
    return lambda: Partition(fmt=FMT, n=2, rank=rank)


def _reassemble(rank, count=None):
    return lambda: Reassemble(fmt=FMT, n=2, rank=rank, sel_rank=0, count=count)


@pytest.mark.parametrize(
    ("make", "bad", "good"),
    [
        # b = 1: the chunk closes with S1, so the selector owes no stop, but holds one.
        (_partition(1), {"i": "1 S1 2 S1 D", "sel": "[10] S1 [01] D"},
                        {"i": "1 S1 2 S1 D", "sel": "[10] [01] D"}),
        # b = 1: the chunk closes with S2, so the selector owes S1, but does not hold it.
        (_partition(1), {"i": "1 S2 2 S2 D", "sel": "[10] [01] D"},
                        {"i": "1 S2 2 S2 D", "sel": "[10] S1 [01] S1 D"}),
        # b = 0: the input's stops do not line up with the selector's.
        (_partition(0), {"i": "1 S1 2 S2 D", "sel": "[10] S1 [01] S1 D"},
                        {"i": "1 S1 2 S1 D", "sel": "[10] S1 [01] S1 D"}),
        # The input continues after the selector ended.
        (_partition(0), {"i": "1 2 D", "sel": "[11] D"}, {"i": "1 2 D", "sel": "[11] [00] D"}),
        # count = 1, but a selector sets two bits.
        (_reassemble(0, 1), {"i0": "1 D", "i1": "2 D", "sel": "[11] D"},
                            {"i0": "1 D", "i1": "2 D", "sel": "[10] [01] D"}),
        # Rank-1 chunks and a selector that selects nothing.
        (_reassemble(1), {"i0": "1 S1 D", "i1": "D", "sel": "[00] [10] D"},
                         {"i0": "1 S1 D", "i1": "D", "sel": "[10] D"}),
        # An input holds a chunk the selector never asks for.
        (_reassemble(0), {"i0": "1 D", "i1": "2 D", "sel": "[10] D"},
                         {"i0": "1 D", "i1": "2 D", "sel": "[10] [01] D"}),
    ],
)  # fmt: skip
def test_error_flags_contract_violations(make, bad, good):
    # Where the interpreter raises StepRuntimeError, the block raises its sticky `error` output.
    def run(feeds: dict[str, str]) -> int:
        dut = make()
        if isinstance(dut, Partition):
            ins, outs = {"i": dut.i, "sel": dut.sel}, list(dut.o)
        else:
            ins, outs = {"i0": dut.i[0], "i1": dut.i[1], "sel": dut.sel}, [dut.o]
        _, err = run_to_end(
            dut,
            {
                name: (ins[name], dut.sel_fmt if name == "sel" else FMT, parse(text))
                for name, text in feeds.items()
            },
            {f"o{j}": (p, FMT, []) for j, p in enumerate(outs)},
            pattern="periodic",
            cycles=60,
            strict=False,
        )
        return err

    assert run(bad) == 1
    assert run(good) == 0


# -- construction -------------------------------------------------------------------------------


def graph_with(build, *types):
    g = Graph("t")
    streams_ = [Source(g, t, name=f"s{k}").out for k, t in enumerate(types)]
    return build(*streams_)


@pytest.mark.parametrize(
    ("kind", "build", "types", "params"),
    [
        ("Broadcast", lambda x: ops.Broadcast(x, 3, name="b"), [stype(1)], {"n": 3}),
        ("Partition", lambda x, s: ops.Partition(x, s, 1, name="p"),
         [stype(2), stype(1, elem=Selector(4))], {"n": 4, "rank": 1}),
        ("Reassemble", lambda a, b, s: ops.Reassemble([a, b], s, count=1, name="r"),
         [stype(1, "a"), stype(1, "b"), stype(2, "s", Selector(2))],
         {"n": 2, "rank": 1, "sel_rank": 2, "count": 1}),
        ("EagerMerge", lambda a, b, c: ops.EagerMerge([a, b, c], name="m"),
         [stype(2, "a"), stype(2, "b"), stype(2, "c")], {"n": 3, "rank": 2}),
        ("Parallelize", lambda x: ops.Parallelize(x, 2, rank=1, name="z"), [stype(3)],
         {"n": 2, "rank": 1}),
    ],
)  # fmt: skip
def test_from_node(kind, build, types, params):
    node = graph_with(build, *types)
    dut = BLOCKS[kind].from_node(node, CFG)
    assert {k: getattr(dut, k) for k in params} == params
    assert dut.fmt == FMT
    # Ports line up with the node's inputs and outputs, payload widths with their formats.
    assert len(dut.in_ports) == len(node.inputs) and len(dut.out_ports) == len(node.outputs)
    for port, t in [*zip(dut.in_ports, [s.type for s in node.inputs], strict=True),
                    *zip(dut.out_ports, node.out_types, strict=True)]:  # fmt: skip
        assert len(port.payload.as_value()) == fmt_of(t.elem).width
    # Every block elaborates and converts (no zero-width or unused-port surprises).
    rtlil.convert(dut)


@pytest.mark.parametrize("n", [1, 2, 5])
def test_blocks_convert_for_any_width(n):
    for dut in [
        Broadcast(fmt=FMT, n=n),
        Partition(fmt=FMT, n=n, rank=2),
        Reassemble(fmt=FMT, n=n, rank=1, sel_rank=2),
        EagerMerge(fmt=FMT, n=n, rank=0),
        Parallelize(fmt=FMT, n=n, rank=0),
    ]:
        rtlil.convert(dut)


def test_from_node_rejects_unsupported():
    # The wrong kind of node.
    node = graph_with(lambda x: ops.Broadcast(x, 2, name="b"), stype(1))
    with pytest.raises(StepTypeError, match=r"^Broadcast 'b': Partition\.from_node needs a node of kind Partition$"):  # fmt: skip
        Partition.from_node(node, CFG)
    with pytest.raises(StepTypeError, match=r"^Broadcast\.from_node needs a node of kind Broadcast, not 3$"):  # fmt: skip
        Broadcast.from_node(3, CFG)
    # Elements without a hardware encoding.
    node = graph_with(lambda x, s: ops.Partition(x, s, 0, name="p"),
                      stype(0, elem=Tile(float32, 2, 2)), stype(0, elem=Selector(2)))  # fmt: skip
    with pytest.raises(StepTypeError, match=r"^Partition 'p', port 'in': dtype float32 is not supported by the hardware \(int16/int32\)$"):  # fmt: skip
        Partition.from_node(node, CFG)
    node = graph_with(lambda x: ops.Parallelize(x, 2, name="z"), stype(1, elem=Tile(int8, 8, 1)))
    with pytest.raises(StepTypeError, match=r"^Parallelize 'z', port 'in': tile Tile<int8, 8x1> does not fit the configured 4x4 tile$"):  # fmt: skip
        Parallelize.from_node(node, CFG)
    # Inputs whose tile rows differ symbolically unify to a dynamic tile on the output.
    node = graph_with(lambda a, b: ops.EagerMerge([a, b], name="m"),
                      stype(0, "a", Tile(int32, regular("r"), 1)), stype(0, "b", SCALAR))  # fmt: skip
    for refuse in (EagerMerge.from_node, check_node):  # the block, and the rtl profile's rule
        with pytest.raises(StepTypeError, match=r"^EagerMerge 'm', port 'in1': tile Tile<int32, 1x1> and the output's Tile<int32, m_rowsx1> have different hardware formats \(static and dynamic tiles do not merge\)$"):  # fmt: skip
            refuse(node, CFG)
    node = graph_with(lambda a, b, s: ops.Reassemble([a, b], s, name="r"),
                      stype(0, "a", Tile(int32, regular("r"), 1)), stype(0, "b", SCALAR),
                      stype(0, "s", Selector(2)))  # fmt: skip
    for refuse in (Reassemble.from_node, check_node):
        with pytest.raises(StepTypeError, match=r"^Reassemble 'r', port 'in1': tile Tile<int32, 1x1> and the output's Tile<int32, r_rowsx1> have different hardware formats \(static and dynamic tiles do not merge\)$"):  # fmt: skip
            refuse(node, CFG)
    # Stop levels beyond the level field (2 bits: up to S3).
    narrow = HwConfig(level_bits=2)
    node = graph_with(lambda a, s: ops.Reassemble([a], s, name="r"), stype(1, "a"), stype(2, "s", Selector(1)))  # fmt: skip
    with pytest.raises(StepTypeError, match=r"^Reassemble 'r', port 'out': a rank-4 stream needs stop levels up to S4; HwConfig\.level_bits=2 holds levels up to S3$"):  # fmt: skip
        Reassemble.from_node(node, narrow)
    node = graph_with(lambda x: ops.Map(x, fn=F.silu, name="f"), stype(0, elem=Tile(float32, 1, 1)))
    with pytest.raises(StepTypeError, match=r"^Map 'f': EagerMerge\.from_node needs a node of kind EagerMerge$"):  # fmt: skip
        EagerMerge.from_node(node, CFG)


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda: Broadcast(fmt=FMT, n=0), ValueError, r"^Broadcast n must be a positive integer, not 0$"),
        (lambda: Broadcast(fmt=FMT, n=True), TypeError, r"^Broadcast n must be a positive integer, not True$"),
        (lambda: Broadcast(fmt="int16", n=2), TypeError, r"^Broadcast fmt must be a TokenFormat or TupleFormat, not 'int16'$"),
        (lambda: Partition(fmt=FMT, n=2, rank=-1), ValueError, r"^Partition rank must be a non-negative integer, not -1$"),
        (lambda: Partition(fmt=FMT, n=2, rank=1.0), TypeError, r"^Partition rank must be a non-negative integer, not 1\.0$"),
        (lambda: Partition(fmt=FMT, n=2, rank=8), ValueError, r"^Partition rank S8 does not fit the format's 3 level bits \(levels up to S7\)$"),
        (lambda: Partition(fmt=FMT, n=0, rank=0), ValueError, r"^Partition n must be a positive integer, not 0$"),
        (lambda: Reassemble(fmt=FMT, n=2, rank=3, sel_rank=4), ValueError, r"^Reassemble output stop S8 does not fit the format's 3 level bits \(levels up to S7\)$"),
        (lambda: Reassemble(fmt=FMT, n=2, rank=0, sel_rank="1"), TypeError, r"^Reassemble sel_rank must be a non-negative integer, not '1'$"),
        (lambda: Reassemble(fmt=FMT, n=2, rank=0, sel_rank=0, count=3), ValueError, r"^Reassemble count must be at most n=2, not 3$"),
        (lambda: Reassemble(fmt=FMT, n=2, rank=0, sel_rank=0, count=-1), ValueError, r"^Reassemble count must be a non-negative integer, not -1$"),
        (lambda: Reassemble(fmt=FMT, n=2, rank=1, sel_rank=0, count=0), ValueError, r"^Reassemble count 0 with rank > 0 would make an empty non-innermost dimension$"),
        (lambda: EagerMerge(fmt=FMT, n=-2, rank=0), ValueError, r"^EagerMerge n must be a positive integer, not -2$"),
        (lambda: EagerMerge(fmt=None, n=2, rank=0), TypeError, r"^EagerMerge fmt must be a TokenFormat or TupleFormat, not None$"),
        (lambda: Parallelize(fmt=FMT, n=2, rank=None), TypeError, r"^Parallelize rank must be a non-negative integer, not None$"),
        (lambda: Parallelize(FMT, 2, 0), TypeError, r"takes 1 positional argument but 4 were given$"),
    ],
)  # fmt: skip
def test_constructor_validation(make, error, message):
    with pytest.raises(error, match=message):
        make()
