"""Which queues the co-simulated confirmation of sized queues grows (``rtl_tests.sizing_cosim``):
only where the sized run falls behind the deep one, not where a delay merely passes on."""

from __future__ import annotations

from rtl_tests.sizing_cosim import fell_behind


def test_a_delay_is_charged_where_it_starts_not_downstream():
    # load -> a (depth 1, its consumer slow) ; a's consumer `f` -> b ; `f` also has input c.
    deep = {"load.out": [0, 1, 2, 3], "f.out": [3, 4, 5, 6], "c.out": [0, 1, 2, 3]}
    sized = {"load.out": [0, 3, 6, 9], "f.out": [3, 6, 9, 12], "c.out": [0, 1, 2, 3]}
    inputs = {"f": ["load.out", "c.out"], "g": ["f.out"]}
    # load.out is late by 2 at its second push with no input: it found its queue full. f.out is
    # as late as its input load.out was: passed on, not created.
    assert fell_behind(sized, deep, inputs) == ["load.out"]


def test_small_jitter_and_early_tokens_are_ignored():
    deep = {"x.out": [2, 3, 4], "y.out": [5, 6, 7]}
    sized = {"x.out": [1, 4, 5], "y.out": [4, 7, 8]}  # one cycle late at most
    assert fell_behind(sized, deep, {"y": ["x.out"]}) == []
    assert fell_behind(sized, deep, {"y": ["x.out"]}, slack=1) == ["x.out"]


def test_a_delay_larger_than_the_inputs_is_created_here():
    deep = {"x.out": [2, 3, 4], "y.out": [5, 6, 7]}
    sized = {"x.out": [2, 4, 5], "y.out": [5, 13, 14]}  # x one late, y eight: y's queue was full
    assert fell_behind(sized, deep, {"y": ["x.out"]}) == ["y.out"]
