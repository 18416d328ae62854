"""The functional reference interpreter.

It runs any graph on numpy data as a Kahn process network: every node is a coroutine (its
:meth:`~step_lang.graph.Node.execute` generator), every edge an unbounded FIFO. Nodes run in turn
until all have finished; when a full round makes no progress the graph is deadlocked and
:class:`~step_lang.errors.StepDeadlock` names every blocked node and the queues it waits on.
Feedback loops and data-dependent routing need nothing special. EagerMerge's choice among ready
inputs comes from an :class:`~step_lang.arrival.ArrivalPolicy`.

After the run every stream is checked against its declared type (see :mod:`step_lang.observe`),
which also yields the values the dynamic dims took. During it, every off-chip access to a tensor
that a store writes is checked against the others (:mod:`step_lang.races`): two that no stream
orders raise :class:`~step_lang.errors.StepRaceError`, since their outcome depends on timing.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .arrival import ArrivalPolicy, FixedOrder, LowestIndexFirst
from .errors import StepDeadlock, StepRuntimeError, StepValueError, op_message
from .graph import Graph, Node, OffChipTensor, Stream
from .observe import Bindings, check_stream
from .ops.misc import Source
from .ops.offchip import tile_index
from .ops.routing import EagerMerge
from .passes import lower
from .races import RaceCheck
from .tokens import DONE, Token, is_data, to_tokens

__all__ = ["InterpretResult", "NodeIO", "check_memory", "interpret"]


class _Channel:
    """An unbounded FIFO carrying one stream; keeps its history for checking and probes."""

    def __init__(self, stream: Stream):
        self.stream = stream
        self.queue: deque[Token] = deque()
        self.history: list[Token] = []
        self.closed = False
        self.clocks: deque = deque()  # the senders' clocks, when the run checks for races
        self.merged: int | None = None  # the clock the consumer merged last


class NodeIO:
    """What a node's ``execute`` generator sees: its input and output queues and the memory."""

    def __init__(self, run: _Run, node: Node, inputs: list[_Channel], outputs: list[_Channel]):
        self._run = run
        self.node = node
        self.inputs = inputs
        self.outputs = outputs
        self._races = run.races
        self._index = run.races.node_index[node.name] if run.races is not None else -1
        self._ordered = True  # False inside ``recv_unordered``

    def recv(self, i: int) -> Iterator[str]:
        """Generator: wait for and pop the next token of input ``i``."""
        ch = self.inputs[i]
        while not ch.queue:
            yield f"input '{self.node.input_names[i]}' ({ch.stream.name})"
        self._run.moves += 1
        if self._races is not None:
            clock = ch.clocks.popleft()
            # a run of tokens with one clock is merged once
            if self._ordered and clock is not ch.merged:
                self._races.received(self._index, clock)
                ch.merged = clock
        return ch.queue.popleft()

    def recv_unordered(self, i: int) -> Iterator[str]:
        """Generator: :meth:`recv` a token that no later action of the node depends on, which
        it takes whenever it arrives (the closing stop an Expand only checks): taking it does
        not order the node after the token's sender for the race check
        (:mod:`step_lang.races`), which would make the verdict depend on when the token came.
        The sender's later tokens on that input, which the node waits for, order it."""
        self._ordered = False
        try:
            return (yield from self.recv(i))
        finally:
            self._ordered = True

    def peek(self, i: int) -> Iterator[str]:
        """Generator: wait for the next token of input ``i`` without popping it."""
        ch = self.inputs[i]
        while not ch.queue:
            yield f"input '{self.node.input_names[i]}' ({ch.stream.name})"
        return ch.queue[0]

    def has(self, i: int) -> bool:
        """True if input ``i`` holds a token now."""
        return bool(self.inputs[i].queue)

    def head(self, i: int) -> Token:
        """The next token of input ``i`` (which must hold one)."""
        return self.inputs[i].queue[0]

    def send(self, j: int, token: Token) -> Iterator[str]:
        """Generator: append a token to output ``j`` (never blocks: queues are unbounded)."""
        ch = self.outputs[j]
        if ch.closed:
            raise StepRuntimeError(
                op_message(
                    self.node.kind,
                    self.node.name,
                    self.node.output_names[j],
                    f"token {token!r} after done",
                )
            )
        if token is DONE:
            ch.closed = True
        ch.queue.append(token)
        ch.history.append(token)
        if self._races is not None:
            ch.clocks.append(self._races.sent(self._index))
        self._run.moves += 1
        return
        yield  # a generator, like the simulator's blocking send

    def fail(self, port: str | None, text: str) -> StepRuntimeError:
        """A runtime error naming this node and ``port`` (raise it)."""
        return StepRuntimeError(op_message(self.node.kind, self.node.name, port, text))

    def read_tile(self, t: OffChipTensor, tile: tuple[int, int], k: int) -> np.ndarray:
        """A copy of tile number ``k`` of tensor ``t`` in ``tile``-shaped tiles."""
        if self._races is not None:
            self._races.read(self._index, t, tile, k)
        return np.array(self._run.memory[t.name][tile_index(t.shape, tile, k)], copy=True)

    def write_tile(
        self, t: OffChipTensor, tile: tuple[int, int], k: int, value: np.ndarray
    ) -> None:
        """Overwrite tile number ``k`` of tensor ``t``."""
        if self._races is not None:
            self._races.write(self._index, t, tile, k)
        self._run.memory[t.name][tile_index(t.shape, tile, k)] = value
        self._run.written.add(t.name)

    def check_tile(self, token: Any, shape: tuple[int, int], port: str) -> Any:
        """A data token that must be a tile of ``shape``."""
        arr = token
        if (
            not hasattr(arr, "shape")
            or isinstance(arr, (tuple, list))
            or tuple(arr.shape) != tuple(shape)
        ):
            raise self.fail(
                port,
                f"expected a {shape[0]}x{shape[1]} tile, got {type(token).__name__} {np.shape(token)}",
            )
        return arr

    def source_tokens(self) -> list[Token]:
        """The tokens fed to this Source node."""
        return self._run.source_tokens(self.node)

    def policy(self) -> ArrivalPolicy:
        """This node's arrival policy (fresh state per node)."""
        return self._run.policy_for(self.node)


