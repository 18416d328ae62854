"""The rules for the arguments of :func:`~step_hw.cosim.run` and :func:`~step_hw.cosim.validate`.

Both check every argument before any work (the interpreter, the simulator, an elaboration, a
Verilator build): a bad one is a one-line error that names the function, the parameter and the
value (``run: watchdog must be a positive integer, not 0``); nothing is masked, truncated or
dropped. A wrong type raises ``TypeError``, a value outside the rule ``ValueError``; the memory's
and the Source tokens' errors are :class:`~step_lang.errors.StepValueError`, as the
interpreter's are.

The command line (``step validate --seed/--watchdog/--tier``) refuses the same values: its bounds
are :data:`SEED_MAX` and :data:`WATCHDOG_MIN`, its tiers :data:`TIERS`. This module imports neither Amaranth nor cocotb.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from step_lang.integers import is_integer

__all__ = ["SEED_MAX", "TIERS", "WATCHDOG_MIN", "Checked", "check_arguments", "check_memory"]

#: Co-simulation tiers: the cocotbext-axi bench (protocol conformance) and the fast tier.
TIERS = ("axi", "fast")

#: The largest seed of the back-pressure patterns: the fast tier seeds its pause LFSRs from a
#: 32-bit register (``fast_top``'s ``reg [31:0] seed``), so a larger seed would be cut to 32 bits.
SEED_MAX = 2**32 - 1
#: The smallest watchdog (cycles without a queue handshake before a run fails): with 0 a run
#: would report a deadlock before its first handshake.
WATCHDOG_MIN = 1


@dataclass(frozen=True)
class Checked:
    """What the checks return: ``memory`` as arrays of the declared dtypes and shapes (tensors
    it does not name start as zeros on both tiers, as in the interpreter), ``inputs`` as a dict,
    each Source's ``tokens`` (checked against its stream type) by node name, ``axi_errors`` as
    a tuple, and ``seed`` and ``watchdog`` as ints (numpy integers too)."""

    memory: dict[str, np.ndarray]
    inputs: dict[str, Any]
    tokens: dict[str, list]
    axi_errors: tuple[str, ...]
    seed: int
    watchdog: int


def _integer(who: str, name: str, value: Any, low: int, high: int | None, rule: str) -> int:
    """``value`` as an ``int`` if it is an integer in ``[low, high]``, else ``TypeError``
    (not an integer) or ``ValueError`` (outside)."""
    message = f"{who}: {name} must be {rule}, not {value!r}"
    if not is_integer(value):
        raise TypeError(message)
    if value < low or (high is not None and value > high):
        raise ValueError(message)
    return int(value)


def _flag(who: str, name: str, value: Any) -> None:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{who}: {name} must be True or False, not {value!r}")


def _one_of(who: str, name: str, value: Any, choices: Iterable[str]) -> None:
    choices = tuple(choices)
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{who}: {name} must be one of {', '.join(choices)}, not {value!r}")


def _tag(who: str, tag: Any) -> None:
    """A run's folder is ``<design>/runs/<tag>``: ``tag`` must name one folder there."""
    seps = {os.sep, os.altsep, "/", "\0"} - {None}
    if not isinstance(tag, str) or tag in ("", ".", "..") or any(s in tag for s in seps):
        raise (TypeError if not isinstance(tag, str) else ValueError)(
            f"{who}: tag must be a plain folder name (not empty, '.' or '..', no path "
            f"separator), not {tag!r}"
        )


def check_memory(who: str, graph: Any, memory: Any) -> dict[str, np.ndarray]:
    """``memory`` (tensor name to array) checked as every reader checks it
    (:func:`step_lang.interpret.check_memory`), its errors prefixed with ``who``. Tensors it
    does not name are left out (both tiers and the interpreter start them as zeros)."""
    from step_lang.errors import StepValueError
    from step_lang.interpret import check_memory as check

    try:
        return check(graph, memory)
    except StepValueError as exc:
        raise StepValueError(f"{who}: {exc}") from None


def _source_tokens(who: str, graph: Any, inputs: Any) -> tuple[dict[str, Any], dict[str, list]]:
    """``inputs`` as a dict and each Source's tokens, checked as the interpreter checks them."""
    from step_lang.errors import StepValueError
    from step_lang.interpret import check_inputs, source_tokens
    from step_lang.ops import Source

    try:
        inputs = check_inputs(graph, inputs)
        tokens = {
            n.name: source_tokens(n, inputs) for n in graph.nodes.values() if isinstance(n, Source)
        }
    except StepValueError as exc:
        raise StepValueError(f"{who}: {exc}") from None
    return inputs, tokens


def check_arguments(
    who: str,
    graph: Any,
    memory: Any,
    *,
    inputs: Any,
    config: Any,
    pattern: Any,
    seed: Any,
    watchdog: Any,
    tag: Any,
    tier: Any,
    memory_model: Any,
    axi_errors: Any = (),
    flags: Mapping[str, Any] | None = None,
) -> Checked:
    """Check the arguments of ``who`` (``"run"`` or ``"validate"``) as :func:`~step_hw.cosim.run`
    documents them, before any work; ``flags`` are its ``True``/``False`` arguments by name.
    Raises the first error found; returns the memory, the inputs and the Source tokens."""
    from step_hw.config import HwConfig
    from step_hw.memory_model import MemoryModel
    from step_hw.patterns import PATTERNS
    from step_lang.graph import Graph

    if not isinstance(graph, Graph):
        raise TypeError(f"{who}: graph must be a step_lang Graph, not {graph!r}")
    if config is not None and not isinstance(config, HwConfig):
        raise TypeError(f"{who}: config must be an HwConfig or None, not {config!r}")
    if memory_model is not None and not isinstance(memory_model, MemoryModel):
        raise TypeError(
            f"{who}: memory_model must be a step_hw.memory_model.MemoryModel or None, not "
            f"{memory_model!r}"
        )
    _one_of(who, "tier", tier, TIERS)
    _one_of(who, "pattern", pattern, PATTERNS)
    seed = _integer(who, "seed", seed, 0, SEED_MAX, "an integer in [0, 2**32-1]")
    watchdog = _integer(who, "watchdog", watchdog, WATCHDOG_MIN, None, "a positive integer")
    _tag(who, tag)
    for name, value in (flags or {}).items():
        _flag(who, name, value)
    names = None
    if not isinstance(axi_errors, (str, bytes)) and isinstance(axi_errors, Iterable):
        names = tuple(axi_errors)  # once: an iterator is read here, not again
    if names is None or not all(isinstance(n, str) for n in names):
        raise TypeError(
            f"{who}: axi_errors must be a collection of tensor names, not {axi_errors!r}"
        )
    axi_errors = names
    unknown = sorted(set(axi_errors) - set(graph.tensors))
    if unknown:
        raise ValueError(
            f"{who}: axi_errors names {', '.join(unknown)}, which graph '{graph.name}' does not "
            "declare"
        )
    if tier == "fast" and axi_errors:
        raise ValueError(
            f"{who}: axi_errors needs the axi tier (the fast tier's memory answers SLVERR only "
            "outside the memory map)"
        )
    if tier != "fast" and memory_model not in (None, MemoryModel.axi_ram()):
        raise ValueError(
            f"{who}: memory_model {memory_model} needs the fast tier (the axi tier's "
            "cocotbext-axi RAM has latency 2 and write response 2)"
        )
    checked = check_memory(who, graph, memory)
    inputs, tokens = _source_tokens(who, graph, inputs)
    return Checked(checked, inputs, tokens, axi_errors, seed, watchdog)
