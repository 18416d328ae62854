"""Bad input to the ``step`` command: every subcommand and parameter, sweep specs, trace files.

Each case runs ``stepcli.main`` in-process and asserts exit status 2, one line on standard error
that matches an anchored regex naming the parameter, option or file and the offending value, and
no traceback. A handful run the real console script and module entry points as subprocesses.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from stepcli.main import main
from stepcli.params import MAX_SEED, MAX_SIZE

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def check(capsys, argv: list[str], message: str) -> None:
    """``step *argv`` exits 2 with the one line ``step: error: <message>``."""
    rc = main([str(a) for a in argv])
    out = capsys.readouterr()
    assert rc == 2, (rc, out.err)
    assert "Traceback" not in out.err and out.err.count("\n") == 1, out.err
    assert re.fullmatch(re.escape(f"step: error: {message}") + "\n", out.err), out.err


# -- -p parameters: type and range, before anything runs ----------------------------------------

INT_PARAMS = {
    "swiglu": {k: 1 for k in ("batch", "hidden", "intermediate", "tile_b", "tile_i")} | {"seed": 0},
    "moe": {"batch": 1, "tile_n": 1, "tile_f": 1, "regions": 0, "seed": 0, "compute_bw": 1},
    "attention": {"batch": 1, "regions": 1, "seed": 0},
}
HIGH = {"seed": MAX_SEED, "compute_bw": None}

PARAMS: list = []
for ex, params in INT_PARAMS.items():
    for key, low in params.items():
        for text, rule in (
            (str(low - 1), f"must be at least {low}, not {low - 1}"),
            ("-7", f"must be at least {low}, not -7"),
            ("abc", "must be an integer, not 'abc'"),
            ("1.5", "must be an integer, not '1.5'"),
            ("1e3", "must be an integer, not '1e3'"),
            ("", "must be an integer, not ''"),
        ):
            PARAMS.append(pytest.param(ex, key, text, rule, id=f"{ex}-{key}={text}"))
        high = HIGH.get(key, MAX_SIZE)
        if high is not None:
            PARAMS.append(
                pytest.param(
                    ex,
                    key,
                    str(high + 1),
                    f"must be at most {high}, not {high + 1}",
                    id=f"{ex}-{key}-too-large",
                )
            )
for ex, key, choices in (
    ("moe", "model", "mixtral, qwen, small"),
    ("moe", "tiling", "static, dynamic"),
    ("moe", "trace_fit", "exact, cut, repeat"),
    ("attention", "config", "qwen, small"),
    ("attention", "schedule", "interleaved, coarse, dynamic"),
    ("attention", "trace_fit", "exact, cut, repeat"),
):
    for text in ("nope", "3", "Static"):
        shown = repr(text)
        PARAMS.append(
            pytest.param(
                ex, key, text, f"must be one of {choices}, not {shown}", id=f"{ex}-{key}={text}"
            )
        )
for ex, key, text, rule in (
    ("moe", "skew", "abc", "must be a number, not 'abc'"),
    ("moe", "skew", "nan", "must be a finite number, not 'nan'"),
    ("moe", "skew", "inf", "must be a finite number, not 'inf'"),
    ("moe", "skew", "1e400", "must be a finite number, not '1e400'"),
    ("moe", "skew", "1e-400", "must be a number a float can hold (it would be 0.0), not '1e-400'"),
    ("moe", "skew", "1_0", "must be a number in ASCII digits (as 0.5 or 1e3), not '1_0'"),
    ("moe", "batch", "1_6", "must be an integer in ASCII digits (as 16 or -3), not '1_6'"),
    ("moe", "batch", "+4", "must be an integer in ASCII digits (as 16 or -3), not '+4'"),
    ("moe", "batch", "\u0664", "must be an integer in ASCII digits (as 16 or -3), not '\u0664'"),
    ("moe", "skew", "2000", "must be at most 100, not 2000"),
    ("moe", "skew", "-101", "must be at least -100, not -101"),
    ("attention", "mean", "0", "must be at least 2, not 0"),
    ("attention", "mean", "-5", "must be at least 2, not -5"),
    ("attention", "mean", "1.5", "must be at least 2, not 1.5"),
    ("attention", "mean", "50000", "must be at most 7900, not 50000"),
    ("attention", "mean", "1e9", "must be at most 7900, not 1000000000.0"),
    ("attention", "mean", "x", "must be a number, not 'x'"),
    ("attention", "sigma", "-1", "must be at least 0, not -1"),
    ("attention", "sigma", "17", "must be at most 16, not 17"),
    ("attention", "sigma", "nan", "must be a finite number, not 'nan'"),
):
    PARAMS.append(pytest.param(ex, key, text, rule, id=f"{ex}-{key}={text}"))


@pytest.mark.parametrize(("ex", "key", "text", "rule"), PARAMS)
def test_bad_parameter(capsys, ex, key, text, rule):
    check(capsys, ["metrics", ex, "-p", f"{key}={text}"], f"example '{ex}': parameter {key} {rule}")


# Every subcommand that takes -p checks them the same way, before it builds or runs anything.
SUBCOMMANDS = [
    pytest.param(cmd, ex, key, text, rule, id=f"{cmd}-{ex}-{key}={text}")
    for cmd in ("metrics", "sim", "graph", "size-queues")
    for ex, key, text, rule in (
        ("swiglu", "tile_b", "0", "must be at least 1, not 0"),
        ("swiglu", "tile_b", "abc", "must be an integer, not 'abc'"),
        ("moe", "seed", "1.5", "must be an integer, not '1.5'"),
        ("moe", "regions", "four", "must be an integer, not 'four'"),
        ("moe", "compute_bw", "0", "must be at least 1, not 0"),
        ("moe", "compute_bw", "-4096", "must be at least 1, not -4096"),
        ("attention", "regions", "four", "must be an integer, not 'four'"),
        ("attention", "batch", "0", "must be at least 1, not 0"),
    )
]


@pytest.mark.parametrize(("cmd", "ex", "key", "text", "rule"), SUBCOMMANDS)
def test_every_subcommand_checks_parameters(capsys, cmd, ex, key, text, rule):
    check(capsys, [cmd, ex, "-p", f"{key}={text}"], f"example '{ex}': parameter {key} {rule}")


OTHER = [
    (
        ["metrics", "nope"],
        "unknown example 'nope'; examples: swiglu, moe, attention, decoder, or a graph file path/to/file.py:function",
    ),
    (
        ["sim", "Swiglu"],
        "unknown example 'Swiglu'; examples: swiglu, moe, attention, decoder, or a graph file path/to/file.py:function",
    ),
    (
        ["graph", ""],
        "unknown example ''; examples: swiglu, moe, attention, decoder, or a graph file path/to/file.py:function",
    ),
    (["metrics", "moe", "-p", "=3"], "parameter '=3' is not of the form key=value"),
    (["metrics", "moe", "-p", "batch"], "parameter 'batch' is not of the form key=value"),
    (
        ["metrics", "swiglu", "-p", "tile=3"],
        "example 'swiglu' has no parameter tile; it takes batch, hidden, intermediate, tile_b, "
        "tile_i, seed",
    ),
    (
        ["metrics", "swiglu", "--convention", "both"],
        "argument --convention: invalid choice: 'both' (choose from 'paper', 'artifact')",
    ),
    (["metrics"], "the following arguments are required: example"),
    (
        ["nope"],
        "argument COMMAND: invalid choice: 'nope' (choose from 'list', 'metrics', 'sim', "
        "'graph', 'rtl', 'validate', 'sweep', 'size-queues', 'paper')",
    ),
    (["metrics", "swiglu", "--bogus"], "unrecognized arguments: --bogus"),
    (
        ["size-queues", "swiglu", "--images", "0"],
        "argument --images: must be an integer in [1, 1024], not 0",
    ),
    (
        ["size-queues", "swiglu", "--images", "-2"],
        "argument --images: must be an integer in [1, 1024], not -2",
    ),
    (
        ["size-queues", "swiglu", "--images", "2.5"],
        "argument --images: must be an integer, not '2.5'",
    ),
    (
        ["size-queues", "swiglu", "--images", "5000"],
        "argument --images: must be an integer in [1, 1024], not 5000",
    ),
    (
        ["size-queues", "swiglu", "--held-out", "-1"],
        "argument --held-out: must be an integer in [0, 1024], not -1",
    ),
    (
        ["size-queues", "swiglu", "--margin", "-1"],
        "argument --margin: must be a number at least 1 (1: no margin), not -1",
    ),
    (
        ["size-queues", "swiglu", "--margin", "0.5"],
        "argument --margin: must be a number at least 1 (1: no margin), not 0.5",
    ),
    (
        ["size-queues", "swiglu", "--margin", "nan"],
        "argument --margin: must be a finite number, not 'nan'",
    ),
    (
        ["size-queues", "swiglu", "--margin", "inf"],
        "argument --margin: must be a finite number, not 'inf'",
    ),
    (["size-queues", "swiglu", "--margin", "x"], "argument --margin: must be a number, not 'x'"),
    (
        ["size-queues", "swiglu", "--tolerance", "-1"],
        "argument --tolerance: must be a number at least 0, not -1",
    ),
    (
        ["size-queues", "swiglu", "--tolerance", "-0.01"],
        "argument --tolerance: must be a number at least 0, not -0.01",
    ),
    (
        ["size-queues", "swiglu", "--tolerance", "nan"],
        "argument --tolerance: must be a finite number, not 'nan'",
    ),
    (
        ["size-queues", "swiglu", "--tolerance", "abc"],
        "argument --tolerance: must be a number, not 'abc'",
    ),
    (
        ["size-queues", "swiglu", "--verilog", "x"],
        "--verilog writes the hardware-size graph; add --hardware",
    ),
    (
        ["size-queues", "swiglu", "--schedule", "mn_mk"],
        "--schedule picks a hardware-size schedule; use -p without --hardware",
    ),
    (
        ["size-queues", "swiglu", "--hardware", "-p", "batch=4"],
        "--hardware sizes the fixed hardware-size graph; it takes no -p",
    ),
    (
        ["size-queues", "moe", "--hardware", "--schedule", "nope"],
        "hardware-size moe has no schedule 'nope'; it has static, dynamic, time-mux",
    ),
    (
        ["sim", "swiglu", "--hardware", "-p", "batch=4"],
        "--hardware simulates the fixed hardware-size graph; it takes no -p, --hw-tile or --hw",
    ),
    (
        ["sim", "swiglu", "--schedule", "mn_mk"],
        "--schedule picks a hardware-size schedule; use -p without --hardware",
    ),
    (
        ["sim", "attention", "--hardware", "--schedule", "fast"],
        "hardware-size attention has no schedule 'fast'; it has interleaved, coarse, dynamic",
    ),
    (
        ["sim", "nope", "--hardware"],
        "no hardware-size example 'nope'; there are swiglu, moe, attention",
    ),
    (
        ["rtl", "swiglu", "-p", "batch=4"],
        "step rtl builds each example at its fixed hardware size; it takes no -p, --hw-tile or --hw (give a graph file for those)",
    ),
    (
        ["rtl", "nope"],
        "no hardware-size variant of nope; available: swiglu, moe, moe_dynamic, moe_timemux, attention, "
        "swiglu_bf16, moe_bf16, moe_dynamic_bf16, moe_timemux_bf16, attention_bf16",
    ),
    (
        ["sweep", "x.toml", "-j", "0"],
        "argument -j/--workers: must be an integer in [1, 1024], not 0",
    ),
    (
        ["sweep", "x.toml", "-j", "-3"],
        "argument -j/--workers: must be an integer in [1, 1024], not -3",
    ),
    (["sweep", "x.toml", "-j", "two"], "argument -j/--workers: must be an integer, not 'two'"),
    (
        ["sweep", "x.toml", "--cluster", "slurm"],
        "argument --cluster: invalid choice: 'slurm' (choose from 'local')",
    ),
    (["paper", "-j", "0"], "argument -j/--workers: must be an integer in [1, 1024], not 0"),
    (
        ["sim", "moe", "-p", "batch=16", "-p", "batch=32"],
        "parameter batch given twice (16 and 32)",
    ),
    (
        ["paper", "--only", "fig9"],
        "argument --only: invalid choice: 'fig9' (choose from 'dynamic_tiling', 'time_multiplexing', "
        "'dynamic_parallelization', 'decoder_layer')",
    ),
]


@pytest.mark.parametrize(
    ("argv", "message"), [pytest.param(a, m, id=" ".join(a)) for a, m in OTHER]
)
def test_bad_command_line(capsys, argv, message):
    check(capsys, argv, message)


# -- sweep specs ----------------------------------------------------------------------------------

SPECS = [
    ("example = 'moe'\nfixed = 3\n", "'fixed' must be a table ([fixed]), not 3"),
    (
        "example = 'moe'\ngrid = [1, 2]\n",
        "'grid' must be a table ([grid]) or tables ([[grid]]), not [1, 2]",
    ),
    ("example = 3\n", "'example' must be a string, not 3"),
    ("example = 'moe'\nfunctional = 'yes'\n", "'functional' must be true or false, not 'yes'"),
    ("example = 'moe'\nfunctional = 1\n", "'functional' must be true or false, not 1"),
    ("example = 'moe'\noutput = 3\n", "'output' must be a string (a CSV path), not 3"),
    ("example = 'moe'\n[grid]\ntile_n = []\n", "grid.tile_n must be a non-empty list"),
    ("example = 'moe'\n[grid]\ntile_n = 8\n", "grid.tile_n must be a non-empty list"),
    ("[grid]\ntile_n = [8]\n", "missing 'example'"),
    (
        "example = 'moe'\n[fixed]\ntile_n = 8\n[grid]\ntile_n = [8]\n",
        "tile_n both fixed and in the grid",
    ),
    (
        "example = 'moe'\n[fixed]\ntile_n = 0\n",
        "example 'moe': parameter tile_n must be at least 1, not 0",
    ),
    (
        "example = 'moe'\n[fixed]\ntile_n = 1.5\n",
        "example 'moe': parameter tile_n must be an integer, not 1.5",
    ),
    (
        "example = 'moe'\n[fixed]\ntile_n = true\n",
        "example 'moe': parameter tile_n must be an integer, not True",
    ),
    (
        "example = 'moe'\n[grid]\ntile_n = [8, -8]\n",
        "example 'moe': parameter tile_n must be at least 1, not -8",
    ),
    (
        "example = 'moe'\n[grid]\nseed = [0, 0.5]\n",
        "example 'moe': parameter seed must be an integer, not 0.5",
    ),
    (
        "example = 'moe'\n[grid]\nmodel = ['qwen', 'gpt']\n",
        "example 'moe': parameter model must be one of mixtral, qwen, small, not 'gpt'",
    ),
    (
        "example = 'moe'\n[fixed]\ncompute_bw = 0\n",
        "example 'moe': parameter compute_bw must be at least 1, not 0",
    ),
    (
        "example = 'moe'\n[fixed]\nskew = 'high'\n",
        "example 'moe': parameter skew must be a number, not 'high'",
    ),
    (
        "example = 'attention'\n[fixed]\nregions = 0\n",
        "example 'attention': parameter regions must be at least 1, not 0",
    ),
    (
        "example = 'swiglu'\n[grid]\ntile_b = [16, 'x']\n",
        "example 'swiglu': parameter tile_b must be an integer, not 'x'",
    ),
    ("example = 'swiglu'\n[grid]\ntile_b = [16, 32, 16]\n", "grid.tile_b lists 16 twice"),
    ("example = 'swiglu'\noutput = ' '\n", "'output' must name a CSV file, not ' '"),
    (
        "example = 'moe'\n[fixed]\ncolour = 1\n",
        "example 'moe' has no parameter colour; it takes model, "
        "batch, tiling, tile_n, tile_f, regions, trace, trace_fit, skew, seed, compute_bw",
    ),
]


@pytest.mark.parametrize(("text", "message"), [pytest.param(t, m, id=m[:40]) for t, m in SPECS])
def test_bad_sweep_spec(capsys, tmp_path, text, message):
    spec = tmp_path / "s.toml"
    spec.write_text(text)
    check(capsys, ["sweep", spec, "-q"], f"sweep spec {spec}: {message}")


def test_sweep_output_of_another_sweep_is_refused(capsys, tmp_path):
    """A CSV written by another sweep is not resumed (a raw KeyError once)."""
    out = tmp_path / "a.csv"
    out.write_text("foo,bar\n1,2\n")
    spec = tmp_path / "s.toml"
    spec.write_text(f"example = 'swiglu'\noutput = '{out}'\n[grid]\ntile_b = [16]\n")
    check(
        capsys,
        ["sweep", spec, "-q"],
        f"sweep output {out} holds another sweep: it has no column example, batch, hidden, "
        "intermediate, tile_b, tile_i, seed; give another 'output' or remove the file",
    )
    assert out.read_text() == "foo,bar\n1,2\n"


def test_sweep_spec_missing_file(capsys, tmp_path):
    spec = tmp_path / "none.toml"
    check(capsys, ["sweep", spec], f"cannot read sweep spec {spec}: No such file or directory")


def test_sweep_spec_unknown_example(capsys, tmp_path):
    spec = tmp_path / "s.toml"
    spec.write_text("example = 'llama'\n")
    check(
        capsys,
        ["sweep", spec],
        "unknown example 'llama'; examples: swiglu, moe, attention, decoder, or a graph file path/to/file.py:function",
    )


# -- trace files ----------------------------------------------------------------------------------


def _npz(path, **arrays):
    np.savez(path, **arrays)
    return path


def _routing(tmp_path, make):
    path = tmp_path / "r.npz"
    make(path)
    return path


def _write(data: bytes):
    return lambda p: p.write_bytes(data)


def _truncated_npz(p):
    _npz(p, data=np.zeros((8, 2), np.int64))
    p.write_bytes(p.read_bytes()[:-40])


def _npz_cut_member(p):
    _npz(p, data=np.zeros((8, 2), np.int64))
    raw = bytearray(p.read_bytes())
    with zipfile.ZipFile(p) as z:
        info = z.getinfo("data.npy")
    start = info.header_offset + 30 + len(info.filename) + 60
    raw[start : start + 20] = b"\xff" * 20  # a corrupted member: the zip's CRC check fails
    p.write_bytes(bytes(raw))


ROUTING = [
    ("empty-file", _write(b""), "cannot read (empty file, expected an .npz archive)"),
    (
        "text-file",
        _write(b"hello world, not a zip"),
        "cannot read (expected an .npz archive, got a file starting with b'hello ')",
    ),
    (
        "npy-file",
        lambda p: (
            np.save(p.with_suffix(".npy"), np.zeros((8, 2), np.int64))
            or p.write_bytes(p.with_suffix(".npy").read_bytes())
        ),
        "cannot read (expected an .npz archive, got an .npy array)",
    ),
    ("truncated", _truncated_npz, "cannot read (BadZipFile: "),
    ("corrupted-member", _npz_cut_member, "cannot read (BadZipFile: "),
    (
        "no-data-key",
        lambda p: _npz(p, choices=np.zeros((8, 2), np.int64)),
        "no array 'data' (has ['choices'])",
    ),
    (
        "float",
        lambda p: _npz(p, data=np.zeros((8, 2))),
        "expected an integer [B, top_k] array, got float64 (8, 2)",
    ),
    (
        "one-dim",
        lambda p: _npz(p, data=np.zeros(8, np.int64)),
        "expected an integer [B, top_k] array, got int64 (8,)",
    ),
    (
        "three-dim",
        lambda p: _npz(p, data=np.zeros((8, 2, 1), np.int64)),
        "expected an integer [B, top_k] array, got int64 (8, 2, 1)",
    ),
    ("no-tokens", lambda p: _npz(p, data=np.zeros((0, 2), np.int64)), "empty (0 tokens x 2)"),
    (
        "negative-id",
        lambda p: _npz(p, data=np.array([[0, 1]] * 7 + [[-1, 2]])),
        "token 7 selects expert -1, outside [0, 4)",
    ),
    (
        "id-too-large",
        lambda p: _npz(p, data=np.array([[0, 4]] + [[0, 1]] * 7)),
        "token 0 selects expert 4, outside [0, 4)",
    ),
    (
        "duplicate",
        lambda p: _npz(p, data=np.array([[0, 1]] * 3 + [[2, 2]] + [[0, 1]] * 4)),
        "token 3 selects expert(s) twice: [2, 2]",
    ),
    (
        "top-k-too-large",
        lambda p: _npz(p, data=np.array([[0, 1, 2]] * 8)),
        "3 experts per token, model 'small' routes each token to 2 (top_k)",
    ),
    (
        "top-k-too-small",
        lambda p: _npz(p, data=np.array([[3]] * 8)),
        "1 experts per token, model 'small' routes each token to 2 (top_k)",
    ),
    (  # a member whose header claims 10**11 elements: refused before numpy allocates them
        "huge-shape-header",
        lambda p: _npz_member(p, _npy_bytes(np.zeros((8, 2), np.int64), b"(100000000000, 2)")),
        "cannot read (its header says int64 (100000000000, 2), 1600000000000 bytes of data; "
        "139 follow it)",
    ),
    (
        "damaged-header",
        lambda p: _npz_member(p, _npy_bytes(np.zeros((8, 2), np.int64)).replace(b"}", b" ")),
        "cannot read (TokenError: ('EOF in multi-line statement', (2, 0)))",
    ),
]


def _npy_bytes(array: np.ndarray, shape: bytes | None = None) -> bytes:
    """``array`` as .npy bytes; with ``shape``, its header's shape replaced by that text."""
    out = io.BytesIO()
    np.save(out, array)
    data = out.getvalue()
    return data if shape is None else data.replace(str(array.shape).encode(), shape, 1)


