"""`make rtl`: Verilog and a JSON description for every example at its hardware size.

Attention is written with its ``"interleaved"`` schedule (``examples.attention.hardware()``); the
other schedules elaborate the same way (``step_hw.elaborate.write(attention.hardware(s), ...)``).
Every example is written twice: in int16 fixed point (``HwConfig()``) and, as ``<name>_bf16``,
on BF16 tiles with FP32 accumulation (``config.BF16_CONFIG``).

Writes ``build/rtl/<example>.v`` and ``build/rtl/<example>.json`` (ports, parameters, memory
map). An example whose graph still uses an operator without hardware is reported, with the
nodes in question, and skipped; the command fails only if nothing could be written.
"""

from __future__ import annotations

import pathlib
import sys
import time
from collections.abc import Callable
from typing import Any

from step_lang.errors import StepTypeError

from .config import BF16_CONFIG, HwConfig, config_for
from .elaborate import write

__all__ = ["EXAMPLES", "example_config", "main"]


def _swiglu(hw: HwConfig | None = None):
    from examples import swiglu

    return swiglu.hardware(hw=hw)


def _moe(hw: HwConfig | None = None):
    from examples import moe

    return moe.hardware(hw=hw)


def _moe_dynamic(hw: HwConfig | None = None):
    from examples import moe

    return moe.hardware(schedule=moe.MoESchedule("dynamic"), hw=hw)


def _moe_timemux(hw: HwConfig | None = None):
    from examples import moe

    return moe.hardware(schedule=moe.MoESchedule("static", tile_n=4, tile_f=4, regions=2), hw=hw)


def _attention(hw: HwConfig | None = None):
    from examples import attention

    return attention.hardware("interleaved", hw=hw)


def _bf16(make: Callable[..., Any]) -> Callable[[], Any]:
    """The example built with the BF16 hardware's functions (``BF16_CONFIG``)."""

    def build() -> Any:
        return make(hw=BF16_CONFIG)

    return build


EXAMPLES = {
    "swiglu": _swiglu,
    "moe": _moe,
    # The MoE layer's dynamic-tiling and time-multiplexed (2 regions) schedules.
    "moe_dynamic": _moe_dynamic,
    "moe_timemux": _moe_timemux,
    "attention": _attention,
    # The same graphs on BF16 tiles with FP32 accumulation (step_lang.float_numerics).
    "swiglu_bf16": _bf16(_swiglu),
    "moe_bf16": _bf16(_moe),
    "moe_dynamic_bf16": _bf16(_moe_dynamic),
    "moe_timemux_bf16": _bf16(_moe_timemux),
    "attention_bf16": _bf16(_attention),
}


def example_config(graph: Any) -> HwConfig:
    """The configuration an example's graph is written for: ``HwConfig()``, or
    ``BF16_CONFIG`` for the ``*_bf16`` examples (``config.config_for``)."""
    return config_for(graph)


def main(argv: list[str] | None = None, out: str = "build/rtl") -> int:
    out = pathlib.Path(out)
    written = 0
    names = argv or list(EXAMPLES)
    unknown = [n for n in names if n not in EXAMPLES]
    if unknown:  # before the folder is made: a refused command leaves nothing behind
        raise ValueError(
            f"no hardware-size variant of {', '.join(unknown)}; available: {', '.join(EXAMPLES)}"
        )
    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        make = EXAMPLES[name]
        t0 = time.perf_counter()
        try:
            graph = make()
            write(graph, str(out / name), example_config(graph))
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
