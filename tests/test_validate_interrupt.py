"""``make validate`` interrupted (Ctrl-C): it starts no other point and exits with status 130
(``bench.validate._run_all``), where the pool's exit ran every queued point first."""

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
import sys, time
from bench import validate as V

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
