"""The files and folders a command writes, checked when the command line is read, before any
work: a run of many minutes must not end in an error about where its results go, and an
output is never written somewhere other than the path given.

A file path (``--json FILE``, ``--trace FILE``, ``-o FILE.csv``, ...) must be non-empty, name a
file (not end in ``/``, not be an existing folder) and lie in a folder that exists or can be
made and can be written; a folder path (``-o DIR``) likewise. Nothing is created here: the
commands make their folders when they write.
"""

from __future__ import annotations

import os
import pathlib

from step_lang.dims import IDENTIFIER

from .registry import UsageError

__all__ = ["output_file", "output_folder", "verilog_stem"]


def _writable(folder: pathlib.Path, where: str) -> None:
    """``folder`` exists and can be written in, or can be made: its nearest existing ancestor
    is a folder one can write in."""
    here = folder
    while not here.exists():
        if here.parent == here:
            break
        here = here.parent
    if not here.is_dir():
        raise UsageError(f"{where}: {here} is a file, not a folder")
    if not os.access(here, os.W_OK | os.X_OK):
        raise UsageError(f"{where}: cannot write in {here}")


def output_file(text: str, option: str, suffix: str | None = None) -> pathlib.Path:
    """The file ``text`` (given as ``option``), checked as the module docstring says; with
    ``suffix``, its name must end in it."""
    where = f"{option} {text!r}"
    if not text.strip():
        raise UsageError(f"{option}: an empty path names no file")
    if text.endswith(("/", os.sep)):
        raise UsageError(f"{where} names a folder; give a file name")
    path = pathlib.Path(text)
    if suffix is not None and path.suffix != suffix:
        raise UsageError(f"{where} must name a {suffix} file")
    if path.is_dir():
        raise UsageError(f"{where} is a folder; give a file name")
    _writable(path.parent, where)
    return path


def output_folder(text: str, option: str) -> pathlib.Path:
    """The folder ``text`` (given as ``option``), checked as the module docstring says."""
    if not text.strip():
        raise UsageError(f"{option}: an empty path names no folder")
    path = pathlib.Path(text)
    if path.exists() and not path.is_dir():
        raise UsageError(f"{option} {text!r} is a file, not a folder")
    _writable(path, f"{option} {text!r}")
    return path


def verilog_stem(text: str, option: str) -> pathlib.Path:
    """``STEM`` of ``STEM.v`` and ``STEM.json``: a file path whose name is the Verilog module's
    (letters, digits and ``_``, not starting with a digit; ``sized.v2`` would write
    ``sized.v2.v`` for a module that Verilog must escape)."""
    path = output_file(text, option)
    if not IDENTIFIER.match(path.name):  # the module's name, as a graph's (step_lang.graph)
        raise UsageError(
            f"{option} {text!r}: the file name {path.name!r} names the Verilog module; use "
            "letters, digits and _ (not a digit first)"
        )
    for suffix in (".v", ".json"):
        output_file(f"{text}{suffix}", option)
    return path
