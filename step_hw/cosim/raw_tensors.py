"""How tensors cross between the harness and the simulator process (the axi tier's ``.npz``
files, the fast tier's memory image): integers as themselves, floating point as its bit
patterns (``npz`` files do not keep ``bfloat16``).

Harness side only: :func:`raw_dtype` reads the language's dtypes. The cocotb benches take the
raw dtype of each tensor from the run's description (``memory_map[name]["raw_dtype"]``, written
by :func:`step_hw.cosim.run`), so a simulator process does not import the language.
"""

from __future__ import annotations

import numpy as np

__all__ = ["bit_patterns", "raw_dtype"]


def raw_dtype(name: str) -> np.dtype:
    """The little-endian numpy dtype a tensor of step_lang dtype ``name`` crosses the process
    boundary in: floating-point tensors as their bit patterns (``uint16``/``uint32``),
    integers as themselves."""
    from step_lang.types import dtype

    dt = dtype(name)
    if dt.is_float:
        return np.dtype(f"<u{dt.nbytes}")
    return dt.numpy.newbyteorder("<")


def bit_patterns(array: np.ndarray) -> np.ndarray:
    """A floating-point array as its bit patterns (unsigned integers of its width); any other
    array unchanged."""
    if array.dtype.kind == "f" or array.dtype.name == "bfloat16":
        return array.view(f"uint{array.dtype.itemsize * 8}")
    return array
