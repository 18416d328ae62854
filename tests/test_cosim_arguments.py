"""The arguments of ``step_hw.cosim.run`` and ``validate``: each bad one is a one-line error that
names the function, the parameter and the value, raised before any work. Every test here runs
with the elaboration and the Verilator build replaced by ``AssertionError("built")`` (and, for
``validate``, the interpreter and the simulator by ``AssertionError``): a check that came after
the work fails the test instead of building."""

from __future__ import annotations

import re

import numpy as np
import pytest

import sim
import step_lang
from step_hw import elaborate
from step_hw.config import HwConfig
from step_hw.cosim import fast_io, harness, verilator
from step_hw.cosim.arguments import SEED_MAX, WATCHDOG_MIN
from step_hw.cosim.report import validate
from step_hw.memory_model import MemoryModel
from step_lang import (
    Graph,
    LinearOffChipLoad,
    LinearOffChipStore,
    Map,
    Source,
    StreamType,
    Tile,
    numerics,
)
from step_lang.errors import StepValueError


def bias_add():
    """docs/tutorial.md's graph: ``y = x + b``, ``x`` from a Source, ``b`` an int16 [8, 4]."""
    fx = numerics.functions(HwConfig())
    g = Graph("bias_add")
    x = Source(g, StreamType(Tile("int16", 4, 4), (1, 2)), name="x")
    b = g.tensor("b", (8, 4), "int16")
    y = g.tensor("y", (8, 4), "int16")
    lb = LinearOffChipLoad(b, tile=(4, 4), out_shape=(2,), stride=(1,), name="load_b")
    add = Map(x.out, lb.out, fn=fx.add, name="add")
    LinearOffChipStore(add.out, y, name="store_y")
    rng = np.random.default_rng(0)
    memory = {"b": rng.integers(-256, 256, (8, 4)).astype(np.int16)}
    tiles = [rng.integers(-256, 256, (4, 4)).astype(np.int16) for _ in range(2)]
    return g, memory, {"x": [tiles]}


class Reached(Exception):
    """The checks passed and the work (the build) began."""


def _refuse(what: str):
    def refuse(*args, **kwargs):
        raise AssertionError(what)

    return refuse


@pytest.fixture
def no_build(monkeypatch):
    """Elaboration and Verilator builds fail the test."""
    monkeypatch.setattr(harness, "design", _refuse("built"))
    monkeypatch.setattr(elaborate, "conversion", _refuse("built"))
    monkeypatch.setattr(verilator, "runner", _refuse("built"))
    monkeypatch.setattr(verilator, "build", _refuse("built"))


@pytest.fixture
def no_work(no_build, monkeypatch):
    """... and so do the interpreter and the simulator (``validate``'s first work)."""
    monkeypatch.setattr(step_lang, "interpret", _refuse("interpreted"))
    monkeypatch.setattr(sim, "simulate", _refuse("simulated"))


def _b(dtype=np.int16, shape=(8, 4)):
    return np.ones(shape, dtype)


