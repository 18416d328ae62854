"""`make rtl`: Verilog and a JSON description for every example at its hardware size.

Writes ``build/rtl/<example>.v`` and ``build/rtl/<example>.json`` (ports, parameters, memory
map). An example whose graph still uses an operator without hardware is reported, with the
nodes in question, and skipped; the command fails only if nothing could be written.
"""

from __future__ import annotations

import pathlib
import sys
import time

from step_lang.errors import StepTypeError

from .config import HwConfig
from .elaborate import write

__all__ = ["EXAMPLES", "main"]


def _swiglu():
    from examples import swiglu

    return swiglu.hardware()


EXAMPLES = {"swiglu": _swiglu}


def main(argv: list[str] | None = None) -> int:
    out = pathlib.Path("build/rtl")
    out.mkdir(parents=True, exist_ok=True)
    written = 0
    for name, make in EXAMPLES.items():
        t0 = time.perf_counter()
        try:
            write(make(), str(out / name), HwConfig())
        except StepTypeError as exc:
            print(f"{name}: skipped: {exc}")
            continue
        written += 1
        print(f"{name}: {out / name}.v, {out / name}.json ({time.perf_counter() - t0:.1f} s)")
    print("moe, attention: not yet elaborated (their graphs need operators without hardware: "
          "selector conversion, dynamic tiles); see docs/hardware.md")  # fmt: skip
    return 0 if written else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
