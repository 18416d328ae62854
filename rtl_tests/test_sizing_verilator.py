"""Sized queues in co-simulation: the depths `step size-queues --hardware` picks (the
simulator's ``rtl`` profile over ``IMAGES`` memory images, or one where every seed gives the
same timing image (SwiGLU), as in
``build/bench/queue_sizing.json``, then confirmed on the RTL: ``rtl_tests.sizing_cosim``) hold
on the generated RTL. On every image, each sized design must finish without deadlock, produce
the interpreter's outputs bit for bit and take at most 2% more cycles than the same graph with
every queue 1024 deep, with no more queue storage than the smallest uniform depth that runs as
fast. SwiGLU runs in `make test`; the larger designs (two builds or more each) in `make test-all`."""

from __future__ import annotations

import pytest

from rtl_tests.sizing_cosim import confirm_in_cosim
from sim.sizing import DEEP, queue_bits
from stepcli.sizing import IMAGES, hardware_case, image_counts, size_hardware

CASES = [
    ("swiglu", "mn_mk"),
    pytest.param("moe", "static", marks=pytest.mark.slow),
    pytest.param("moe", "dynamic", marks=pytest.mark.slow),
    pytest.param("moe", "time-mux", marks=pytest.mark.slow),
    pytest.param("attention", "interleaved", marks=pytest.mark.slow),
    pytest.param("attention", "coarse", marks=pytest.mark.slow),
    pytest.param("attention", "dynamic", marks=pytest.mark.slow),
]


@pytest.mark.parametrize(("example", "schedule"), CASES)
def test_sized_queues_hold_in_cosimulation(example, schedule):
    images, _ = image_counts(example, {}, IMAGES, 0)  # SwiGLU's seeds give one timing image
    report = size_hardware(example, schedule, images=images)
    assert report.deadlock_free and report.bits_sized < report.bits_default
    _, memories = hardware_case(example, schedule, images)
    confirmed = confirm_in_cosim(example, schedule, report.depths, memories, tolerance=0.02)
    bits = queue_bits(report.bits, confirmed.depths)
    print(f"{example}/{schedule}: {report.bits_sized} bits sized, {bits} confirmed "
          f"({len(confirmed.rounds)} rounds {confirmed.rounds}), {report.bits_uniform} uniform")  # fmt: skip
    assert len(confirmed.runs) == images
    for run in confirmed.runs:
        print(f"  image {run.image}: sized {run.cycles_sized}, depth {DEEP} {run.cycles_deep}")
        assert not run.mismatched, f"image {run.image}: sized RTL tensors {run.mismatched} differ"
        assert run.slowdown <= 0.02, (
            f"image {run.image}: sized {run.cycles_sized} cycles, depth {DEEP} {run.cycles_deep}"
        )
    assert bits <= report.bits_uniform
