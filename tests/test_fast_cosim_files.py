"""The fast co-simulation tier without a simulator: the memory model's parameters, the memory
image and Source files it loads, and the harness Verilog it generates (ports, widths)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from sim.profiles import RtlProfile
from step_hw.config import HwConfig
from step_hw.cosim import fast_io, fast_top
from step_hw.memory_model import MemoryModel


def _desc(width: int, layout: dict) -> dict:
    return {"config": {"axi_data_width": width}, "memory_map": layout}


@pytest.mark.parametrize("width", [32, 64, 128, 512])
def test_memory_image_round_trip(tmp_path, width):
    """Tensors written as ``$readmemh`` words come back unchanged from the same words (the
    format ``$writememh`` writes), at their addresses, whatever the bus width."""
    rng = np.random.default_rng(width)
    tensors = {
        "a": rng.integers(-(2**15), 2**15, (3, 5), dtype=np.int16),
        "b": rng.standard_normal((4, 8)).astype(ml_dtypes.bfloat16),
        "c": rng.integers(-(2**31), 2**31, (7,), dtype=np.int32),
    }
    layout, addr = {}, 4096
    for name, t in tensors.items():
        dtype = "bfloat16" if t.dtype == ml_dtypes.bfloat16 else t.dtype.name
        layout[name] = {"addr": addr, "shape": list(t.shape), "dtype": dtype, "bytes": t.nbytes}
        addr += 4096
    desc = _desc(width, layout)
    path = tmp_path / "mem.hex"
    fast_io.write_memory(path, desc, tensors)
    lines = path.read_text().split()
    assert len(lines) == fast_top.memory_words(desc) and {len(ln) for ln in lines} == {width // 4}
    back = fast_io.read_memory(path, desc, list(tensors))
    for name, t in tensors.items():
        raw = t.view(np.uint16) if t.dtype == ml_dtypes.bfloat16 else t
        assert np.array_equal(back[name], raw), name
    # little-endian words: the first byte of tensor `a` is the low byte of its word
    word = int(lines[4096 // (width // 8)], 16)
    assert word & 0xFFFF == int(tensors["a"].reshape(-1)[0]) & 0xFFFF


def test_memory_image_refuses_a_tensor_of_the_wrong_size(tmp_path):
    desc = _desc(64, {"x": {"addr": 0, "shape": [4], "dtype": "int16", "bytes": 8}})
    with pytest.raises(
        ValueError,
        match=r"^write_memory: memory 'x': array of 10 bytes \(shape \[5\]\), its memory map "
        r"entry 8 \(shape \[4\]\)$",
    ):
        fast_io.write_memory(tmp_path / "m.hex", desc, {"x": np.zeros(5, np.int16)})


def test_source_files_and_their_limit(tmp_path, monkeypatch):
    args = fast_io.write_sources(tmp_path, {"src_ids": ["0x1", "0xabc", "0x0"]})
    assert args == [f"+SRC_ids={tmp_path / 'src_ids.hex'}", "+SRC_ids_N=3"]
    assert (tmp_path / "src_ids.hex").read_text().split() == ["1", "abc", "0"]
    monkeypatch.setattr(fast_io, "SOURCE_DEPTH", 2)
    with pytest.raises(ValueError, match=r"Source 'ids' has 3 tokens, its ROM holds 2"):
        fast_io.write_sources(tmp_path, {"src_ids": ["0x1", "0x2", "0x3"]})


def test_trace_file_names_its_indices(tmp_path):
    (tmp_path / "t.txt").write_text("0 3\n2 4\n0 5\n")
    got = fast_io.read_trace(
        tmp_path / "t.txt", ["q_a", "q_b", "m_axi_x.ar"], {"queues": {"q_a": {"depth": 2}}}
    )
    assert got == {
        "q_a": {"depth": 2, "push": [3, 5]},
        "q_b": {"push": []},
        "m_axi_x.ar": {"push": [4]},
    }


@pytest.mark.parametrize(
    ("field", "low", "high"),
    [
        ("latency", 1, 65535),
        ("write_response", 1, 65535),
        ("outstanding", 1, 16),
        ("beat_interval", 1, 16),
        ("start_up", 0, 65535),
    ],
)
@pytest.mark.parametrize("value", ["low-1", 1.5, True, "high+1"])
def test_memory_model_refuses_bad_values(field, low, high, value):
    value = {"low-1": low - 1, "high+1": high + 1}.get(value, value)
    with pytest.raises(
        ValueError, match=rf"MemoryModel\.{field} must be an integer in \[{low}, {high}\], not"
    ):
        MemoryModel(**{field: value})


def test_memory_model_presets_tags_and_plusargs():
    assert MemoryModel() == MemoryModel.axi_ram()
    assert MemoryModel().tag == "l2w2"
    assert MemoryModel.hbm().tag == "l64w64o16"
    paper = MemoryModel.paper()
    assert paper.tag == "l2w2o16i2s14"
    # the artifact's channel: 64-byte requests every 2 cycles is 32 bytes per cycle
    assert paper.peak_bytes_per_cycle(512) == 32.0
    assert MemoryModel().peak_bytes_per_cycle(64) == 8.0
    assert fast_top.memory_plusargs(paper) == [
        "+LATENCY=2", "+WRITE_RESPONSE=2", "+OUTSTANDING=16", "+BEAT_INTERVAL=2", "+START_UP=14",
    ]  # fmt: skip


def test_rtl_profile_takes_the_memory_model():
    hbm = MemoryModel.hbm()
    p = RtlProfile.for_memory(hbm, HwConfig(axi_ports=1))
    assert (p.memory_latency, p.write_response, p.config.axi_ports) == (64, 64, 1)
    assert p.memory_outstanding == 16 and not p.memory_shapes_ports
    d = RtlProfile()
    assert (d.memory_latency, d.write_response, d.memory_outstanding) == (2, 2, 2)
    assert (d.beat_interval, d.start_up) == (1, 0) and not d.memory_shapes_ports
    # a beat interval, a start-up or a queue shorter than the controllers' bursts in flight
    # shape every port: then ports of one operator take the port model too
    assert RtlProfile.for_memory(MemoryModel.paper()).memory_shapes_ports
    assert RtlProfile.for_memory(MemoryModel(start_up=1)).memory_shapes_ports
    assert RtlProfile.for_memory(MemoryModel(outstanding=1)).memory_shapes_ports
    one = HwConfig(max_outstanding=1)
    assert not RtlProfile.for_memory(MemoryModel(outstanding=1), one).memory_shapes_ports
    with pytest.raises(TypeError, match="memory must be a MemoryModel"):
        RtlProfile.for_memory(64)
    with pytest.raises(
        ValueError, match="RtlProfile: beat_interval must be a positive integer, not 0"
    ):
        RtlProfile(beat_interval=0)


def test_harness_ports_and_queue_levels_from_the_verilog():
    from examples import swiglu
    from step_hw.elaborate import convert

    text, desc = convert(swiglu.hardware(), HwConfig(), name="step_top")
    top = fast_top.ports(text)
    assert top["m_axi_load_x_rdata"] == ("input", 64) and top["done"] == ("output", 1)
    levels = fast_top.queue_level_widths(text, sorted(desc["queues"]))
    assert set(levels) == set(desc["queues"]) and all(1 <= w <= 16 for w in levels.values())
    v = fast_top.wrapper(desc, text)
    assert v.count("  // ---- read port") == 4 and v.count("  // ---- write port") == 1
    names = fast_top.trace_names(desc, text)
    assert names[: len(levels)] == sorted(levels) and names[-3:] == [
        "m_axi_store.aw",
        "m_axi_store.w",
        "m_axi_store.b",
    ]


def test_the_benchs_inputs_reach_design_and_harness_through_a_register():
    # a top-level input that feeds logic combinationally is evaluated by Verilator on every
    # eval call (twice a cycle): the design and the harness read rst, start and the run-time
    # settings (queue_limits, geometry) only through their registers, so none of them drives
    # anything else
    import re

    from examples import swiglu
    from step_hw.elaborate import convert
    from step_hw.run_time_geometry import shared_bounds

    tiled = [
        swiglu.hardware_tiled(b, i, 4, size=swiglu.TILED_SIZE) for b, i in swiglu.TILED_TILINGS
    ]
    config = HwConfig(
        queue_capacity={"load_x.out": 4}, geometry_bounds=shared_bounds(tiled, HwConfig())
    )
    text, desc = convert(tiled[0], config, name="step_top")
    assert "geometry_fields" in desc  # the design has both run-time settings
    v = fast_top.wrapper(desc, text)
    code = re.sub(r"//.*", "", v)
    for name in fast_top.REGISTERED:
        assert f".{name}({name}_q)" in v
        assert re.search(rf"^    {name}_q <= {name};$", v, re.M)
        # the input is named in its port declaration and as its register's input, nowhere else
        uses = re.findall(rf"(?<![\w.]){name}(?!\w)", code)
        assert len(uses) == 2, (name, uses)