# (id, overrides of the good arguments, exception type, message after "<function>: ");
# `memory` and `inputs` overrides replace the good ones; `graph` too.
COMMON = [
    ("graph", {"graph": "bias_add"}, TypeError, r"graph must be a step_lang Graph, not 'bias_add'"),
    ("memory-not-mapping", {"memory": [("b", _b())]}, StepValueError,
     r"memory must map tensor names to arrays, not list"),
    ("memory-unknown", {"memory": {"b": _b(), "bias": _b()}}, StepValueError,
     r"memory holds bias, which graph 'bias_add' does not declare"),
    ("memory-dtype", {"memory": {"b": _b(np.float64)}}, StepValueError,
     r"tensor 'b': array float64 \[8, 4\], declared int16 \[8, 4\]"),
    ("memory-truncated", {"memory": {"b": np.array([1.7, 300.2])}}, StepValueError,
     r"tensor 'b': array float64 \[2\], declared int16 \[8, 4\]"),
    ("memory-shape", {"memory": {"b": _b(shape=(4, 8))}}, StepValueError,
     r"tensor 'b': array int16 \[4, 8\], declared int16 \[8, 4\]"),
    ("memory-flat", {"memory": {"b": _b(shape=(32,))}}, StepValueError,
     r"tensor 'b': array int16 \[32\], declared int16 \[8, 4\]"),
    ("memory-int32", {"memory": {"b": _b(np.int32)}}, StepValueError,
     r"tensor 'b': array int32 \[8, 4\], declared int16 \[8, 4\]"),
    ("memory-list", {"memory": {"b": [[1] * 4] * 8}}, StepValueError,
     r"tensor 'b': array int64 \[8, 4\], declared int16 \[8, 4\]"),
    ("memory-output-dtype", {"memory": {"b": _b(), "y": _b(np.uint16)}}, StepValueError,
     r"tensor 'y': array uint16 \[8, 4\], declared int16 \[8, 4\]"),
    ("inputs-unknown", {"inputs": {"x": [[_b(shape=(4, 4))] * 2], "zz": []}}, StepValueError,
     r"inputs name zz, which are not Source nodes of graph 'bias_add'"),
    ("inputs-missing", {"inputs": None}, StepValueError,
     r"Source 'x' has no tokens; pass inputs=\{'x': \.\.\.\}"),
    ("inputs-not-mapping", {"inputs": [1]}, StepValueError,
     r"inputs must map Source node names to tokens, not list"),
    ("config", {"config": "x"}, TypeError, r"config must be an HwConfig or None, not 'x'"),
    ("config-dict", {"config": {}}, TypeError, r"config must be an HwConfig or None, not \{\}"),
    ("tier", {"tier": "slow"}, ValueError, r"tier must be one of axi, fast, not 'slow'"),
    ("pattern", {"pattern": "sometimes"}, ValueError,
     r"pattern must be one of always, periodic, random, not 'sometimes'"),
    ("seed-2**32", {"seed": 2**32}, ValueError,
     r"seed must be an integer in \[0, 2\*\*32-1\], not 4294967296"),
    ("seed-2**32-fast", {"seed": 2**32, "tier": "fast"}, ValueError,
     r"seed must be an integer in \[0, 2\*\*32-1\], not 4294967296"),
    ("seed-negative", {"seed": -1}, ValueError,
     r"seed must be an integer in \[0, 2\*\*32-1\], not -1"),
    ("seed-float", {"seed": 1.5}, TypeError, r"seed must be an integer in \[0, 2\*\*32-1\], not 1\.5"),
    ("seed-bool", {"seed": True}, TypeError, r"seed must be an integer in \[0, 2\*\*32-1\], not True"),
    ("seed-str", {"seed": "3"}, TypeError, r"seed must be an integer in \[0, 2\*\*32-1\], not '3'"),
    ("watchdog-0", {"watchdog": 0}, ValueError, r"watchdog must be a positive integer, not 0"),
    ("watchdog-negative", {"watchdog": -5}, ValueError,
     r"watchdog must be a positive integer, not -5"),
    ("watchdog-float", {"watchdog": 2.5}, TypeError, r"watchdog must be a positive integer, not 2\.5"),
    ("watchdog-none", {"watchdog": None}, TypeError, r"watchdog must be a positive integer, not None"),
    ("tag-empty", {"tag": ""}, ValueError, r"tag must be a plain folder name \(not empty, '\.' or "
     r"'\.\.', no path separator\), not ''"),
    ("tag-dot", {"tag": "."}, ValueError, r"tag must be a plain folder name .*, not '\.'"),
    ("tag-dotdot", {"tag": ".."}, ValueError, r"tag must be a plain folder name .*, not '\.\.'"),
    ("tag-up", {"tag": "../../x"}, ValueError, r"tag must be a plain folder name .*, not '\.\./\.\./x'"),
    ("tag-absolute", {"tag": "/tmp/x"}, ValueError, r"tag must be a plain folder name .*, not '/tmp/x'"),
    ("tag-nested", {"tag": "a/b"}, ValueError, r"tag must be a plain folder name .*, not 'a/b'"),
    ("tag-int", {"tag": 3}, TypeError, r"tag must be a plain folder name .*, not 3"),
    ("waves", {"waves": "no"}, TypeError, r"waves must be True or False, not 'no'"),
    ("quiet", {"quiet": None}, TypeError, r"quiet must be True or False, not None"),
    ("memory_model-str", {"memory_model": "hbm"}, TypeError,
     r"memory_model must be a step_hw\.memory_model\.MemoryModel or None, not 'hbm'"),
    ("memory_model-str-fast", {"memory_model": "hbm", "tier": "fast"}, TypeError,
     r"memory_model must be a step_hw\.memory_model\.MemoryModel or None, not 'hbm'"),
    ("memory_model-axi", {"memory_model": MemoryModel.hbm()}, ValueError,
     r"memory_model MemoryModel\(.*\) needs the fast tier \(the axi tier's cocotbext-axi RAM has "
     r"latency 2 and write response 2\)"),
]  # fmt: skip

