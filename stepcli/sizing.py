"""``step size-queues``: queue sizing of the command line's examples.

Paper-size examples are sized in the simulator with their own timing profile, with stop and done
tokens taking a queue slot as they do in the generated hardware
(``PaperProfile(stops_take_slots=True)``). Hardware-size examples (:data:`HARDWARE`, the graphs
``make rtl`` writes) are sized with the simulator's ``rtl`` profile and the hardware's token
widths. Data-dependent examples are sized over several memory images (``images``: seeds
``seed``, ``seed + 1``, ...: different routings or KV lengths), and the depths checked on
``held_out`` more (the next seeds; an image they miss is sized on too,
:func:`sim.sizing.plan_queue_sizes`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from sim.checks import check_int, check_number
from sim.sizing import NUMBER_OPTIONS, SizingReport, plan_queue_sizes

from .registry import UsageError, example

__all__ = [
    "HARDWARE",
    "IMAGES",
    "SCHEDULES",
    "hardware_case",
    "image_counts",
    "one_image",
    "size_example",
    "size_for_hardware",
    "size_hardware",
]

# Memory images (seeds, routings, KV lengths) the queue-sizing report sizes every case over
# (bench/queue_sizing.py; rtl_tests/test_sizing_verilator.py co-simulates the same depths).
IMAGES = 3

# Every example and schedule the queue-sizing report covers (bench/queue_sizing.py).
SCHEDULES: dict[str, dict[str, dict[str, Any]]] = {
    "swiglu": {"mn_mk": {}},
    "moe": {
        "static": {"tiling": "static", "batch": 64},
        "dynamic": {"tiling": "dynamic", "batch": 64},
        "time-mux": {"tiling": "static", "batch": 64, "regions": 2},
        "static-small": {"model": "small", "tiling": "static", "batch": 16},
        "dynamic-small": {"model": "small", "tiling": "dynamic", "batch": 16},
    },
    "attention": {
        "interleaved": {"schedule": "interleaved", "batch": 16},
        "coarse": {"schedule": "coarse", "batch": 16},
        "dynamic": {"schedule": "dynamic", "batch": 16},
    },
}


def _check_images(images: Any, name: str = "images", low: int = 1) -> int:
    return check_int("", name, images, low, UsageError)


def _check_options(options: Mapping[str, Any]) -> None:
    """The number options queue sizing takes (``margin`` >= 1, 1: none; ``tolerance`` >= 0),
    by :data:`sim.sizing.NUMBER_OPTIONS`' rule: never clamped silently."""
    for key, low in NUMBER_OPTIONS.items():
        if key in options:
            check_number("", key, options[key], low, UsageError)


def one_image(
    name: str,
    images: int,
    held_out: int,
    why: str = "gives one memory image (no seed to draw more from)",
) -> None:
    """Refuse more than one memory image for ``name``, whose memory is given, not drawn from a
    seed (a graph file's function returns one), or whose seeds all give one timing image
    (``why`` says which)."""
    if images != 1 or held_out != 0:
        raise UsageError(
            f"{name} {why}: --images must be 1 and --held-out 0, not {images} and {held_out}"
        )


def _one_timing_image(
    what: str, name: str, params: Mapping[str, Any], images: int, held_out: int
) -> None:
    """Refuse several images of example ``name`` at ``params`` (or its defaults) where every
    seed gives the same timing image (:meth:`~stepcli.registry.Example.fixed_image`)."""
    ex = example(name)
    fixed = ex.fixed_image({**ex.defaults, **params})
    if fixed:
        one_image(what, images, held_out, f"gives one timing image ({fixed})")


def image_counts(
    name: str, given: Mapping[str, Any], images: int, held_out: int
) -> tuple[int, int]:
    """``(images, held_out)`` for sizing example ``name`` with parameters ``given`` (a bench's
    fixed counts), or ``(1, 0)`` where every seed gives the same timing image."""
    ex = example(name)
    return (1, 0) if ex.fixed_image(ex.params(dict(given))) else (images, held_out)


def size_example(
    name: str,
    given: Mapping[str, Any],
    *,
    images: int = 1,
    held_out: int = 0,
    hw_tile: tuple[int, int] | None = None,
    **options: Any,
) -> SizingReport:
    """Size example ``name`` (or a graph file, ``path/to/file.py:function``: its one memory
    image and Source inputs) with parameters ``given`` over ``images`` memory images, checked
    on ``held_out`` more; ``hw_tile`` first rewrites the graph onto hardware tiles of that size
    (``step_lang.hier_tiling.hier_tile``)."""
    _check_options(options)
    _check_images(images)
    _check_images(held_out, "held_out", 0)
    ex = example(name)
    params = ex.params(dict(given))
    _one_timing_image(f"example '{name}'", name, params, images, held_out)
    if "seed" in params:
        seeds = ex.one_graph(
            [{**params, "seed": params["seed"] + i} for i in range(images + held_out)]
        )
    else:
        one_image(name, images, held_out)
        seeds = [params]
    graph = ex.build(seeds[0])
    if hw_tile is not None:
        from .hardware import hw_tiled

        graph = hw_tiled(graph, hw_tile)
    memories, dims = [], {}
    for p in seeds:
        memories.append(ex.memory(p, False))
        for k, v in ex.dims(p).items():
            dims[k] = max(dims.get(k, 0), int(v))
    profile = dataclasses.replace(ex.profile(params), stops_take_slots=True)
    return plan_queue_sizes(graph, memories[:images], profile=profile, dims=dims,
                            inputs=ex.inputs, held_out=memories[images:], **options)  # fmt: skip


