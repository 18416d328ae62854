"""The `step` command: every subcommand, its outputs and its one-line errors."""

from __future__ import annotations

import csv
import json
import pathlib

import pytest

from stepcli.main import main
from stepcli.registry import UsageError


def run(capsys, *argv):
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_list(capsys):
    rc, out, _ = run(capsys, "list")
    assert rc == 0
    assert out.splitlines()[0].startswith("swiglu: ")
    assert "moe: " in out and "attention: " in out
    # the decoder's default tile_n does not apply to its default dynamic tiling: said, not hidden
    assert (
        "  (at these defaults tile_n does not apply to tiling=dynamic: the MoE's token tiles "
        "follow the routing)" in out.splitlines()
    )


def test_metrics_table(capsys):
    rc, out, _ = run(capsys, "metrics", "swiglu", "-p", "tile_b=16", "-p", "tile_i=16")
    assert rc == 0
    total = next(line for line in out.splitlines() if line.startswith("total"))
    assert total.split()[2] == "8454144"  # off-chip bytes of the paper's 16x16 point


def test_metrics_evaluated_by_kind(capsys):
    rc, out, _ = run(capsys, "metrics", "moe", "-p", "model=small", "-p", "batch=8", "-p", "tile_f=16",
                     "--evaluate", "--by-kind", "--convention", "artifact")  # fmt: skip
    assert rc == 0
    assert "on-chip B (artifact)" in out
    assert any(line.split()[:3] == ["4", "node(s)", "RetileStreamify"] for line in out.splitlines())


def test_sim_summary_trace_and_json(capsys, tmp_path):
    trace = tmp_path / "t.json"
    rc, out, _ = run(capsys, "sim", "swiglu", "-p", "batch=16", "-p", "hidden=32", "-p", "intermediate=64",
                     "-p", "tile_b=8", "-p", "tile_i=16", "--functional", "--trace", str(trace), "--json")  # fmt: skip
    assert rc == 0
    row = json.loads(out.strip().splitlines()[-1])
    assert row["offchip_bytes"] == 2 * 4 * (8 * 32 + 3 * 32 * 16) * 4 + 16 * 32 * 4
    assert out.startswith(f"cycles            {row['cycles']}")
    assert json.loads(trace.read_text())["otherData"]["cycles"] == row["cycles"]


def test_graph_writes_dot_and_svg(capsys, tmp_path):
    dot = tmp_path / "g.dot"
    rc, _, _ = run(capsys, "graph", "moe", "-p", "model=small", "-p", "batch=4", "-o", str(dot))
    assert rc == 0
    assert dot.read_text().startswith('digraph "moe_small_static32" {')
    svg = dot.with_suffix(".svg").read_text()
    assert svg.startswith("<svg ") and svg.count("<rect ") > 50 and ">route<" in svg


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["metrics", "nope"],
            "step: error: unknown example 'nope'; examples: swiglu, moe, attention, decoder, or a graph file path/to/file.py:function",
        ),
        (
            ["metrics", "moe", "-p", "flavour=x"],
            "step: error: example 'moe' has no parameter flavour; it takes ",
        ),
        (
            ["metrics", "moe", "-p", "batch"],
            "step: error: parameter 'batch' is not of the form key=value",
        ),
        (
            ["sim", "moe", "-p", "model=small", "-p", "trace=/no/such/trace.npz"],
            "step: error: routing trace /no/such/trace.npz: cannot read",
        ),
        (
            ["paper", "--traces", "/no/such/dir"],
            "step: error: traces directory /no/such/dir does not exist",
        ),
    ],
)
def test_errors_are_one_line(capsys, argv, message):
    rc, _, err = run(capsys, *argv)
    assert rc == 2
    assert err.count("\n") == 1 and err.startswith(message)


def test_rtl_writes_verilog_and_description(capsys, tmp_path):
    rc, out, _ = run(capsys, "rtl", "swiglu", "-o", str(tmp_path))
    assert rc == 0 and out.startswith(f"swiglu: {tmp_path}/swiglu.v, {tmp_path}/swiglu.json")
    assert "module swiglu(" in (tmp_path / "swiglu.v").read_text()
    desc = json.loads((tmp_path / "swiglu.json").read_text())
    assert desc["memory_map"]["x"]["addr"] == 4096 and desc["config"]["tile_rows"] == 4


