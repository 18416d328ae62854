"""A parameter given where it does not apply is refused, never ignored (docs/exploration.md,
"Parameters that do not apply"): on the command line, in sweep specs (whose ``[[grid]]`` tables
sweep such a parameter with the points it applies to), in result rows (left empty) and in queue
sizing, where seeds that all give one timing image are refused as several images."""

from __future__ import annotations

import csv
import re

import pytest

from stepcli.main import main
from stepcli.registry import EXAMPLES, NotApplicable, UsageError, run_point
from stepcli.sizing import IMAGES, image_counts, size_example, size_hardware
from tests.test_bad_input_cli import check

TRACE = "t.npz"  # never read: the parameters are refused before any trace is loaded

# (example, the parameters that make the last one not apply, the message's reason)
NOT_APPLYING = [
    ("moe", {"tiling": "dynamic", "tile_n": "8"},
     "tile_n does not apply to tiling=dynamic: its token tiles follow the routing"),
    ("moe", {"trace": TRACE, "skew": "2"},
     "skew does not apply with trace given: it shapes the synthetic routing"),
    ("moe", {"trace_fit": "cut"},
     "trace_fit does not apply without a trace (trace): it fits a trace to the batch"),
    ("attention", {"trace": TRACE, "mean": "500"},
     "mean does not apply with trace given: it shapes the synthetic KV lengths"),
    ("attention", {"trace": TRACE, "sigma": "0.5"},
     "sigma does not apply with trace given: it shapes the synthetic KV lengths"),
    ("attention", {"trace_fit": "repeat"},
     "trace_fit does not apply without a trace (trace): it fits a trace to the batch"),
    ("decoder", {"tiling": "dynamic", "tile_n": "8"},
     "tile_n does not apply to tiling=dynamic: the MoE's token tiles follow the routing"),
    ("decoder", {"kv_trace": TRACE, "sigma": "1"},
     "sigma does not apply with kv_trace given: it shapes the synthetic KV lengths"),
    ("decoder", {"routing_trace": TRACE, "skew": "0"},
     "skew does not apply with routing_trace given: it shapes the synthetic routing"),
    ("decoder", {"trace_fit": "cut"},
     "trace_fit does not apply without a trace (kv_trace or routing_trace): it fits a trace "
     "to the batch"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "given", "reason"), NOT_APPLYING)
def test_command_line_refuses_a_parameter_that_does_not_apply(capsys, name, given, reason):
    argv = ["sim", name]
    for key, value in given.items():
        argv += ["-p", f"{key}={value}"]
    check(capsys, argv, f"example '{name}': parameter {reason}; leave it out")


@pytest.mark.parametrize(("name", "given", "reason"), NOT_APPLYING)
def test_params_raise_not_applicable(name, given, reason):
    with pytest.raises(NotApplicable, match="^example '" + name + "': parameter "):
        EXAMPLES[name].params(given)


@pytest.mark.parametrize(
    ("name", "given"),
    [
        ("moe", {"tiling": "static", "tile_n": "8"}),
        ("moe", {"trace": TRACE, "trace_fit": "cut"}),
        ("moe", {"skew": "2"}),
        ("attention", {"mean": "500", "sigma": "0.5"}),
        ("attention", {"trace": TRACE, "trace_fit": "repeat"}),
        ("decoder", {"tiling": "static", "tile_n": "8"}),
        # one trace given: the other's generator still draws, and trace_fit fits the one
        ("decoder", {"kv_trace": TRACE, "skew": "0", "trace_fit": "cut"}),
        ("decoder", {"routing_trace": TRACE, "mean": "500", "sigma": "1"}),
    ],
)
def test_a_parameter_that_applies_is_taken(name, given):
    params = EXAMPLES[name].params(given)
    for key in given:
        assert str(params[key]) == given[key] or params[key] == float(given[key])


def test_rows_leave_what_does_not_apply_empty():
    """A dynamic-tiling row shows no tile_n, a run without a trace no trace_fit; a default
    that was not given (tiling=dynamic leaves tile_n at its default) is not refused."""
    row = run_point("moe", {"model": "small", "batch": 8, "tiling": "dynamic", "tile_f": 16})
    assert row["tile_n"] == "" and row["trace_fit"] == ""
    assert row["skew"] == 1.0 and row["tiling"] == "dynamic" and row["cycles"] > 0
    static = run_point("moe", {"model": "small", "batch": 8, "tile_n": 4, "tile_f": 16})
    assert static["tile_n"] == 4 and static["trace_fit"] == ""