def size_for_hardware(
    graph: Any,
    memories: list[Any],
    config: Any,
    *,
    inputs: Mapping[str, Any] | None = None,
    held_out: list[Any] | None = None,
    memory_model: Any = None,
    **options: Any,
) -> SizingReport:
    """Size ``graph`` for the hardware ``config`` (a :class:`~step_hw.config.HwConfig`) with
    the simulator's ``rtl`` profile over ``memories``, checked on ``held_out`` more; on the
    fast tier's ``memory_model`` (a :class:`~step_hw.memory_model.MemoryModel`) if given, else
    on the axi tier's RAM."""
    from sim.profiles import RtlProfile
    from step_hw.memory_model import MemoryModel

    _check_options(options)
    profile = RtlProfile.for_memory(memory_model or MemoryModel.axi_ram(), config)
    return plan_queue_sizes(graph, memories, hw_config=config, profile=profile, inputs=inputs,
                            functional=True, held_out=held_out or [], **options)  # fmt: skip


# -- hardware size ---------------------------------------------------------------------------------


def _swiglu_hw(schedule: str, images: int):
    from examples import swiglu

    return swiglu.hardware(), [swiglu.inputs(swiglu.HW_CONFIG, seed=s) for s in range(images)]


def _moe_hw(schedule: str, images: int):
    from examples import moe, traces

    sched = {
        "static": moe.MoESchedule("static", tile_n=4, tile_f=4),
        "dynamic": moe.MoESchedule("dynamic"),
        "time-mux": moe.MoESchedule("static", tile_n=4, tile_f=4, regions=2),
    }[schedule]
    c = moe.HW
    skews = (1.5, 0.0, 4.0, 1.0)
    mems = [
        moe.inputs(c, traces.synthetic_routing(8, c.experts, c.top_k, skew=skews[s % 4], seed=s))
        for s in range(images)
    ]
    return moe.hardware(schedule=sched), mems


def _attention_hw(schedule: str, images: int):
    from examples import attention, traces

    c = attention.HW
    mems = [
        attention.hardware_inputs(
            traces.synthetic_kv_lengths(4, mean=6.0, sigma=0.8, low=0, high=c.max_len - 1, seed=s),
            seed=s,
        )
        for s in range(images)
    ]
    return attention.hardware(schedule), mems


# Hardware-size examples and schedules: (example, schedule) -> builder of (graph, memory images).
HARDWARE: dict[str, dict[str, Any]] = {
    "swiglu": {"mn_mk": _swiglu_hw},
    "moe": {"static": _moe_hw, "dynamic": _moe_hw, "time-mux": _moe_hw},
    "attention": {"interleaved": _attention_hw, "coarse": _attention_hw, "dynamic": _attention_hw},
}


def hardware_case(name: str, schedule: str | None = None, images: int = 1):
    """The hardware-size graph of ``name`` under ``schedule`` and ``images`` memory images."""
    if name not in HARDWARE:
        raise UsageError(f"no hardware-size example {name!r}; there are {', '.join(HARDWARE)}")
    schedules = HARDWARE[name]
    schedule = schedule or next(iter(schedules))
    if schedule not in schedules:
        raise UsageError(
            f"hardware-size {name} has no schedule {schedule!r}; it has {', '.join(schedules)}"
        )
    return schedules[schedule](schedule, _check_images(images))


def size_hardware(
    name: str,
    schedule: str | None = None,
    *,
    images: int = 1,
    held_out: int = 0,
    memory_model: Any = None,
    **options: Any,
) -> SizingReport:
    """Size the hardware-size graph of ``name`` with the ``rtl`` profile of ``HwConfig()`` (on
    ``memory_model``, as :func:`size_for_hardware`) over ``images`` memory images, checked on
    ``held_out`` more."""
    from step_hw.config import HwConfig

    _check_options(options)
    _check_images(images)
    _check_images(held_out, "held_out", 0)
    if name in HARDWARE:  # else hardware_case names the hardware-size examples
        _one_timing_image(f"hardware-size example '{name}'", name, {}, images, held_out)
    graph, memories = hardware_case(name, schedule, images + held_out)
    return size_for_hardware(graph, memories[:images], HwConfig(), held_out=memories[images:],
                             memory_model=memory_model, **options)  # fmt: skip
