"""One's own graph on the command line (``step ... path/to/file.py:function``) and
``step validate`` (``step_hw.cosim.validate``)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from stepcli.main import main
from tests.test_tutorial import DOC, python_blocks

STEP = Path(sys.executable).with_name("step")


def graph_file(folder: Path) -> Path:
    """The tutorial's graph (its first block, which defines ``build``) as ``mygraph.py``."""
    path = folder / "mygraph.py"
    path.write_text(python_blocks(DOC.read_text())[0])
    return path


def check(capsys, argv: list[str], message: str) -> None:
    """``step *argv`` exits 2 with the one line ``step: error: <message>``."""
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert re.fullmatch(r"step: error: " + message + "\n", err), err


@pytest.mark.parametrize("command", ["metrics", "sim", "graph", "rtl", "validate"])
def test_bad_graph_files_are_one_line_errors(tmp_path, monkeypatch, capsys, command):
    monkeypatch.chdir(tmp_path)
    graph_file(tmp_path)
    (tmp_path / "other.py").write_text(
        "def build():\n    return 42\n\nNOT_A_FUNCTION = 1\n\n"
        "def needs(x, y=1):\n    return x\n\ndef buggy():\n    return undefined + 1\n"
    )
    (tmp_path / "broken.py").write_text("def build(:\n")
    check(capsys, [command, "nope.py:build"], r"graph file nope\.py does not exist \(in .*\)")
    check(capsys, [command, "mygraph.py:make"],
          r"graph file mygraph\.py has no function 'make'; it defines build")  # fmt: skip
    check(capsys, [command, "other.py:build"],
          r"other\.py:build returned an int, not a Graph or a tuple \(Graph, memory\) or "
          r"\(Graph, memory, inputs\)")  # fmt: skip
    check(capsys, [command, "other.py:NOT_A_FUNCTION"],
          r"other\.py:NOT_A_FUNCTION: 'NOT_A_FUNCTION' is an int, not a function")  # fmt: skip
    check(capsys, [command, "other.py:needs"],
          r"other\.py:needs takes arguments \(x\); the command calls a function of none")  # fmt: skip
    check(capsys, [command, "other.py:buggy"],
          r"other\.py:buggy raised NameError: name 'undefined' is not defined \(at other\.py "
          r"line 10\)")  # fmt: skip
    check(capsys, [command, "broken.py:build"],
          r"graph file broken\.py failed to import: SyntaxError: .*")  # fmt: skip
    check(capsys, [command, "mygraph.py:1x"],
          r"mygraph\.py:1x: '1x' is not a function name \(expected path/to/file\.py:function\)")  # fmt: skip


