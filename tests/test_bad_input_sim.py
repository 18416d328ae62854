"""Bad input to the readers: ``interpret`` and ``simulate`` (paper and rtl profiles).

Memory arrays, Source tokens, run-time function errors and the profiles' numeric settings, each
with the message it must give (an anchored regex naming the node, port, tensor or setting and
the value).
"""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest

from sim import PaperProfile, simulate
from sim.memory import MemoryConfig
from sim.profiles import RtlProfile
from sim.sizing import plan_queue_sizes, size_queues
from step_hw.config import HwConfig
from step_hw.memory_model import PRESETS, MemoryModel
from step_lang import (
    DONE,
    Graph,
    LinearOffChipLoad,
    LinearOffChipStore,
    Map,
    RandomOffChipLoad,
    Reshape,
    Sink,
    Source,
    StepGraphError,
    StepRuntimeError,
    StepTypeError,
    StepValueError,
    Stop,
    StreamType,
    Tile,
    interpret,
)
from step_lang import functions as F
from step_lang.dims import ragged
from step_lang.numerics import Numerics

#: The rtl profile refuses graphs its hardware cannot build (``step_hw.graph_rules``): these
#: graphs' float32 tensors and tiles need a floating-point configuration.
FLOAT_HW = HwConfig(elem_dtype="bfloat16", acc_dtype="float32")
RUNNERS = {
    "interpret": lambda g, memory=None, **kw: interpret(g, memory, **kw),
    "paper": lambda g, memory=None, **kw: simulate(g, memory, **kw),
    "rtl": lambda g, memory=None, **kw: simulate(g, memory, profile=RtlProfile(FLOAT_HW), **kw),
}


def expect(exc: type[BaseException], message: str):
    return pytest.raises(exc, match="^" + re.escape(message) + "$")


# -- memory arrays --------------------------------------------------------------------------------


def _load_store() -> Graph:
    g = Graph("g")
    a, c = g.tensor("a", (4, 4)), g.tensor("c", (4, 4))
    ld = LinearOffChipLoad(a, tile=(2, 2), name="ld")
    LinearOffChipStore(ld.out, c, name="st")
    return g


MEMORY = [
    # (id, array, the message of every reader: step_lang.interpret.check_memory)
    (
        "shape",
        np.ones((4, 5), np.float32),
        "tensor 'a': array float32 [4, 5], declared float32 [4, 4]",
    ),
    (
        "transposed",
        np.ones((8, 2), np.float32),
        "tensor 'a': array float32 [8, 2], declared float32 [4, 4]",
    ),
    (
        "one-dim",
        np.ones(16, np.float32),
        "tensor 'a': array float32 [16], declared float32 [4, 4]",
    ),
    (
        "scalar",
        np.float32(1.0),
        "tensor 'a': array float32 [], declared float32 [4, 4]",
    ),
    (
        "int32",
        np.ones((4, 4), np.int32),
        "tensor 'a': array int32 [4, 4], declared float32 [4, 4]",
    ),
    (
        "float64",
        np.ones((4, 4)),
        "tensor 'a': array float64 [4, 4], declared float32 [4, 4]",
    ),
    (
        "bool",
        np.ones((4, 4), bool),
        "tensor 'a': array bool [4, 4], declared float32 [4, 4]",
    ),
    (
        "python-list",
        [[1] * 4] * 4,
        "tensor 'a': array int64 [4, 4], declared float32 [4, 4]",
    ),
]


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize(("array", "message"), [pytest.param(a, m, id=k) for k, a, m in MEMORY])
def test_bad_memory_array(runner, array, message):
    with expect(StepValueError, message):
        RUNNERS[runner](_load_store(), {"a": array})


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("names", [["zz"], ["b", "zz"], ["A"]])
def test_memory_names_an_undeclared_tensor(runner, names):
    memory = {"a": np.ones((4, 4), np.float32), **{n: np.ones((4, 4), np.float32) for n in names}}
    message = f"memory holds {', '.join(sorted(names))}, which graph 'g' does not declare"
    with expect(StepValueError, message):
        RUNNERS[runner](_load_store(), memory)


# -- Source tokens -------------------------------------------------------------------------------

T = np.ones((2, 2), np.float32)
SRC = "Source 'x': inputs['x'] Strm<Tile<float32, 2x2>, [1, 2]>: "