def test_unreadable_kv_trace(capsys, tmp_path):
    bad = tmp_path / "bad.npy"
    bad.write_bytes(b"not numpy")
    rc, _, err = run(capsys, "sim", "attention", "-p", "config=small", "-p", f"trace={bad}")
    assert rc == 2 and err.startswith(f"step: error: KV-length trace {bad}: cannot read")


SPEC = """
example = "moe"
[fixed]
model = "small"
batch = 8
tile_f = 16
[grid]
tiling = ["static"]
tile_n = [2, 4]
seed = [0, 1]
"""


def _rows(path: pathlib.Path) -> list[dict]:
    with path.open() as f:
        return sorted(csv.DictReader(f), key=lambda r: (r["tile_n"], r["seed"]))


def test_sweep_local_resume_and_dask(capsys, tmp_path):
    spec = tmp_path / "s.toml"
    spec.write_text(SPEC)
    local = tmp_path / "local.csv"
    rc, out, _ = run(capsys, "sweep", str(spec), "-o", str(local), "-q", "-j", "2")
    assert rc == 0 and out.strip() == f"4 points in {local}"
    rows = _rows(local)
    assert [(r["tile_n"], r["seed"]) for r in rows] == [
        ("2", "0"),
        ("2", "1"),
        ("4", "0"),
        ("4", "1"),
    ]
    assert all(int(r["cycles"]) > 0 for r in rows)
    # A re-run skips the points that are done: the file keeps exactly four rows.
    local.write_text(local.read_text())
    run(capsys, "sweep", str(spec), "-o", str(local), "-q")
    assert len(_rows(local)) == 4
    # The same sweep on a Dask LocalCluster with 2 workers gives the same rows.
    dask_csv = tmp_path / "dask.csv"
    rc, out, _ = run(
        capsys, "sweep", str(spec), "-o", str(dask_csv), "-q", "--cluster", "local", "-j", "2"
    )
    assert rc == 0
    strip = lambda rs: [{k: v for k, v in r.items() if k != "sim_wall_s"} for r in rs]  # noqa: E731
    assert strip(_rows(dask_csv)) == strip(rows)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("example = 'moe'\n[grid]\ntile_n = 3\n", "grid.tile_n must be a non-empty list"),
        ("exampel = 'moe'\n", "unknown key(s) exampel"),
        ("example = 'moe'\n[fixed]\ncolour = 1\n", "example 'moe' has no parameter colour"),
        ("example = [", "is not valid TOML"),
    ],
)
def test_bad_sweep_specs(capsys, tmp_path, text, message):
    spec = tmp_path / "bad.toml"
    spec.write_text(text)
    rc, _, err = run(capsys, "sweep", str(spec))
    assert rc == 2 and message in err and err.startswith("step: error: ")


def test_paper_writes_summary(capsys, tmp_path):
    """``--only``: the summary keeps an earlier run's headlines of the other experiments (on the
    same traces) and replaces this experiment's."""
    earlier = {"traces": "synthetic", "headlines": [
        {"name": "an earlier Fig. 9 headline", "figure": "Fig. 9", "paper": 1.33, "ours": 1.5,
         "experiment": "dynamic_tiling"},
        {"name": "an earlier Fig. 12 headline", "figure": "Fig. 12", "paper": 2.0, "ours": 9.0,
         "experiment": "time_multiplexing"},
    ]}  # fmt: skip
    (tmp_path / "summary.json").write_text(json.dumps(earlier))
    rc, _, _ = run(capsys, "paper", "-o", str(tmp_path), "--only", "time_multiplexing")
    assert rc == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["traces"] == "synthetic"
    assert summary["kept"] == ["dynamic_tiling"] and list(summary["experiment_wall_s"]) == [
        "time_multiplexing"
    ]
    assert summary["headlines"][0] == earlier["headlines"][0]
    names = [h["name"] for h in summary["headlines"][1:]]
    assert {h["experiment"] for h in summary["headlines"][1:]} == {"time_multiplexing"}
    assert names == [
        "time-multiplexing utilisation gain, static tiling (<= 1% cycles)",
        "time-multiplexing utilisation gain, static tiling, at 32 regions (the artifact's comparison point)",
        "time-multiplexing utilisation gain, dynamic tiling (<= 5% cycles)",
        "time-multiplexing utilisation gain, dynamic tiling, at 32 regions (the artifact's comparison point)",
        "time-multiplexing utilisation gain, dynamic tiling, the artifact's construction (<= 5% cycles)",
        "time-multiplexing utilisation gain, dynamic tiling, the artifact's construction, at 32 regions",
        "time-multiplexing utilisation gain, dynamic tiling, the artifact's construction, 2-byte memory-unit reads (<= 5% cycles)",
        "time-multiplexing utilisation gain, dynamic tiling, the artifact's construction, 2-byte memory-unit reads, at 32 regions",
    ]
    assert all(h["ours"] >= 1.0 for h in summary["headlines"])
    assert (tmp_path / "timemux.csv").exists() and (
        tmp_path / "fig12_time_multiplexing.png"
    ).exists()
    assert (tmp_path / "timemux_artifact.csv").exists()