# -- sweeps ---------------------------------------------------------------------------------------

MIXED = """example = "moe"
[fixed]
model = "small"
batch = 8
tile_f = 16
[grid]
tiling = ["static", "dynamic"]
tile_n = [2, 4]
"""


def test_sweep_crossing_a_parameter_with_points_it_does_not_apply_to_is_refused(capsys, tmp_path):
    spec = tmp_path / "s.toml"
    spec.write_text(MIXED)
    check(
        capsys,
        ["sweep", spec, "-q"],
        f"sweep spec {spec}: example 'moe': parameter tile_n does not apply to tiling=dynamic: "
        "its token tiles follow the routing; leave it out, or sweep it in a [[grid]] table of "
        "the points it applies to",
    )


GRIDS = """example = "moe"
[fixed]
model = "small"
batch = 8
tile_f = 16
[[grid]]
tiling = ["static"]
tile_n = [2, 4]
[[grid]]
tiling = ["dynamic"]
seed = [0, 1]
"""


def test_sweep_of_several_grids_runs_each_product(capsys, tmp_path):
    spec, out = tmp_path / "s.toml", tmp_path / "out.csv"
    spec.write_text(GRIDS)
    assert main(["sweep", str(spec), "-o", str(out), "-q", "-j", "1"]) == 0
    assert capsys.readouterr().out.strip() == f"4 points in {out}"
    with out.open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["tiling"], r["tile_n"], r["seed"]) for r in rows] == [
        ("static", "2", "0"),
        ("static", "4", "0"),
        ("dynamic", "", "0"),
        ("dynamic", "", "1"),
    ]
    assert all(int(r["cycles"]) > 0 for r in rows)
    # the same points again: all resumed from the file, none re-run
    assert main(["sweep", str(spec), "-o", str(out), "-q", "-j", "1"]) == 0
    assert capsys.readouterr().out.strip() == f"4 points in {out}"
    with out.open() as f:
        assert len(list(csv.DictReader(f))) == 4


def test_a_sweep_lists_each_point_once_whatever_its_spelling(capsys, tmp_path):
    """``skew = [1, 1.0]`` is one point twice (it ran twice once)."""
    spec = tmp_path / "s.toml"
    spec.write_text("example = 'moe'\n[fixed]\nmodel = 'small'\n[grid]\nskew = [1, 1.0]\n")
    check(capsys, ["sweep", spec, "-q"],
          f"sweep spec {spec}: grid lists one point twice: {{'model': 'small', 'skew': 1}} and "
          f"{{'model': 'small', 'skew': 1.0}}")  # fmt: skip


def test_a_sweep_resumes_a_file_written_before_parameters_were_blanked(capsys, tmp_path):
    """A CSV whose dynamic rows show ``tile_n`` (written before parameters that do not apply were
    blanked) resumes: its rows are the points they were, none runs again, and the file is
    rewritten with the blank."""
    spec, out = tmp_path / "s.toml", tmp_path / "out.csv"
    spec.write_text(GRIDS)
    assert main(["sweep", str(spec), "-o", str(out), "-q", "-j", "1"]) == 0
    capsys.readouterr()
    with out.open() as f:
        rows = list(csv.DictReader(f))
    for r in rows:  # as the old files were
        r["tile_n"] = r["tile_n"] or "16"
        r["cycles"] = "-1"  # marks the rows read back, not run again
    with out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    assert main(["sweep", str(spec), "-o", str(out), "-q", "-j", "1"]) == 0
    assert capsys.readouterr().out.strip() == f"4 points in {out}"
    with out.open() as f:
        again = list(csv.DictReader(f))
    assert [(r["tiling"], r["tile_n"], r["seed"], r["cycles"]) for r in again] == [
        ("static", "2", "0", "-1"),
        ("static", "4", "0", "-1"),
        ("dynamic", "", "0", "-1"),
        ("dynamic", "", "1", "-1"),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "example = 'moe'\n[[grid]]\ntiling = ['static']\n[[grid]]\ntiling = ['dynamic', 'static']\n",
            "grid 2 repeats a point of grid 1: {'tiling': 'static'}",
        ),
        (
            # seed 0 is the default: the second table's point is the first's
            "example = 'moe'\n[[grid]]\ntile_f = [16]\n[[grid]]\ntile_f = [16]\nseed = [0]\n",
            "grid 2 repeats a point of grid 1: {'tile_f': 16, 'seed': 0}",
        ),
        (
            "example = 'moe'\n[fixed]\nseed = 1\n[[grid]]\ntile_n = [8]\n[[grid]]\nseed = [2]\n",
            "seed both fixed and in the grid 2",
        ),
        ("example = 'moe'\n[[grid]]\ntile_n = []\n", "grid.tile_n must be a non-empty list"),
        (
            "example = 'moe'\n[[grid]]\ntile_n = [8]\n[[grid]]\ntile_n = 8\n",
            "grid 2.tile_n must be a non-empty list",
        ),
        (
            "example = 'moe'\ngrid = []\n",
            "'grid' must be a table ([grid]) or tables ([[grid]]), not []",
        ),
    ],
)
def test_bad_grids(capsys, tmp_path, text, message):
    spec = tmp_path / "s.toml"
    spec.write_text(text)
    check(capsys, ["sweep", spec, "-q"], f"sweep spec {spec}: {message}")