def _source_graph() -> Graph:
    g = Graph("g")
    s = Source(g, StreamType(Tile("float32", 2, 2), (1, 2)), name="x")
    Sink(s.out, name="sink")
    return g


TOKENS = [
    (
        "rows",
        [[np.ones((3, 2), np.float32), T]],
        StepRuntimeError,
        SRC + "element: tile rows of Tile<float32, 2x2>: declared 2, observed 3",
    ),
    (
        "cols",
        [[np.ones((2, 5), np.float32), T]],
        StepRuntimeError,
        SRC + "element: tile cols of Tile<float32, 2x2>: declared 2, observed 5",
    ),
    (
        "dtype-int32",
        [[np.ones((2, 2), np.int32), T]],
        StepRuntimeError,
        SRC + "element: expected dtype float32, got int32",
    ),
    (
        "dtype-float64",
        [[T, np.ones((2, 2))]],
        StepRuntimeError,
        SRC + "element: expected dtype float32, got float64",
    ),
    ("too-few", [[T]], StepRuntimeError, SRC + "dim 1 of [1, 2]: declared 2, observed 1"),
    ("too-many", [[T, T, T]], StepRuntimeError, SRC + "dim 1 of [1, 2]: declared 2, observed 3"),
    ("outer", [[T, T], [T, T]], StepRuntimeError, SRC + "dim 0 of [1, 2]: declared 1, observed 2"),
    ("empty-outer", [], StepRuntimeError, SRC + "dim 0 of [1, 2]: declared 1, observed 0"),
    (
        "stop-too-high",
        [T, T, Stop(3), DONE],
        StepRuntimeError,
        SRC + "malformed tokens: token #2 is S3 but the stream has rank 1",
    ),
    (
        "no-done",
        [T, T, Stop(1)],
        StepValueError,
        "Source 'x', port 'out': inputs['x'] holds stop or done tokens, so it is read as a token "
        "list, which must be a list ending with the done token (DONE), not a list ending with S1",
    ),
    (
        "string",
        "abc",
        StepValueError,
        "Source 'x', port 'out': expected a list of tensors, got str",
    ),
    (
        "none",
        None,
        StepValueError,
        "Source 'x', port 'out': expected a list of tensors, got NoneType",
    ),
    ("number", 3, StepValueError, "Source 'x', port 'out': expected a list of tensors, got int"),
    (
        "flat",
        [T, T],
        StepValueError,
        "Source 'x', port 'out': expected a nested list of depth 1 at [0], got ndarray",
    ),
]


def _token_params():
    # (the simulator and the interpreter share step_lang.interpret.source_tokens)
    for key, tokens, exc, message in TOKENS:
        for runner in RUNNERS:
            yield pytest.param(runner, tokens, exc, message, id=f"{runner}-{key}")


@pytest.mark.parametrize(("runner", "tokens", "exc", "message"), list(_token_params()))
def test_bad_source_tokens(runner, tokens, exc, message):
    with expect(exc, message):
        RUNNERS[runner](_source_graph(), inputs={"x": tokens})


@pytest.mark.parametrize("runner", RUNNERS)
def test_source_without_tokens(runner):
    with expect(StepValueError, "Source 'x' has no tokens; pass inputs={'x': ...}"):
        RUNNERS[runner](_source_graph(), inputs={})


@pytest.mark.parametrize(
    "runner",
    [
        "interpret",
        *(r for r in ("paper", "rtl")),
    ],
)
def test_inputs_name_an_unknown_source(runner):
    with expect(StepValueError, "inputs name y, which are not Source nodes of graph 'g'"):
        RUNNERS[runner](_source_graph(), inputs={"x": [[T, T]], "y": [[T]]})


# -- run-time errors: the node, the function and the value ---------------------------------------


def _int_map(fn, rows=1, cols=1, dtype="int64") -> Graph:
    g = Graph("g")
    s = Source(g, StreamType(Tile(dtype, rows, cols), (1, 1)), name="x")
    Sink(Map(s.out, fn=fn, name="f").out, name="sink")
    return g


def _binary(fn, dtype) -> Graph:
    g = Graph("g")
    a = Source(g, StreamType(Tile(dtype, 1, 2), (1, 1)), name="a")
    b = Source(g, StreamType(Tile(dtype, 1, 2), (1, 1)), name="b")
    Sink(Map(a.out, b.out, fn=fn, name="f").out, name="sink")
    return g