def test_paper_only_takes_every_experiment(capsys):
    from stepcli.main import build_parser
    from stepcli.paper import EXPERIMENTS

    parser = build_parser()
    for name in EXPERIMENTS:  # decoder_layer among them
        assert parser.parse_args(["paper", "--only", name]).only == [name]
    rc, _, err = run(capsys, "paper", "--only", "nope")
    assert rc == 2 and err.count("\n") == 1
    assert err.startswith("step: error: argument --only: invalid choice: 'nope'")
    assert all(repr(name) in err for name in EXPERIMENTS)


def test_size_queues_reports_storage_and_cycles(capsys, tmp_path):
    out_json = tmp_path / "sizing.json"
    rc, out, _ = run(capsys, "size-queues", "moe", "-p", "model=small", "-p", "batch=16",
                     "--images", "2", "--json", str(out_json))  # fmt: skip
    assert rc == 0
    lines = {line.split()[0] + " " + line.split()[1]: line for line in out.splitlines()[:5]}
    sized = int(lines["bits sized"].split()[2])
    uniform = int(lines["bits uniform"].split()[2])
    report = json.loads(out_json.read_text())
    assert report["bits_sized"] == sized and report["bits_uniform"] == uniform
    assert sized < uniform and report["deadlock_free"]
    assert report["cycles_sized"] <= report["cycles_deep"] * 1.01
    assert report["uniform_depth"] > 1 and report["data_dependent"]


def test_size_queues_checks_held_out_images(capsys, tmp_path):
    """``--held-out 3``: the next three seeds' routings are checked, and the ones the depths
    miss are sized on too; every held-out image ends within the tolerance of its reference."""
    out_json = tmp_path / "sizing.json"
    rc, out, _ = run(capsys, "size-queues", "moe", "-p", "model=small", "-p", "tiling=static",
                     "-p", "batch=16", "--images", "1", "--held-out", "3", "--margin", "1",
                     "--json", str(out_json))  # fmt: skip
    report = json.loads(out_json.read_text())
    assert rc == 0 and len(report["held_out_cycles"]) == 3 and report["held_out_missed"] == []
    assert report["images"] == 1 + len(report["held_out_added"])
    assert all(c <= ref * 1.01 for c, ref in report["held_out_cycles"])
    added = len(report["held_out_added"])
    assert f"held out          3 image(s), {added} sized on too, worst " in out


def test_size_queues_rejects_an_unknown_parameter(capsys):
    rc, _, err = run(capsys, "size-queues", "swiglu", "-p", "tile=3")
    assert rc == 2 and "has no parameter tile" in err


def test_sim_hardware_uses_the_rtl_profile(capsys):
    from sim import simulate
    from sim.profiles import RtlProfile
    from stepcli.sizing import hardware_case

    rc, out, _ = run(capsys, "sim", "moe", "--hardware", "--schedule", "dynamic", "--json")
    assert rc == 0
    graph, (memory,) = hardware_case("moe", "dynamic")
    want = simulate(graph, memory, profile=RtlProfile()).cycles
    assert json.loads(out.splitlines()[-1])["cycles"] == want
    rc, _, err = run(capsys, "sim", "moe", "--hardware", "--schedule", "nope")
    assert rc == 2 and "no schedule 'nope'" in err


