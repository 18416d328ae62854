"""Where generated files go: converted designs, Verilator builds (no Amaranth, cocotb or
Verilator import: the co-simulation harness finds its build folder when it is imported)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

__all__ = ["build_folder", "private_name", "write_atomically"]


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


def private_name(path: Path) -> Path:
    """A hidden sibling of ``path`` that no other process or thread uses: where to write before
    renaming into place (a name by process alone let two threads of one process rename each
    other's file away)."""
    return path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")


def write_atomically(path: Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` so that a reader sees the old file or the whole new one, never
    a part, whatever other processes and threads write it at the same time."""
    tmp = private_name(path)
    if isinstance(data, str):
        tmp.write_text(data)
    else:
        tmp.write_bytes(data)
    tmp.replace(path)