def _matmul_int() -> Graph:
    g = Graph("g")
    a = Source(g, StreamType(Tile("float32", 1, 2), (1, 1)), name="a")
    b = Source(g, StreamType(Tile("float32", 2, 1), (1, 1)), name="b")
    Sink(Map(a.out, b.out, fn=F.matmul(out_dtype="int32"), name="f").out, name="sink")
    return g


def _i64(v):
    return np.array([[v]], np.int64)


def _row(*v, dtype=np.int32):
    return np.array([v], dtype)


ONE = np.ones((2, 1), np.float32)
RUNTIME = [
    (
        "scalar-mul-overflow",
        lambda: _int_map(F.scalar_op("mul", 2**62)),
        {"x": [[_i64(2)]]},
        "Map 'f': function 'scalar_mul': result 9223372036854775808 does not fit int64 "
        "[-9223372036854775808, 9223372036854775807]",
    ),
    (
        "scalar-add-overflow",
        lambda: _int_map(F.scalar_op("add", 1)),
        {"x": [[_i64(2**63 - 1)]]},
        "Map 'f': function 'scalar_add': result 9223372036854775808 does not fit int64 "
        "[-9223372036854775808, 9223372036854775807]",
    ),
    (
        "int-div-by-zero",
        lambda: _binary(F.div, "int32"),
        {"a": [[_row(1, 2)]], "b": [[_row(1, 0)]]},
        "Map 'f': function 'div': integer division by zero",
    ),
    (
        "int8-add-overflow",
        lambda: _binary(F.add, "int8"),
        {"a": [[_row(100, 1, dtype=np.int8)]], "b": [[_row(100, 1, dtype=np.int8)]]},
        "Map 'f': function 'add': result 200 does not fit int8 [-128, 127]",
    ),
    (
        "int16-mul-overflow",
        lambda: _binary(F.mul, "int16"),
        {"a": [[_row(300, 1, dtype=np.int16)]], "b": [[_row(300, 1, dtype=np.int16)]]},
        "Map 'f': function 'mul': result 90000 does not fit int16 [-32768, 32767]",
    ),
    (
        "uint8-sub-underflow",
        lambda: _binary(F.sub, "uint8"),
        {"a": [[_row(1, 1, dtype=np.uint8)]], "b": [[_row(2, 1, dtype=np.uint8)]]},
        "Map 'f': function 'sub': result -1 does not fit uint8 [0, 255]",
    ),
    (
        "matmul-fraction-to-int",
        _matmul_int,
        {"a": [[np.array([[0.25, 0.5]], np.float32)]], "b": [[ONE]]},
        "Map 'f': function 'matmul': result 0.75 is not an integer; casting it to int32 would round",
    ),
    (
        "matmul-nan-to-int",
        _matmul_int,
        {"a": [[np.array([[np.nan, 1]], np.float32)]], "b": [[ONE]]},
        "Map 'f': function 'matmul': result nan is not a finite number; it cannot be cast to int32",
    ),
    (
        "matmul-inf-to-int",
        _matmul_int,
        {"a": [[np.array([[-np.inf, 1]], np.float32)]], "b": [[ONE]]},
        "Map 'f': function 'matmul': result -inf is not a finite number; it cannot be cast to int32",
    ),
]


#: Cases whose int64 tiles have no hardware encoding: the rtl profile refuses their graphs. It
#: refuses the others' too: their functions (``step_lang.functions``) raise where the hardware's
#: arithmetic wraps, and no block computes them (``step_hw.unit_functions``).
NO_HARDWARE = {"scalar-mul-overflow", "scalar-add-overflow"}
#: Cases whose unsigned tiles have no hardware encoding (its integers are signed).
UNSIGNED = {"uint8-sub-underflow": "Source 'a': dtype uint8"}


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize(
    ("case", "build", "inputs", "message"),
    [pytest.param(k, b, i, m, id=k) for k, b, i, m in RUNTIME],
)
def test_runtime_errors_name_the_node(runner, case, build, inputs, message):
    exc = StepRuntimeError
    if runner == "rtl" and case in NO_HARDWARE:
        exc = StepTypeError
        message = "Source 'x': dtype int64 is not supported by the hardware (bfloat16/float32)"
    elif runner == "rtl" and case in UNSIGNED:
        exc = StepTypeError
        message = (
            f"{UNSIGNED[case]} is not supported by the hardware (bfloat16/float32) (the "
            "hardware's integers are signed: int8, int16 or int32)"
        )
    elif runner == "rtl":
        exc = StepTypeError
        fn = message.split("'")[3]  # "Map 'f': function '<fn>': ..."
        message = (
            f"Map 'f': function '{fn}' has no hardware arithmetic; build the graph with "
            "step_lang.numerics.functions(config)"
        )
    with expect(exc, message):
        RUNNERS[runner](build(), inputs=inputs)


