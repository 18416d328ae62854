"""Merge identical modules of an RTLIL design, so that Yosys synthesises each distinct one once
and the Verilog holds each distinct one once.

Amaranth writes one RTLIL module per instance (``top.silu0``, ``top.silu1``, ...), so a whole
example holds many copies of the same hardware: the dynamic BF16 MoE has 461 modules, 154 of
them distinct.

Verilog conversions (``step_hw.verilog_backend.convert(merge_modules=True)``, which
``step_hw.elaborate`` uses) write the merged design: an instance keeps its name and is an
instance of its module's representative, so code that looks inside an instance finds its module
by the instantiation (``step_hw.verilog_modules``). The dynamic BF16 MoE's Verilog falls from
5.6 MB (465 modules) to 2.9 MB (158), and its Verilator build at ``-O0`` from 83 s to 68 s
(Verilator 28.4 s to 20.6 s, compiling 54.3 s to 47.7 s); the int16 MoE's from 4.7 MB to 2.2 MB
and 37 to 32 s (2026-12-07, an idle machine).

In the area report (``bench/hw_area.py``) Yosys's ``synth`` without ``-flatten`` optimises each
module on its own, and ABC maps each module separately, so synthesising one copy and counting it
once per instance (``stat -top top``) gives the same total, up to ABC's sensitivity to the order
of its input (Yosys's internal names differ between the runs): measured on the nine examples that synthesise
both ways, eight totals equal and the BF16 attention's 346,219 against 346,217 cells. Yosys's
time falls with the copies: 4.6 times on the BF16 MoE (656 s to 144 s), 1.04 times on the int16
SwiGLU (69.8 s to 67.4 s).

Two modules are identical when their attributes and bodies are the same text once the modules
they instantiate are named by their representatives; the merge runs to a fixed point, so a
parent merges once its children have. A module's representative is the first of its kind in
the file, which keeps ``top`` (always the only one of its kind) under its own name.
"""

from __future__ import annotations

import re

__all__ = ["merge_identical_modules"]

_MODULE = re.compile(r"^((?:attribute [^\n]*\n)*)module (\S+)\n(.*?)^end\n", re.S | re.M)
_CELL = re.compile(r"^(\s*cell )(\S+)( \S+)$", re.M)


def merge_identical_modules(text: str) -> tuple[str, int, int]:
    """``text`` with every module replaced by the first module identical to it (cells naming the
    merged modules renamed to match), the number of modules before and the number after.

    Raises ValueError on text that is not a sequence of RTLIL modules (anything between them
    other than blank lines would be lost)."""
    modules: dict[str, tuple[str, str]] = {}
    end = 0
    for match in _MODULE.finditer(text):
        if text[end : match.start()].strip():
            raise ValueError(f"RTLIL text before module {match[2]} is not a module")
        modules[match[2]] = (match[1], match[3])
        end = match.end()
    if text[end:].strip():
        raise ValueError("RTLIL text after the last module is not a module")

    def renamed(body: str, rep: dict[str, str]) -> str:
        return _CELL.sub(lambda m: m[1] + rep.get(m[2], m[2]) + m[3], body)

    rep = {name: name for name in modules}
    while True:
        first: dict[tuple[str, str], str] = {}
        merged = {
            name: first.setdefault((attrs, renamed(body, rep)), name)
            for name, (attrs, body) in modules.items()
        }
        if merged == rep:
            break
        rep = merged
    kept = [
        f"{attrs}module {name}\n{renamed(body, rep)}end\n"
        for name, (attrs, body) in modules.items()
        if rep[name] == name
    ]
    return "\n".join(kept), len(modules), len(kept)
