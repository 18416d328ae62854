"""The bench scripts refuse bad options with one line before any work (a negative --limit once
dropped points, --jobs 0 ran serially, an unknown --only matched nothing or raised KeyError)."""

from __future__ import annotations

import importlib
import re

import pytest

CASES = [
    ("bench.validate", ["--limit", "-3"], r"--limit: at least 0 \(0: every point\), not -3"),
    ("bench.validate", ["--jobs", "0"], "--jobs: at least 1, not 0"),
    ("bench.validate", ["--where", "tile_b"], "--where: PARAM=VALUE, not 'tile_b'"),
    ("bench.validate", ["--where", "=64"], "--where: PARAM=VALUE, not '=64'"),
    ("bench.validate", ["--only", "fig8,fig8"], "--only: fig8 given twice"),
    ("bench.cosim_speed", ["--only", "swigl"],
     "--only: no design swigl; designs: swiglu, moe, attention, swiglu16"),
    ("bench.hier_tiling", ["--only", "7x7"], "--only: no point 7x7; points: 16x16, .*"),
    ("bench.hier_tiling", ["--only", "nosuch", "--moe"], "--only: no point nosuch; points: .*"),
    ("bench.hier_tiling", ["--only", "dynamic_timemux1_b16"],
     "--only dynamic_timemux1_b16 is a point of --moe, which is not given"),
    ("bench.hw_area", ["--generic-timeout", "-5"],
     "--generic-timeout must be 0 \\(skip\\) or more, not -5"),
]  # fmt: skip


@pytest.mark.parametrize(("module", "argv", "message"), CASES, ids=[" ".join(c[1]) for c in CASES])
def test_bad_bench_options(capsys, module, argv, message):
    main = importlib.import_module(module).main
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert re.fullmatch(r".*: error: " + message, last), last