def _random_load() -> Graph:
    g = Graph("g")
    w = g.tensor("w", (4, 4))
    s = Source(g, StreamType(Tile("int32", 1, 1), (1, 2)), name="x")
    Sink(RandomOffChipLoad(s.out, w, tile=(2, 2), name="rl").out, name="sink")
    return g


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("address", [4, 100, -1])
def test_random_load_address_out_of_range(runner, address):
    message = (
        f"RandomOffChipLoad 'rl', port 'raddr': tile address {address} outside tensor 'w' of "
        "4 tiles"
    )
    with expect(StepRuntimeError, message):
        RUNNERS[runner](_random_load(), inputs={"x": [[_row(0), _row(address)]]})


@pytest.mark.parametrize("runner", RUNNERS)
def test_reshape_without_pad_at_run_time(runner):
    g = Graph("g")
    s = Source(g, StreamType(Tile("float32", 2, 2), (2, ragged("r"))), name="x")
    Sink(Reshape(s.out, 2, name="rs").out, name="sink")
    exc, message = (
        StepRuntimeError,
        (
            "Reshape 'rs', port 'in': a vector ends 1 element(s) into a chunk of 2 and no pad was given "
            "(give pad= to pad it)"
        ),
    )
    if runner == "rtl":  # no hardware block takes a dynamic innermost dim without pad
        exc, message = (
            StepTypeError,
            (
                "Reshape 'rs', port 'in': no hardware block: the innermost dim r is dynamic and no "
                "pad is given; hardware cannot report a short vector at run time, give pad="
            ),
        )
    with expect(exc, message):
        RUNNERS[runner](g, inputs={"x": [[T, T], [T, T, T]]})


# -- the profiles' and the numerics' settings ----------------------------------------------------


PROFILES = [
    pytest.param(
        lambda: PaperProfile(compute_bw_default=0),
        "PaperProfile: compute_bw_default must be a positive integer, not 0",
        id="bw-0",
    ),
    pytest.param(
        lambda: PaperProfile(compute_bw_default=-4096),
        "PaperProfile: compute_bw_default must be a positive integer, not -4096",
        id="bw-neg",
    ),
    pytest.param(
        lambda: PaperProfile(compute_bw_default=1.5),
        "PaperProfile: compute_bw_default must be a positive integer, not 1.5",
        id="bw-float",
    ),
    pytest.param(
        lambda: PaperProfile(pmu_bw=0),
        "PaperProfile: pmu_bw must be a positive integer, not 0",
        id="pmu-0",
    ),
    pytest.param(
        lambda: PaperProfile(channel_latency=-1),
        "PaperProfile: channel_latency must be a non-negative integer, not -1",
        id="lat-neg",
    ),
    pytest.param(
        lambda: PaperProfile(switch_cycles=-1),
        "PaperProfile: switch_cycles must be a non-negative integer, not -1",
        id="switch-neg",
    ),
    pytest.param(
        lambda: PaperProfile(onchip_convention="both"),
        "PaperProfile: onchip_convention must be 'paper' or 'artifact', not 'both'",
        id="convention",
    ),
]


PROFILES += [
    pytest.param(
        lambda: PaperProfile(compute_bw_overrides={"m": 0}),
        "PaperProfile: compute_bw_overrides['m'] must be a positive integer, not 0",
        id="override-0",
    ),
    pytest.param(
        lambda: PaperProfile(compute_bw_overrides={"nope": 64}),
        "PaperProfile: compute_bw_overrides names 'nope', which is no compute node (Map, Accum, "
        "Scan) of graph 'g'",
        id="override-unknown",
    ),
    pytest.param(
        lambda: PaperProfile(compute_bw_overrides={"ld": 64}),
        "PaperProfile: compute_bw_overrides names 'ld', which is no compute node (Map, Accum, "
        "Scan) of graph 'g'",
        id="override-not-compute",
    ),
    pytest.param(
        lambda: PaperProfile(write_back=frozenset({"nope"})),
        "PaperProfile: write_back names 'nope', which is no node of graph 'g'",
        id="write-back-unknown",
    ),
    pytest.param(
        lambda: PaperProfile(loads_in_memory=1),
        "PaperProfile: loads_in_memory must be True or False, not 1",
        id="loads-in-memory",
    ),
    *(
        pytest.param(
            lambda name=name, v=v: RtlProfile(**{name: v}),
            f"RtlProfile: {name} must be a non-negative integer, not {v!r}",
            id=f"rtl-{name}-{v}",
        )
        for name in ("memory_latency", "write_response", "load_issue", "sink_done", "start_up")
        for v in (-1, 1.5)
    ),
]


