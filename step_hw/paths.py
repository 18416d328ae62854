"""Where generated files go: converted designs, Verilator builds (no Amaranth, cocotb or
Verilator import: the co-simulation harness finds its build folder when it is imported)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

__all__ = ["abandoned_private_names", "build_folder", "private_name", "write_atomically"]


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


def abandoned_private_names(path: Path) -> list[Path]:
    """The :func:`private_name` siblings of ``path`` whose process is gone (killed or interrupted
    before it renamed its file into place): safe to remove. A name whose process still runs,
    or whose number another process has taken since, is kept."""
    head = f".{path.name}."
    found = []
    for sibling in path.parent.glob(f"{head}*") if path.parent.is_dir() else []:
        pid, _, thread = sibling.name[len(head) :].partition(".")
        if not (pid.isdigit() and thread.isdigit()):
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            found.append(sibling)
        except PermissionError:
            pass  # another user's process: alive
    return found


def write_atomically(path: Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` so that a reader sees the old file or the whole new one, never
    a part, whatever other processes and threads write it at the same time."""
    tmp = private_name(path)
    if isinstance(data, str):
        tmp.write_text(data)
    else:
        tmp.write_bytes(data)
    tmp.replace(path)