def _npz_member(path, data: bytes):
    """An .npz whose ``data.npy`` member is ``data`` (a sound archive: its CRC matches)."""
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("data.npy", data)
    return path


@pytest.mark.parametrize(("make", "message"), [pytest.param(m, s, id=i) for i, m, s in ROUTING])
def test_bad_routing_trace(capsys, tmp_path, make, message):
    path = _routing(tmp_path, make)
    rc = main(
        [
            "metrics",
            "moe",
            "-p",
            "model=small",
            "-p",
            "batch=8",
            "-p",
            f"trace={path}",
            "--evaluate",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err and err.count("\n") == 1, err
    assert err.startswith(f"step: error: routing trace {path}: {message}"), err


@pytest.mark.parametrize(
    ("tokens", "fit", "message"),
    [
        (
            12,
            "exact",
            "has 12 entries, batch is 8; set trace_fit=cut or trace_fit=repeat to use it anyway",
        ),
        (
            4,
            "exact",
            "has 4 entries, batch is 8; set trace_fit=cut or trace_fit=repeat to use it anyway",
        ),
        (
            4,
            "cut",
            "has 4 entries, batch is 8, too few to cut (trace_fit=cut); set trace_fit=repeat to repeat it",
        ),
    ],
)
def test_routing_trace_of_another_length(capsys, tmp_path, tokens, fit, message):
    path = _npz(tmp_path / "r.npz", data=np.array([[0, 1]] * tokens))
    check(
        capsys,
        [
            "sim",
            "moe",
            "-p",
            "model=small",
            "-p",
            "batch=8",
            "-p",
            f"trace={path}",
            "-p",
            f"trace_fit={fit}",
        ],
        f"routing trace {path} {message}",
    )


def test_routing_trace_fit_when_asked(tmp_path):
    from stepcli.registry import MOE, moe_choices

    data = np.array([[0, 1], [1, 2], [2, 3]])
    path = _npz(tmp_path / "r.npz", data=data)
    base = {"model": "small", "batch": 5, "trace": str(path)}
    rep = moe_choices(MOE.params({**base, "trace_fit": "repeat"}))
    assert rep.tolist() == [[0, 1], [1, 2], [2, 3], [0, 1], [1, 2]]
    cut = moe_choices(MOE.params({**base, "batch": 2, "trace_fit": "cut"}))
    assert cut.tolist() == [[0, 1], [1, 2]]


def _npy(data):
    return lambda p: np.save(p, data)


KV = [
    ("empty-file", _write(b""), "cannot read (empty file, expected an .npy array)"),
    (
        "text-file",
        _write(b"not numpy"),
        "cannot read (expected an .npy array, got a file starting with b'not nu')",
    ),
    (
        "short-text-file",
        _write(b"PK"),
        "cannot read (expected an .npy array, got a file starting with b'PK')",
    ),
    (
        "truncated",
        lambda p: (np.save(p, np.arange(64)), p.write_bytes(p.read_bytes()[:-100])),
        "cannot read (its header says int64 (64,), 512 bytes of data; 412 follow it)",
    ),
    (
        "header-only",
        lambda p: (np.save(p, np.arange(64)), p.write_bytes(p.read_bytes()[:100])),
        "cannot read (ValueError: EOF: reading array header, expected 118 bytes got 90)",
    ),
    ("float", _npy(np.ones(8)), "expected 1-D non-negative ints, got float64 (8,)"),
    (
        "two-dim",
        _npy(np.ones((8, 2), np.int64)),
        "expected 1-D non-negative ints, got int64 (8, 2)",
    ),
    ("negative", _npy(np.array([5, -1, 3, 4])), "length -1 of request 1 is negative"),
    ("bool", _npy(np.ones(8, bool)), "expected 1-D non-negative ints, got bool (8,)"),
    ("no-requests", _npy(np.zeros(0, np.int64)), "empty (no requests)"),
    (
        "unbounded",
        _npy(np.array([5, 10**9, 3, 4])),
        "length 1000000000 of request 1 exceeds the limit 65536",
    ),
    (
        "just-over-limit",
        _npy(np.array([65537, 3, 3, 3])),
        "length 65537 of request 0 exceeds the limit 65536",
    ),
    (
        "npz-archive",
        lambda p: (
            np.savez(p.with_suffix(".npz"), a=np.arange(4))
            or p.write_bytes(p.with_suffix(".npz").read_bytes())
        ),
        "cannot read (expected an .npy array, got an .npz archive)",
    ),
    (
        "object-array",
        _npy(np.array([1, "a"], dtype=object)),
        "cannot read (an object array; traces hold integers)",
    ),
    (  # one byte of the header (its closing brace) damaged: a Python tokenizer error
        "damaged-header",
        lambda p: (np.save(p, np.arange(64)), p.write_bytes(p.read_bytes().replace(b"}", b" "))),
        "cannot read (TokenError: ('EOF in multi-line statement', (2, 0)))",
    ),
    (  # a header claiming 10**11 elements: refused before numpy allocates 745 GiB
        "huge-shape-header",
        lambda p: (
            np.save(p, np.arange(64)),
            p.write_bytes(p.read_bytes().replace(b"(64,)", b"(100000000000,)", 1)),
        ),
        "cannot read (its header says int64 (100000000000,), 800000000000 bytes of data; 522 "
        "follow it)",
    ),
]


@pytest.mark.parametrize(("make", "message"), [pytest.param(m, s, id=i) for i, m, s in KV])
def test_bad_kv_trace(capsys, tmp_path, make, message):
    path = tmp_path / "kv.npy"
    make(path)
    rc = main(
        ["metrics", "attention", "-p", "config=small", "-p", "batch=4", "-p", f"trace={path}"]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err and err.count("\n") == 1, err
    assert err.startswith(f"step: error: KV-length trace {path}: {message}"), err


@pytest.mark.parametrize(
    ("entries", "fit", "message"),
    [
        (
            10,
            "exact",
            "has 10 entries, batch is 64; set trace_fit=cut or trace_fit=repeat to use it anyway",
        ),
        (
            192,
            "exact",
            "has 192 entries, batch is 64; set trace_fit=cut or trace_fit=repeat to use it anyway",
        ),
        (
            10,
            "cut",
            "has 10 entries, batch is 64, too few to cut (trace_fit=cut); set trace_fit=repeat to repeat it",
        ),
    ],
)
def test_kv_trace_of_another_length(capsys, tmp_path, entries, fit, message):
    path = tmp_path / "kv.npy"
    np.save(path, np.full(entries, 7, np.int64))
    check(
        capsys,
        ["sim", "attention", "-p", "config=small", "-p", f"trace={path}", "-p", f"trace_fit={fit}"],
        f"KV-length trace {path} {message}",
    )


def test_missing_trace_files(capsys, tmp_path):
    path = tmp_path / "none.npy"
    rc = main(["sim", "attention", "-p", "config=small", "-p", f"trace={path}"])
    err = capsys.readouterr().err
    assert rc == 2 and re.fullmatch(
        re.escape(f"step: error: KV-length trace {path}: cannot read (FileNotFoundError: ")
        + r".*\)\n",
        err,
    ), err


def test_kv_trace_fit_when_asked(tmp_path):
    from stepcli.registry import ATTENTION, kv_lengths

    path = tmp_path / "kv.npy"
    np.save(path, np.array([3, 5, 7]))
    base = {"config": "small", "trace": str(path)}
    assert kv_lengths(ATTENTION.params({**base, "batch": 5, "trace_fit": "repeat"})).tolist() == [
        3,
        5,
        7,
        3,
        5,
    ]
    assert kv_lengths(ATTENTION.params({**base, "batch": 2, "trace_fit": "cut"})).tolist() == [3, 5]


def test_a_trace_named_like_a_number_is_a_name(monkeypatch, tmp_path):
    """-p values stay text until the example's Param reads them: trace=123 names a file (it was
    once read as the integer 123 and refused as not a string)."""
    monkeypatch.chdir(tmp_path)
    with open("123", "wb") as f:
        np.save(f, np.array([3, 5, 7]))
    assert (
        main(
            [
                "metrics",
                "attention",
                "-p",
                "config=small",
                "-p",
                "batch=3",
                "-p",
                "regions=1",
                "-p",
                "trace=123",
            ]
        )
        == 0
    )


# -- the Python API behind the command: no silent clamping ----------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"images": 0}, "images must be a positive integer, not 0"),
        ({"images": -1}, "images must be a positive integer, not -1"),
        ({"images": 1.5}, "images must be a positive integer, not 1.5"),
        ({"held_out": -1}, "held_out must be a non-negative integer, not -1"),
        ({"held_out": True}, "held_out must be a non-negative integer, not True"),
        ({"margin": 0.5}, "margin must be a finite number of at least 1, not 0.5"),
        ({"margin": -1}, "margin must be a finite number of at least 1, not -1"),
        ({"tolerance": -0.5}, "tolerance must be a finite number of at least 0, not -0.5"),
        ({"tolerance": float("nan")}, "tolerance must be a finite number of at least 0, not nan"),
    ],
)
def test_size_example_refuses_bad_options(kwargs, message):
    from stepcli.registry import UsageError
    from stepcli.sizing import size_example

    with pytest.raises(UsageError, match="^" + re.escape(message) + "$"):
        size_example("swiglu", {}, **kwargs)


def test_hardware_case_refuses_zero_images():
    from stepcli.registry import UsageError
    from stepcli.sizing import hardware_case

    with pytest.raises(UsageError, match=r"^images must be a positive integer, not 0$"):
        hardware_case("swiglu", None, 0)


# -- real processes: the console script and the module entry points --------------------------------


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=120)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["-m", "stepcli", "metrics", "swiglu", "-p", "tile_b=0"],
            "step: error: example 'swiglu': parameter tile_b must be at least 1, not 0",
        ),
        (
            ["-m", "stepcli", "size-queues", "swiglu", "--tolerance", "-1"],
            "step: error: argument --tolerance: must be a number at least 0, not -1",
        ),
        (
            ["-m", "step_hw.rtl", "nope"],
            "python -m step_hw.rtl: error: no hardware-size example 'nope'; available: swiglu, moe, "
            "moe_dynamic, moe_timemux, attention, swiglu_bf16, moe_bf16, moe_dynamic_bf16, "
            "moe_timemux_bf16, attention_bf16",
        ),
    ],
)
def test_subprocess_errors(argv, message):
    r = _run(sys.executable, *argv)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.rstrip("\n").splitlines()[-1] == message