@pytest.mark.parametrize(("make", "message"), PROFILES)
def test_bad_profile_settings(make, message):
    with expect(ValueError, message):
        simulate(_load_store(), {"a": np.ones((4, 4), np.float32)}, profile=make())


@pytest.mark.parametrize("depth", [0, -1, 2.5, True])
def test_bad_queue_depth_of_the_profile(depth):
    with expect(
        ValueError, f"PaperProfile: channel_depth must be a positive integer, not {depth!r}"
    ):
        PaperProfile(channel_depth=depth)


PAPER_TYPES = [
    pytest.param(
        {"write_back": "linearoffchipload0"},
        "PaperProfile: write_back must be a set of node names, e.g. frozenset({'op'}), not "
        "'linearoffchipload0'",
        id="write-back-string",
    ),
    pytest.param(
        {"write_back": None},
        "PaperProfile: write_back must be a set of node names, e.g. frozenset({'op'}), not None",
        id="write-back-none",
    ),
    pytest.param(
        {"write_back": frozenset({1})},
        "PaperProfile: write_back must be a set of node names, e.g. frozenset({'op'}), not "
        "frozenset({1})",
        id="write-back-int-name",
    ),
    pytest.param(
        {"compute_bw_overrides": [("x", 1)]},
        "PaperProfile: compute_bw_overrides must be a mapping of compute node names to FLOPs per "
        "cycle, not [('x', 1)]",
        id="overrides-list",
    ),
    pytest.param(
        {"memory": {"channels": 2}},
        "PaperProfile: memory must be a MemoryConfig, not {'channels': 2}",
        id="memory-dict",
    ),
]


@pytest.mark.parametrize(("kwargs", "message"), PAPER_TYPES)
def test_paper_profile_setting_of_the_wrong_type(kwargs, message):
    with expect(TypeError, message):
        PaperProfile(**kwargs)


@pytest.mark.parametrize("value", ["no", 0, 1, None])
def test_stops_take_slots_must_be_a_bool(value):
    with expect(ValueError, f"PaperProfile: stops_take_slots must be True or False, not {value!r}"):
        PaperProfile(stops_take_slots=value)


def test_write_back_of_a_set_and_a_list_of_names():
    """Collections of names pass (``check_graph`` then checks each name)."""
    g = Graph("g")
    a, c = g.tensor("a", (4, 4)), g.tensor("c", (4, 4))
    ld = LinearOffChipLoad(a, tile=(2, 2), name="ld")
    LinearOffChipStore(Map(ld.out, fn=F.exp, name="op").out, c, name="st")
    for names in ({"op"}, ["op"], ("op",), frozenset({"op"})):
        simulate(g, {"a": np.ones((4, 4), np.float32)}, profile=PaperProfile(write_back=names))
    with pytest.raises(
        ValueError, match=r"^PaperProfile: write_back names 'ld', a LinearOffChipLoad"
    ):
        simulate(g, {"a": np.ones((4, 4), np.float32)}, profile=PaperProfile(write_back={"ld"}))


# -- the off-chip memory model (MemoryConfig) and PaperProfile.for_rtl ---------------------------

MEMORY_CONFIG = [
    # (field, bad value, rule)
    *((f, v, "a positive integer") for f in ("channels", "request_bytes", "interval", "dispatch")
      for v in (0, -1, 2.5, True, "4", None)),
    *((f, v, "a non-negative integer") for f in ("latency", "startup")
      for v in (-1, -100, 0.5, False, None)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "value", "rule"),
    [pytest.param(n, v, r, id=f"{n}-{v!r}") for n, v, r in MEMORY_CONFIG],
)
def test_bad_memory_config(name, value, rule):
    with expect(ValueError, f"MemoryConfig: {name} must be {rule}, not {value!r}"):
        MemoryConfig(**{name: value})


