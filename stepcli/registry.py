"""The examples the command line knows, behind one interface.

An :class:`Example` turns string parameters (``-p key=value``) into a graph, the memory a
simulation needs, and the values of the graph's dynamic dims; :func:`run_point` simulates one
parameter set and returns a result row. Sweeps and the paper's experiments are made of these.
"""

from __future__ import annotations

import pathlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from examples import attention, decoder, moe, swiglu, traces
from sim import PaperProfile, simulate
from step_lang import Graph, metrics

from .params import MAX_SEED, MAX_SIZE, Param, ParamError
from .userfile import is_graph_file, load_graph_file

__all__ = [
    "EXAMPLES",
    "TRACE_FITS",
    "Example",
    "NotApplicable",
    "UsageError",
    "parse_params",
    "run_point",
]


class UsageError(ValueError):
    """A command-line mistake: an unknown example or parameter, a bad value."""


class NotApplicable(UsageError):
    """A parameter given where it does not apply (``tile_n`` under dynamic tiling, ``skew``
    with a routing trace): it would change nothing, so it is refused, not ignored."""


def parse_params(pairs: list[str]) -> dict[str, str]:
    """``["batch=64", "model=qwen"]`` to ``{"batch": "64", "model": "qwen"}``: the text as
    given; each example's :class:`~stepcli.params.Param` reads it as its type (so a trace file
    named ``123`` stays a name)."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"parameter {pair!r} is not of the form key=value")
        key, value = key.strip(), value.strip()
        if key in out:
            raise UsageError(f"parameter {key} given twice ({out[key]} and {value})")
        out[key] = value
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
    # How each parameter is checked (type and range); parameters without an entry pass unchecked.
    spec: Mapping[str, Param] = field(default_factory=dict)
    # Tokens of the graph's Source nodes (a graph file's third value; the examples have none).
    inputs: Mapping[str, Any] | None = None
    # Parameter sets of several memory images -> the same sets, changed so that they all build
    # one graph (``one_graph``); None: the graph does not depend on the image's parameters.
    _one_graph: Callable[[list[dict]], list[dict]] | None = None
    # A full parameter set -> the parameters that do not apply to it, each with the reason
    # ("to tiling=dynamic (...)"): given, they are refused; in a result row they are empty.
    _inapplicable: Callable[[dict], Mapping[str, str]] = lambda p: {}
    # A full parameter set -> None if its seed draws the timing image (the routing, the KV
    # lengths), else why it does not (queue sizing over several seeds needs it to).
    _fixed_image: Callable[[dict], str | None] = lambda p: None

    def params(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """The full parameter set: ``given`` over the defaults, each value checked by ``spec``;
        a given parameter that does not apply to the set raises :class:`NotApplicable`."""
        unknown = sorted(set(given) - set(self.defaults))
        if unknown:
            raise UsageError(
                f"example '{self.name}' has no parameter {', '.join(unknown)}; it takes {', '.join(self.defaults)}"
            )
        checked = dict(given)
        for key, value in given.items():
            if key in self.spec:
                try:
                    checked[key] = self.spec[key].check(self.name, key, value)
                except ParamError as exc:
                    raise UsageError(str(exc)) from None
        full = {**self.defaults, **checked}
        inapplicable = self.inapplicable(full)
        for key in given:
            if key in inapplicable:
                raise NotApplicable(
                    f"example '{self.name}': parameter {key} does not apply "
                    f"{inapplicable[key]}; leave it out"
                )
        return full

    def inapplicable(self, params: dict) -> Mapping[str, str]:
        """The parameters that do not apply to ``params`` (a full set), each with the reason.
        The rules compare with strings and test truthiness only, so a sweep's CSV row (its
        values as text) is judged the same way when a sweep resumes it."""
        return self._inapplicable(params)

    def row(self, params: dict) -> dict[str, Any]:
        """``params`` (a full set) as a result row shows them: a parameter that does not apply
        to the set is empty, so a row never shows a value that was not used."""
        inapplicable = self.inapplicable(params)
        return {k: "" if k in inapplicable else params[k] for k in self.defaults}

    def fixed_image(self, params: dict) -> str | None:
        """None if ``params``' seed draws the timing image (so seeds ``seed``, ``seed + 1``, ...
        give different routings or KV lengths), else why it does not."""
        return self._fixed_image(params)

    def build(self, params: dict) -> Graph:
        return self._build(params)

    def memory(self, params: dict, functional: bool) -> dict[str, np.ndarray]:
        return self._memory(params, functional)

    def dims(self, params: dict) -> dict[str, int]:
        return self._dims(params)

    def profile(self, params: dict) -> PaperProfile:
        return self._profile(params)

    def one_graph(self, images: list[dict]) -> list[dict]:
        """The parameter sets of several memory images (e.g. seeds), changed where needed so
        that every one builds the same graph and its image runs on it (queue sizing over
        several images): an attention cache then holds the longest request of them all."""
        return images if self._one_graph is None else self._one_graph(images)


def _trace_rules(
    p: dict, trace_keys: tuple[str, ...], drawn_by: Mapping[str, tuple[str, ...]]
) -> dict[str, str]:
    """What does not apply where traces are concerned: ``trace_fit`` without any of
    ``trace_keys`` given; a synthetic generator's parameters (``drawn_by[trace_key]``) with that
    trace given."""
    out = {}
    if not any(p[k] for k in trace_keys):
        names = " or ".join(trace_keys)
        out["trace_fit"] = f"without a trace ({names}): it fits a trace to the batch"
    for key, synthetic in drawn_by.items():
        if p[key]:
            for name in synthetic:
                out[name] = f"with {key} given: it shapes the synthetic {_DRAWN[name]}"
    return out


# What each synthetic generator's parameter draws (the messages of _trace_rules).
_DRAWN = {"skew": "routing", "mean": "KV lengths", "sigma": "KV lengths"}

_SEED_DRAWS_DATA = "its seed draws only data values, which do not change the timing"


def _traced(keys: tuple[str, ...]) -> Callable[[dict], str | None]:
    """``Example._fixed_image`` of an example whose timing image comes from ``keys``' traces
    when all of them are given, else from its seed."""

    def fixed(p: dict) -> str | None:
        if all(p[k] for k in keys):
            return f"with {' and '.join(keys)} given, " + _SEED_DRAWS_DATA
        return None

    return fixed


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
    {
        "batch": Param("int", 1, MAX_SIZE),
        "hidden": Param("int", 1, MAX_SIZE),
        "intermediate": Param("int", 1, MAX_SIZE),
        "tile_b": Param("int", 1, MAX_SIZE),
        "tile_i": Param("int", 1, MAX_SIZE),
        "seed": Param("int", 0, MAX_SEED),
    },
    _fixed_image=lambda p: _SEED_DRAWS_DATA,
)

# -- MoE ----------------------------------------------------------------------------------------

_MODELS = {"mixtral": moe.MIXTRAL, "qwen": moe.QWEN, "small": moe.SMALL}


def _moe_config(p: dict) -> moe.MoEConfig:
    if p["model"] not in _MODELS:
        raise UsageError(f"model must be one of {', '.join(_MODELS)}, not {p['model']!r}")
    return _MODELS[p["model"]]


# How a trace of another length than the batch is used (``-p trace_fit=...``): ``exact`` (the
# default) refuses it; ``cut`` keeps its first ``batch`` entries (it must have that many);
# ``repeat`` repeats it cyclically to ``batch`` entries (cutting a longer one).
TRACE_FITS = ("exact", "cut", "repeat")


def fit_trace(data: np.ndarray, batch: int, fit: str, what: str) -> np.ndarray:
    """``data`` (one entry per request or token) fitted to ``batch`` entries as ``fit`` says."""
    n = len(data)
    if n == batch:
        return data
    if fit == "cut" and n > batch:
        return data[:batch]
    if fit == "repeat" and n > 0:
        return np.resize(data, (batch, *data.shape[1:]))
    if fit == "exact":
        hint = "; set trace_fit=cut or trace_fit=repeat to use it anyway"
    elif fit == "cut":
        hint = ", too few to cut (trace_fit=cut); set trace_fit=repeat to repeat it"
    else:
        hint = ""
    raise UsageError(f"{what} has {n} entries, batch is {batch}{hint}")


def moe_choices(p: dict) -> np.ndarray:
    """Routing choices: a trace file (``trace=path.npz``) or the synthetic generator."""
    cfg = _moe_config(p)
    if p["trace"]:
        choices = traces.load_routing(pathlib.Path(p["trace"]), cfg.experts)
        if choices.shape[1] != cfg.top_k:
            raise UsageError(
                f"routing trace {p['trace']}: {choices.shape[1]} experts per token, model "
                f"'{p['model']}' routes each token to {cfg.top_k} (top_k)"
            )
        fit = p.get("trace_fit", "exact")
        return fit_trace(choices, p["batch"], fit, f"routing trace {p['trace']}")
    return traces.synthetic_routing(
        p["batch"], cfg.experts, cfg.top_k, skew=float(p["skew"]), seed=p["seed"]
    )


def _moe_schedule(p: dict) -> moe.MoESchedule:
    regions = p["regions"] or None
    return moe.MoESchedule(p["tiling"], tile_n=p["tile_n"], tile_f=p["tile_f"], regions=regions)


def _moe_inapplicable(p: dict) -> dict[str, str]:
    out = _trace_rules(p, ("trace",), {"trace": ("skew",)})
    if p["tiling"] == "dynamic":
        out["tile_n"] = "to tiling=dynamic: its token tiles follow the routing"
    return out


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
        "trace_fit": "exact",
        "skew": 1.0,
        "seed": 0,
        "compute_bw": 4096,
    },
    "MoE layer with SwiGLU experts: static/dynamic tiling, optional time-multiplexing (regions)",
    lambda p: moe.build(_moe_config(p), _moe_schedule(p), p["batch"]),
    _moe_memory,
    lambda p: moe.dim_values(moe_choices(p), _moe_config(p).experts),
    lambda p: PaperProfile(compute_bw_default=int(p["compute_bw"])),
    {
        "model": Param("choice", choices=tuple(_MODELS)),
        "batch": Param("int", 1, MAX_SIZE),
        "tiling": Param("choice", choices=("static", "dynamic")),
        "tile_n": Param("int", 1, MAX_SIZE),
        "tile_f": Param("int", 1, MAX_SIZE),
        "regions": Param("int", 0, MAX_SIZE),
        "trace": Param("str"),
        "trace_fit": Param("choice", choices=TRACE_FITS),
        "skew": Param("float", -traces.MAX_SKEW, traces.MAX_SKEW),
        "seed": Param("int", 0, MAX_SEED),
        "compute_bw": Param("int", 1),
    },
    _inapplicable=_moe_inapplicable,
    _fixed_image=_traced(("trace",)),
)

# -- attention ----------------------------------------------------------------------------------

_ATTN = {"qwen": attention.QWEN, "small": attention.SMALL}


def kv_lengths(p: dict) -> np.ndarray:
    """KV lengths: a trace file (``trace=path.npy``) or log-normal synthetic ones."""
    if p["trace"]:
        lengths = traces.load_kv_lengths(pathlib.Path(p["trace"]))
        fit = p.get("trace_fit", "exact")
        return fit_trace(lengths, p["batch"], fit, f"KV-length trace {p['trace']}")
    return traces.synthetic_kv_lengths(
        p["batch"], mean=float(p["mean"]), sigma=float(p["sigma"]), seed=p["seed"]
    )


#: The largest ``max_len`` parameter: cache rows for the longest KV length a trace may hold.
MAX_CACHE_ROWS = 2 * traces.MAX_KV_LENGTH


def cache_rows(p: dict, config: Any, lengths: np.ndarray) -> int:
    """Cache rows per request of ``config`` (a KV cache's config, ``kv_tile`` and ``max_len``):
    ``p["max_len"]``, checked to be whole KV tiles holding the longest request of ``lengths`` and
    its new token, or, if it is 0, ``config`` fitted to them (:func:`attention.fit_cache`)."""
    rows = p.get("max_len", 0)
    if not rows:
        return attention.fit_cache(config, lengths).max_len
    least = attention.cache_rows_needed(config.kv_tile, lengths)
    if rows % config.kv_tile or rows < least:
        raise UsageError(
            f"max_len must be a multiple of kv_tile {config.kv_tile} holding the longest request "
            f"and its new token (at least {least} rows), not {rows}"
        )
    return rows


def _longest_cache(config_of: Callable[[dict], Any]) -> Callable[[list[dict]], list[dict]]:
    """``Example.one_graph`` of an example with a KV cache: every image's ``max_len`` is the
    largest that any of them needs."""

    def one_graph(images: list[dict]) -> list[dict]:
        rows = max(config_of(p).max_len for p in images)
        return [{**p, "max_len": rows} for p in images]

    return one_graph


def attention_profile() -> PaperProfile:
    """The paper's attention experiments' simulator settings (reference §5.6, Fig. 14/15/21):
    2048 FLOPs per cycle per compute node, queues of depth 1."""
    return PaperProfile(compute_bw_default=2048, channel_depth=1)


def _attn_config(p: dict) -> attention.AttentionConfig:
    if p["config"] not in _ATTN:
        raise UsageError(f"config must be one of {', '.join(_ATTN)}, not {p['config']!r}")
    base = _ATTN[p["config"]]
    max_len = cache_rows(p, base, kv_lengths(p))
    return attention.AttentionConfig(head_dim=base.head_dim, kv_tile=base.kv_tile, max_len=max_len)


ATTENTION = Example(
    "attention",
    {
        "config": "qwen",
        "batch": 64,
        "schedule": "dynamic",
        "regions": 4,
        "trace": "",
        "trace_fit": "exact",
        "mean": 1000,
        "sigma": 0.8,
        "seed": 0,
        "max_len": 0,
    },
    "decode attention with a KV cache: interleaved, coarse or dynamic parallelization",
    lambda p: attention.build(_attn_config(p), p["schedule"], p["batch"], regions=p["regions"]),
    lambda p, functional: (attention.inputs if functional else attention.control_inputs)(
        _attn_config(p), kv_lengths(p)
    ),
    lambda p: {},
    lambda p: attention_profile(),
    {
        "config": Param("choice", choices=tuple(_ATTN)),
        "batch": Param("int", 1, MAX_SIZE),
        "schedule": Param("choice", choices=attention.SCHEDULES),
        "regions": Param("int", 1, MAX_SIZE),
        "trace": Param("str"),
        "trace_fit": Param("choice", choices=TRACE_FITS),
        "mean": Param("float", *traces.SYNTHETIC_KV_RANGE),
        "sigma": Param("float", 0, 16),
        "seed": Param("int", 0, MAX_SEED),
        "max_len": Param("int", 0, MAX_CACHE_ROWS),
    },
    _one_graph=_longest_cache(_attn_config),
    _inapplicable=lambda p: _trace_rules(p, ("trace",), {"trace": ("mean", "sigma")}),
    _fixed_image=_traced(("trace",)),
)

# -- decoder layer ------------------------------------------------------------------------------

_DECODERS = {"qwen": decoder.QWEN, "mixtral": decoder.MIXTRAL, "small": decoder.SMALL}


def _decoder_parts(p: dict) -> tuple:
    """The decoder config, schedule, KV lengths and routing choices of a parameter set."""
    kv = kv_lengths({**p, "trace": p["kv_trace"]})
    base = _DECODERS[p["model"]]
    cfg = replace(base, max_len=cache_rows(p, base, kv))
    choices = moe_choices({**p, "model": p["model"], "trace": p["routing_trace"]})
    sched = decoder.DecoderSchedule(
        p["attention"], p["tiling"], tile_n=p["tile_n"], moe_regions=p["moe_regions"] or None
    )
    return cfg, sched, kv, choices


def _decoder_inapplicable(p: dict) -> dict[str, str]:
    traces_ = ("kv_trace", "routing_trace")
    out = _trace_rules(p, traces_, {"kv_trace": ("mean", "sigma"), "routing_trace": ("skew",)})
    if p["tiling"] == "dynamic":
        out["tile_n"] = "to tiling=dynamic: the MoE's token tiles follow the routing"
    return out


def _decoder_memory(p: dict, functional: bool) -> dict[str, np.ndarray]:
    cfg, _, kv, choices = _decoder_parts(p)
    return (decoder.inputs if functional else decoder.control_inputs)(cfg, kv, choices)


DECODER = Example(
    "decoder",
    {
        "model": "qwen",
        "batch": 64,
        "attention": "dynamic",
        "tiling": "dynamic",
        "tile_n": 16,
        "moe_regions": 0,
        "kv_trace": "",
        "routing_trace": "",
        "trace_fit": "exact",
        "mean": 1000,
        "sigma": 0.8,
        "skew": 1.0,
        "seed": 0,
        "max_len": 0,
    },
    "decoder layer (QKV, attention, MoE) as one graph: the three optimizations and baselines",
    lambda p: decoder.build(*_decoder_parts(p)[:2], p["batch"]),
    _decoder_memory,
    lambda p: decoder.dim_values(
        _DECODERS[p["model"]], _decoder_parts(p)[3], p["moe_regions"] or None
    ),
    lambda p: decoder.profile(decoder.build(*_decoder_parts(p)[:2], p["batch"])),
    {
        "model": Param("choice", choices=tuple(_DECODERS)),
        "batch": Param("int", 4, MAX_SIZE),
        "attention": Param("choice", choices=attention.SCHEDULES),
        "tiling": Param("choice", choices=("static", "dynamic")),
        "tile_n": Param("int", 1, MAX_SIZE),
        "moe_regions": Param("int", 0, MAX_SIZE),
        "kv_trace": Param("str"),
        "routing_trace": Param("str"),
        "trace_fit": Param("choice", choices=TRACE_FITS),
        "mean": Param("float", *traces.SYNTHETIC_KV_RANGE),
        "sigma": Param("float", 0, 16),
        "skew": Param("float", -traces.MAX_SKEW, traces.MAX_SKEW),
        "seed": Param("int", 0, MAX_SEED),
        "max_len": Param("int", 0, MAX_CACHE_ROWS),
    },
    _one_graph=_longest_cache(lambda p: _decoder_parts(p)[0]),
    _inapplicable=_decoder_inapplicable,
    _fixed_image=_traced(("kv_trace", "routing_trace")),
)

EXAMPLES = {e.name: e for e in (SWIGLU, MOE, ATTENTION, DECODER)}


def file_example(target: str) -> Example:
    """A ``path/to/file.py:function`` target as an :class:`Example` without parameters
    (:mod:`stepcli.userfile`); its dims are the values the interpreter binds."""
    user = load_graph_file(target, UsageError)

    def dims(p: dict) -> dict:
        from step_lang import interpret

        return interpret(user.graph, user.memory, inputs=user.inputs).bindings.regular

    return Example(
        target,
        {},
        f"the graph of {target}",
        lambda p: user.graph,
        lambda p, functional: user.memory,
        dims,
        inputs=user.inputs,
    )


def example(name: str) -> Example:
    if is_graph_file(name):
        return file_example(name)
    if name not in EXAMPLES:
        raise UsageError(
            f"unknown example {name!r}; examples: {', '.join(EXAMPLES)}, "
            "or a graph file path/to/file.py:function"
        )
    return EXAMPLES[name]


#: The measured figures of a :func:`run_point` row, after ``example`` and the parameters.
RESULT_COLUMNS = ("cycles", "offchip_bytes", "onchip_bytes", "flops", "compute_util", "sim_wall_s")


def run_point(name: str, params: Mapping[str, Any], functional: bool = False) -> dict[str, Any]:
    """Simulate one parameter set; the row holds the parameters and the measured figures
    (:data:`RESULT_COLUMNS`)."""
    ex = example(name)
    p = ex.params(params)
    graph = ex.build(p)
    memory = ex.memory(p, functional)
    t0 = time.perf_counter()
    result = simulate(graph, memory, profile=ex.profile(p), functional=functional,
                      inputs=ex.inputs)  # fmt: skip
    wall = time.perf_counter() - t0
    cost = metrics(graph, "artifact").evaluate(ex.dims(p))
    onchip = cost.onchip_bytes
    return {
        "example": name,
        **ex.row(p),
        "cycles": result.cycles,
        "offchip_bytes": result.offchip_bytes,
        "onchip_bytes": int(onchip) if isinstance(onchip, int) else float("nan"),
        "flops": result.flops,
        "compute_util": round(result.compute_utilization, 6),
        "sim_wall_s": round(wall, 3),
    }