def test_rtl_module_help():
    r = _run(sys.executable, "-m", "step_hw.rtl", "--help")
    assert (
        r.returncode == 0 and r.stderr == "" and r.stdout.startswith("usage: python -m step_hw.rtl")
    )


@pytest.mark.parametrize("script", ["moe.py", "attention.py", "swiglu.py"])
def test_examples_import_as_scripts(script):
    """``python examples/<x>.py`` imports (``-c`` runs its top level without ``main()``)."""
    code = (
        "import runpy, sys; sys.argv = ['x']; "
        f"runpy.run_path('examples/{script}', run_name='not_main'); print('ok')"
    )
    r = _run(sys.executable, "-c", code)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda t: t.synthetic_routing(4, 8, 2, skew=150.0),
            "synthetic_routing: skew must be a number in [-100, 100], not 150.0",
        ),
        (
            lambda t: t.synthetic_kv_lengths(4, mean=50000.0),
            "synthetic_kv_lengths: mean must be a number in [2, 7900], not 50000.0",
        ),
        (
            lambda t: t.synthetic_kv_lengths(4, mean=1.0),
            "synthetic_kv_lengths: mean must be a number in [2, 7900], not 1.0",
        ),
        (
            lambda t: t.synthetic_kv_lengths(4, sigma=float("nan")),
            "synthetic_kv_lengths: sigma must be a number in [0, inf], not nan",
        ),
        (
            lambda t: t.synthetic_kv_lengths(0),
            "synthetic_kv_lengths: batch must be a positive integer, not 0",
        ),
        (
            lambda t: t.synthetic_routing(0, 8, 2),
            "synthetic_routing: batch must be a positive integer, not 0",
        ),
        (
            lambda t: t.synthetic_routing(4, 8.7, 2),
            "synthetic_routing: num_experts must be a positive integer, not 8.7",
        ),
        (
            lambda t: t.synthetic_routing(4, 8, 2, skew="1"),
            "synthetic_routing: skew must be a number in [-100, 100], not '1'",
        ),
        (
            lambda t: t.routing_weights(np.zeros((2, 2, 2), np.int64)),
            "routing_weights: choices: expected an integer [B, top_k] array, got int64 (2, 2, 2)",
        ),
        (
            lambda t: t.check_routing(np.array([[0, 1]]), 0),
            "choices: num_experts must be a positive integer, not 0",
        ),
    ],
)
def test_synthetic_generators_refuse_out_of_range(call, message):
    from examples import traces

    with pytest.raises(ValueError) as err:
        call(traces)
    assert str(err.value) == message


def test_synthetic_generators_at_their_limits():
    """The extreme skews still give a distribution (an integer skew once overflowed int64), and
    the synthetic lengths stay in SYNTHETIC_KV_RANGE (the generator's definition)."""
    from examples import traces

    for skew in (traces.MAX_SKEW, -traces.MAX_SKEW, 100):
        got = traces.synthetic_routing(64, 128, 8, skew=skew, seed=1)
        assert got.shape == (64, 8)
        assert all(len(set(row)) == 8 for row in got.tolist())
    low, high = traces.SYNTHETIC_KV_RANGE
    kv = traces.synthetic_kv_lengths(4096, mean=high, sigma=2.0, seed=3)
    assert kv.min() >= low and kv.max() == high