@pytest.mark.parametrize("name", ["channels", "interval"])
def test_bad_memory_config_by_replace(name):
    """``dataclasses.replace`` checks again: a bad field never reaches the simulator."""
    with expect(ValueError, f"MemoryConfig: {name} must be a positive integer, not 0"):
        dataclasses.replace(MemoryConfig(), **{name: 0})


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"latency": 0, "startup": 0}, {"channels": 1, "interval": 1, "dispatch": 64}],
    ids=["default", "no-latency", "one-channel"],
)
def test_good_memory_config_runs(kwargs):
    r = simulate(
        _load_store(),
        {"a": np.ones((4, 4), np.float32)},
        profile=PaperProfile(memory=MemoryConfig(**kwargs)),
    )
    assert r.cycles > 0


@pytest.mark.parametrize("channels", [0, -1, 2.5, True])
def test_for_rtl_channels_must_be_positive(channels):
    message = f"PaperProfile.for_rtl: channels must be a positive integer, not {channels!r}"
    with expect(ValueError, message):
        PaperProfile.for_rtl(HwConfig(), MemoryModel.axi_ram(), channels=channels)


@pytest.mark.parametrize("preset", PRESETS)
def test_for_rtl_of_every_memory_preset(preset):
    model = getattr(MemoryModel, preset)()
    config = HwConfig()
    p = PaperProfile.for_rtl(config, model, channels=3)
    assert p.memory == MemoryConfig(
        channels=3,
        request_bytes=config.axi_data_width // 8,
        interval=model.beat_interval,
        latency=model.latency,
        startup=model.start_up,
    )
    if config.axi_ports is not None:
        assert PaperProfile.for_rtl(config, model).memory.channels == config.axi_ports


# -- the rtl profile's memory settings -----------------------------------------------------------


@pytest.mark.parametrize("value", [-30, -1, 2.5, None])
def test_rtl_profile_start_up(value):
    with expect(ValueError, f"RtlProfile: start_up must be a non-negative integer, not {value!r}"):
        RtlProfile(start_up=value)


@pytest.mark.parametrize("preset", PRESETS)
def test_rtl_profile_of_every_memory_preset(preset):
    model = getattr(MemoryModel, preset)()
    assert RtlProfile.for_memory(model).start_up == model.start_up


# -- queue sizing's options ----------------------------------------------------------------------

SIZING = [
    # (option, bad value, rule)
    *(("min_depth", v, "a positive integer") for v in (0, -5, 2.9, True)),
    *(("deep", v, "a positive integer") for v in (0, -1, 64.0)),
    *(("max_rounds", v, "a non-negative integer") for v in (-1, 1.5)),
    *(("shrink_budget", v, "a non-negative integer") for v in (-1, 2.0)),
    *(("tolerance", v, "a finite number of at least 0") for v in (-1.0, -0.01, math.inf, math.nan, "0.1", True)),
    *(("margin", v, "a finite number of at least 1") for v in (-3.0, 0.5, 0, math.inf, None)),
]  # fmt: skip


@pytest.mark.parametrize("fn", ["plan_queue_sizes", "size_queues"])
@pytest.mark.parametrize(
    ("name", "value", "rule"), [pytest.param(n, v, r, id=f"{n}-{v!r}") for n, v, r in SIZING]
)
def test_bad_sizing_options(fn, name, value, rule):
    sizing = {"plan_queue_sizes": plan_queue_sizes, "size_queues": size_queues}[fn]
    g = _source_graph()
    with expect(ValueError, f"{fn}: {name} must be {rule}, not {value!r}"):
        sizing(g, inputs={"x": [[T, T]]}, **{name: value})
    assert g.queue_depths == {}  # nothing sized


def test_good_sizing_options():
    options = dict(tolerance=0, margin=1, deep=8, max_rounds=0, min_depth=2, shrink_budget=0)
    r = plan_queue_sizes(_source_graph(), inputs={"x": [[T, T]]}, uniform=False, **options)
    assert min(r.depths.values()) >= 2


@pytest.mark.parametrize("depth", [0, -2])
def test_bad_queue_depth_override(depth):
    with expect(StepValueError, f"queue depth of ld.out must be a positive integer, not {depth}"):
        simulate(_load_store(), queue_depths={"ld.out": depth})


