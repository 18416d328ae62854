"""Errors a STeP user can hit.

Every message names the operator (kind and node name), the port, and the offending shapes or values,
so that a failing graph points at the line that built it.
"""

from __future__ import annotations

__all__ = [
    "SimDeadlock",
    "StepDeadlock",
    "StepError",
    "StepGraphError",
    "StepRaceError",
    "StepRuntimeError",
    "StepTypeError",
    "StepValueError",
]


class StepError(Exception):
    """Base class of every error raised by the STeP toolkit."""


class StepTypeError(StepError, TypeError):
    """An operator was constructed with inputs or parameters its type rules reject."""


class StepValueError(StepError, ValueError):
    """A value handed to the toolkit (a tensor, a token list, a parameter) is malformed."""


class StepGraphError(StepError):
    """A graph is not well formed (unbound feedback, unconsumed output, foreign stream, ...)."""


class StepRuntimeError(StepError):
    """Data seen while executing a graph contradicts its declared types or an operator's contract."""


class StepRaceError(StepRuntimeError):
    """Two off-chip accesses to the same elements, at least one a write, that no stream orders:
    the result would depend on timing (see :mod:`step_lang.races`)."""


class StepDeadlock(StepError):
    """Execution stopped before every node finished and no node can make progress.

    Attributes:
        blocked: mapping of node name to a description of what it waits for.
        queues: mapping of edge name to the number of tokens it holds.
    """

    def __init__(self, message: str, *, blocked: dict[str, str], queues: dict[str, int]):
        super().__init__(message)
        self.blocked = blocked
        self.queues = queues

    def __reduce__(self):
        # keyword-only arguments and attributes set after construction (a simulator's causes):
        # rebuilt from the message and the instance's attributes, so that a deadlock raised in
        # a worker process reaches its parent whole
        return (_rebuild, (type(self), str(self), dict(self.__dict__)))


class SimDeadlock(StepDeadlock):
    """The simulator (or a co-simulation) stopped making progress before the graph finished.

    Attributes as :class:`StepDeadlock`, plus ``cycle``: the simulated time it was detected at.
    """

    def __init__(
        self, message: str, *, blocked: dict[str, str], queues: dict[str, int], cycle: int
    ):
        super().__init__(message, blocked=blocked, queues=queues)
        self.cycle = cycle


def _rebuild(cls: type, message: str, state: dict) -> StepDeadlock:
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    err.__dict__.update(state)
    return err


def op_message(kind: str, name: str, port: str | None, text: str) -> str:
    """The one format of operator error messages: ``Kind 'name', port 'p': text``."""
    where = f"{kind} '{name}'"
    if port is not None:
        where += f", port '{port}'"
    return f"{where}: {text}"