@dataclass
class InterpretResult:
    """What a run produced.

    Attributes:
        memory: every off-chip tensor after the run (inputs included).
        written: names of the tensors stores wrote.
        streams: tokens of every stream, by ``Stream`` and by stream name.
        bindings: values the dynamic dims took.
    """

    memory: dict[str, np.ndarray]
    written: set[str]
    streams: dict[Any, list[Token]] = field(repr=False)
    bindings: Bindings = field(repr=False)

    def tokens(self, stream: Stream | str) -> list[Token]:
        """Tokens of a stream, given as a handle or a name ``node.port``."""
        key = stream.name if isinstance(stream, Stream) else stream
        if key not in self.streams:
            raise KeyError(f"no stream named {key!r}")
        return self.streams[key]


class _Run:
    def __init__(
        self, graph: Graph, memory: dict[str, np.ndarray], policy: Any, inputs: Mapping[str, Any]
    ):
        self.graph = graph
        self.inputs = inputs
        self.memory = memory
        self.written: set[str] = set()
        self.moves = 0
        self._policy = policy
        self.races = RaceCheck.for_graph(graph)

    def source_tokens(self, node: Node) -> list[Token]:
        return source_tokens(node, self.inputs)

    def policy_for(self, node: Node) -> ArrivalPolicy:
        p = self._policy
        if isinstance(p, Mapping):
            p = p.get(node.name, LowestIndexFirst())
        if p is None:
            p = LowestIndexFirst()
        if not isinstance(p, ArrivalPolicy):
            raise StepValueError(
                f"merge_policy for '{node.name}' must be an ArrivalPolicy, not {p!r}"
            )
        return p.fresh()


