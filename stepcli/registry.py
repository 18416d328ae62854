"""The examples the command line knows, behind one interface.

An :class:`Example` turns string parameters (``-p key=value``) into a graph, the memory a
simulation needs, and the values of the graph's dynamic dims; :func:`run_point` simulates one
parameter set and returns a result row. Sweeps and the paper's experiments are made of these.
"""

from __future__ import annotations

import math
import pathlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from examples import attention, moe, swiglu, traces
from sim import PaperProfile, simulate
from step_lang import Graph, metrics

__all__ = ["EXAMPLES", "Example", "UsageError", "parse_params", "run_point"]


class UsageError(ValueError):
    """A command-line mistake: an unknown example or parameter, a bad value."""


def _value(text: str) -> Any:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def parse_params(pairs: list[str]) -> dict[str, Any]:
    """``["batch=64", "model=qwen"]`` to ``{"batch": 64, "model": "qwen"}``."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"parameter {pair!r} is not of the form key=value")
        out[key.strip()] = _value(value.strip())
    return out


@dataclass(frozen=True)
class Example:
    """One example workload: its parameters (with defaults) and how to build and feed it."""

    name: str
    defaults: Mapping[str, Any]
    help: str
    _build: Callable[[dict], Graph]
    _memory: Callable[[dict, bool], dict[str, np.ndarray]]
    _dims: Callable[[dict], dict[str, int]]
    _profile: Callable[[dict], PaperProfile] = lambda p: PaperProfile()

    def params(self, given: Mapping[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(given) - set(self.defaults))
        if unknown:
            raise UsageError(
                f"example '{self.name}' has no parameter {', '.join(unknown)}; it takes {', '.join(self.defaults)}"
            )
        return {**self.defaults, **given}

    def build(self, params: dict) -> Graph:
        return self._build(params)

    def memory(self, params: dict, functional: bool) -> dict[str, np.ndarray]:
        return self._memory(params, functional)

    def dims(self, params: dict) -> dict[str, int]:
        return self._dims(params)

    def profile(self, params: dict) -> PaperProfile:
        return self._profile(params)


# -- SwiGLU -------------------------------------------------------------------------------------


def _swiglu_config(p: dict) -> swiglu.SwiGLUConfig:
    return swiglu.SwiGLUConfig(batch=p["batch"], hidden=p["hidden"], intermediate=p["intermediate"])


SWIGLU = Example(
    "swiglu",
    {"batch": 64, "hidden": 256, "intermediate": 512, "tile_b": 16, "tile_i": 16, "seed": 0},
    "SwiGLU layer of the paper's HDL validation (schedule mn_mk)",
    lambda p: swiglu.build(_swiglu_config(p), p["tile_b"], p["tile_i"]),
    lambda p, functional: swiglu.inputs(_swiglu_config(p), seed=p["seed"]) if functional else {},
    lambda p: {},
    lambda p: PaperProfile.hdl_validation(),
)

# -- MoE ----------------------------------------------------------------------------------------

_MODELS = {"mixtral": moe.MIXTRAL, "qwen": moe.QWEN, "small": moe.SMALL}


def _moe_config(p: dict) -> moe.MoEConfig:
    if p["model"] not in _MODELS:
        raise UsageError(f"model must be one of {', '.join(_MODELS)}, not {p['model']!r}")
    return _MODELS[p["model"]]


def moe_choices(p: dict) -> np.ndarray:
    """Routing choices: a trace file (``trace=path.npz``) or the synthetic generator."""
    cfg = _moe_config(p)
    if p["trace"]:
        return traces.load_routing(pathlib.Path(p["trace"]), cfg.experts)[: p["batch"]]
    return traces.synthetic_routing(
        p["batch"], cfg.experts, cfg.top_k, skew=float(p["skew"]), seed=p["seed"]
    )


def _moe_schedule(p: dict) -> moe.MoESchedule:
    regions = p["regions"] or None
    return moe.MoESchedule(p["tiling"], tile_n=p["tile_n"], tile_f=p["tile_f"], regions=regions)


def _moe_memory(p: dict, functional: bool) -> dict[str, np.ndarray]:
    cfg, choices = _moe_config(p), moe_choices(p)
    if choices.shape[0] != p["batch"]:
        raise UsageError(f"the routing trace has {choices.shape[0]} tokens, batch is {p['batch']}")
    return (
        moe.inputs(cfg, choices, seed=p["seed"])
        if functional
        else moe.routing_tensors(cfg, choices)
    )


MOE = Example(
    "moe",
    {
        "model": "qwen",
        "batch": 64,
        "tiling": "static",
        "tile_n": 32,
        "tile_f": 64,
        "regions": 0,
        "trace": "",
        "skew": 1.0,
        "seed": 0,
        "compute_bw": 4096,
    },
    "MoE layer with SwiGLU experts: static/dynamic tiling, optional time-multiplexing (regions)",
    lambda p: moe.build(_moe_config(p), _moe_schedule(p), p["batch"]),
    _moe_memory,
    lambda p: moe.dim_values(moe_choices(p), _moe_config(p).experts),
    lambda p: PaperProfile(compute_bw_default=int(p["compute_bw"])),
)

# -- attention ----------------------------------------------------------------------------------

_ATTN = {"qwen": attention.QWEN, "small": attention.SMALL}


def kv_lengths(p: dict) -> np.ndarray:
    """KV lengths: a trace file (``trace=path.npy``) or log-normal synthetic ones."""
    if p["trace"]:
        lengths = traces.load_kv_lengths(pathlib.Path(p["trace"]))
        return np.resize(lengths, p["batch"]) if len(lengths) != p["batch"] else lengths
    return traces.synthetic_kv_lengths(
        p["batch"], mean=float(p["mean"]), sigma=float(p["sigma"]), high=7900, seed=p["seed"]
    )


def _attn_config(p: dict) -> attention.AttentionConfig:
    if p["config"] not in _ATTN:
        raise UsageError(f"config must be one of {', '.join(_ATTN)}, not {p['config']!r}")
    base = _ATTN[p["config"]]
    need = int(kv_lengths(p).max()) + 1
    max_len = max(base.max_len, math.ceil(need / base.kv_tile) * base.kv_tile)
    return attention.AttentionConfig(head_dim=base.head_dim, kv_tile=base.kv_tile, max_len=max_len)


ATTENTION = Example(
    "attention",
    {
        "config": "qwen",
        "batch": 64,
        "schedule": "dynamic",
        "regions": 4,
        "trace": "",
        "mean": 1000,
        "sigma": 0.8,
        "seed": 0,
    },
    "decode attention with a KV cache: interleaved, coarse or dynamic parallelization",
    lambda p: attention.build(_attn_config(p), p["schedule"], p["batch"], regions=p["regions"]),
    lambda p, functional: (attention.inputs if functional else attention.control_inputs)(
        _attn_config(p), kv_lengths(p)
    ),
    lambda p: {},
    lambda p: PaperProfile(compute_bw_default=2048, channel_depth=1),
)

EXAMPLES = {e.name: e for e in (SWIGLU, MOE, ATTENTION)}


def example(name: str) -> Example:
    if name not in EXAMPLES:
        raise UsageError(f"unknown example {name!r}; examples: {', '.join(EXAMPLES)}")
    return EXAMPLES[name]


def run_point(name: str, params: Mapping[str, Any], functional: bool = False) -> dict[str, Any]:
    """Simulate one parameter set; the row holds the parameters and the measured figures."""
    ex = example(name)
    p = ex.params(params)
    graph = ex.build(p)
    memory = ex.memory(p, functional)
    t0 = time.perf_counter()
    result = simulate(graph, memory, profile=ex.profile(p), functional=functional)
    wall = time.perf_counter() - t0
    cost = metrics(graph, "artifact").evaluate(ex.dims(p))
    onchip = cost.onchip_bytes
    return {
        "example": name,
        **{k: p[k] for k in ex.defaults},
        "cycles": result.cycles,
        "offchip_bytes": result.offchip_bytes,
        "onchip_bytes": int(onchip) if isinstance(onchip, int) else float("nan"),
        "flops": result.flops,
        "compute_util": round(result.compute_utilization, 6),
        "sim_wall_s": round(wall, 3),
    }
