"""step_hw.design_key: a cache key for the design a graph elaborates to, without elaborating."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from examples import attention, moe, swiglu
from step_hw.config import HwConfig
from step_hw.design_key import design_key
from step_hw.run_time_depths import shared_capacities
from step_lang import Graph, Map, Sink, Source, StreamType, Tile
from step_lang import functions as F
from step_lang.types import int32

TOP = "step_top"


def test_equal_graphs_share_a_key_across_processes():
    """Also with functions whose code holds a comprehension (the MoE's and attention's
    ``retile_rows_masked``: a nested code object, whose ``repr`` shows an address)."""
    makes = {"swiglu": swiglu.hardware, "moe": moe.hardware, "attention": attention.hardware}
    keys = [design_key(make(), HwConfig(), TOP) for make in makes.values()]
    assert keys == [design_key(make(), HwConfig(), TOP) for make in makes.values()]
    assert all(len(k) == 32 for k in keys)
    code = (
        "from examples import attention, moe, swiglu; from step_hw.config import HwConfig; "
        "from step_hw.design_key import design_key; "
        f"print(*(design_key(m.hardware(), HwConfig(), 'step_top') for m in ({', '.join(makes)})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == keys


def test_whatever_changes_the_verilog_changes_the_key():
    base = design_key(swiglu.hardware(), HwConfig(), TOP)
    deeper = swiglu.hardware()
    deeper.queue_depths["load_x.out"] = 5
    keys = {
        base,
        design_key(deeper, HwConfig(), TOP),
        design_key(swiglu.hardware(), HwConfig(queue_depth=4), TOP),
        design_key(swiglu.hardware(), HwConfig(axi_ports=1), TOP),
        design_key(swiglu.hardware(), HwConfig(), "other_top"),
        design_key(swiglu.hardware(tile_b=2), HwConfig(), TOP),
        design_key(moe.hardware(), HwConfig(), TOP),
    }
    assert len(keys) == 7 and None not in keys


def _doubling(fn_apply) -> Graph:
    g = Graph("g")
    x = Source(g, StreamType(Tile(int32, 1, 1), (2,)), name="x")
    fn = F.MapFn("twice", 1, lambda err, t: t, lambda t: 0, fn_apply)
    Sink(Map(x.out, fn=fn, name="m").out)
    return g


def test_functions_are_described_by_their_code_and_closure():
    def scaled(k):
        return lambda out, t: np.asarray(t) * k

    twice = design_key(_doubling(lambda out, t: np.asarray(t) * 2), HwConfig(), TOP)
    thrice = design_key(_doubling(lambda out, t: np.asarray(t) * 3), HwConfig(), TOP)
    assert None not in (twice, thrice) and twice != thrice
    assert design_key(_doubling(scaled(2)), HwConfig(), TOP) != design_key(
        _doubling(scaled(3)), HwConfig(), TOP
    )


def test_functions_that_call_other_functions_differ():
    """The same bytecode calling another function (``np.exp``, ``np.log``) is another key."""
    exp = design_key(_doubling(lambda out, t: np.exp(t)), HwConfig(), TOP)
    log = design_key(_doubling(lambda out, t: np.log(t)), HwConfig(), TOP)
    assert None not in (exp, log) and exp != log


def test_a_value_without_a_stable_description_is_not_cached():
    class Opaque:  # its repr shows an address
        pass

    thing = Opaque()
    assert design_key(_doubling(lambda out, t: (thing, t)[1]), HwConfig(), TOP) is None


def test_an_operator_defined_outside_the_library_is_not_cached():
    """Its hardware block is code outside ``step_lang`` and ``step_hw``, whose sources the key
    hashes: a change to it would not change the key."""

    class MyMap(Map):  # a user's operator (same behaviour, a class of its own)
        pass

    g = Graph("g")
    x = Source(g, StreamType(Tile(int32, 1, 1), (2,)), name="x")
    Sink(MyMap(x.out, fn=F.MapFn("id", 1, lambda err, t: t, lambda t: 0, None), name="m").out)
    assert design_key(g, HwConfig(), TOP) is None
    assert design_key(_doubling(lambda out, t: t), HwConfig(), TOP) is not None


def test_a_depth_that_builds_the_same_queues_keeps_the_key():
    """A depth set to its default, or on a stream without a queue (a Feedback's input: a wire),
    builds the same hardware, so the key is the same: a design's default and sized graphs
    (``make validate``) are converted once, not once per setting. The Verilog says so too."""
    from step_hw.elaborate import _convert
    from step_lang.passes import lower

    explicit = swiglu.hardware()
    explicit.queue_depths["load_x.out"] = HwConfig().queue_depth
    assert design_key(explicit, HwConfig(), TOP) == design_key(swiglu.hardware(), HwConfig(), TOP)
    assert _convert(explicit, HwConfig(), TOP) == _convert(swiglu.hardware(), HwConfig(), TOP)
    wired = attention.hardware("dynamic")
    wired.queue_depths["merge_done.data"] = 1
    assert any(
        n.is_feedback and n.inputs[0].name == "merge_done.data" for n in lower(wired).nodes.values()
    )
    assert design_key(wired, HwConfig(), TOP) == design_key(
        attention.hardware("dynamic"), HwConfig(), TOP
    )
    # a depth that does change a queue still changes the key
    explicit.queue_depths["load_x.out"] = HwConfig().queue_depth + 1
    assert design_key(explicit, HwConfig(), TOP) != design_key(swiglu.hardware(), HwConfig(), TOP)


def test_run_time_depths_leave_the_depths_out_of_the_key():
    """The depth of a queue named in ``HwConfig.queue_capacity`` is an input of the design, not
    its hardware: a graph at two such depths has one key; the capacities are part of it, and
    every other queue's depth too."""

    def at(depth: int) -> Graph:
        g = swiglu.hardware()
        g.queue_depths["load_x.out"] = depth
        return g

    # load_x.out and, lowered, the outputs of the Broadcast that copies it
    capacities = shared_capacities([at(1), at(5)], HwConfig())
    assert len(capacities) == 3 and set(capacities.values()) == {5}
    run_time = HwConfig(queue_capacity=capacities)
    assert design_key(at(1), run_time, "t") == design_key(at(5), run_time, "t")
    # a run-time depth left out: its queue (here a Broadcast output's) is built in
    partial = HwConfig(queue_capacity={"load_x.out": 5})
    assert design_key(at(1), partial, "t") != design_key(at(5), partial, "t")
    assert design_key(at(1), HwConfig(), "t") != design_key(at(5), HwConfig(), "t")
    assert design_key(at(1), run_time, "t") != design_key(
        at(1), HwConfig(queue_capacity={**capacities, "load_x.out": 6}), "t"
    )
    assert design_key(at(1), run_time, "t") != design_key(at(1), HwConfig(), "t")
    other = at(1)
    other.queue_depths["up.out"] = 2
    assert design_key(other, run_time, "t") != design_key(at(1), run_time, "t")
    scaled = at(1)
    scaled.queue_scale["load_up.out"] = 2
    assert design_key(scaled, run_time, "t") != design_key(at(1), run_time, "t")


def test_the_source_digest_ignores_documentation_and_layout_but_not_code(tmp_path):
    from step_hw.design_key import source_digest

    package = tmp_path / "pkg"
    package.mkdir()
    code = '''"""A module."""

def f(x):
    """Twice x."""
    return 2 * x  # doubled
'''
    (package / "m.py").write_text(code)
    base = source_digest([package], tmp_path)
    same = {
        "docstring": code.replace("Twice x.", "Two times x, documented at length."),
        "comment": code.replace("# doubled", "# times two"),
        "layout": code.replace("return 2 * x", "return (2\n            * x)"),
        "no docstrings": code.replace('"""A module."""\n', "").replace('    """Twice x."""\n', ""),
    }
    for change, text in same.items():
        (package / "m.py").write_text(text)
        assert source_digest([package], tmp_path) == base, change
    other = {
        "constant": code.replace("2 * x", "3 * x"),
        "string that is code": code.replace("return 2 * x", 'return "2" * x'),
        "name": code.replace("def f", "def g"),
    }
    for change, text in other.items():
        (package / "m.py").write_text(text)
        assert source_digest([package], tmp_path) != base, change
    (package / "m.py").write_text(code)
    (package / "n.py").write_text(code)  # another file, or the same code under another path
    assert source_digest([package], tmp_path) != base
    (package / "n.py").unlink()
    (package / "m.py").rename(package / "o.py")
    assert source_digest([package], tmp_path) != base


def test_the_source_digest_memo_parses_a_file_once_per_content(tmp_path, monkeypatch):
    import json

    from step_hw import design_key as dk

    package = tmp_path / "pkg"
    package.mkdir()
    (package / "m.py").write_text("def f(x):\n    return 2 * x\n")
    (package / "n.py").write_text("Y = 3\n")
    memo = tmp_path / "build" / "memo.json"
    base = dk.source_digest([package], tmp_path)
    assert dk.source_digest([package], tmp_path, memo=memo) == base
    assert len(json.loads(memo.read_text())) == 2  # a digest per file content

    def no_parsing(*args, **kwargs):
        raise AssertionError("parsed a file the memo knows")

    with monkeypatch.context() as m:
        m.setattr(dk.ast, "parse", no_parsing)
        assert dk.source_digest([package], tmp_path, memo=memo) == base
        (package / "n.py").write_text("Y = 4\n")  # a new content is parsed
        with pytest.raises(AssertionError, match="parsed a file the memo knows"):
            dk.source_digest([package], tmp_path, memo=memo)
    changed = dk.source_digest([package], tmp_path, memo=memo)
    assert changed != base and changed == dk.source_digest([package], tmp_path)
    assert len(json.loads(memo.read_text())) == 3  # the old content's entry stays
    memo.write_text("{not json")  # an unreadable memo counts as empty
    assert dk.source_digest([package], tmp_path, memo=memo) == changed
    monkeypatch.setattr(dk, "_MEMO_ENTRIES", 2)
    (package / "m.py").write_text("def f(x):\n    return 5 * x\n")
    dk.source_digest([package], tmp_path, memo=memo)
    assert len(json.loads(memo.read_text())) == 2  # the newest, the files just read
