"""Where generated files go: converted designs, Verilator builds (no Amaranth, cocotb or
Verilator import: the co-simulation harness finds its build folder when it is imported)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["build_folder"]


def build_folder(name: str, env: str | None = None) -> Path:
    """``build/<name>`` of the project when this package runs from its source tree, else of the
    current directory (an installed package has no project root); the environment variable
    ``env``, when set, wins."""
    if env and os.environ.get(env):
        return Path(os.environ[env]).resolve()
    root = Path(__file__).resolve().parents[1]
    if (root / "pyproject.toml").is_file() and (root / "step_hw" / "cosim").is_dir():
        return root / "build" / name
    return Path.cwd().resolve() / "build" / name