def test_size_queues_writes_verilog_with_the_sized_depths(capsys, tmp_path):
    report_json, stem = tmp_path / "sizing.json", tmp_path / "rtl" / "moe_tm"
    rc, out, _ = run(capsys, "size-queues", "moe", "--hardware", "--schedule", "time-mux",
                     "--json", str(report_json), "--verilog", str(stem))  # fmt: skip
    assert rc == 0 and "sized queues" in out
    depths = json.loads(report_json.read_text())["depths"]
    desc = json.loads(stem.with_suffix(".json").read_text())
    assert stem.with_suffix(".v").read_text().startswith("/*")
    written = {q["stream"]: q["depth"] for q in desc["queues"].values()}
    assert written == {s: depths[s] for s in written}
    assert max(written.values()) > 1 and min(written.values()) == 1


def test_size_queues_verilog_needs_hardware(capsys):
    rc, _, err = run(capsys, "size-queues", "swiglu", "--verilog", "x")
    assert rc == 2 and "--hardware" in err


def test_size_queues_holds_every_seeds_kv_lengths_on_one_graph(capsys, tmp_path):
    """Seed 0 of the small attention (4 requests, median 20) needs 36 cache rows per request,
    seed 3 a request of 102 rows: the graph sized on both holds 104 rows, so seed 3's image runs
    on it (built from seed 0 alone, its 102-row request did not fit: a FlatMap error)."""
    from sim import simulate
    from step_lang.errors import StepRuntimeError
    from stepcli.registry import ATTENTION

    seeds = [ATTENTION.params({"config": "small", "batch": 4, "mean": 20, "seed": s})
             for s in range(4)]  # fmt: skip
    shared = ATTENTION.one_graph(seeds)
    assert [p["max_len"] for p in shared] == [104] * 4
    assert {ATTENTION.build(p).tensors["k_cache"].shape for p in shared} == {(4 * 104, 8)}
    assert ATTENTION.build(seeds[0]).tensors["k_cache"].shape == (4 * 36, 8)
    with pytest.raises(StepRuntimeError, match="exceed the row"):  # the premise
        simulate(ATTENTION.build(seeds[0]), ATTENTION.memory(seeds[3], False))
    out_json = tmp_path / "sizing.json"
    rc, out, _ = run(capsys, "size-queues", "attention", "-p", "config=small", "-p", "batch=4",
                     "-p", "mean=20", "-p", "schedule=interleaved", "-p", "regions=2",
                     "--images", "1", "--held-out", "3", "--json", str(out_json))  # fmt: skip
    report = json.loads(out_json.read_text())
    assert rc == 0 and len(report["held_out_cycles"]) == 3 and report["held_out_missed"] == []
    assert "held out          3 image(s)" in out


def test_an_attention_cache_can_be_given_its_rows(capsys):
    """``max_len``: whole KV tiles holding the longest request and its new token, or refused."""
    from stepcli.registry import ATTENTION, DECODER

    p = ATTENTION.params({"config": "small", "batch": 4, "mean": 20, "max_len": 64})
    assert ATTENTION.build(p).tensors["k_cache"].shape == (4 * 64, 8)
    # the longest request is 33 rows: with its new token 34, in whole tiles of 4 rows 36
    for rows, why in ((30, "not 30"), (32, r"\(at least 36 rows\), not 32")):
        p = ATTENTION.params({"config": "small", "batch": 4, "mean": 20, "max_len": rows})
        with pytest.raises(UsageError, match=r"max_len must be a multiple of kv_tile 4 .*" + why):
            ATTENTION.build(p)
    d = DECODER.params({"model": "small", "batch": 4, "mean": 20, "max_len": 128})
    assert DECODER.one_graph([d])[0]["max_len"] == 128
    seeds = [
        DECODER.params({"model": "small", "batch": 4, "mean": 20, "seed": s}) for s in range(4)
    ]
    shared = DECODER.one_graph(seeds)
    assert [p["max_len"] for p in shared] == [104] * 4  # seed 3: 102 rows and its new token
    caches = {DECODER.build(p).tensors["attn_k_cache"].shape for p in shared}
    assert caches == {(4 * 104, 8)}
    rc, _, err = run(capsys, "metrics", "attention", "-p", "max_len=-4")
    assert rc == 2 and "max_len" in err


