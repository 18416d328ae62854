"""Per-operator behaviour of the readers that live outside ``step_lang``, keyed by node class.

The interpreter and the cost model are methods of each :class:`~step_lang.graph.Node` subclass
(``execute``, ``onchip_bytes``, ``offchip_bytes``, ``flops``). The other readers (the
simulator's ``paper`` and ``rtl`` timing profiles, the hardware contract and the elaborator) keep
a :class:`NodeRegistry` each, and register an entry per operator class where they define it, in
the spirit of hls4ml's per-layer-class template registries: a second entry for the same class is
an error, a missing one is reported by name (``tests/test_registry.py`` checks that every
operator has an entry in every reader).

An operator a reader deliberately does not support is registered with :class:`Unsupported`,
whose text the reader's error repeats.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from .errors import StepTypeError, op_message
from .graph import Node

__all__ = ["NodeRegistry", "Unsupported", "node_classes"]

T = TypeVar("T")


@dataclass(frozen=True)
class Unsupported:
    """A registry entry saying that a reader does not support an operator, and why."""

    reason: str


class NodeRegistry(Generic[T]):
    """Entries of one reader, keyed by operator class (exact class, no inheritance).

    ``reader`` names the reader in error messages ("hardware", "rtl-profile timing", ...).
    """

    def __init__(self, reader: str):
        self.reader = reader
        self._entries: dict[type[Node], T | Unsupported] = {}

    def register(self, *classes: type[Node]) -> Callable[[T], T]:
        """Decorator: register the decorated object as the entry of every class in ``classes``."""

        def add(entry: T) -> T:
            self.add(entry, *classes)
            return entry

        return add

    def add(self, entry: T | Unsupported, *classes: type[Node]) -> None:
        """Register ``entry`` for every class in ``classes``; a class registered twice is an error."""
        if not classes:
            raise TypeError(f"{self.reader}: register needs at least one Node class")
        for cls in classes:
            if not (isinstance(cls, type) and issubclass(cls, Node)):
                raise TypeError(f"{self.reader}: {cls!r} is not a Node class")
            if cls in self._entries:
                raise ValueError(f"{self.reader}: {cls.kind} is registered twice")
            self._entries[cls] = entry

    def entry(self, node: Node | type[Node]) -> T:
        """The entry of ``node``'s class; a missing or :class:`Unsupported` entry raises a
        :class:`~step_lang.errors.StepTypeError` naming the operator."""
        cls = node if isinstance(node, type) else type(node)
        name = "?" if isinstance(node, type) else node.name
        try:
            found = self._entries[cls]
        except KeyError:
            raise StepTypeError(
                op_message(cls.kind, name, None, f"has no {self.reader} entry (not registered)")
            ) from None
        if isinstance(found, Unsupported):
            raise StepTypeError(op_message(cls.kind, name, None, found.reason))
        return found

    def get(self, node: Node | type[Node], default: Any = None) -> T | Unsupported | Any:
        """The raw entry of ``node``'s class (an :class:`Unsupported` included), or ``default``."""
        cls = node if isinstance(node, type) else type(node)
        return self._entries.get(cls, default)

    def missing(self, classes: Iterable[type[Node]]) -> list[type[Node]]:
        """The classes in ``classes`` without an entry."""
        return [c for c in classes if c not in self._entries]

    def __contains__(self, cls: object) -> bool:
        return cls in self._entries

    def __repr__(self) -> str:
        return f"NodeRegistry({self.reader!r}, {len(self._entries)} entries)"


def node_classes() -> list[type[Node]]:
    """Every concrete operator class: the :class:`Node` subclasses with their own ``kind``
    (abstract helpers such as the private reduction base share their parent's)."""
    from . import ops  # noqa: F401 - defines the classes

    out, todo = [], list(Node.__subclasses__())
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if "kind" in vars(cls) and not cls.__name__.startswith("_"):
            out.append(cls)
    return sorted(set(out), key=lambda c: c.kind)
