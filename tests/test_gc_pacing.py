"""step_hw.gc_pacing: the collector's third threshold is raised inside a conversion and restored
after it, whatever happens inside."""

from __future__ import annotations

import gc
import threading

import pytest

from step_hw.gc_pacing import FULL_EVERY, fewer_full_collections


@pytest.fixture
def thresholds():
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*saved)


def test_only_the_third_threshold_is_raised_and_it_comes_back(thresholds):
    with fewer_full_collections():
        assert gc.get_threshold() == (700, 10, FULL_EVERY)
    assert gc.get_threshold() == (700, 10, 10)


def test_an_exception_inside_restores_the_thresholds(thresholds):
    with pytest.raises(RuntimeError, match="boom"), fewer_full_collections():
        raise RuntimeError("boom")
    assert gc.get_threshold() == (700, 10, 10)


def test_nested_blocks_restore_when_the_outermost_exits(thresholds):
    with fewer_full_collections():
        with fewer_full_collections():
            assert gc.get_threshold()[2] == FULL_EVERY
        assert gc.get_threshold()[2] == FULL_EVERY  # the outer conversion still runs
    assert gc.get_threshold() == (700, 10, 10)


def test_overlapping_blocks_in_threads_restore_after_the_last(thresholds):
    inside, leave = threading.Event(), threading.Event()

    def other():
        with fewer_full_collections():
            inside.set()
            leave.wait(10)

    t = threading.Thread(target=other)
    t.start()
    assert inside.wait(10)
    with fewer_full_collections():
        pass  # this block ends first: the other thread's conversion still runs
    assert gc.get_threshold()[2] == FULL_EVERY
    leave.set()
    t.join(10)
    assert gc.get_threshold() == (700, 10, 10)


def test_a_higher_threshold_of_the_user_is_kept(thresholds):
    gc.set_threshold(700, 10, 5 * FULL_EVERY)
    with fewer_full_collections():
        assert gc.get_threshold() == (700, 10, 5 * FULL_EVERY)
    assert gc.get_threshold() == (700, 10, 5 * FULL_EVERY)


def test_a_conversion_runs_with_fewer_full_collections(thresholds, monkeypatch):
    """The elaborator converts inside the block: the thresholds seen while Amaranth converts."""
    from examples import swiglu
    from step_hw import elaborate, verilog_backend

    seen = []
    convert = verilog_backend.convert

    def spy(*args, **kwargs):
        seen.append(gc.get_threshold())
        return convert(*args, **kwargs)

    monkeypatch.setattr(verilog_backend, "convert", spy)
    graph = swiglu.hardware()
    elaborate._convert(graph, elaborate.config_for(graph), "gc_pacing_top")
    assert seen and all(t == (700, 10, FULL_EVERY) for t in seen)
    assert gc.get_threshold() == (700, 10, 10)