RUN_ONLY = [
    ("trace", {"trace": 1}, TypeError, r"trace must be True or False, not 1"),
    ("axi_errors-str", {"axi_errors": "bias"}, TypeError,
     r"axi_errors must be a collection of tensor names, not 'bias'"),
    ("axi_errors-bytes", {"axi_errors": b"b"}, TypeError,
     r"axi_errors must be a collection of tensor names, not b'b'"),
    ("axi_errors-int", {"axi_errors": 5}, TypeError,
     r"axi_errors must be a collection of tensor names, not 5"),
    ("axi_errors-items", {"axi_errors": ["b", 1]}, TypeError,
     r"axi_errors must be a collection of tensor names, not \['b', 1\]"),
    ("axi_errors-unknown", {"axi_errors": ("b", "zz")}, ValueError,
     r"axi_errors names zz, which graph 'bias_add' does not declare"),
    ("axi_errors-fast", {"axi_errors": ("b",), "tier": "fast"}, ValueError,
     r"axi_errors needs the axi tier \(the fast tier's memory answers SLVERR only outside the "
     r"memory map\)"),
]  # fmt: skip


def _call(fn, overrides: dict):
    graph, memory, inputs = bias_add()
    args = {"graph": graph, "memory": memory, "inputs": inputs, "quiet": True, **overrides}
    return fn(args.pop("graph"), args.pop("memory"), **args)


def _expect(fn, name: str, overrides: dict, kind: type, message: str) -> None:
    with pytest.raises(Exception) as info:
        _call(fn, overrides)
    got = str(info.value)
    assert type(info.value) is kind, f"{type(info.value).__name__}: {got}"
    assert "\n" not in got
    assert re.fullmatch(f"{name}: {message}", got), got


@pytest.mark.parametrize(
    ("overrides", "kind", "message"),
    [pytest.param(*row[1:], id=row[0]) for row in COMMON + RUN_ONLY],
)
def test_run_refuses_a_bad_argument_before_building(no_build, overrides, kind, message):
    _expect(harness.run, "run", overrides, kind, message)


@pytest.mark.parametrize(
    ("overrides", "kind", "message"), [pytest.param(*row[1:], id=row[0]) for row in COMMON]
)
def test_validate_refuses_a_bad_argument_before_any_work(no_work, overrides, kind, message):
    _expect(validate, "validate", overrides, kind, message)