def source_tokens(node: Node, inputs: Mapping[str, Any]) -> list[Token]:
    """The tokens ``inputs`` feed Source ``node`` (a token list ending with ``DONE``, or nested
    lists), checked against its type; the interpreter and the simulator share this."""
    if node.name not in inputs:
        raise StepValueError(
            f"Source '{node.name}' has no tokens; pass inputs={{'{node.name}': ...}}"
        )
    toks = inputs[node.name]
    ends_done = isinstance(toks, list) and bool(toks) and toks[-1] is DONE
    if not ends_done and isinstance(toks, (list, tuple)) and any(not is_data(t) for t in toks):
        # stop or done tokens at the top: a token list whose done token is missing or not
        # last, not nested lists (whose top level holds tensors)
        last = repr(toks[-1])
        raise StepValueError(op_message(node.kind, node.name, "out", (
            f"inputs['{node.name}'] holds stop or done tokens, so it is read as a token list, "
            f"which must be a list ending with the done token (DONE), not a "
            f"{type(toks).__name__} ending with {last}"
        )))  # fmt: skip
    if not ends_done:
        try:
            toks = to_tokens(toks, node.out_types[0].rank)
        except StepValueError as exc:  # say which Source was fed the malformed data
            raise StepValueError(op_message(node.kind, node.name, "out", str(exc))) from exc
    check_stream(toks, node.out_types[0], Bindings(), f"inputs['{node.name}']")
    return list(toks)


def check_inputs(graph: Graph, inputs: Mapping[str, Any] | None) -> dict[str, Any]:
    """``inputs`` as a dict, after checking that every name is a Source node of ``graph``."""
    if inputs is not None and not isinstance(inputs, Mapping):
        raise StepValueError(
            f"inputs must map Source node names to tokens, not {type(inputs).__name__}"
        )
    inputs = dict(inputs or {})
    sources = {n.name for n in graph.nodes.values() if isinstance(n, Source)}
    unknown = sorted(set(inputs) - sources)
    if unknown:
        raise StepValueError(
            f"inputs name {', '.join(unknown)}, which are not Source nodes of graph '{graph.name}'"
        )
    return inputs


def check_memory(graph: Graph, memory: Mapping[str, Any] | None) -> dict[str, np.ndarray]:
    """The arrays of ``memory`` (tensor name to array) after checking them against ``graph``'s
    tensors: every name declared, each array of the tensor's shape and dtype (nothing is cast
    or reshaped). Tensors it does not name are left out (the readers start them as zeros). The
    one rule of the interpreter, the simulator and co-simulation; ``StepValueError`` otherwise."""
    if memory is None:
        return {}
    if not isinstance(memory, Mapping):
        raise StepValueError(f"memory must map tensor names to arrays, not {type(memory).__name__}")
    unknown = sorted(map(str, set(memory) - set(graph.tensors)))
    if unknown:
        raise StepValueError(
            f"memory holds {', '.join(unknown)}, which graph '{graph.name}' does not declare"
        )
    out = {}
    for name, value in memory.items():
        t = graph.tensors[name]
        arr = np.asarray(value)
        if arr.shape != tuple(t.shape) or arr.dtype != t.dtype.numpy:
            raise StepValueError(
                f"tensor '{name}': array {arr.dtype} {list(arr.shape)}, declared {t.dtype} "
                f"{list(t.shape)}"
            )
        out[name] = arr
    return out


def _prepare_memory(graph: Graph, memory: Mapping[str, np.ndarray] | None) -> dict[str, np.ndarray]:
    given = check_memory(graph, memory)
    return {
        name: np.array(given[name], copy=True)
        if name in given
        else np.zeros(t.shape, dtype=t.dtype.numpy)
        for name, t in graph.tensors.items()
    }


