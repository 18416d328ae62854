"""Trace input for the examples: loaders for recorded traces and synthetic generators.

Recorded traces keep the layout of the paper's artifact (read them from wherever they live, e.g.
``../shared/traces``; the project does not ship them):

* expert routing: ``expert_routing/<model>_b<B>/<iter>_<layer>.npz`` with one int array ``data``
  of shape ``[B, top_k]`` (selected expert ids, no duplicates in a row);
* KV-cache lengths: ``kv_lengths/b<B>/conv_stdev<SSSS>_<start>_<end>.npy``, a 1-D int array.

The synthetic generators are the defaults; they are seeded and so repeat exactly.
"""

from __future__ import annotations

import math
import os
import pathlib
import pickle
import re
import tokenize
import zipfile
from typing import Any

import numpy as np

from examples.checks import is_positive_int, number_in, positive_int  # absolute: as moe.py

__all__ = [
    "MAX_KV_LENGTH",
    "MAX_SKEW",
    "SYNTHETIC_KV_RANGE",
    "TraceError",
    "check_routing",
    "kv_length_files",
    "load_kv_lengths",
    "load_routing",
    "routing_files",
    "synthetic_kv_lengths",
    "synthetic_routing",
]


# The longest KV-cache length a trace may hold (tokens): a request of 1e9 would build a cache of
# that many tiles and run without bound. The recorded traces stay below 8000.
MAX_KV_LENGTH = 1 << 16

#: The synthetic KV lengths' range (tokens): each log-normal draw is rounded and clipped to it,
#: the recorded Azure traces' range (2 to 7,930). Part of the generator's definition.
SYNTHETIC_KV_RANGE = (2, 7900)

#: The largest ``|skew|`` of :func:`synthetic_routing`: ``rank**skew`` stays a normal float64
#: for up to 128 experts (at 150 it overflows and the weights are no longer a distribution).
MAX_SKEW = 100.0

# What numpy raises for a file that is not a (complete) .npy/.npz: a truncated zip is a
# BadZipFile, a truncated .npy an EOFError or ValueError, an object array an UnpicklingError,
# a damaged header (a Python literal) a SyntaxError or a tokenize.TokenError.
_UNREADABLE = (
    OSError,
    ValueError,
    EOFError,
    SyntaxError,
    tokenize.TokenError,
    zipfile.BadZipFile,
    pickle.UnpicklingError,
)


class TraceError(ValueError):
    """A trace file is missing, unreadable or malformed."""


_ZIP, _NPY = b"PK\x03\x04", b"\x93NUMPY"


def _magic(fh, what: str, magic: bytes, expected: str) -> None:
    """Refuse an empty file or one of another format before numpy guesses (e.g. as a pickle)."""
    head = fh.read(6)
    fh.seek(0)
    if not head:
        raise TraceError(f"{what}: cannot read (empty file, expected {expected})")
    if not head.startswith(magic):
        kinds = ((_ZIP, "an .npz archive"), (_NPY, "an .npy array"))
        got = next((k for m, k in kinds if head.startswith(m)), f"a file starting with {head!r}")
        raise TraceError(f"{what}: cannot read (expected {expected}, got {got})")


def _read_npy(fh, size: int, what: str) -> np.ndarray:
    """The array of the ``.npy`` data in ``fh`` (``size`` bytes from its current position),
    its header checked against ``size`` before anything is allocated: a damaged header that
    claims a shape of 10**11 elements is refused, not handed to numpy to allocate."""
    start = fh.tell()
    version = np.lib.format.read_magic(fh)
    read_header = (
        np.lib.format.read_array_header_1_0
        if version == (1, 0)
        else np.lib.format.read_array_header_2_0
    )
    shape, fortran, dtype = read_header(fh)
    if dtype.hasobject:
        raise TraceError(f"{what}: cannot read (an object array; traces hold integers)")
    need = math.prod(shape) * dtype.itemsize
    have = size - (fh.tell() - start)
    if need != have:
        raise TraceError(
            f"{what}: cannot read (its header says {dtype} {shape}, {need} bytes of data; "
            f"{have} follow it)"
        )
    data = np.frombuffer(fh.read(need), dtype)
    return data.reshape(shape, order="F" if fortran else "C").copy()


