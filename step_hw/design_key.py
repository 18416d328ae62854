"""A key for the hardware a graph elaborates to, computed without elaborating it.

Co-simulation caches a Verilator build per design. Converting a graph to Verilog only to hash the
text costs 2 to 70 s per run; :func:`design_key` instead hashes what determines the Verilog: the
lowered graph (every node's class, name, ports, types and parameters, the queue depths but the
run-time ones (``HwConfig.queue_capacity``), the tensors), the :class:`~step_hw.config.HwConfig`,
the top module's name, and the code of ``step_lang`` and ``step_hw`` without docstrings
(:func:`source_digest`: any change to the generator's code invalidates every key, a change to
its documentation none). A graph with an operator defined outside those packages (registered by
the user, ``docs/architecture.md``) has no key: its hardware block is code the key does not hash.

A key must never be shared by two different designs, and must be the same in every process:
functions are described by their code (bytecode, the names it looks up, its constants, nested
code objects by their own digest) and the values they close over, dataclasses (the functions of
``step_lang.functions`` and ``numerics``) field by field, arrays by their bytes; a value that
cannot be described stably (an object whose ``repr`` shows a memory address or is elided) makes
the graph uncacheable: :func:`design_key` returns ``None`` and the caller falls back to hashing
the Verilog text. Pure Python, no Amaranth.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
import re
import sys
import types
from dataclasses import asdict
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from step_lang.graph import Graph, Node, OffChipTensor, Stream
from step_lang.passes import lower

from .config import HwConfig
from .paths import build_folder, write_atomically
from .run_time_depths import built_in_depths

__all__ = ["code_memo", "design_key", "source_digest", "source_version"]

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
#: packages whose source :func:`source_version` hashes
_LIBRARY = ("step_lang.", "step_hw.")


class _Uncacheable(Exception):
    pass


@cache
def source_version() -> str:
    """:func:`source_digest` of ``step_lang`` and ``step_hw``, as this process first read them
    (the code it runs, not an edit made since), with the memo in ``build/``
    (:func:`code_memo`)."""
    root = Path(__file__).resolve().parent.parent
    return source_digest([root / "step_lang", root / "step_hw"], root, memo=code_memo())


def code_memo() -> Path:
    """The file that keeps each source file's code digest by the hash of its bytes
    (:func:`source_digest`'s ``memo``): ``build/code_digests.json``."""
    return build_folder("code_digests.json")


def source_digest(paths: list[Path], root: Path, *, memo: Path | None = None) -> str:
    """SHA-256 (16 hex digits) of the code of every ``.py`` file under ``paths`` (a folder, or
    one file), each with its path relative to ``root``.

    The code is the file's syntax tree without its docstrings: a change to a docstring, a comment
    or the layout keeps the digest, so the caches keyed on it (a design's RTL result, a
    simulator result, a conversion) outlive a documentation commit; any other change, a
    constant or a string that is not a docstring among them, gives a new digest. Parsing is
    the cost: 0.9 s for the 94 files of ``step_lang`` and ``step_hw`` on a busy 2-core machine,
    against 4 ms to hash their bytes. ``memo`` (a JSON file) keeps each file's code digest by
    the SHA-256 of its bytes and this Python's version (whose syntax trees it dumps): a file
    parsed once, by any process, is not parsed again until its bytes change. An unreadable memo
    counts as empty; the memo keeps the :data:`_MEMO_ENTRIES` newest entries."""
    known = _read_memo(memo)
    used: dict[str, str] = {}
    h = hashlib.sha256()
    for top in paths:
        for path in sorted(top.rglob("*.py")) if top.is_dir() else [top]:
            data = path.read_bytes()
            key = f"{sys.version_info[0]}.{sys.version_info[1]}:{hashlib.sha256(data).hexdigest()}"
            code = known.get(key) or used.get(key) or _code_of(data)
            used[key] = code
            h.update(f"\0{path.relative_to(root).as_posix()}\0{code}".encode())
    if memo is not None and not used.keys() <= known.keys():
        kept = [(k, v) for k, v in known.items() if k not in used]
        memo.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(memo, json.dumps(dict([*kept, *used.items()][-_MEMO_ENTRIES:])))
    return h.hexdigest()[:16]


#: how many file digests :func:`source_digest`'s memo keeps (the project has about 100 files)
_MEMO_ENTRIES = 2000


def _read_memo(memo: Path | None) -> dict[str, str]:
    if memo is None:
        return {}
    try:
        known = json.loads(memo.read_text())
    except (OSError, ValueError):
        return {}
    ok = isinstance(known, dict) and all(isinstance(v, str) for v in known.values())
    return known if ok else {}


def _code_of(source: bytes) -> str:
    """SHA-256 of a file's syntax tree without its docstrings."""
    tree = _without_docstrings(ast.parse(source))
    return hashlib.sha256(ast.dump(tree).encode()).hexdigest()


def _without_docstrings(tree: ast.Module) -> ast.Module:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            value = first.value if isinstance(first, ast.Expr) else None
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                node.body = node.body[1:] or [ast.Pass()]
    return tree


def _code_digest(code: types.CodeType) -> str:
    """SHA-256 of a function's bytecode, the names it looks up (``np.exp`` and ``np.log`` have
    the same bytecode) and its constants, nested code objects (a comprehension's) by their own
    digest: their ``repr`` shows an address, which would change the key in every process."""
    h = hashlib.sha256(code.co_code)
    h.update(repr(code.co_names).encode())
    for const in code.co_consts:
        text = _code_digest(const) if isinstance(const, types.CodeType) else repr(const)
        h.update(f"\0{text}".encode())
    return h.hexdigest()


def _describe(value: Any) -> Any:
    if isinstance(value, Stream):
        return f"stream:{value.name}"
    if isinstance(value, Node):
        return f"node:{value.name}"
    if isinstance(value, OffChipTensor):
        return f"tensor:{value.name}:{list(value.shape)}:{value.dtype.name}"
    if isinstance(value, np.ndarray):
        return (
            f"array:{value.dtype}:{list(value.shape)}:{hashlib.sha256(value.tobytes()).hexdigest()}"
        )
    if isinstance(value, (list, tuple)):
        return [_describe(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _describe(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        # every field, the callables a repr leaves out included (a function's behaviour)
        fields = {f.name: _describe(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return [f"{type(value).__module__}.{type(value).__qualname__}", fields]
    if isinstance(value, types.FunctionType):
        closure = [c.cell_contents for c in value.__closure__ or ()]
        digest = _code_digest(value.__code__)
        return [f"function:{value.__module__}.{value.__qualname__}:{digest}", _describe(closure)]
    text = repr(value)
    if _ADDRESS.search(text) or "..." in text:
        raise _Uncacheable(text)
    return f"{type(value).__module__}.{type(value).__qualname__}:{text}"


def design_key(graph: Graph, config: HwConfig, top: str) -> str | None:
    """The key (32 hex digits) of the design ``graph`` elaborates to under ``config`` with top
    module ``top``, or ``None`` if some node holds a value without a stable description."""
    low = lower(graph)
    nodes = []
    try:
        for node in low.nodes.values():
            if not type(node).__module__.startswith(_LIBRARY):
                # its hardware block is code outside the sources that the key hashes
                raise _Uncacheable(type(node).__qualname__)
            attrs = {k: v for k, v in vars(node).items() if k != "graph"}
            nodes.append([type(node).__module__, type(node).__qualname__, _describe(attrs)])
    except _Uncacheable:
        return None
    text = json.dumps(
        {
            "version": source_version(),
            "top": top,
            "config": asdict(config),
            "graph": low.name,
            "nodes": nodes,
            "tensors": [_describe(t) for t in low.tensors.values()],
            # every built-in queue by its depth, set or default (a graph's default and sized
            # depths run on one build: an explicit default, or the depth of a stream without a
            # queue, must not split its key); a run-time depth (HwConfig.queue_capacity) is
            # not in the hardware
            "queue_depths": sorted(built_in_depths(low, config).items()),
            "queue_scale": sorted(low.queue_scale.items()),
        },
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(text.encode()).hexdigest()[:32]
