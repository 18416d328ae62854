"""Helpers shared by the hardware-block tests."""

from __future__ import annotations

import numpy as np


def assert_same_tokens(got: list, want: list) -> None:
    """Tokens from a block equal the interpreter's: tiles by value (as int64; bool tiles as bool)."""
    assert len(got) == len(want), f"{len(got)} tokens, the interpreter wrote {len(want)}"
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        if isinstance(b, np.ndarray):
            assert isinstance(a, np.ndarray), f"token #{i}: {a!r}, want a tile"
            b = b if b.dtype == bool else b.astype(np.int64)
            assert a.shape == b.shape and np.array_equal(a, b), (
                f"token #{i}: {a.tolist()} {a.shape}, want {b.tolist()} {b.shape}"
            )
        else:
            assert a == b, f"token #{i}: {a!r}, want {b!r}"