def test_queue_depth_of_an_unknown_stream():
    message = (
        "queue depth of nope.out: graph 'g' has no such stream (nor does its lowered form, "
        "whose Broadcast outputs are named <producer>_<port>_bc.out<k>)"
    )
    with expect(StepValueError, message):
        simulate(_load_store(), queue_depths={"nope.out": 2})


def test_profile_of_the_wrong_type():
    with expect(
        TypeError, "profile must be a TimingProfile (PaperProfile or RtlProfile), not 'paper'"
    ):
        simulate(_load_store(), profile="paper")


NUMERICS = [
    ({"overflow": "clamp"}, "Numerics.overflow must be one of wrap, raise, not 'clamp'"),
    ({"overflow": None}, "Numerics.overflow must be one of wrap, raise, not None"),
    ({"frac_bits": -1}, "Numerics.frac_bits must be an integer in [0, 16) for int16, not -1"),
    ({"frac_bits": 16}, "Numerics.frac_bits must be an integer in [0, 16) for int16, not 16"),
    ({"frac_bits": 1.5}, "Numerics.frac_bits must be an integer in [0, 16) for int16, not 1.5"),
    ({"frac_bits": True}, "Numerics.frac_bits must be an integer in [0, 16) for int16, not True"),
    (
        {"frac_bits": 8, "elem_dtype": "int8"},
        "Numerics.frac_bits must be an integer in [0, 8) for int8, not 8",
    ),
    (
        {"elem_dtype": "int4"},
        "Numerics.elem_dtype must be one of int8, int16, int32, bfloat16, float32, not 'int4'",
    ),
    (
        {"elem_dtype": "float32"},
        "Numerics: floating point is elem_dtype bfloat16 with acc_dtype float32, "
        "not float32 with int32",
    ),
    (
        {"elem_dtype": "bfloat16", "acc_dtype": "float32", "overflow": "raise"},
        "Numerics.overflow='raise' applies to fixed point; the floating-point units round an "
        "overflow to infinity (IEEE 754)",
    ),
    (
        {"acc_dtype": "int64"},
        "Numerics.acc_dtype must be one of int8, int16, int32, bfloat16, float32, not 'int64'",
    ),
    ({"acc_dtype": "int8"}, "Numerics.acc_dtype int8 is narrower than elem_dtype int16"),
]


@pytest.mark.parametrize(("kwargs", "message"), NUMERICS)
def test_bad_numerics_settings(kwargs, message):
    with expect(ValueError, message):
        Numerics(**kwargs)


@pytest.mark.parametrize("config", [3, None, "int16"])
def test_numerics_of_something_else(config):
    message = (
        "Numerics need a Numerics or a config with elem_dtype, acc_dtype and frac_bits, "
        f"not {config!r}"
    )
    with expect(TypeError, message):
        Numerics.of(config)


# -- graph-level mistakes the readers must not run past ------------------------------------------


def test_merge_policy_naming_an_unknown_node():
    from step_lang import LowestIndexFirst

    message = "merge_policy names 'nope', which is no EagerMerge node of graph 'g' (EagerMerge nodes: none)"
    with expect(StepValueError, message):
        interpret(_load_store(), merge_policy={"nope": LowestIndexFirst()})


@pytest.mark.parametrize("runner", RUNNERS)
def test_two_stores_to_one_tensor(runner):
    g = _load_store()
    LinearOffChipStore(
        LinearOffChipLoad(g.tensors["a"], tile=(2, 2), name="ld2").out, g.tensors["c"], name="st2"
    )
    message = (
        "tensor 'c' is written by 2 stores: st, st2; a LinearOffChipStore writes every tile of "
        "its tensor, so it must be the tensor's only store"
    )
    with expect(StepGraphError, message):
        RUNNERS[runner](g, {"a": np.ones((4, 4), np.float32)})


def test_rtl_profile_of_a_config_that_is_no_hwconfig():
    with expect(TypeError, "RtlProfile: config must be a HwConfig, not 'int16'"):
        RtlProfile("int16")


@pytest.mark.parametrize("runner", RUNNERS)
def test_memory_that_is_no_mapping(runner):
    exc = StepValueError if runner == "interpret" else TypeError
    with expect(exc, "memory must map tensor names to arrays, not list"):
        RUNNERS[runner](_load_store(), [np.ones((4, 4), np.float32)])
