"""One's own graph on the hardware the command line sets: ``--hw-tile`` and ``--hw KEY=VALUE``
on ``step rtl``, ``sim --hardware``, ``size-queues`` and ``validate`` (``stepcli.hardware``)."""

from __future__ import annotations

import csv
import json
import re
import subprocess
from pathlib import Path

import pytest

from step_hw.config import HwConfig
from stepcli.hardware import HW_SETTINGS
from stepcli.main import main
from tests.test_step_validate import STEP, check

# A layer written with 16 x 8 tiles: larger than the default 4 x 4 hardware tile.
GRAPH = """
import numpy as np

from step_hw.config import HwConfig
from step_lang import Graph, LinearOffChipLoad, LinearOffChipStore, Map, numerics


def build():
    fx = numerics.functions(HwConfig())
    g = Graph("wide_add")
    x = g.tensor("x", (32, 8), "int16")
    b = g.tensor("b", (32, 8), "int16")
    y = g.tensor("y", (32, 8), "int16")
    lx = LinearOffChipLoad(x, tile=(16, 8), out_shape=(2,), stride=(1,), name="load_x")
    lb = LinearOffChipLoad(b, tile=(16, 8), out_shape=(2,), stride=(1,), name="load_b")
    add = Map(lx.out, lb.out, fn=fx.add, name="add")
    LinearOffChipStore(add.out, y, name="store_y")
    rng = np.random.default_rng(1)
    memory = {n: rng.integers(-256, 256, (32, 8)).astype(np.int16) for n in ("x", "b")}
    return g, memory
"""


