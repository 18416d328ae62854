"""``make validate`` while it runs (``bench.validate._run_all``): each measured point's line says
how many points have ended; interrupted (Ctrl-C), it starts no other point and exits with status
130, where the pool's exit ran every queued point first."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
POINTS = 40

#: A run of ``POINTS`` fake points (each writes its index to a file, then takes 0.5 s).
DRIVER = f"""
import signal, sys, time
from bench import validate as V

# Ctrl-C as in a terminal: under make and pytest-xdist a child may inherit SIGINT ignored
signal.signal(signal.SIGINT, signal.default_int_handler)

def fake(name, index, options):
    with open(sys.argv[1], "a") as f:
        f.write(f"{{index}}\\n")
    time.sleep(0.5)
    return {{"error": "fake", "fatal": False}}

V._run_indexed = fake
V._run_all([("fig8", i) for i in range({POINTS})], {{}}, int(sys.argv[2]))
print("every point ran")
"""


def _started(marks: Path) -> int:
    return len(marks.read_text().split()) if marks.is_file() else 0


@pytest.mark.parametrize("jobs", [1, 2])
def test_an_interrupted_run_starts_no_other_point(tmp_path, jobs):
    marks = tmp_path / "started"
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.Popen(
        [sys.executable, str(driver), str(marks), str(jobs)], cwd=ROOT, env=env,
        start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while _started(marks) < 3:
            assert run.poll() is None and time.monotonic() < deadline, run.communicate()
            time.sleep(0.05)
        before = _started(marks)
        os.killpg(run.pid, signal.SIGINT)  # Ctrl-C: the whole foreground group
        out, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    assert run.returncode == 130, err
    assert "every point ran" not in out
    assert "validate: interrupted after " in err and f"of {POINTS} points" in err
    # at most the points in flight when the signal went out start after it
    assert _started(marks) <= before + 2 * jobs < POINTS


def test_each_measured_point_says_how_many_have_ended(monkeypatch, capsys):
    from bench import validate as V

    def fake(name, index, options):
        if index == 1:
            return {"error": "not cached", "fatal": False}
        return {"params": {"i": index}, "rtl_cycles": 100, "sim_cycles": 100 + index,
                "paper_cycles": 90, "axi_efficiency": 0.5, "outputs_match": True}  # fmt: skip

    monkeypatch.setattr(V, "_run_indexed", fake)
    results, walls = V._run_all([("fig8", i) for i in range(12)], {}, jobs=1)
    assert len(results) == 12 and set(walls) == {"fig8"}
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 11  # the point that was not measured is counted, not shown
    assert lines[0].startswith("[ 1/12 00:00] fig8 ")
    assert lines[1].startswith("[ 3/12 00:00] fig8 ") and '{"i": 2}' in lines[1]
    assert lines[-1].startswith("[12/12 00:00] fig8 ")
    assert "rtl     100 sim     111 (+11.0%) paper      90 (-10%) axi 50% match True" in lines[-1]