def _reason(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def load_routing(path: str | pathlib.Path, num_experts: int | None = None) -> np.ndarray:
    """Load a routing trace (``.npz`` with ``data`` of shape ``[B, top_k]``) and check it."""
    path = pathlib.Path(path)
    try:
        # Our own handle: np.load leaves its file open when a damaged archive fails to parse.
        with path.open("rb") as fh:
            _magic(fh, f"routing trace {path}", _ZIP, "an .npz archive")
            with zipfile.ZipFile(fh) as archive:
                names = archive.namelist()
                if "data.npy" not in names:
                    arrays = [n.removesuffix(".npy") for n in names]
                    raise TraceError(f"routing trace {path}: no array 'data' (has {arrays})")
                info = archive.getinfo("data.npy")
                with archive.open(info) as member:
                    data = _read_npy(member, info.file_size, f"routing trace {path}")
    except TraceError:
        raise
    except _UNREADABLE as exc:
        raise TraceError(f"routing trace {path}: cannot read ({_reason(exc)})") from None
    return check_routing(data, num_experts, what=f"routing trace {path}", error=TraceError)


def check_routing(
    choices: Any,
    num_experts: int | None,
    top_k: int | None = None,
    *,
    what: str = "choices",
    error: type[ValueError] = ValueError,
) -> np.ndarray:
    """``choices`` checked as routing choices, returned as int64: a non-empty integer
    ``[B, top_k]`` numpy array (``top_k`` columns when given) whose rows select distinct experts
    in ``[0, num_experts)`` (``None``: any non-negative id).

    Messages start with ``what`` (``"moe.inputs: choices"``, ``"routing trace <path>"``) and are
    raised as ``error`` (``ValueError`` or a subclass such as :class:`TraceError`); anything
    but a numpy array is a ``TypeError``. The one rule of a trace file (:func:`load_routing`)
    and of the choices the examples take (``examples.moe``, ``examples.decoder``).
    """
    if not isinstance(choices, np.ndarray):
        raise TypeError(
            f"{what} must be a numpy integer array [B, top_k], not {type(choices).__name__}"
        )
    if num_experts is not None and not is_positive_int(num_experts):
        raise ValueError(f"{what}: num_experts must be a positive integer, not {num_experts!r}")
    if choices.ndim != 2 or not np.issubdtype(choices.dtype, np.integer):
        raise error(
            f"{what}: expected an integer [B, top_k] array, got {choices.dtype} {choices.shape}"
        )
    tokens, k = choices.shape
    if tokens == 0 or k == 0:  # a layer has at least one token and top_k >= 1
        raise error(f"{what}: empty ({tokens} tokens x {k})")
    if top_k is not None and k != top_k:
        raise error(f"{what}: {k} experts per token, top_k is {top_k}")
    high = num_experts if num_experts is not None else np.iinfo(np.int64).max
    bad = np.argwhere((choices < 0) | (choices >= high))
    if bad.size:
        row, col = (int(v) for v in bad[0])
        raise error(
            f"{what}: token {row} selects expert {int(choices[row, col])}, "
            f"outside [0, {num_experts if num_experts is not None else 'inf'})"
        )
    ordered = np.sort(choices, axis=1)
    twice = np.flatnonzero((ordered[:, 1:] == ordered[:, :-1]).any(axis=1))
    if twice.size:
        row = int(twice[0])
        raise error(f"{what}: token {row} selects expert(s) twice: {choices[row].tolist()}")
    return choices.astype(np.int64)


def load_kv_lengths(path: str | pathlib.Path) -> np.ndarray:
    """Load a KV-length trace (``.npy``, 1-D non-negative ints)."""
    path = pathlib.Path(path)
    try:
        with path.open("rb") as fh:
            _magic(fh, f"KV-length trace {path}", _NPY, "an .npy array")
            data = _read_npy(fh, os.fstat(fh.fileno()).st_size, f"KV-length trace {path}")
    except TraceError:
        raise
    except _UNREADABLE as exc:
        raise TraceError(f"KV-length trace {path}: cannot read ({_reason(exc)})") from None
    if data.ndim != 1 or not np.issubdtype(data.dtype, np.integer):
        raise TraceError(
            f"KV-length trace {path}: expected 1-D non-negative ints, got {data.dtype} {data.shape}"
        )
    if data.size == 0:
        raise TraceError(f"KV-length trace {path}: empty (no requests)")
    if (data < 0).any():
        i = int(np.argmin(data))
        raise TraceError(
            f"KV-length trace {path}: length {int(data[i])} of request {i} is negative"
        )
    if data.max() > MAX_KV_LENGTH:
        i = int(np.argmax(data))
        raise TraceError(
            f"KV-length trace {path}: length {int(data[i])} of request {i} exceeds the limit "
            f"{MAX_KV_LENGTH}"
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
    batch = positive_int("synthetic_routing: batch", batch)
    num_experts = positive_int("synthetic_routing: num_experts", num_experts)
    if not is_positive_int(top_k) or top_k > num_experts:
        raise ValueError(f"synthetic_routing: top_k must be in [1, {num_experts}], not {top_k!r}")
    number_in("synthetic_routing: skew", skew, -MAX_SKEW, MAX_SKEW)
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, num_experts + 1, dtype=np.float64) ** skew
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
    low: int = SYNTHETIC_KV_RANGE[0],
    high: int = SYNTHETIC_KV_RANGE[1],
    seed: int = 0,
) -> np.ndarray:
    """Log-normal KV-cache lengths with median ``mean`` and log-spread ``sigma``, each draw
    rounded and clipped to ``[low, high]`` (by default :data:`SYNTHETIC_KV_RANGE`); ``mean``
    must lie in that range; ``sigma`` is a finite number of at least 0."""
    batch = positive_int("synthetic_kv_lengths: batch", batch)
    number_in("synthetic_kv_lengths: mean", mean, low, high)
    number_in("synthetic_kv_lengths: sigma", sigma, 0, math.inf)
    rng = np.random.default_rng(seed)
    x = rng.lognormal(np.log(mean), sigma, size=batch)
    return np.clip(np.rint(x), low, high).astype(np.int64)


def routing_weights(choices: np.ndarray, *, seed: int = 0) -> np.ndarray:
    """Softmax routing weights for ``choices`` ([B, top_k], :func:`check_routing`'s rule), as
    the paper's scripts draw them."""
    choices = check_routing(choices, None, what="routing_weights: choices")
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal(choices.shape)
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
