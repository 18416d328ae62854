"""One's own graph on the command line: ``path/to/file.py:function`` wherever an example goes.

The function takes no arguments and returns a :class:`~step_lang.Graph`, or a tuple
``(graph, memory)`` or ``(graph, memory, inputs)``: ``memory`` the off-chip tensors by name
(numpy arrays), ``inputs`` the tokens of its Source nodes (as for ``interpret``). The file is
imported as a module of its own, with its folder first on ``sys.path`` (so it may import its
neighbours). A bad path, a missing function, a function that takes arguments, raises (its
exception named with the line of the file it came from) or returns no graph is a ``ValueError``
(the command's ``UsageError``: ``step: error: ...``, exit status 2).
"""

from __future__ import annotations

import importlib.util
import inspect
import pathlib
import sys
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from step_lang import Graph
from step_lang.errors import StepError

__all__ = ["UserGraph", "is_graph_file", "load_graph_file"]


@dataclass(frozen=True)
class UserGraph:
    """What a ``file.py:function`` target gave: the graph, its memory and Source inputs."""

    target: str
    graph: Graph
    memory: dict[str, Any]
    inputs: dict[str, Any] | None


def is_graph_file(target: str) -> bool:
    """Whether ``target`` names a function in a Python file (``path/to/file.py:function``)."""
    path, sep, _ = target.rpartition(":")
    return bool(sep) and path.endswith(".py")


def load_graph_file(target: str, error: type[ValueError] = ValueError) -> UserGraph:
    """Import the file of ``target`` and call its function; see the module docstring."""
    path_text, _, fn = target.rpartition(":")
    path = pathlib.Path(path_text)
    if not fn.isidentifier():
        raise error(f"{target}: {fn!r} is not a function name (expected path/to/file.py:function)")
    if not path.is_file():
        raise error(f"graph file {path_text} does not exist (in {pathlib.Path.cwd()})")
    module_name = f"_step_user_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise error(f"graph file {path_text} cannot be imported as Python")
    module = importlib.util.module_from_spec(spec)
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise error(
            f"graph file {path_text} failed to import: {type(exc).__name__}: {exc}"
        ) from exc
    finally:
        if sys.path and sys.path[0] == folder:
            sys.path.pop(0)
    func = getattr(module, fn, None)
    if func is None:
        defined = sorted(
            n for n, v in vars(module).items() if callable(v) and not n.startswith("_")
            and getattr(v, "__module__", None) == module_name
        )  # fmt: skip
        hint = f"; it defines {', '.join(defined)}" if defined else ""
        raise error(f"graph file {path_text} has no function {fn!r}{hint}")
    if not callable(func):
        raise error(f"{target}: {fn!r} is {_describe(func)}, not a function")
    try:
        required = [
            name for name, p in inspect.signature(func).parameters.items()
            if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]  # fmt: skip
    except (TypeError, ValueError):  # no signature to read (a builtin): call it as it is
        required = []
    if required:
        raise error(
            f"{target} takes arguments ({', '.join(required)}); the command calls a function "
            "of none"
        )
    try:
        got = func()
    except SystemExit as exc:  # sys.exit() in the file would end the command without a word
        raise error(f"{target} called sys.exit({exc.code!r}){_where(exc, path)}") from None
    except (StepError, ValueError, OSError):
        raise  # the command prints these as one line, as for an example
    except Exception as exc:
        raise error(f"{target} raised {type(exc).__name__}: {exc}{_where(exc, path)}") from exc
    parts = got if isinstance(got, tuple) else (got,)
    if not parts or not isinstance(parts[0], Graph) or len(parts) > 3:
        raise error(
            f"{target} returned {_describe(got)}, not a Graph or a tuple (Graph, memory) or "
            "(Graph, memory, inputs)"
        )
    memory = parts[1] if len(parts) > 1 and parts[1] is not None else {}
    inputs = parts[2] if len(parts) > 2 else None
    if not isinstance(memory, Mapping):
        raise error(f"{target}: memory must map tensor names to arrays, not {_describe(memory)}")
    if inputs is not None and not isinstance(inputs, Mapping):
        raise error(f"{target}: inputs must map Source names to tokens, not {_describe(inputs)}")
    # checked here, for every command (metrics and graph too, which read no memory)
    from step_lang.interpret import check_inputs, check_memory

    try:
        check_memory(parts[0], memory)
        check_inputs(parts[0], inputs)
    except StepError as exc:
        raise error(f"{target}: {exc}") from None
    return UserGraph(target, parts[0], dict(memory), dict(inputs) if inputs is not None else None)


def _where(exc: BaseException, path: pathlib.Path) -> str:
    """`` (at file.py line N)``: the last line of the graph file in ``exc``'s traceback."""
    here = path.resolve()
    lines = [
        frame.lineno for frame in traceback.extract_tb(exc.__traceback__)
        if pathlib.Path(frame.filename).resolve() == here
    ]  # fmt: skip
    return f" (at {path.name} line {lines[-1]})" if lines else ""


def _describe(value: Any) -> str:
    if isinstance(value, tuple):
        return f"a tuple of {len(value)} ({', '.join(type(v).__name__ for v in value)})"
    if value is None:
        return "None"
    name = type(value).__name__
    return f"{'an' if name[0] in 'aeiouAEIOU' else 'a'} {name}"
