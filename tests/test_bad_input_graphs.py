"""Bad input to the graph-building API, hierarchical tiling, ``simulate`` and graph files: the
cases a second audit found silently coerced, ignored or failing with a raw traceback. Each
raises one line naming the parameter and the value (or, for numpy constants, now computes the
value a Python integer gives)."""

from __future__ import annotations

import re

import numpy as np
import pytest
import sympy as sp

from sim import simulate
from step_lang import (
    Graph,
    LinearOffChipLoad,
    Map,
    Sink,
    Source,
    StepGraphError,
    StepTypeError,
    StepValueError,
    StreamType,
    Tile,
    interpret,
)
from step_lang import functions as F
from step_lang.dims import as_dim
from step_lang.hier_tiling import hier_tile, hw_split
from step_lang.types import dtype
from stepcli.hardware import hardware_point, hw_settings, parse_hw_tile
from stepcli.registry import UsageError
from tests.test_bad_input_lang import _scalars, src


def raises(kind: type[Exception], message: str):
    return pytest.raises(kind, match="^" + re.escape(message) + "$")


# -- numpy integer constants compute as Python integers -------------------------------------------


def _one_scalar(fn, *inputs: list[int]) -> int:
    """``fn`` mapped over ``[1,1]`` int32 scalar streams holding ``inputs``; its one output."""
    g = Graph("g")
    streams = [src(g, (1,), Tile("int32", 1, 1), name=f"s{k}") for k in range(len(inputs))]
    m = Map(*streams, fn=fn, name="m")
    Sink(m.out, name="out")
    res = interpret(g, inputs={f"s{k}": _scalars(v) for k, v in enumerate(inputs)})
    return int(next(t for t in res.tokens(m.out) if isinstance(t, np.ndarray))[0, 0])


@pytest.mark.parametrize(
    ("fn", "inputs", "want"),
    [
        (F.scalar_op("mul", np.int8(100)), ([3],), 300),  # was 44: int8 arithmetic wrapped
        (F.scalar_op("sub", np.uint8(5)), ([3],), -2),  # was 254
        (F.cache_write_addr(np.int8(100)), ([3], [2]), 301),  # was 46
    ],
)
def test_numpy_integer_constants_do_not_wrap(fn, inputs, want):
    assert _one_scalar(fn, *inputs) == want


def test_numpy_integer_parameters_become_python_ints():
    assert F.scalar_op("add", np.int16(7)).params == (("add", 7),)
    assert type(F.scalar_op("add", np.int16(7)).params[0][1]) is int
    assert all(type(v) is int for _, v in F.block_row_offsets(np.int8(16), 2, np.int64(3)).params)


def test_transpose_b_must_be_a_bool():
    with raises(TypeError, "function 'matmul': transpose_b must be a bool, not 'no'"):
        F.matmul("no")
    with raises(TypeError, "function 'matmul': transpose_b must be a bool, not 1"):
        F.matmul_acc(1)
    assert F.matmul(np.bool_(True)).name == "matmul_t" and F.matmul().name == "matmul"


# -- types, dims and names ------------------------------------------------------------------------


@pytest.mark.parametrize("value", [None, 3, object()])
def test_dtype_none_is_no_dtype(value):
    with pytest.raises(ValueError, match=f"^unknown dtype {re.escape(repr(value))}; known: int8, "):
        dtype(value)
    with pytest.raises(ValueError, match=r"^unknown dtype None"):
        Graph("g").tensor("n", (4, 4), None)


@pytest.mark.parametrize("value", ["16", "-1", "", "n m", "a\n", "2x"])
def test_a_string_dim_must_be_an_identifier(value):
    message = f"tile rows must be an int or an identifier naming a dynamic dim, not {value!r}"
    with raises(ValueError, message):
        as_dim(value, what="tile rows")


@pytest.mark.parametrize("value", [sp.Rational(1, 2), sp.Float(2.5), sp.pi])
def test_a_sympy_number_must_be_whole(value):
    with raises(ValueError, f"dimension must be a whole number of elements, not {value}"):
        as_dim(value)


def test_dims_that_stay_accepted():
    n = sp.Symbol("n", integer=True, nonnegative=True)
    assert as_dim("n") == n and as_dim(sp.Integer(4)) == 4 and as_dim(n + 1) == n + 1
    assert Tile("float32", "n", 16).cols == 16


def test_stream_type_checks_its_element_and_shape():
    with raises(TypeError, "StreamType elem must be an element type (Tile, Selector, Buffer, ...), not 'float32'"):  # fmt: skip
        StreamType("float32", (4,))
    with raises(TypeError, "StreamType shape must be a sequence of dims, not 8"):
        StreamType(Tile("float32", 4, 4), 8)


def test_a_tensor_shape_must_be_a_sequence():
    with raises(StepGraphError, "tensor 'd' shape must be a sequence of ints, not 4"):
        Graph("g").tensor("d", 4)


@pytest.mark.parametrize(
    "make",
    [
        lambda: Graph("top\n"),
        lambda: Graph("g").tensor("x\n", (4, 4)),
        lambda: Source(Graph("g"), StreamType(Tile("float32", 1, 1), (2,)), name="a\n"),
    ],
    ids=["graph", "tensor", "node"],
)
def test_a_name_may_not_end_in_a_newline(make):
    with pytest.raises(StepGraphError, match=r"name must be an identifier.*\\n'"):
        make()


# -- simulate --------------------------------------------------------------------------------------