def test_a_graph_file_takes_no_parameters(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    graph_file(tmp_path)
    check(capsys, ["metrics", "mygraph.py:build", "-p", "batch=4"],
          r"mygraph\.py:build: a graph file takes no -p parameters")  # fmt: skip


def test_metrics_sim_graph_rtl_of_a_graph_file(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    graph_file(tmp_path)
    assert main(["metrics", "mygraph.py:build", "--evaluate"]) == 0
    assert "add" in capsys.readouterr().out
    assert main(["sim", "mygraph.py:build", "--functional", "--json"]) == 0
    assert '"cycles": ' in capsys.readouterr().out
    assert main(["graph", "mygraph.py:build"]) == 0
    assert (tmp_path / "build" / "graphs" / "bias_add.svg").is_file()
    assert main(["rtl", "mygraph.py:build", "-o", "rtl"]) == 0
    assert (tmp_path / "rtl" / "bias_add.v").read_text().startswith("/*")
    assert '"src_x"' in (tmp_path / "rtl" / "bias_add.json").read_text()


def test_step_validate_on_a_graph_file_outside_the_project(tmp_path):
    """``step validate mygraph.py:build --waves`` from a folder outside the project: the report,
    exit status 0, and a waveform in the run's folder."""
    graph_file(tmp_path)
    out = subprocess.run([str(STEP), "validate", "mygraph.py:build", "--waves"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "outputs   equal: interpreter = paper = rtl profile = RTL (y)" in out.stdout
    assert re.search(r"^cycles    RTL \d+ \| rtl profile \d+ \([+-]\d+\.\d%\)", out.stdout, re.M)
    assert out.stdout.rstrip().endswith("verdict   OK")
    assert re.search(r"^ran bias_add \(validate, always\): \d+ cycles in", out.stderr, re.M)
    folder = Path(re.search(r"files: (\S+)", out.stdout).group(1))
    assert (folder / "dump.fst").is_file() or (folder / "dump.vcd").is_file()


def test_step_validate_on_the_fast_tier_with_an_hbm_memory(tmp_path):
    """``--tier fast --memory hbm``: the graph's Source as a ROM inside the simulation, the
    memory 64 cycles away; the rtl profile is configured with the same memory and agrees."""
    graph_file(tmp_path)
    out = subprocess.run([str(STEP), "validate", "mygraph.py:build", "--tier", "fast", "--memory", "hbm"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "outputs   equal: interpreter = paper = rtl profile = RTL (y)" in out.stdout
    rtl, profile = map(
        int, re.search(r"^cycles    RTL (\d+) \| rtl profile (\d+)", out.stdout, re.M).groups()
    )
    assert rtl > 64 and abs(rtl - profile) <= 0.02 * rtl
    assert re.search(
        r"^ran bias_add \(validate, always, fast tier\): \d+ cycles in", out.stderr, re.M
    )
    assert out.stdout.rstrip().endswith("verdict   OK")


def test_step_validate_memory_needs_the_fast_tier(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    graph_file(tmp_path)
    check(capsys, ["validate", "mygraph.py:build", "--memory", "hbm"],
          r"--memory hbm needs --tier fast \(the axi tier's RAM is axi_ram\)")  # fmt: skip


def _tutorial_graph():
    namespace: dict = {}
    exec(python_blocks(DOC.read_text())[0], namespace)
    return namespace["build"]()


def test_the_first_diverging_stream_is_the_earliest():
    from step_hw.cosim.report import _divergence

    graph, _, _ = _tutorial_graph()
    sends = {"x.out": [1.0, 1.0, 2.0, 3.0], "load_b.out": [5.0, 6.0, 9.0, 10.0]}
    trace = {
        "q_x_out_add_0": {"stream": "x.out", "consumer": "add", "depth": 3, "push": [1, 2, 3, 4]},
        "q_load_b_out_add_1": {"stream": "load_b.out", "consumer": "add", "push": [5, 6, 7]},
        "m_axi_load_b.ar": [0, 1],
    }
    div, compared = _divergence(graph, sends, trace)
    assert compared == 2
    assert (div.stream, div.producer, div.consumer, div.index) == ("x.out", "x", "add", 1)
    assert (div.sim_cycle, div.rtl_cycle, div.streams) == (1, 2, 2)
    assert str(div) == (
        "'x.out' (x -> add), token 1: rtl profile cycle 1, RTL cycle 2 (2 of 2 streams diverge)"
    )
    assert _divergence(graph, {"x.out": [1.0]}, {"q": {"stream": "x.out", "consumer": "add",
                                                       "push": [1]}}) == (None, 1)  # fmt: skip


def test_a_report_names_the_first_differing_element():
    import numpy as np

    from step_hw.config import HwConfig
    from step_hw.cosim import Mismatch, ValidationReport

    r = ValidationReport("g", HwConfig(), "always", ["y"], [], paper_cycles=40,
                         rtl_profile_cycles=49, rtl_cycles=50,
                         mismatch=Mismatch("y", (3, 1), np.int16(12), np.int16(13), "RTL"))  # fmt: skip
    text = str(r)
    assert "outputs   DIFFER: y[3, 1]: interpreter 12, RTL 13" in text
    got = r.to_json()
    assert json.loads(json.dumps(got)) == got  # plain JSON values
    assert got["mismatch"] == {"what": "y", "index": [3, 1], "reader": "RTL",
                               "interpreter": 12, "got": 13}  # fmt: skip
    assert (got["ok"], got["rtl_cycles"], got["paper_profile"]) == (
        False,
        50,
        {"cycles": 40, "error": -0.2},
    )
    assert got["rtl_profile"] == {"cycles": 49, "error": -0.02}
    # a Sink's token that differs: a tile (and a Zip's pair) against a stop token, as JSON
    from step_lang.tokens import Stop

    tile = np.array([[1, 2]], np.int16)
    r.mismatch = Mismatch("sink y", (2,), (tile, tile), Stop(1), "RTL")
    got = json.loads(json.dumps(r.to_json()))["mismatch"]
    assert (got["interpreter"], got["got"]) == ([[[1, 2]], [[1, 2]]], str(Stop(1)))
    assert "cycles    RTL 50 | rtl profile 49 (-2.0%) | paper profile 40 (-20.0%)" in text
    assert text.endswith("verdict   NOT OK") and not r.ok
    none = ValidationReport("g", HwConfig(), "always", ["y"], [], 40, 49,
                            rtl_error="not elaborated: Map 'f': no hardware")  # fmt: skip
    assert "RTL       not elaborated: Map 'f': no hardware" in str(none) and not none.ok


def test_each_reader_is_compared_with_the_merge_order_it_chose():
    """An EagerMerge's output order is the arrival order: ``validate`` compares each reader with
    the interpreter replaying the order that reader's merge chose (its ``sel`` tokens)."""
    import numpy as np

    from step_hw.config import HwConfig
    from step_hw.cosim.report import _References
    from step_lang import (
        DONE,
        EagerMerge,
        Graph,
        Map,
        Parallelize,
        Sink,
        Source,
        StreamType,
        Tile,
        numerics,
    )
    from step_lang.passes import lower

    g = Graph("dealt")
    x = Source(g, StreamType(Tile("int16", 1, 2), (4,)), name="x").out
    fns = numerics.functions(HwConfig())
    parts = Parallelize(x, 2, 0, name="deal").outputs  # x0, x2 to out0; x1, x3 to out1
    merge = EagerMerge([Map(p, p, fn=fns.add, name=f"twice{i}").out for i, p in enumerate(parts)],
                       name="merge")  # fmt: skip
    Sink(merge.outputs[0], name="y")
    Sink(merge.outputs[1], name="order")
    inputs = {"x": [np.full((1, 2), v, np.int16) for v in (1, 2, 3, 4)] + [DONE]}
    refs = _References(g, {}, inputs, lower(g), {"y": "merge.data", "order": "merge.sel"})

    def sel(*order):
        return [np.eye(2, dtype=bool)[i] for i in order] + [DONE]

    for order, want in [((0, 0, 1, 1), (2, 6, 4, 8)), ((1, 0, 1, 0), (4, 2, 8, 6))]:
        _, sinks = refs.of({"merge.sel": sel(*order)})
        assert [int(t[0, 0]) for t in sinks["y"][:-1]] == list(want)
        assert [int(np.flatnonzero(t)[0]) for t in sinks["order"][:-1]] == list(order)
    assert len(refs._runs) == 3  # the plain run, then one per distinct order
    refs.of({"merge.sel": sel(1, 0, 1, 0)})
    assert len(refs._runs) == 3
    # An order that cannot be replayed (three chunks from input 1, which has two; a selector
    # that is not one-hot): the plain run, from which such a reader's tokens differ.
    plain = refs.of({})
    for bad in (sel(1, 1, 1, 0), [np.array([True, True]), DONE]):
        assert refs.of({"merge.sel": bad})[0] is plain[0]


def test_a_zips_pairs_compare_item_by_item():
    import numpy as np

    from step_hw.cosim.report import _tokens_equal

    a, b = np.arange(4).reshape(2, 2), np.ones((2, 2), int)
    assert _tokens_equal((a, b), (a.copy(), b.copy()))
    assert not _tokens_equal((a, b), (a, a))
    assert not _tokens_equal((a, b), a) and not _tokens_equal(a, (a, b))
    assert not _tokens_equal((a, b), (a,))


def test_a_sweep_of_a_graph_file_feeds_its_sources(tmp_path, monkeypatch, capsys):
    """A sweep spec naming a Source-driven graph file runs its one point with the file's Source
    tokens (it ran without them and failed: "Source 'x' has no tokens")."""
    import csv

    from sim import simulate

    monkeypatch.chdir(tmp_path)
    graph_file(tmp_path)
    (tmp_path / "one.toml").write_text('example = "mygraph.py:build"\noutput = "one.csv"\n')
    assert main(["sweep", "one.toml", "-q", "-j", "1"]) == 0
    (row,) = csv.DictReader((tmp_path / "one.csv").read_text().splitlines())
    graph, memory, inputs = _tutorial_graph()
    assert int(row["cycles"]) == simulate(graph, memory, inputs=inputs).cycles > 0
