"""step_hw.field_wires: a conversion without field wires is the same Verilog less exactly the
field wires' declarations and assignments; it is cached under a key of its own, and omitting
them in one thread leaves another thread's conversion alone."""

from __future__ import annotations

import re
import threading

import pytest

import step_hw.elaborate as elaborate
from step_hw import field_wires
from step_hw.config import HwConfig
from step_lang import Graph, RepeatStatic, Sink, Source, StreamType, Tile
from step_lang.types import int16

pytestmark = pytest.mark.skipif(not field_wires.omittable(), reason="Amaranth is not 0.5")

_DECL = re.compile(r"^  wire (?:signed )?(?:\[\d+:0\] )?(\\\S+) ;$")


def _graph() -> Graph:
    g = Graph("fields")
    x = Source(g, StreamType(Tile(int16, 4, 4), (2,)), name="x")
    Sink(RepeatStatic(x.out, 2, name="r").out, name="y")
    return g


def _without_fields(text: str) -> tuple[str, int]:
    """``text`` less the declarations and assignments of wires named like a field of another
    wire (``\\base.field``, ``\\base[3]``); and how many such wires it declared."""
    names = {m.group(1) for line in text.splitlines() if (m := _DECL.match(line))}
    fields = {n for n in names if re.fullmatch(r"\\[^.\[]+(?:\.\w+|\[\d+\])+", n)}
    kept = [
        line
        for line in text.splitlines(keepends=True)
        if not ((m := _DECL.match(line.rstrip("\n"))) and m.group(1) in fields)
        and not (line.startswith("  assign \\") and line[9:].split(" ", 1)[0] in fields)
    ]
    return "".join(kept), len(fields)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("STEP_CONVERT_BUILD", str(tmp_path / "convert"))


def test_the_verilog_without_field_wires_is_the_same_less_the_field_wires(cache):
    full = elaborate.conversion(_graph(), HwConfig(), name="t")
    bare = elaborate.conversion(_graph(), HwConfig(), name="t", field_wires=False)
    stripped, fields = _without_fields(full.text)
    # a 4 x 4 int16 tile payload has 16 element fields (and rows) in several blocks
    assert fields >= 16
    assert "data[3][3]" in full.text and "data[3][3]" not in bare.text
    assert bare.text == stripped
    assert bare.desc == full.desc


def test_each_kind_of_conversion_is_cached_under_its_own_key(cache, monkeypatch):
    done = []
    real = elaborate._convert

    def spy(graph, config, top_name):
        done.append(field_wires_off())
        return real(graph, config, top_name)

    def field_wires_off() -> bool:
        return getattr(field_wires._STATE, "omit", False)

    monkeypatch.setattr(elaborate, "_convert", spy)
    full = elaborate.conversion(_graph(), HwConfig(), name="t")
    bare = elaborate.conversion(_graph(), HwConfig(), name="t", field_wires=False)
    assert done == [False, True]
    assert elaborate.conversion(_graph(), HwConfig(), name="t").text == full.text
    again = elaborate.conversion(_graph(), HwConfig(), name="t", field_wires=False)
    assert again.cached and again.text == bare.text
    assert done == [False, True]


def test_omitting_them_in_one_thread_leaves_another_threads_conversion_alone(cache):
    from amaranth.back import verilog

    from step_hw.elaborate import ElaboratedGraph

    def convert() -> str:
        return verilog.convert(ElaboratedGraph(_graph(), HwConfig()), name="t", emit_src=False)

    texts: dict[str, str] = {}
    inside, release = threading.Event(), threading.Event()

    def bare() -> None:
        with field_wires.omitted() as omitted:
            assert omitted
            inside.set()
            release.wait(30)
            texts["bare"] = convert()

    worker = threading.Thread(target=bare)
    worker.start()
    assert inside.wait(30)
    texts["full"] = convert()  # while the other thread is inside `omitted`
    release.set()
    worker.join(60)
    assert "data[3][3]" in texts["full"] and "data[3][3]" not in texts["bare"]
    assert texts["bare"] == _without_fields(texts["full"])[0]
    # and after the block, this thread's conversions have them again
    with field_wires.omitted(False) as omitted:
        assert not omitted
    assert "data[3][3]" in convert()