def _trace_folder(root: pathlib.Path, routing: dict[str, int], kv: dict[int, list[int]]):
    """A --traces folder: ``routing`` files per ``<model>_b<batch>`` folder, KV-length files of
    the given stdevs per batch (contents valid; these runs stop before reading them)."""
    import numpy as np

    for folder, n in routing.items():
        d = root / "expert_routing" / folder
        d.mkdir(parents=True)
        for i in range(n):
            np.savez(d / f"{i:03d}_001.npz", data=np.zeros((64, 8), np.int64))
    for batch, stdevs in kv.items():
        d = root / "kv_lengths" / f"b{batch}"
        d.mkdir(parents=True)
        for s in stdevs:
            np.save(d / f"conv_stdev{s:04d}_0000_{batch - 1:04d}.npy", np.full(batch, 100))


@pytest.mark.parametrize(
    ("routing", "kv", "only", "message"),
    [
        ({}, {}, "dynamic_parallelization",
         "no KV-length trace of stdev 477, 484, 508 at batch 64 under {root}/kv_lengths/b64 "
         "(expected conv_stdev0477_<start>_<end>.npy, conv_stdev0484_<start>_<end>.npy, "
         "conv_stdev0508_<start>_<end>.npy)"),
        ({}, {64: [477, 484, 508, 995, 996, 1370, 1457]}, "dynamic_parallelization",
         "no KV-length trace of stdev 1374 at batch 64 under {root}/kv_lengths/b64 (expected "
         "conv_stdev1374_<start>_<end>.npy)"),
        ({"qwen_b64": 1}, {}, "decoder_layer",
         "no KV-length trace of stdev 995 at batch 64 under {root}/kv_lengths/b64 (expected "
         "conv_stdev0995_<start>_<end>.npy)"),
        ({"qwen_b64": 2}, {}, "time_multiplexing",
         "2 routing traces for qwen batch 64 under {root}/expert_routing/qwen_b64 (000_001.npz, "
         "001_001.npz): expected one"),
    ],
)  # fmt: skip
def test_paper_runs_on_every_trace_it_names_or_refuses(capsys, tmp_path, routing, kv, only,
                                                        message):  # fmt: skip
    """``step paper --traces DIR`` never stands synthetic data in for a trace DIR lacks (the
    summary would say the run was on DIR's traces) and never picks one of several."""
    root = tmp_path / "traces"
    root.mkdir()
    _trace_folder(root, routing, kv)
    rc, _, err = run(capsys, "paper", "--traces", str(root), "--only", only,
                     "-o", str(tmp_path / "out"), "-j", "1")  # fmt: skip
    assert rc == 2 and err == f"step: error: {message.format(root=root)}\n"


def _valid_trace_folder(root: pathlib.Path) -> None:
    """Every trace ``step paper`` reads, valid: routing of each model at batch 64 and 1024 (distinct
    experts per token), KV lengths of every stdev it takes at batch 16, 64 and 80."""
    import numpy as np

    from examples import moe
    from stepcli.paper import B16, B80, HIGH, LOW, MED

    for cfg in (moe.MIXTRAL, moe.QWEN):
        for batch in (64, 1024):
            d = root / "expert_routing" / f"{cfg.name}_b{batch}"
            d.mkdir(parents=True)
            data = np.tile(np.arange(cfg.top_k), (batch, 1))
            np.savez(d / "000_001.npz", data=data)
    kv = {64: LOW + MED + HIGH, 16: sum(B16.values(), ()), 80: sum(B80.values(), ())}
    _trace_folder(root, {}, kv)