# -- queue sizing over seeds that draw no timing image ------------------------------------------


@pytest.mark.parametrize(
    ("name", "given", "why"),
    [
        ("swiglu", {}, "its seed draws only data values, which do not change the timing"),
        (
            "moe",
            {"trace": TRACE},
            "with trace given, its seed draws only data values, which do not change the timing",
        ),
        (
            "decoder",
            {"kv_trace": TRACE, "routing_trace": TRACE},
            "with kv_trace and routing_trace given, its seed draws only data values, which do "
            "not change the timing",
        ),
    ],
)
def test_sizing_refuses_several_images_of_one_timing_image(name, given, why):
    message = (
        f"example '{name}' gives one timing image ({why}): --images must be 1 and --held-out 0, "
        "not 1 and 2"
    )
    with pytest.raises(UsageError, match="^" + re.escape(message) + "$"):
        size_example(name, given, images=1, held_out=2)
    assert image_counts(name, given, IMAGES, 5) == (1, 0)


def test_sizing_refuses_several_hardware_swiglu_images(capsys):
    check(
        capsys,
        ["size-queues", "swiglu", "--hardware", "--images", "3"],
        "hardware-size example 'swiglu' gives one timing image (its seed draws only data values, "
        "which do not change the timing): --images must be 1 and --held-out 0, not 3 and 0",
    )
    with pytest.raises(UsageError, match=r"^hardware-size example 'swiglu' gives one timing"):
        size_hardware("swiglu", images=2)


@pytest.mark.parametrize(
    ("name", "given"),
    [("moe", {}), ("attention", {}), ("decoder", {"kv_trace": TRACE})],
)
def test_seeds_that_draw_the_timing_image_keep_their_counts(name, given):
    assert image_counts(name, given, IMAGES, 5) == (IMAGES, 5)


def test_paper_decoder_refuses_a_routing_trace_of_another_length(tmp_path):
    """`step paper`'s decoder layer takes one token per request; a longer routing trace was
    cut to the batch without a word."""
    import numpy as np

    from examples import decoder
    from stepcli.paper import decoder_point

    path = tmp_path / "r.npz"
    experts, top_k = decoder.QWEN.moe.experts, decoder.QWEN.moe.top_k
    np.savez(path, data=(np.arange(65)[:, None] + np.arange(top_k)) % experts)
    message = (
        f"routing trace {path} has 65 tokens, the decoder layer 64 requests (synthetic KV lengths)"
    )
    with pytest.raises(UsageError, match="^" + re.escape(message) + "$"):
        decoder_point("qwen", {"attention": "dynamic", "tiling": "dynamic"}, "", str(path))


def test_the_shipped_sweep_specs_load():
    """Every spec under sweeps/ is accepted as written (its points checked, nothing run)."""
    import pathlib

    from stepcli.sweep import load_spec

    specs = sorted((pathlib.Path(__file__).parents[1] / "sweeps").glob("*.toml"))
    points = {p.stem: load_spec(p).points for p in specs}
    assert len(points["qwen_tiles"]) == 4
    tiling = points["qwen_tiling"]
    assert len(tiling) == 10 and sum(p["tiling"] == "dynamic" for p in tiling) == 2
