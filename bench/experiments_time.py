"""Run `step paper` from a cold interpreter and record its wall time.

Writes ``build/bench/experiments_time.json``: ``{"wall_s", "limit_s", "traces", "command"}``.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import time


def main(argv: list[str]) -> int:
    cmd = [sys.executable, "-m", "stepcli", "paper", *argv]
    t0 = time.perf_counter()
    rc = subprocess.call(cmd)
    wall = time.perf_counter() - t0
    out = pathlib.Path("build/bench")
    out.mkdir(parents=True, exist_ok=True)
    traces = argv[argv.index("--traces") + 1] if "--traces" in argv else "synthetic"
    record = {
        "wall_s": round(wall, 1),
        "limit_s": 600,
        "traces": traces,
        "command": " ".join(["step", "paper", *argv]),
    }
    (out / "experiments_time.json").write_text(json.dumps(record, indent=2) + "\n")
    print(f"step paper took {wall:.1f} s (limit 600 s)")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