@pytest.mark.parametrize(
    ("path", "data", "message"),
    [
        ("kv_lengths/b80/conv_stdev1413_0000_0079.npy", "kv79",
         "KV-length trace {path} has 79 requests; its folder b80 is for batch 80"),
        ("kv_lengths/b64/conv_stdev0995_0000_0063.npy", "negative",
         "KV-length trace {path}: length -1 of request 0 is negative"),
        ("expert_routing/mixtral_b64/000_001.npz", "routing63",
         "routing trace {path} has 63 tokens; its folder mixtral_b64 is for batch 64"),
        ("expert_routing/qwen_b64/000_001.npz", "top2",
         "routing trace {path}: 2 experts per token, model 'qwen' routes each token to 8 (top_k)"),
    ],
)  # fmt: skip
def test_paper_reads_every_trace_before_it_runs(capsys, tmp_path, path, data, message):
    """A bad trace of any experiment (here Fig. 21's, Fig. 14's and the decoder's, read by the
    third and fourth experiments) fails ``step paper`` before the first experiment runs: no
    output folder is made."""
    import numpy as np

    root = tmp_path / "traces"
    _valid_trace_folder(root)
    bad = {
        "kv79": np.full(79, 100),
        "negative": np.full(64, -1),
        "routing63": np.tile(np.arange(2), (63, 1)),
        "top2": np.tile(np.arange(2), (64, 1)),
    }[data]
    if path.endswith(".npz"):
        np.savez(root / path, data=bad)
    else:
        np.save(root / path, bad)
    out = tmp_path / "out"
    rc, _, err = run(capsys, "paper", "--traces", str(root), "-o", str(out), "-j", "1")
    assert rc == 2 and err == f"step: error: {message.format(path=root / path)}\n"
    assert not out.exists()


def test_paper_traces_of_the_valid_folder_are_read_as_given(tmp_path):
    """The valid folder of the test above passes every experiment's check, and each experiment
    gets the files of its figure (the real runs are in the experiments' own tests)."""
    from stepcli.paper import EXPERIMENTS

    root = tmp_path / "traces"
    _valid_trace_folder(root)
    found = {name: find(root) for name, (find, _) in EXPERIMENTS.items()}
    assert found["time_multiplexing"] == str(root / "expert_routing/qwen_b64/000_001.npz")
    assert sorted(found["dynamic_tiling"]) == [
        ("mixtral", 64), ("mixtral", 1024), ("qwen", 64), ("qwen", 1024)
    ]  # fmt: skip
    by_batch = found["dynamic_parallelization"]["by_batch"]
    assert {b: {c: len(f) for c, f in v.items()} for b, v in by_batch.items()} == {
        64: {"low": 3, "high": 3, "med": 2},
        16: {"low": 2, "med": 2, "high": 3},
        80: {"low": 3, "med": 2, "high": 3},
    }
    kv, routing = found["decoder_layer"]
    assert kv == str(root / "kv_lengths/b64/conv_stdev0995_0000_0063.npy")
    assert list(routing) == ["qwen", "mixtral"]
    assert {name: find(None) for name, (find, _) in EXPERIMENTS.items()} == {
        "dynamic_tiling": dict.fromkeys(found["dynamic_tiling"], ""),
        "time_multiplexing": "",
        "dynamic_parallelization": {
            "by_batch": {b: {c: [] for c in v} for b, v in by_batch.items()},
            "fig15": [],
        },
        "decoder_layer": ("", {"qwen": "", "mixtral": ""}),
    }


def test_paper_traces_must_be_a_folder(capsys, tmp_path):
    path = tmp_path / "kv.npy"
    path.write_bytes(b"")
    rc, _, err = run(capsys, "paper", "--traces", str(path))
    assert rc == 2 and err == f"step: error: traces directory {path} is not a directory\n"


def test_paper_keeps_no_headline_of_other_traces(tmp_path):
    from stepcli.paper import _kept_headlines

    path = tmp_path / "summary.json"
    h = {"name": "x", "experiment": "dynamic_tiling"}
    path.write_text(json.dumps({"traces": "/some/traces", "headlines": [h]}))
    assert _kept_headlines(path, "synthetic", {}) == []
    assert _kept_headlines(path, "/some/traces", {}) == [h]
    assert _kept_headlines(path, "/some/traces", {"dynamic_tiling": 1.0}) == []
    path.write_text(json.dumps({"traces": "synthetic", "headlines": [{"name": "no experiment"}]}))
    assert _kept_headlines(path, "synthetic", {}) == []
