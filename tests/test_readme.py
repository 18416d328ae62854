"""The README's tour runs and prints what it says."""

from __future__ import annotations

import contextlib
import io
import pathlib
import re


def test_readme_tour_runs():
    text = (pathlib.Path(__file__).parent.parent / "README.md").read_text()
    code = re.search(r"## A tour\n\n```python\n(.*?)```", text, re.S).group(1)
    sim_code = re.search(r"Simulate the same graph.*?```python\n(.*?)```", text, re.S).group(1)
    out = io.StringIO()
    scope: dict = {}
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), scope)
        exec(compile(sim_code, "README.md", "exec"), scope)
    lines = out.getvalue().splitlines()
    assert lines[:2] == ["Strm<Tile<float32, 16x16>, [1, 2, 2]>", "36864 9216 131072"]
    cycles, read = map(int, lines[2].split())
    assert read == 16 * 1024 * 2 and cycles > 0
    assert (scope["r"].memory["c"] == scope["result"].memory["c"]).all()
