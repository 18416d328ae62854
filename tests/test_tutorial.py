"""docs/tutorial.md runs as written: its ```python blocks, executed in order in one namespace
(the co-simulation is one Verilator build of a tiny graph, cached under build/cosim/)."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "tutorial.md"


def python_blocks(text: str) -> list[str]:
    """The tutorial's ```python blocks, in order."""
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_the_tutorial_runs_as_written(capsys):
    blocks = python_blocks(DOC.read_text())
    assert len(blocks) >= 3
    namespace: dict = {"__name__": "tutorial"}
    for i, block in enumerate(blocks):
        exec(compile(block, f"{DOC}:block{i}", "exec"), namespace)
    report = namespace["report"]
    assert report.ok and report.rtl_cycles > 0
    out = capsys.readouterr().out
    assert "Strm<Tile<int16, 4x4>, [1, 2]>" in out
    # The report as the tutorial shows it, but for the run's times and folder.
    shown = re.search(r"^```\n(validation of graph .*?)^```", DOC.read_text(), re.S | re.M)
    got = re.search(r"^validation of graph .*?^verdict .*?$", out, re.S | re.M)
    assert shown and got, out

    def lines(text: str) -> list[str]:
        return [line for line in text.strip().splitlines() if not line.startswith("RTL run")]

    assert lines(got.group(0)) == lines(shown.group(1))
