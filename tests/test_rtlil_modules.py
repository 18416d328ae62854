"""step_hw.rtlil_modules: identical RTLIL modules merged without changing the hardware."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from step_hw.rtlil_modules import merge_identical_modules


def _module(name: str, body: list[str], cells: dict[str, str] | None = None, top=False) -> str:
    lines = ['attribute \\generator "Amaranth"']
    lines += ["attribute \\top 1"] if top else []
    lines.append(f"module {name}")
    lines += [f"  {line}" for line in body]
    for instance, kind in (cells or {}).items():
        lines += [f"  cell {kind} {instance}", "  end"]
    return "\n".join([*lines, "end", ""])


def _design(*modules: str) -> str:
    return "\n".join(modules)


def _names(text: str) -> list[str]:
    return re.findall(r"^module (\S+)$", text, re.M)


def test_copies_of_a_leaf_become_one_module_and_the_cells_name_it():
    text = _design(
        _module("\\top", ["wire \\x"], {"\\a": "\\top.a", "\\b": "\\top.b"}, top=True),
        _module("\\top.a", ["wire width 4 \\q"]),
        _module("\\top.b", ["wire width 4 \\q"]),
    )
    merged, before, after = merge_identical_modules(text)
    assert (before, after) == (3, 2)
    assert _names(merged) == ["\\top", "\\top.a"]
    assert "cell \\top.a \\a" in merged and "cell \\top.a \\b" in merged
    assert "attribute \\top 1\nmodule \\top\n" in merged


def test_parents_merge_once_their_children_have():
    text = _design(
        _module("\\top", [], {"\\p": "\\top.p", "\\q": "\\top.q"}, top=True),
        _module("\\top.p", ["wire \\v"], {"\\c": "\\top.p.c"}),
        _module("\\top.p.c", ["wire width 8 \\w"]),
        _module("\\top.q", ["wire \\v"], {"\\c": "\\top.q.c"}),
        _module("\\top.q.c", ["wire width 8 \\w"]),
    )
    merged, before, after = merge_identical_modules(text)
    assert (before, after) == (5, 3)
    assert _names(merged) == ["\\top", "\\top.p", "\\top.p.c"]
    assert merged.count("cell \\top.p ") == 2


def test_modules_that_differ_in_body_or_attributes_stay_apart():
    text = _design(
        _module("\\top", [], {"\\a": "\\top.a", "\\b": "\\top.b", "\\c": "\\top.c"}, top=True),
        _module("\\top.a", ["wire width 4 \\q"]),
        _module("\\top.b", ["wire width 5 \\q"]),
        _module("\\top.c", ["wire width 4 \\q"], top=True),
    )
    merged, before, after = merge_identical_modules(text)
    assert (before, after) == (4, 4)
    assert merged == text


def test_text_outside_the_modules_is_refused():
    module = _module("\\top", [], top=True)
    with pytest.raises(ValueError, match="before module \\\\top"):
        merge_identical_modules("autoidx 3\n" + module)
    with pytest.raises(ValueError, match="after the last module"):
        merge_identical_modules(module + "module \\broken\n")


def two_queues():
    """A small Amaranth design with two identical submodules (each with a submodule)."""
    from bench.hw_area import SCALAR
    from step_hw.broadcast import Broadcast
    from step_hw.queue import Queue

    class TwoQueues(Broadcast):
        def elaborate(self, platform):
            m = super().elaborate(platform)
            m.submodules.q0 = Queue(shape=SCALAR.layout(), depth=2)
            m.submodules.q1 = Queue(shape=SCALAR.layout(), depth=2)
            return m

    return TwoQueues(fmt=SCALAR, n=2)


def test_an_amaranth_design_with_two_identical_submodules():
    from amaranth.back import rtlil

    text = rtlil.convert(two_queues(), name="top", emit_src=False)
    merged, before, after = merge_identical_modules(text)
    copies = [name for name in _names(text) if name.startswith("\\top.q1")]
    assert copies and before - after == len(copies)  # q1 and its submodules fold into q0's
    assert "cell \\top.q0 \\q1" in merged
    assert "\\top.q1" not in merged


# Random hierarchies: every module's body one of a few texts, every instance of a random kind.
# The merge must keep the hardware (the expanded instance tree from top) and leave no two
# identical modules.


@st.composite
def _hierarchies(draw):
    count = draw(st.integers(1, 9))
    modules = {}
    for i in reversed(range(count)):  # children (higher numbers) first
        name = "\\top" if i == 0 else f"\\top.m{i}"
        body = [f"wire width {draw(st.integers(1, 3))} \\w"]
        kinds = st.sampled_from([f"\\top.m{j}" for j in range(i + 1, count)] or [None])
        cells = {f"\\i{k}": kind for k in range(draw(st.integers(0, 3))) if (kind := draw(kinds))}
        modules[name] = _module(name, body, cells, top=i == 0)
    return _design(*(modules[name] for name in sorted(modules, key=len)))


def _expanded(text: str) -> tuple:
    bodies = {m[1]: m[2] for m in re.finditer(r"^module (\S+)\n(.*?)^end\n", text, re.S | re.M)}

    def tree(name: str) -> tuple:
        body = bodies[name]
        cells = re.findall(r"^  cell (\S+) (\S+)$", body, re.M)
        plain = re.sub(r"^  cell .*\n  end\n", "", body, flags=re.M)
        return plain, tuple(sorted((instance, tree(kind)) for kind, instance in cells))

    return tree("\\top")


@settings(max_examples=200, deadline=None)
@given(_hierarchies())
def test_random_hierarchies_keep_their_hardware_and_no_two_modules_stay_identical(text):
    merged, before, after = merge_identical_modules(text)
    assert _expanded(merged) == _expanded(text)
    assert len(_names(merged)) == after <= before == len(_names(text))
    again, *_ = merge_identical_modules(merged)
    assert again == merged  # a fixed point: nothing identical is left