def _passthrough() -> tuple[Graph, dict]:
    g = Graph("g")
    Sink(src(g, (2,), Tile("int32", 1, 1), name="a"), name="out")
    return g, {"a": _scalars([1, 2])}


@pytest.mark.parametrize(("flag", "value"), [("functional", None), ("functional", "no"), ("trace", "yes")])  # fmt: skip
def test_simulate_flags_are_booleans(flag, value):
    g, inputs = _passthrough()
    with raises(TypeError, f"simulate: {flag} must be True or False, not {value!r}"):
        simulate(g, inputs=inputs, **{flag: value})


@pytest.mark.parametrize("value", ["ab", [("a.out", 2)], []])
def test_simulate_queue_depths_must_be_a_mapping(value):
    g, inputs = _passthrough()
    kind = type(value).__name__
    with raises(StepValueError, f"queue_depths must map stream names to depths, not {kind}"):
        simulate(g, inputs=inputs, queue_depths=value)
    assert simulate(g, inputs=inputs, queue_depths={"a.out": 2}).cycles > 0


# -- hierarchical tiling ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", [None, "g"])
def test_hier_tile_needs_a_graph(value):
    with raises(StepTypeError, f"hier_tile: graph must be a step_lang Graph, not {value!r}"):
        hier_tile(value, 16, 16)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((20, 0), "hw_split: hw must be an integer of at least 1, not 0"),
        ((20, -3), "hw_split: hw must be an integer of at least 1, not -3"),
        ((20.5, 16), "hw_split: extent must be an integer of at least 0, not 20.5"),
        ((-1, 16), "hw_split: extent must be an integer of at least 0, not -1"),
    ],
)
def test_hw_split_checks_its_arguments(args, message):
    with raises(StepTypeError, message):
        hw_split(*args)
    assert (hw_split(20, 16), hw_split(0, 16), hw_split(12, 16)) == (10, 0, 12)


def test_tiling_a_tiled_graph_keeps_its_queue_scale():
    """hier_tile of a graph tiled before (a graph file that returns one, run with --hw-tile)
    kept none of its queue scales: every blocked queue fell back to the default depth."""
    g = Graph("g")
    x = g.tensor("x", (64, 32), "bfloat16")
    y = g.tensor("y", (64, 32), "bfloat16")
    from step_lang import LinearOffChipStore

    load = LinearOffChipLoad(x, tile=(32, 32), name="load_x")
    LinearOffChipStore(Map(load.out, fn=F.silu, name="act").out, y, name="store")
    once = hier_tile(g, 16, 16)
    twice = hier_tile(once, 16, 16)
    assert once.queue_scale["load_x.out"] == 4
    assert twice.queue_scale == once.queue_scale
    assert twice.queue_depth("load_x.out", 2) == once.queue_depth("load_x.out", 2) == 8


# -- the command line's hardware options -----------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "²x2",
        "1_6x16",
        "+16x16",
        pytest.param("1" * 5001 + "x16", id="5001-digits"),
        "16x16x",
        " 16x16",
    ],
)
def test_parse_hw_tile_takes_ascii_digits_only(text):
    with raises(
        UsageError,
        f"must be ROWSxCOLS of positive integers of at most 9 digits, e.g. 16x16, not {text!r}",
    ):
        parse_hw_tile(text)
    assert parse_hw_tile("16x32") == (16, 32)


@pytest.mark.parametrize("raw", ["1_0", "+64", "٦٤", "1e3"])
def test_hw_settings_take_ascii_digits_only(raw):
    with raises(UsageError, f"--hw lanes must be an integer of at most 9 digits, not {raw!r}"):
        hw_settings([f"lanes={raw}"])


@pytest.mark.parametrize(("value", "shown"), [("64", "'64'"), (True, "True"), (64.0, "64.0")])
def test_a_hardware_sweep_setting_must_be_a_toml_integer(value, shown):
    g, _ = _passthrough()
    with raises(UsageError, f"[hardware] lanes must be an integer, not {shown}"):
        hardware_point(g, {"lanes": value})


# -- graph files -----------------------------------------------------------------------------------

GRAPH_FILE = """
import numpy as np
import sys
from step_lang import Graph, LinearOffChipLoad, LinearOffChipStore

def _graph():
    g = Graph("g")
    x = g.tensor("x", (8, 8), "float32")
    y = g.tensor("y", (8, 8), "float32")
    LinearOffChipStore(LinearOffChipLoad(x, tile=(8, 8), name="ld").out, y, name="st")
    return g

def bad_name():
    return _graph(), {"zz": np.zeros((8, 8), np.float32)}

def bad_shape():
    return _graph(), {"x": np.zeros((4, 8), np.float32)}

def exits():
    sys.exit(3)
"""


@pytest.mark.parametrize(
    ("function", "message"),
    [
        ("bad_name", "memory holds zz, which graph 'g' does not declare"),
        ("bad_shape", "tensor 'x': array float32 [4, 8], declared float32 [8, 8]"),
        ("exits", "called sys.exit(3) (at g.py line 20)"),
    ],
)
@pytest.mark.parametrize("command", ["metrics", "graph"])
def test_graph_file_memory_is_checked_by_every_command(
    tmp_path, capsys, command, function, message
):
    from stepcli.main import main

    (tmp_path / "g.py").write_text(GRAPH_FILE)
    target = f"{tmp_path / 'g.py'}:{function}"
    argv = [command, target] + (["-o", str(tmp_path / "out.dot")] if command == "graph" else [])
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"step: error: {target}"), err
    assert err.rstrip("\n").endswith(message), err