GOOD = [
    pytest.param({}, id="defaults"),
    pytest.param({"memory": None}, id="no-memory"),  # every tensor starts as zeros
    pytest.param({"memory": {}}, id="empty-memory"),
    pytest.param({"memory": {"y": np.zeros((8, 4), np.int16)}}, id="output-only"),
    pytest.param(
        {
            "config": HwConfig(),
            "pattern": "random",
            "seed": SEED_MAX,
            "watchdog": WATCHDOG_MIN,
            "tag": "a-run_1",
            "waves": False,
            "quiet": True,
        },
        id="bounds",
    ),
    pytest.param({"seed": np.uint32(7), "watchdog": np.int64(100)}, id="numpy-integers"),
    pytest.param({"tier": "fast", "memory_model": MemoryModel.hbm()}, id="fast-hbm"),
    pytest.param({"memory_model": MemoryModel.axi_ram()}, id="axi-axi_ram"),
]


def _reach_the_build(monkeypatch):
    monkeypatch.setattr(harness, "design", _refuse_with(Reached))


def _refuse_with(kind):
    def refuse(graph, config, **kwargs):
        raise kind(graph.name, config, kwargs)

    return refuse


@pytest.mark.parametrize("overrides", GOOD)
def test_run_passes_good_arguments_to_the_build(no_build, monkeypatch, overrides):
    _reach_the_build(monkeypatch)
    with pytest.raises(Reached):
        _call(harness.run, overrides)


@pytest.mark.parametrize(
    "axi_errors",
    [("b",), ["b", "y"], iter(["b"]), frozenset({"y"})],
    ids=["tuple", "list", "iterator", "frozenset"],
)
def test_run_takes_any_collection_of_axi_error_tensors(no_build, monkeypatch, axi_errors):
    _reach_the_build(monkeypatch)
    with pytest.raises(Reached):
        _call(harness.run, {"axi_errors": axi_errors})


@pytest.mark.parametrize("overrides", GOOD)
def test_validate_passes_good_arguments_to_the_interpreter_simulator_and_build(
    no_build, monkeypatch, overrides
):
    """The interpreter and the simulator run (pure Python, a tiny graph); the co-simulation's
    own checks pass too, and it reaches its build."""
    _reach_the_build(monkeypatch)
    with pytest.raises(Reached) as info:
        _call(validate, overrides)
    name, config, kwargs = info.value.args
    assert name == "bias_add" and isinstance(config, HwConfig)
    assert kwargs["tier"] == overrides.get("tier", "axi")


def test_the_fast_tiers_memory_image_refuses_what_it_would_convert(tmp_path):
    """``write_memory`` (below ``run``'s checks) neither drops an unknown tensor nor converts
    an array of another dtype."""
    desc = {
        "config": {"axi_data_width": 64},
        "memory_map": {"b": {"addr": 0, "shape": [8, 4], "dtype": "int16", "bytes": 64}},
    }
    with pytest.raises(
        ValueError, match=r"^write_memory: memory holds bias, which the memory map does not$"
    ):
        fast_io.write_memory(tmp_path / "m.hex", desc, {"b": _b(), "bias": _b()})
    with pytest.raises(
        ValueError, match=r"^write_memory: memory 'b': array float64, its memory map entry int16$"
    ):
        fast_io.write_memory(tmp_path / "m.hex", desc, {"b": _b(np.float64)})
    fast_io.write_memory(tmp_path / "m.hex", desc, {"b": _b()})  # the declared dtype: written
    assert fast_io.read_memory(tmp_path / "m.hex", desc, ["b"])["b"].tolist() == _b().tolist()


@pytest.mark.parametrize(
    ("overrides", "kind", "message"),
    [
        ({"tier": "slow"}, ValueError, r"design: tier must be one of axi, fast, not 'slow'"),
        ({"config": "x"}, TypeError, r"design: config must be an HwConfig or None, not 'x'"),
    ],
)
def test_design_refuses_a_bad_argument_before_converting(monkeypatch, overrides, kind, message):
    monkeypatch.setattr(elaborate, "conversion", _refuse("built"))
    monkeypatch.setattr(verilator, "runner", _refuse("built"))
    graph, _, _ = bias_add()
    with pytest.raises(kind) as info:
        harness.design(graph, quiet=True, **overrides)
    assert re.fullmatch(message, str(info.value)), str(info.value)
