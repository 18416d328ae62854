"""Every BF16 x BF16 product (2^32 pairs) through the Verilated ``mul_bf16``, against numpy.

``python -m bench.fp_exhaustive [--chunks START:STOP]`` builds ``step_hw.compute.fp.mul_bf16``
with :mod:`step_hw.cosim.datapath` (cached; the build goes through the Verilator lock), then
for each chunk of 256 values of ``a`` runs the C++ side over that chunk times all 2^16 values
of ``b`` (2^24 products, one executable run) and compares with ``step_lang.floats.mul_bf16`` on
the same grid; the next chunk's RTL run overlaps the current chunk's numpy reference (two
processes, two cores). There are 256 chunks; ``--chunks 0:16`` checks a 1/16 slice and projects
the full time.

Writes ``build/bench/fp_exhaustive.json``: ``{"pairs", "mismatches", "first_mismatches",
"seconds", ...}`` (``pairs`` the pairs checked; ``seconds`` the wall time of the check, build
excluded, which is ``build_seconds``). Measured on the 2-core development machine: all 2^32
pairs in 197 s, no mismatches (the RTL runs 23 M products a second, 188 s in all, the numpy
reference 35 M/s, 124 s, overlapped with it); the 1/16 slice ``--chunks 0:16`` in 11 s.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from step_hw.compute import fp
from step_hw.cosim import datapath
from step_lang import floats as fl

CHUNK = 256  # values of `a` per executable run
CHUNKS = 2**16 // CHUNK
OUT = pathlib.Path("build/bench/fp_exhaustive.json")


def _range(text: str) -> range:
    start, _, stop = text.partition(":")
    r = range(int(start or 0), int(stop or CHUNKS))
    if not (0 <= r.start < r.stop <= CHUNKS):
        raise argparse.ArgumentTypeError(f"chunk range must lie within 0:{CHUNKS}, not {text!r}")
    return r


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--chunks",
        type=_range,
        default=range(CHUNKS),
        help=f"START:STOP of the {CHUNKS} chunks of {CHUNK} values of a (default: all)",
    )
    args = parser.parse_args(argv)
    chunks: range = args.chunks

    t0 = time.perf_counter()
    dp = datapath.build_datapath(fp.mul_bf16, [16, 16], 32, name="mul_bf16")
    build_s = time.perf_counter() - t0

    every = np.arange(2**16, dtype=np.uint16)
    mismatches, first = 0, []
    rtl_s = ref_s = 0.0

    def rtl(c: int) -> tuple[np.ndarray, float]:
        t = time.perf_counter()
        got = dp.run([every[c * CHUNK : (c + 1) * CHUNK], every], grid=True)
        return got, time.perf_counter() - t

    start = time.perf_counter()
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(rtl, chunks[0])
        for k, c in enumerate(chunks):
            a = every[c * CHUNK : (c + 1) * CHUNK]
            t = time.perf_counter()
            want = fl.mul_bf16(a[:, None], every[None, :]).ravel()
            ref_s += time.perf_counter() - t
            got, seconds = pending.result()
            rtl_s += seconds
            if k + 1 < len(chunks):
                pending = pool.submit(rtl, chunks[k + 1])
            bad = np.flatnonzero(got != want)
            mismatches += int(bad.size)
            for i in bad[: max(0, 10 - len(first))]:
                first.append(
                    {
                        "a": f"{int(a[i // 2**16]):#06x}",
                        "b": f"{int(every[i % 2**16]):#06x}",
                        "got": f"{int(got[i]):#010x}",
                        "want": f"{int(want[i]):#010x}",
                    }
                )
            if (k + 1) % 16 == 0 or k + 1 == len(chunks):
                print(
                    f"chunk {c + 1}/{CHUNKS}: {mismatches} mismatches, "
                    f"{time.perf_counter() - start:.0f} s",
                    file=sys.stderr,
                    flush=True,
                )
    seconds = time.perf_counter() - start

    pairs = len(chunks) * CHUNK * 2**16
    result = {
        "pairs": pairs,
        "mismatches": mismatches,
        "first_mismatches": first,
        "seconds": round(seconds, 1),
        "full": len(chunks) == CHUNKS,
        "chunks": f"{chunks.start}:{chunks.stop}",
        "projected_full_seconds": round(seconds * CHUNKS / len(chunks), 1),
        "build_seconds": round(build_s, 1),
        "rtl_seconds": round(rtl_s, 1),
        "reference_seconds": round(ref_s, 1),
        "rtl_pairs_per_second": round(pairs / rtl_s),
        "reference_pairs_per_second": round(pairs / ref_s),
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    if mismatches:
        sys.exit(1)


if __name__ == "__main__":
    main()