@pytest.fixture
def wide(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "wide.py"
    path.write_text(GRAPH)
    return path


def _graph_and_memory():
    namespace: dict = {}
    exec(GRAPH, namespace)
    return namespace["build"]()


def test_the_settings_are_hwconfigs_integer_parameters():
    assert HW_SETTINGS == (
        "tile_rows", "tile_cols", "lanes", "queue_depth", "mem_port_elems", "axi_data_width",
        "axi_addr_width", "axi_id_width", "max_outstanding", "level_bits", "axi_ports",
        "dyn_tile_rows",
    )  # fmt: skip


@pytest.mark.parametrize(
    "argv, message",
    [
        (["rtl", "wide.py:build"],
         r"LinearOffChipLoad 'load_x', port 'out': tile Tile<int16, 16x8> does not fit the "
         r"configured 4x4 tile \(--hw-tile ROWSxCOLS rewrites a graph file onto hardware tiles "
         r"of that size\)"),
        (["sim", "wide.py:build", "--hardware"],
         r"LinearOffChipLoad 'load_x', port 'out': tile Tile<int16, 16x8> does not fit the "
         r"configured 4x4 tile \(--hw-tile ROWSxCOLS .*\)"),
        (["rtl", "wide.py:build", "--hw-tile", "8x8", "--hw", "tile_cols=4"],
         r"--hw tile_cols=4 contradicts --hw-tile 8x8"),
        (["rtl", "wide.py:build", "--hw", "lanes=0"],
         r"--hw: HwConfig\.lanes must be a positive integer, not 0"),
        (["rtl", "wide.py:build", "--hw", "axi_data_width=100"],
         r"--hw: HwConfig\.axi_data_width must be 32, 64, 128, 256 or 512, not 100"),
        (["rtl", "wide.py:build", "--hw", "lanes=1.5"], r"--hw lanes must be an integer of at most 9 digits, not '1\.5'"),
        (["rtl", "wide.py:build", "--hw", "lanes=1_6"],
         r"--hw lanes must be an integer of at most 9 digits, not '1_6'"),
        (["rtl", "wide.py:build", "--hw", "lanes=10000000000"],
         r"--hw lanes must be an integer of at most 9 digits, not '10000000000'"),
        (["rtl", "wide.py:build", "--hw", "axi_ports=two"],
         r"--hw axi_ports must be an integer of at most 9 digits or none, not 'two'"),
        (["rtl", "wide.py:build", "--hw", "lanes"], r"--hw 'lanes': expected KEY=VALUE, e\.g\. lanes=64"),
        (["rtl", "wide.py:build", "--hw", "=4"], r"--hw '=4': expected KEY=VALUE, e\.g\. lanes=64"),
        (["rtl", "wide.py:build", "--hw", "lanes=2", "--hw", "lanes=3"],
         r"--hw lanes given twice \(2 and 3\)"),
        (["rtl", "wide.py:build", "--hw", "speed=9"],
         r"--hw speed: HwConfig has no such setting; settings: tile_rows, tile_cols, lanes, .*"),
        (["rtl", "wide.py:build", "--hw", "elem_dtype=int8"],
         r"--hw elem_dtype: the number format is the graph's; build its functions with "
         r"numerics\.functions\(config\)"),
        (["rtl", "wide.py:build", "--hw", "queue_capacity=4"],
         r"--hw queue_capacity: a run-time setting of one build, given in Python"),
        (["sim", "wide.py:build", "--hw", "lanes=4"],
         r"--hw sets the hardware of --hardware; add --hardware"),
        (["sim", "wide.py:build", "--hardware", "--schedule", "coarse"],
         r"--schedule picks a hardware-size example's schedule, not a file's"),
        (["sim", "wide.py:build", "--memory", "hbm"],
         r"--memory hbm is the hardware's memory; add --hardware"),
        (["size-queues", "wide.py:build", "--memory", "hbm"],
         r"--memory hbm sizes for the hardware's memory; add --hardware"),
        (["size-queues", "wide.py:build", "--hw", "lanes=4"],
         r"--hw sets the hardware of --hardware; add --hardware"),
        (["size-queues", "wide.py:build", "--images", "3"],
         r"wide\.py:build gives one memory image \(no seed to draw more from\): --images must "
         r"be 1 and --held-out 0, not 3 and 0"),
        (["size-queues", "wide.py:build", "--hardware", "--held-out", "2"],
         r"wide\.py:build gives one memory image \(no seed to draw more from\): --images must "
         r"be 1 and --held-out 0, not 1 and 2"),
        (["size-queues", "moe", "--hardware", "--hw", "lanes=4"],
         r"--hardware sizes the fixed hardware-size graph; --hw-tile and --hw set the hardware "
         r"of a graph file"),
        (["validate", "moe", "--hw-tile", "16x16"],
         r"moe is built for its fixed hardware size; --hw-tile and --hw set the hardware of a "
         r"graph file"),
        (["sim", "moe", "--hardware", "--hw", "lanes=4"],
         r"--hardware simulates the fixed hardware-size graph; it takes no -p, --hw-tile or --hw"),
    ],
)  # fmt: skip
def test_bad_hardware_settings_are_one_line_errors(wide, capsys, argv, message):
    check(capsys, argv, message)


def test_rtl_of_a_graph_file_on_the_hardware_the_command_line_sets(wide, capsys):
    assert main(["rtl", "wide.py:build", "--hw-tile", "8x8", "--hw", "lanes=32",
                 "--hw", "axi_ports=1", "-o", "rtl"]) == 0  # fmt: skip
    assert capsys.readouterr().out == "wrote rtl/wide_add_hw8x8.v and rtl/wide_add_hw8x8.json\n"
    desc = json.loads(Path("rtl/wide_add_hw8x8.json").read_text())
    cfg = desc["config"]
    assert (cfg["tile_rows"], cfg["tile_cols"], cfg["lanes"], cfg["axi_ports"]) == (8, 8, 32, 1)
    assert (cfg["elem_dtype"], cfg["frac_bits"]) == ("int16", 8)  # the graph's number format
    assert sorted(desc["axi_ports"]) == ["m_axi_rd0", "m_axi_wr0"]
    # ``--hw tile_rows/tile_cols`` builds larger hardware tiles for the graph as written.
    assert main(["rtl", "wide.py:build", "--hw", "tile_rows=16", "--hw", "tile_cols=8",
                 "--hw", "axi_ports=none", "-o", "rtl"]) == 0  # fmt: skip
    cfg = json.loads(Path("rtl/wide_add.json").read_text())["config"]
    assert (cfg["tile_rows"], cfg["tile_cols"], cfg["axi_ports"]) == (16, 8, None)


def test_sim_hardware_of_a_graph_file_is_the_rtl_profile_of_its_hardware(wide, capsys):
    from sim import simulate
    from sim.profiles import RtlProfile
    from step_hw.memory_model import MemoryModel
    from step_lang.hier_tiling import hier_tile

    graph, memory = _graph_and_memory()
    tiled = hier_tile(graph, 8, 8)
    cycles = {}
    for ports in ("1", "none"):  # one read port shared by both loads, or a port each
        config = HwConfig(tile_rows=8, tile_cols=8, axi_ports=None if ports == "none" else 1)
        cycles[ports] = simulate(tiled, memory, profile=RtlProfile(config)).cycles
        assert main(["sim", "wide.py:build", "--hardware", "--hw-tile", "8x8",
                     "--hw", f"axi_ports={ports}", "--json"]) == 0  # fmt: skip
        row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert row["cycles"] == cycles[ports]
    assert cycles["1"] > cycles["none"]
    # ``--memory hbm``: the rtl profile on the HBM-like memory.
    config = HwConfig(tile_rows=8, tile_cols=8)
    want = simulate(tiled, memory, profile=RtlProfile.for_memory(MemoryModel.hbm(), config)).cycles
    assert main(["sim", "wide.py:build", "--hardware", "--hw-tile", "8x8", "--memory", "hbm",
                 "--json"]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["cycles"] == want
    assert want > cycles["none"] + 64


def test_size_queues_of_a_graph_file(wide, capsys):
    """The paper profile sizes the graph as written (no more crash on a file's missing seed);
    ``--hardware`` sizes it for its hardware and ``--verilog`` writes it with the depths."""
    assert main(["size-queues", "wide.py:build", "--json", "paper.json"]) == 0
    assert "over 1 image(s)" in capsys.readouterr().out
    paper = json.loads(Path("paper.json").read_text())
    assert set(paper["depths"]) >= {"load_x.out", "load_b.out", "add.out"}
    assert main(["size-queues", "wide.py:build", "--hardware", "--hw-tile", "8x8",
                 "--json", "hw.json", "--verilog", "sized"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "wrote sized.v and sized.json (sized queues)" in out
    depths = json.loads(Path("hw.json").read_text())["depths"]
    desc = json.loads(Path("sized.json").read_text())
    assert desc["config"]["tile_rows"] == 8
    built = {q["stream"]: q["depth"] for q in desc["queues"].values()}
    assert built and all(built[s] == d for s, d in depths.items() if s in built)
    assert any(d != HwConfig().queue_depth for d in built.values())
    # ``--memory hbm``: sized for the HBM-like memory's latency (the rtl profile on it).
    assert main(["size-queues", "wide.py:build", "--hardware", "--hw-tile", "8x8",
                 "--memory", "hbm", "--json", "hbm.json"]) == 0  # fmt: skip
    capsys.readouterr()
    hbm = json.loads(Path("hbm.json").read_text())
    ram = json.loads(Path("hw.json").read_text())
    assert hbm["cycles_sized"] > ram["cycles_sized"] + 64


def test_step_validate_of_a_graph_file_on_hardware_tiles_with_sized_queues(wide):
    """``step validate wide.py:build --hw-tile 8x8 --hw queue_depth=2 --size-queues`` on the
    fast tier with the HBM-like memory: the graph rewritten onto 8 x 8 tiles, built for 8 x 8
    hardware, its queues sized for that memory, equal in every reader."""
    from sim import simulate
    from sim.profiles import PaperProfile
    from step_hw.memory_model import MemoryModel
    from step_lang.hier_tiling import hier_tile
    from stepcli.sizing import size_for_hardware

    out = subprocess.run([str(STEP), "validate", "wide.py:build", "--hw-tile", "8x8", "--hw",
                          "queue_depth=2", "--size-queues", "--tier", "fast", "--memory", "hbm",
                          "--json", "v.json"],
                         cwd=wide.parent, capture_output=True, text=True, timeout=900,
                         check=False)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    graph, memory = _graph_and_memory()
    tiled = hier_tile(graph, 8, 8)
    config = HwConfig(tile_rows=8, tile_cols=8, queue_depth=2)
    hbm = MemoryModel.hbm()
    sizing = size_for_hardware(tiled, [memory], config, memory_model=hbm, uniform=False)
    assert out.stdout.startswith(
        f"queues    sized: {{bits:,}} bits (default depths {{default:,}}); rtl profile "
        f"{sizing.cycles_sized} cycles (default depths {sizing.cycles_default})\n"
        "validation of graph 'wide_add_hw8x8'".format(
            bits=sum(sizing.bits[q] * d for q, d in sizing.depths.items()),
            default=sum(sizing.bits[q] * d for q, d in sizing.default_depths.items()),
        )
    ), out.stdout
    assert "outputs   equal: interpreter = paper = rtl profile = RTL (y)" in out.stdout
    rtl, profile = map(int, re.search(r"^cycles    RTL (\d+) \| rtl profile (\d+)", out.stdout,
                                      re.M).groups())  # fmt: skip
    assert rtl == profile == sizing.cycles_sized > 0
    assert out.stdout.rstrip().endswith("verdict   OK\nwrote v.json")
    # The RTL ran with the sized depths.
    folder = Path(re.search(r"files: (\S+)", out.stdout).group(1))
    trace = json.loads((folder / "trace.json").read_text())
    built = {
        q["stream"]: q["depth"] for q in trace.values() if isinstance(q, dict) and "depth" in q
    }
    assert built == sizing.depths
    # The paper profile is the paper's model with this hardware's rates and memory.
    tiled.queue_depths.update(sizing.depths)
    paper = PaperProfile.for_rtl(config, hbm, graph=tiled)
    assert paper.memory.channels == 2 and paper.memory.latency == 64  # a read port per load
    want = simulate(tiled, memory, profile=paper).cycles
    assert re.search(rf"\| paper profile {want} \(", out.stdout), out.stdout
    # ``--json``: the same report for programs, with the sizing.
    got = json.loads((wide.parent / "v.json").read_text())
    assert got["ok"] and got["graph"] == "wide_add_hw8x8" and got["mismatch"] is None
    assert got["rtl_cycles"] == got["rtl_profile"]["cycles"] == rtl
    assert got["rtl_profile"]["error"] == 0.0
    assert got["paper_profile"] == {"cycles": want, "error": (want - rtl) / rtl}
    assert (got["config"]["tile_rows"], got["config"]["queue_depth"]) == (8, 2)
    assert got["sizing"]["depths"] == sizing.depths and got["folder"] == str(folder)


def test_the_paper_profiles_channels_are_the_hardwares_read_ports():
    from step_hw.contract import axi_managers, read_ports

    graph, _ = _graph_and_memory()
    assert read_ports(graph, HwConfig()) == 2  # a port per load (the store writes)
    assert read_ports(graph, HwConfig(axi_ports=1)) == 1
    # three ports allowed, two loads: the hardware has two read ports (it counted 3)
    assert read_ports(graph, HwConfig(axi_ports=3)) == 2
    assert sorted(axi_managers(graph, HwConfig(axi_ports=3))) == ["m_axi_rd0", "m_axi_rd1",
                                                                  "m_axi_wr0"]  # fmt: skip


HW_SPEC = """
example = "wide.py:build"
output = "hw.csv"
[hardware]
hw_tile = ["8x8", "12x8"]
lanes = [16, 64]
memory = ["axi_ram", "hbm"]
axi_ports = ["none", 1]
"""


def test_a_sweep_of_a_graph_files_hardware(wide, capsys):
    """``[hardware]`` sweeps a graph file over HwConfig settings, hardware tiles and memories
    with the rtl profile: one row per point, each the cycles of ``RtlProfile.for_memory``."""
    import csv

    from sim import simulate
    from sim.profiles import RtlProfile
    from step_hw.memory_model import MemoryModel
    from step_lang.hier_tiling import hier_tile

    Path("hw.toml").write_text(HW_SPEC)
    assert main(["sweep", "hw.toml", "-q", "-j", "2"]) == 0
    assert capsys.readouterr().out == "16 points in hw.csv\n"
    rows = list(csv.DictReader(Path("hw.csv").read_text().splitlines()))
    assert len(rows) == 16
    graph, memory = _graph_and_memory()
    seen = set()
    for row in rows:
        rows_hw, cols_hw = map(int, row["hw_tile"].split("x"))
        tiled = hier_tile(graph, rows_hw, cols_hw)
        ports = None if row["axi_ports"] == "none" else int(row["axi_ports"])
        config = HwConfig(tile_rows=rows_hw, tile_cols=cols_hw, lanes=int(row["lanes"]),
                          axi_ports=ports)  # fmt: skip
        model = getattr(MemoryModel, row["memory"])()
        want = simulate(tiled, memory, profile=RtlProfile.for_memory(model, config))
        assert int(row["cycles"]) == want.cycles, row
        # 16-row tiles on 12-row hardware are 8-row tiles: two thirds of each hardware tile
        assert float(row["hw_tile_fill"]) == {"8x8": 1, "12x8": 0.666667}[row["hw_tile"]]
        seen.add(int(row["cycles"]))
    assert len(seen) >= 4  # the memory and the ports change the cycles
    # Resumed: every point is in the CSV already, so nothing runs again.
    assert main(["sweep", "hw.toml", "-q", "-j", "1"]) == 0
    assert len(Path("hw.csv").read_text().splitlines()) == 1 + 16


def test_a_hardware_sweep_adds_a_new_column_to_an_old_file(wide, capsys):
    """A file written before ``hw_tile_fill`` existed, resumed with new points: the file gains
    the column (empty on its old rows), and no value lands under another column's name."""
    old_spec = HW_SPEC.replace('"8x8", "12x8"', '"8x8"').replace("[16, 64]", "[16]")
    Path("hw.toml").write_text(old_spec)
    assert main(["sweep", "hw.toml", "-q", "-j", "1"]) == 0
    capsys.readouterr()
    text = Path("hw.csv").read_text().splitlines()
    drop = text[0].split(",").index("hw_tile_fill")
    old = [",".join(c for i, c in enumerate(line.split(",")) if i != drop) for line in text]
    Path("hw.csv").write_text("\n".join(old) + "\n")
    Path("hw.toml").write_text(HW_SPEC)
    assert main(["sweep", "hw.toml", "-q", "-j", "1"]) == 0
    capsys.readouterr()
    rows = list(csv.DictReader(Path("hw.csv").read_text().splitlines()))
    assert len(rows) == 16
    assert sum(r["hw_tile_fill"] == "" for r in rows) == 4  # the old rows
    for r in rows:
        assert r["memory"] in ("axi_ram", "hbm") and int(r["cycles"]) > 0, r
        assert r["hw_tile_fill"] in ("", "1", "0.666667"), r


def test_a_sweep_never_takes_another_sweeps_rows_for_its_own(wide, capsys):
    """A file written by a sweep of another graph, or one that set a setting this sweep leaves
    at its default, is refused: its rows are not this sweep's points (they were once returned
    as such, and nothing ran)."""
    Path("other.py").write_text(GRAPH.replace("wide_add", "other_add"))
    Path("a.toml").write_text('example = "wide.py:build"\noutput = "a.csv"\n'
                              '[hardware]\nhw_tile = ["8x8"]\nlanes = [16, 64]\nmemory = ["hbm"]\n')  # fmt: skip
    assert main(["sweep", "a.toml", "-q", "-j", "1"]) == 0
    capsys.readouterr()
    before = Path("a.csv").read_text()
    Path("b.toml").write_text('example = "wide.py:build"\noutput = "a.csv"\n'
                              '[hardware]\nhw_tile = ["8x8"]\nlanes = [16, 64]\n')  # fmt: skip
    check(capsys, ["sweep", "b.toml", "-q"],
          r"sweep output a\.csv holds another sweep: it has column memory; give another 'output' "
          r"or remove the file")  # fmt: skip
    Path("c.toml").write_text('example = "other.py:build"\noutput = "a.csv"\n'
                              '[hardware]\nhw_tile = ["8x8"]\nlanes = [16, 64]\nmemory = ["hbm"]\n')  # fmt: skip
    check(capsys, ["sweep", "c.toml", "-q"],
          r"sweep output a\.csv holds another sweep: it has rows of example wide\.py:build; give "
          r"another 'output' or remove the file")  # fmt: skip
    assert Path("a.csv").read_text() == before


def test_a_hardware_sweep_lists_each_point_once(wide, capsys):
    Path("d.toml").write_text('example = "wide.py:build"\n[hardware]\n'
                              'hw_tile = ["8x8", "08x8"]\n')  # fmt: skip
    check(capsys, ["sweep", "d.toml", "-q"],
          r"sweep spec d\.toml: \[hardware\] lists one point twice: \{'hw_tile': '8x8'\} and "
          r"\{'hw_tile': '08x8'\}")  # fmt: skip


@pytest.mark.parametrize(
    "text, message",
    [
        ('example = "moe"\n[hardware]\nlanes = [16]\n',
         r"\[hardware\] sweeps a graph file's hardware \(example = 'path/to/file\.py:function'\); "
         r"example 'moe' is built for its own"),
        ('example = "wide.py:build"\n[grid]\nbatch = [1]\n[hardware]\nlanes = [16]\n',
         r"a graph file has no parameters for \[fixed\] or \[grid\]"),
        ('example = "wide.py:build"\n[hardware]\nlanes = 16\n',
         r"hardware\.lanes must be a non-empty list"),
        ('example = "wide.py:build"\n[hardware]\n',
         r"\[hardware\] is empty; list HwConfig settings, hw_tile or memory to sweep "
         r"\(e\.g\. memory = \[\"axi_ram\"\]\)"),
        ('example = "wide.py:build"\n[hardware]\nlanes = [16, 32, 16]\n',
         r"hardware\.lanes lists 16 twice"),
        ('example = "wide.py:build"\n[hardware]\nspeed = [1]\n',
         r"\[hardware\] has no key speed; keys: tile_rows, .*, hw_tile, memory"),
        ('example = "wide.py:build"\n[hardware]\nlanes = [16, 0]\n',
         r"\[hardware\]: HwConfig\.lanes must be a positive integer, not 0"),
        ('example = "wide.py:build"\n[hardware]\nlanes = ["many"]\n',
         r"\[hardware\] lanes must be an integer, not 'many'"),
        ('example = "wide.py:build"\n[hardware]\nmemory = ["dram"]\n',
         r"\[hardware\] memory must be one of axi_ram, hbm, paper, not 'dram'"),
        ('example = "wide.py:build"\n[hardware]\nhw_tile = ["8"]\n',
         r"\[hardware\] hw_tile must be ROWSxCOLS of positive integers of at most 9 digits, e\.g\. "
         r"16x16, not '8'"),
        ('example = "wide.py:build"\n[hardware]\nhw_tile = ["8x8"]\ntile_rows = [16]\n',
         r"\[hardware\] tile_rows=16 contradicts hw_tile 8x8"),
    ],
)  # fmt: skip
def test_bad_hardware_sweep_specs(wide, capsys, text, message):
    Path("bad.toml").write_text(text)
    check(capsys, ["sweep", "bad.toml"], r"sweep spec bad\.toml: " + message)


@pytest.mark.parametrize("flag", [[], ["--functional"]])
def test_sim_hardware_of_an_example_honours_functional(monkeypatch, capsys, flag):
    """``step sim <example> --hardware`` runs timing-only unless ``--functional`` (it once always
    carried data)."""
    import sim

    seen = []
    real = sim.simulate

    def spy(*args, **kwargs):
        seen.append(kwargs.get("functional", True))
        return real(*args, **kwargs)

    monkeypatch.setattr(sim, "simulate", spy)
    assert main(["sim", "swiglu", "--hardware", *flag]) == 0
    capsys.readouterr()
    assert seen == [bool(flag)]


def test_hw_tile_says_which_streams_run_on_part_of_each_hardware_tile(wide, capsys):
    """16-row tiles on 12-row hardware become two 8-row tiles: a note per stream on stderr
    (nothing is padded, so the layer runs on two thirds of each hardware tile); a tile that
    divides says nothing."""
    assert main(["metrics", "wide.py:build", "--hw-tile", "12x8"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"step: note: --hw-tile 12x8: stream {s}: its [16, 8] tiles become 2 x 1 hardware "
        "tiles of [8, 8] each (16 rows: not a multiple of the 12x8 hardware tile; each fills "
        "66.7% of it)"
        for s in ("load_x.out", "load_b.out", "add.out")
    ]
    assert main(["metrics", "wide.py:build", "--hw-tile", "8x8"]) == 0
    assert capsys.readouterr().err == ""
