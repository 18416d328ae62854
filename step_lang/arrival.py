"""Arrival policies: how the interpreter picks the next input of an EagerMerge.

The interpreter has no clock, so "the input whose chunk arrives first" must be chosen by a policy.
A policy sees the indices of the inputs that currently hold a token and returns one of them. The
simulator and the hardware use real arrival times instead.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import numpy as np

from .errors import StepRuntimeError, StepTypeError, StepValueError
from .integers import is_integer

__all__ = ["ArrivalPolicy", "FixedOrder", "LowestIndexFirst", "RandomArrival", "RoundRobin"]


class ArrivalPolicy:
    """Chooses among ready inputs. Subclasses implement :meth:`choose`; ``fresh`` gives per-node state."""

    def fresh(self) -> ArrivalPolicy:
        """A copy with clean state, one per EagerMerge node."""
        return type(self)()

    def choose(self, ready: Sequence[int], n_inputs: int) -> int | None:  # pragma: no cover
        """Return the index to take next, or ``None`` to wait for another input."""
        raise NotImplementedError

    def start(self, n_inputs: int) -> None:
        """The merge has ``n_inputs`` inputs (called once, before anything else)."""

    def finished(self, i: int) -> None:
        """Input ``i`` has ended (its done token arrived)."""


class LowestIndexFirst(ArrivalPolicy):
    """Take the ready input with the lowest index (the default)."""

    def choose(self, ready: Sequence[int], n_inputs: int) -> int | None:
        return min(ready)


class RoundRobin(ArrivalPolicy):
    """Take the first ready input after the one taken last."""

    def __init__(self):
        self._last = -1

    def choose(self, ready: Sequence[int], n_inputs: int) -> int | None:
        self._last = min(ready, key=lambda i: (i - self._last - 1) % n_inputs)
        return self._last


class RandomArrival(ArrivalPolicy):
    """Take a ready input uniformly at random (seeded, so runs repeat)."""

    def __init__(self, seed: int = 0):
        self.seed = seed
        self._rng = random.Random(seed)

    def fresh(self) -> RandomArrival:
        return RandomArrival(self.seed)

    def choose(self, ready: Sequence[int], n_inputs: int) -> int | None:
        return self._rng.choice(sorted(ready))


class FixedOrder(ArrivalPolicy):
    """Take inputs in a given order, waiting for each one; after the list, lowest index first.

    ``order`` lists input indices, one per chunk the merge forwards. A list shorter than the run
    leaves the rest to the lowest ready index; an entry that cannot be honoured (an index the
    merge does not have, or an input that has already ended, as the entries left over when a
    run needs fewer chunks than the list names) raises :class:`StepRuntimeError`, which the
    interpreter prefixes with the EagerMerge's name: a replay that does not match the run is an
    error, never ignored.
    """

    def __init__(self, order: Sequence[int]):
        if isinstance(order, (str, bytes)) or not isinstance(order, (Sequence, np.ndarray)):
            raise StepTypeError(
                f"FixedOrder: order must be a sequence of input indices, not {order!r}"
            )
        for k, i in enumerate(order):
            if not is_integer(i):
                raise StepTypeError(f"FixedOrder: step {k} must be an input index, not {i!r}")
            if i < 0:
                raise StepValueError(
                    f"FixedOrder: step {k} must be a non-negative input index, not {i!r}"
                )
        self.order = [int(i) for i in order]
        self._pos = 0
        self._ended: set[int] = set()
        self._n: int | None = None  # the merge's input count (``start``)

    @classmethod
    def from_selectors(cls, tokens: Sequence[Any]) -> FixedOrder:
        """The order an EagerMerge chose, from the tokens of its ``sel`` output (one-hot
        selectors; stop and done tokens are skipped): replaying it makes the interpreter's
        run that of a simulator or of the hardware."""
        order = []
        for k, tok in enumerate(tokens):
            if not isinstance(tok, np.ndarray):
                continue
            hot = np.flatnonzero(tok)
            if hot.size != 1:
                raise StepValueError(
                    f"FixedOrder.from_selectors: token {k} is not a one-hot selector: {tok!r}"
                )
            order.append(int(hot[0]))
        return cls(order)

    def _check(self, want: int) -> None:
        """Refuse step ``_pos`` (naming input ``want``) when it can never be taken."""
        if self._n is not None and want >= self._n:
            raise StepRuntimeError(
                f"FixedOrder: step {self._pos} names input {want}, but the merge has "
                f"{self._n} inputs"
            )
        if want in self._ended:
            raise StepRuntimeError(
                f"FixedOrder: step {self._pos} names input {want}, which has already ended "
                f"(the order has {len(self.order)} steps; the merge took {self._pos} chunks)"
            )

    def start(self, n_inputs: int) -> None:
        self._n = n_inputs

    def finished(self, i: int) -> None:
        self._ended.add(i)
        if self._pos < len(self.order):
            self._check(self.order[self._pos])

    def fresh(self) -> FixedOrder:
        return FixedOrder(self.order)

    def choose(self, ready: Sequence[int], n_inputs: int) -> int | None:
        if self._pos >= len(self.order):
            return min(ready)
        want = self.order[self._pos]
        self._check(want)
        if want in ready:
            self._pos += 1
            return want
        return None
