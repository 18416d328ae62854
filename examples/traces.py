"""Trace input for the examples: loaders for recorded traces and synthetic generators.

Recorded traces keep the layout of the paper's artifact (read them from wherever they live, e.g.
``../shared/traces``; the project does not ship them):

* expert routing: ``expert_routing/<model>_b<B>/<iter>_<layer>.npz`` with one int array ``data``
  of shape ``[B, top_k]`` (selected expert ids, no duplicates in a row);
* KV-cache lengths: ``kv_lengths/b<B>/conv_stdev<SSSS>_<start>_<end>.npy``, a 1-D int array.

The synthetic generators are the defaults; they are seeded and so repeat exactly.
"""

from __future__ import annotations

import pathlib
import re

import numpy as np

__all__ = [
    "TraceError",
    "kv_length_files",
    "load_kv_lengths",
    "load_routing",
    "routing_files",
    "synthetic_kv_lengths",
    "synthetic_routing",
]


class TraceError(ValueError):
    """A trace file is missing, unreadable or malformed."""


def load_routing(path: str | pathlib.Path, num_experts: int | None = None) -> np.ndarray:
    """Load a routing trace (``.npz`` with ``data`` of shape ``[B, top_k]``) and check it."""
    path = pathlib.Path(path)
    try:
        with np.load(path) as f:
            if "data" not in f.files:
                raise TraceError(f"routing trace {path}: no array 'data' (has {f.files})")
            data = np.asarray(f["data"])
    except (OSError, ValueError) as exc:
        if isinstance(exc, TraceError):
            raise
        raise TraceError(f"routing trace {path}: cannot read ({exc})") from exc
    if data.ndim != 2 or not np.issubdtype(data.dtype, np.integer):
        raise TraceError(
            f"routing trace {path}: expected an integer [B, top_k] array, got {data.dtype} {data.shape}"
        )
    if (data < 0).any() or (num_experts is not None and (data >= num_experts).any()):
        raise TraceError(f"routing trace {path}: expert ids outside [0, {num_experts})")
    for row, ids in enumerate(data):
        if len(set(ids.tolist())) != len(ids):
            raise TraceError(
                f"routing trace {path}: token {row} selects expert(s) twice: {ids.tolist()}"
            )
    return data.astype(np.int64)


def load_kv_lengths(path: str | pathlib.Path) -> np.ndarray:
    """Load a KV-length trace (``.npy``, 1-D non-negative ints)."""
    path = pathlib.Path(path)
    try:
        data = np.load(path)
    except (OSError, ValueError) as exc:
        raise TraceError(f"KV-length trace {path}: cannot read ({exc})") from exc
    if data.ndim != 1 or not np.issubdtype(data.dtype, np.integer) or (data < 0).any():
        raise TraceError(
            f"KV-length trace {path}: expected 1-D non-negative ints, got {data.dtype} {data.shape}"
        )
    return data.astype(np.int64)


def routing_files(root: str | pathlib.Path, model: str, batch: int) -> list[pathlib.Path]:
    """The routing traces of ``model`` (``mixtral``/``qwen``) at ``batch`` under ``root``."""
    d = pathlib.Path(root) / "expert_routing" / f"{model}_b{batch}"
    return sorted(d.glob("*.npz"))


_KV = re.compile(r"conv_stdev(\d+)_(\d+)_(\d+)\.npy$")


def kv_length_files(root: str | pathlib.Path, batch: int) -> list[tuple[int, pathlib.Path]]:
    """``(stdev, path)`` of the KV-length traces at ``batch`` under ``root``, by stdev."""
    d = pathlib.Path(root) / "kv_lengths" / f"b{batch}"
    out = []
    for p in sorted(d.glob("*.npy")):
        m = _KV.search(p.name)
        if m:
            out.append((int(m.group(1)), p))
    return sorted(out)


def synthetic_routing(
    batch: int, num_experts: int, top_k: int, *, skew: float = 1.0, seed: int = 0
) -> np.ndarray:
    """Routing choices with Zipf-like expert popularity (``skew = 0`` is uniform).

    Each token picks ``top_k`` distinct experts, weighted by ``1 / rank**skew`` over a random
    permutation of the experts.
    """
    if not 1 <= top_k <= num_experts:
        raise ValueError(f"top_k must be in [1, {num_experts}], not {top_k}")
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, num_experts + 1) ** skew
    weights = weights[rng.permutation(num_experts)]
    weights /= weights.sum()
    return np.stack(
        [rng.choice(num_experts, size=top_k, replace=False, p=weights) for _ in range(batch)]
    )


def synthetic_kv_lengths(
    batch: int,
    *,
    mean: float = 1000.0,
    sigma: float = 0.8,
    low: int = 2,
    high: int = 8000,
    seed: int = 0,
) -> np.ndarray:
    """Log-normal KV-cache lengths with median ``mean`` and log-spread ``sigma``, clipped to ``[low, high]``."""
    rng = np.random.default_rng(seed)
    x = rng.lognormal(np.log(mean), sigma, size=batch)
    return np.clip(np.rint(x), low, high).astype(np.int64)


def routing_weights(choices: np.ndarray, *, seed: int = 0) -> np.ndarray:
    """Softmax routing weights for ``choices`` ([B, top_k]), as the paper's scripts draw them."""
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal(choices.shape)
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