def interpret(
    graph: Graph,
    memory: Mapping[str, np.ndarray] | None = None,
    *,
    inputs: Mapping[str, Any] | None = None,
    merge_policy: ArrivalPolicy | Mapping[str, ArrivalPolicy] | None = None,
    check: bool = True,
) -> InterpretResult:
    """Execute ``graph`` on ``memory`` (tensor name to array; absent tensors start as zeros).

    ``inputs`` feeds Source nodes by name (token lists ending with ``DONE``, or nested lists).
    ``merge_policy`` is one policy for every EagerMerge or a mapping from node name to policy
    (default :class:`~step_lang.arrival.LowestIndexFirst`). With ``check`` every stream is checked
    against its declared type afterwards. Two off-chip accesses of the same elements, one a
    write, that no stream orders raise :class:`~step_lang.errors.StepRaceError`
    (:mod:`step_lang.races`).
    """
    graph = lower(graph)
    inputs = check_inputs(graph, inputs)
    merges = {n.name for n in graph.nodes.values() if isinstance(n, EagerMerge)}
    if isinstance(merge_policy, FixedOrder) and merge_policy.order and not merges:
        # a replay with nothing to replay on would be ignored: the order does not match the run
        raise StepValueError(
            f"merge_policy FixedOrder({merge_policy.order}) replays merges, but graph "
            f"'{graph.name}' has no EagerMerge node"
        )
    if isinstance(merge_policy, Mapping):
        stray = sorted(set(merge_policy) - merges)
        if stray:
            raise StepValueError(
                f"merge_policy names {', '.join(map(repr, stray))}, which is no EagerMerge node of "
                f"graph '{graph.name}' (EagerMerge nodes: {', '.join(sorted(merges)) or 'none'})"
            )
    run = _Run(graph, _prepare_memory(graph, memory), merge_policy, inputs)
    order = graph.topo_order()
    channels = {s: _Channel(s) for node in order for s in node.outputs}
    gens: dict[str, Iterator[Any]] = {}
    for node in order:
        io = NodeIO(
            run, node, [channels[s] for s in node.inputs], [channels[s] for s in node.outputs]
        )
        gens[node.name] = node.execute(io)
    waiting: dict[str, str] = {}
    live = [n.name for n in order]
    while live:
        before = run.moves
        still = []
        for name in live:
            try:
                waiting[name] = next(gens[name])
                still.append(name)
            except StopIteration:
                waiting.pop(name, None)
            except StepRuntimeError as exc:  # function errors ("function 'add': ...") lack the node
                node = graph.nodes[name]
                if str(exc).startswith(f"{node.kind} '{node.name}'"):
                    raise
                raise StepRuntimeError(op_message(node.kind, node.name, None, str(exc))) from exc
        finished_some = len(still) != len(live)
        live = still
        if live and run.moves == before and not finished_some:
            _deadlock(graph, live, waiting, channels)
    for s, ch in channels.items():
        if not ch.closed:
            node = s.node
            raise StepRuntimeError(
                op_message(
                    node.kind, node.name, node.output_names[s.port], "finished without sending done"
                )
            )
    bindings = Bindings()
    if check:
        for s, ch in channels.items():
            check_stream(ch.history, s.type, bindings, f"stream {s.name}")
        bindings.finish()
    streams: dict[Any, list[Token]] = {}
    for s, ch in channels.items():
        streams[s.name] = ch.history
    return InterpretResult(run.memory, run.written, streams, bindings)


def _deadlock(
    graph: Graph, live: Iterable[str], waiting: dict[str, str], channels: dict[Stream, _Channel]
) -> None:
    blocked = {name: waiting.get(name, "?") for name in live}
    queues = {
        s.name: len(ch.queue) for s, ch in channels.items() if not (ch.closed and not ch.queue)
    }
    lines = [f"  {graph.nodes[n].kind} '{n}' waits for {w}" for n, w in blocked.items()]
    held = [f"  {name}: {k} token(s)" for name, k in queues.items() if k]
    msg = f"graph '{graph.name}' deadlocked; blocked nodes:\n" + "\n".join(lines)
    if held:
        msg += "\nqueues holding tokens:\n" + "\n".join(held)
    raise StepDeadlock(msg, blocked=blocked, queues=queues)
