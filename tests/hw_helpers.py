"""Helpers shared by the hardware-block tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def assert_same_tokens(got: list, want: list) -> None:
    """Tokens from a block equal the interpreter's: tiles by value (as int64; bool tiles as bool),
    a Zip's pairs item by item."""
    assert len(got) == len(want), f"{len(got)} tokens, the interpreter wrote {len(want)}"
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        if isinstance(b, tuple):  # a Zip's pair, item by item
            assert isinstance(a, tuple), f"token #{i}: {a!r}, want a tuple"
            assert_same_tokens(list(a), list(b))
        elif isinstance(b, np.ndarray):
            assert isinstance(a, np.ndarray), f"token #{i}: {a!r}, want a tile"
            if _is_float(b):  # bit patterns (NaN payloads, signed zeros)
                assert a.dtype == b.dtype, f"token #{i}: dtype {a.dtype}, want {b.dtype}"
                a, b = _bits(a), _bits(b)
            b = b if b.dtype == bool else b.astype(np.int64)
            assert a.shape == b.shape and np.array_equal(a, b), (
                f"token #{i}: {a.tolist()} {a.shape}, want {b.tolist()} {b.shape}"
            )
        else:
            assert a == b, f"token #{i}: {a!r}, want {b!r}"


def _is_float(x: np.ndarray) -> bool:
    return x.dtype.kind == "f" or x.dtype.name == "bfloat16"


def _bits(x: np.ndarray) -> np.ndarray:
    return x.view(f"uint{x.dtype.itemsize * 8}").astype(np.int64)


def built_not_elaborated(graph, config):
    """``ElaboratedGraph(graph, config)``, built to see that every node has a hardware block and
    never elaborated: Amaranth's UnusedElaboratable (an error under pytest) is silenced for the
    top level, its blocks and its arbiters."""
    from step_hw.elaborate import ElaboratedGraph

    top = ElaboratedGraph(graph, config)
    for block in [top, *top.blocks.values(), *top._arbiters.values()]:
        block._MustUse__silence = True
    return top


def run_unit(graph, node, inputs: list[list], config, pattern: str, seed: int = 0):
    """The compute unit of ``node`` (the one node between ``graph``'s Sources ``x0``, ``x1``, ...
    and a Sink) run on ``inputs`` (a token list per Source) under ``pattern``, and the
    interpreter's tokens of the same graph: ``(run, want, unit)``."""
    from step_hw.compute import compute_unit
    from step_hw.testing import run_block
    from step_lang import interpret

    want = interpret(graph, inputs={f"x{i}": t for i, t in enumerate(inputs)}).tokens(node.out)
    unit = compute_unit(node, config)
    ports = zip(unit.in_ports, unit.in_formats, inputs, strict=True)
    run = run_block(
        unit,
        {f"in{i}": (p, f, toks) for i, (p, f, toks) in enumerate(ports)},
        {"out": (unit.out, unit.out_format)},
        pattern=pattern,
        seed=seed,
    )
    return run, want, unit


def run_script(script: str, *args: str) -> list[str]:
    """The words ``script`` prints, run in a fresh Python process from the project root with
    ``args`` (for Amaranth patches, which a process installs once: one run with, one without)."""
    out = subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=ROOT, capture_output=True, text=True, check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    return out.stdout.split()
