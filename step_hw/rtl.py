"""`make rtl`: Verilog and a JSON description for every example at its hardware size.

Attention is written with its ``"interleaved"`` schedule (``examples.attention.hardware()``); the
other schedules elaborate the same way (``step_hw.elaborate.write(attention.hardware(s), ...)``).

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


def _moe():
    from examples import moe

    return moe.hardware()


def _moe_dynamic():
    from examples import moe

    return moe.hardware(schedule=moe.MoESchedule("dynamic"))


def _moe_timemux():
    from examples import moe

    return moe.hardware(schedule=moe.MoESchedule("static", tile_n=4, tile_f=4, regions=2))


def _attention():
    from examples import attention

    return attention.hardware("interleaved")


EXAMPLES = {
    "swiglu": _swiglu,
    "moe": _moe,
    # The MoE layer's dynamic-tiling and time-multiplexed (2 regions) schedules.
    "moe_dynamic": _moe_dynamic,
    "moe_timemux": _moe_timemux,
    "attention": _attention,
}


def main(argv: list[str] | None = None, out: str = "build/rtl") -> int:
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = 0
    names = argv or list(EXAMPLES)
    unknown = [n for n in names if n not in EXAMPLES]
    if unknown:
        raise ValueError(
            f"no hardware-size variant of {', '.join(unknown)}; available: {', '.join(EXAMPLES)}"
        )
    for name in names:
        make = EXAMPLES[name]
        t0 = time.perf_counter()
        try:
            write(make(), str(out / name), HwConfig())
        except StepTypeError as exc:
            print(f"{name}: skipped: {exc}")
            continue
        written += 1
        print(f"{name}: {out / name}.v, {out / name}.json ({time.perf_counter() - t0:.1f} s)")
    return 0 if written else 1


def _cli(argv: list[str] | None = None) -> int:
    """``python -m step_hw.rtl [-o DIR] [EXAMPLE ...]``: parse the arguments, then :func:`main`."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m step_hw.rtl",
        description="Write Verilog and a JSON description of the examples at hardware size.",
    )
    parser.add_argument(
        "examples",
        nargs="*",
        metavar="EXAMPLE",
        help=f"examples to write (default: all): {', '.join(EXAMPLES)}",
    )
    parser.add_argument(
        "-o", "--output", default="build/rtl", help="output folder (default build/rtl)"
    )
    args = parser.parse_args(argv)
    unknown = [n for n in args.examples if n not in EXAMPLES]
    if unknown:
        parser.error(f"no hardware-size example {', '.join(map(repr, unknown))}; "
                     f"available: {', '.join(EXAMPLES)}")  # fmt: skip
    return main(args.examples, out=args.output)


if __name__ == "__main__":
    sys.exit(_cli())
