"""``make validate``'s caches (``bench/validate.py``): an entry cut short by a run killed while
writing it, or damaged since, is computed again and replaced, never read and never fatal; every
entry is written whole (``write_atomically``)."""

from __future__ import annotations

import json
import types

import numpy as np
import pytest

from bench import validate as V


def _cut_short(path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text[: len(text) // 2])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"rtl_cycles": 3105}', {"rtl_cycles": 3105}),
        ('{"rtl_cyc', None),
        ("", None),
        ("[1, 2]", None),
        ("\udcff", None),
    ],
)
def test_cached_json_reads_a_whole_object_only(tmp_path, text, expected):
    path = tmp_path / "entry.json"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    assert V.cached_json(path) == expected
    assert V.cached_json(tmp_path / "missing.json") is None


def test_a_cut_short_rtl_result_is_not_cached(monkeypatch, tmp_path):
    # --cached-only reports it as not cached (where reading it raised JSONDecodeError); a whole
    # entry is read back
    monkeypatch.setattr(V, "OUT", tmp_path)
    p = V.swiglu_points()[0]
    entry = tmp_path / "points" / f"swiglu_{V._key(p)}_{V._design(p)}.json"
    whole = json.dumps({"rtl_cycles": 3105, "outputs_match": True, "rtl_build_s": 0,
                        "rtl_run_s": 0})  # fmt: skip
    _cut_short(entry, whole)
    with pytest.raises(V.NotCached, match="no cached RTL result"):
        V.run_point(p, fresh=False, trace=False, cached_only=True)
    entry.write_text(whole)
    assert V.run_point(p, fresh=False, trace=False, cached_only=True)["rtl_cycles"] == 3105


def test_a_cut_short_simulator_result_is_simulated_again(monkeypatch, tmp_path):
    monkeypatch.setattr(V, "OUT", tmp_path)
    from step_hw.cosim import output_tensors

    p = V.swiglu_points()[0]
    memory = V.MemoryModel.axi_ram()
    outputs = output_tensors(p.make())
    first = V._simulate(p, memory, outputs, "", fresh=False)
    assert first["cached"] is False and first["sim_cycles"] > 0
    (entry,) = (tmp_path / "sims").iterdir()
    whole = entry.read_text()
    _cut_short(entry, whole)
    again = V._simulate(p, memory, outputs, "", fresh=False)
    assert again["cached"] is False  # simulated, not read
    assert again["sim_cycles"] == first["sim_cycles"]
    assert json.loads(entry.read_text())["sim_cycles"] == first["sim_cycles"]  # replaced whole
    assert V._simulate(p, memory, outputs, "", fresh=False)["cached"] is True
    assert [f.name for f in (tmp_path / "sims").iterdir()] == [entry.name]  # no temporary left


def test_a_cut_short_sizing_is_sized_again(monkeypatch, tmp_path):
    import sim.sizing

    monkeypatch.setattr(V, "SIZING", tmp_path / "sizing")
    monkeypatch.setattr(V, "_sized_here", {})
    sized = []
    report = types.SimpleNamespace(depths={"x": 1}, cycles_deep=1, cycles_sized=2,
                                   cycles_default=3, simulations=4, images=1, held_out_added=[],
                                   held_out_cycles=[], bits_sized=5)  # fmt: skip
    monkeypatch.setattr(sim.sizing, "plan_queue_sizes", lambda *a, **k: sized.append(1) or report)
    group = V.swiglu_points()[:1]
    memory = V.MemoryModel.axi_ram()
    path = V.sizing_file(group, memory)
    _cut_short(path, json.dumps({"depths": {"x": 7}, "wall_s": 1.0}))
    assert V.sized_depths(group, memory) == {"x": 1}
    assert sized == [1] and json.loads(path.read_text())["depths"] == {"x": 1}
    assert V.sized_depths(group, memory) == {"x": 1} and sized == [1]  # read back now


def test_a_cut_short_reference_is_interpreted_again(monkeypatch, tmp_path):
    monkeypatch.setattr(V, "OUT", tmp_path)
    from step_hw.cosim import output_tensors

    p = V.swiglu_points()[0]
    outputs = output_tensors(p.make())
    first = V.reference_outputs(p, outputs)
    (entry,) = (tmp_path / "reference").iterdir()
    data = entry.read_bytes()
    entry.write_bytes(data[: len(data) // 2])
    calls, real = [], V.interpret
    monkeypatch.setattr(V, "interpret", lambda *a: calls.append(a) or real(*a))
    again = V.reference_outputs(p, outputs)
    assert len(calls) == 1
    assert all(np.array_equal(again[o], first[o]) for o in outputs)
    assert V.reference_outputs(p, outputs) and len(calls) == 1  # replaced whole, read back


def test_a_run_is_cold_only_when_every_cache_is_empty(monkeypatch, tmp_path):
    from step_hw import conversions
    from step_hw.cosim import verilator

    monkeypatch.setattr(V, "OUT", tmp_path / "validate")
    monkeypatch.setattr(V, "SIZING", tmp_path / "validate" / "sizing")
    monkeypatch.setattr(conversions, "cache_root", lambda: tmp_path / "convert")
    monkeypatch.setattr(verilator, "runtime_cache", lambda: tmp_path / "verilator_runtime")
    import step_hw.cosim.harness as harness

    monkeypatch.setattr(harness, "BUILD", tmp_path / "cosim")
    folders = V.cache_folders()
    assert len(folders) == len(set(folders)) == 7
    assert all(f.is_relative_to(tmp_path) for f in folders)
    assert V.cold_start()  # none there
    for f in folders:
        f.mkdir(parents=True)
    assert V.cold_start()  # all empty
    for f in folders:
        (f / "entry").write_text("x")
        assert not V.cold_start(), f
        (f / "entry").unlink()
    assert V.cold_start()
