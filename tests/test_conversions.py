"""step_hw.conversions: ``convert`` elaborates a design once; later conversions of the same
graph, configuration and top name read the stored Verilog and description."""

from __future__ import annotations

import gzip

import pytest

import step_hw.elaborate as elaborate
from step_hw import conversions
from step_hw.config import HwConfig
from step_hw.design_key import design_key
from step_lang import Graph, RepeatStatic, Sink, Source, StreamType, Tile
from step_lang.types import int16


def _graph(repeats: int = 2) -> Graph:
    g = Graph("conv")
    x = Source(g, StreamType(Tile(int16, 4, 4), (2,)), name="x")
    Sink(RepeatStatic(x.out, repeats, name="r").out, name="y")
    return g


@pytest.fixture
def counted(tmp_path, monkeypatch):
    """The cache in ``tmp_path``; returns the list of elaborations (top names) ``convert`` did."""
    monkeypatch.setenv("STEP_CONVERT_BUILD", str(tmp_path / "convert"))
    done = []
    real = elaborate._convert

    def spy(graph, config, top_name):
        done.append(top_name)
        return real(graph, config, top_name)

    monkeypatch.setattr(elaborate, "_convert", spy)
    return done


def test_a_design_is_elaborated_once_and_then_read_back(counted, tmp_path):
    text, desc = elaborate.convert(_graph(), HwConfig(), name="t")
    assert counted == ["t"] and "module t(" in text
    again = elaborate.convert(_graph(), HwConfig(), name="t")
    assert counted == ["t"] and again == (text, desc)
    fresh = elaborate.conversion(_graph(), HwConfig(), name="t")
    assert fresh.cached and fresh.elaborate_s > 0 and (fresh.text, fresh.desc) == (text, desc)
    # the entry: gzip Verilog and JSON description, in the folder of this version
    key = design_key(_graph(), HwConfig(), "t")
    folder = tmp_path / "convert" / conversions.version()
    assert gzip.decompress((folder / f"{key}.v.gz").read_bytes()).decode() == text
    assert sorted(p.name for p in folder.iterdir()) == [
        f".{key}.lock",
        f"{key}.json",
        f"{key}.v.gz",
    ]


def test_whatever_changes_the_design_is_elaborated_again(counted):
    elaborate.convert(_graph(), HwConfig(), name="t")
    elaborate.convert(_graph(), HwConfig(), name="u")
    elaborate.convert(_graph(3), HwConfig(), name="t")
    elaborate.convert(_graph(), HwConfig(queue_depth=4), name="t")
    assert counted == ["t", "u", "t", "t"]


def test_a_fresh_description_reads_as_a_stored_one(counted):
    """Tuples become lists whether or not the entry was just written, so callers see one type."""
    first = elaborate.convert(_graph(), HwConfig(), name="t")[1]
    assert first == elaborate.convert(_graph(), HwConfig(), name="t")[1]
    assert counted == ["t"]
    assert not any(isinstance(v, tuple) for v in _values(first))


def _values(tree):
    if isinstance(tree, dict):
        for v in tree.values():
            yield v
            yield from _values(v)
    elif isinstance(tree, list):
        for v in tree:
            yield v
            yield from _values(v)


def test_an_unreadable_entry_is_converted_again(counted, tmp_path):
    text, _ = elaborate.convert(_graph(), HwConfig(), name="t")
    key = design_key(_graph(), HwConfig(), "t")
    (tmp_path / "convert" / conversions.version() / f"{key}.v.gz").write_bytes(b"not gzip")
    assert elaborate.convert(_graph(), HwConfig(), name="t")[0] == text
    assert counted == ["t", "t"]


def test_storing_removes_the_entries_of_other_versions_but_the_newest(counted, tmp_path):
    """The newest other version stays: a run of the sources before an edit, still storing its
    conversions (both runs would otherwise remove each other's folders, and a store failed)."""
    import os

    stored_at = {
        "0123456789abcdef": 1_000_010,
        "fedcba9876543210": 1_000_030,
        "00000000000000aa": 1_000_020,
    }
    for name, when in stored_at.items():
        stale = tmp_path / "convert" / name
        stale.mkdir(parents=True)
        (stale / "x.json").write_text("{}")
        os.utime(stale, (when, when))
    elaborate.convert(_graph(), HwConfig(), name="t")
    kept = sorted(p.name for p in (tmp_path / "convert").iterdir())
    assert kept == sorted([conversions.version(), "fedcba9876543210"])


def test_a_folder_removed_while_storing_is_made_again(counted, tmp_path, monkeypatch):
    """Another version's process may remove this version's folder between its creation and a
    write (it happened to a ``make validate`` run while the tests of edited sources ran)."""
    import shutil

    real, calls = conversions.write_atomically, []

    def removed_first(path, data):
        calls.append(path.name)
        if len(calls) == 1:
            shutil.rmtree(path.parent)
        real(path, data)

    monkeypatch.setattr(conversions, "write_atomically", removed_first)
    text, _ = elaborate.convert(_graph(), HwConfig(), name="t")
    key = design_key(_graph(), HwConfig(), "t")
    assert calls == [f"{key}.v.gz", f"{key}.v.gz", f"{key}.json"]
    assert conversions.lookup(key).text == text


def test_a_graph_without_a_key_is_never_stored(counted, tmp_path, monkeypatch):
    """(``design_key`` gives no key to a graph with a value it cannot describe stably or an
    operator from outside the library: tests/test_design_key.py.)"""
    import step_hw.design_key

    monkeypatch.setattr(step_hw.design_key, "design_key", lambda graph, config, top: None)
    first = elaborate.convert(_graph(), HwConfig(), name="t")
    assert elaborate.convert(_graph(), HwConfig(), name="t") == first
    assert counted == ["t", "t"] and not (tmp_path / "convert").exists()


_CONVERT_IN_ANOTHER_PROCESS = """
import json, sys
sys.path.insert(0, sys.argv[1])
from tests.test_conversions import _graph
from step_hw import elaborate
from step_hw.config import HwConfig
c = elaborate.conversion(_graph(), HwConfig(), name="t")
print(json.dumps({"cached": c.cached, "text": c.text}))
"""


def test_a_design_being_converted_is_waited_for_not_converted_twice(tmp_path, monkeypatch):
    """While one process converts a design (here: this test, holding its claim), another that
    converts the same design waits, then reads the entry the first one stored."""
    import json
    import subprocess
    import sys
    import time
    from pathlib import Path

    monkeypatch.setenv("STEP_CONVERT_BUILD", str(tmp_path / "convert"))
    key = design_key(_graph(), HwConfig(), "t")
    root = str(Path(__file__).resolve().parents[1])
    with conversions.claim(key):
        other = subprocess.Popen(
            [sys.executable, "-c", _CONVERT_IN_ANOTHER_PROCESS, root],
            stdout=subprocess.PIPE,
            text=True,
        )
        time.sleep(3)  # it is waiting for the claim, not elaborating
        assert other.poll() is None
        conversions.store(key, conversions.Conversion("module t(); endmodule", {}, 1.0, False))
    out, _ = other.communicate(timeout=120)
    assert json.loads(out) == {"cached": True, "text": "module t(); endmodule"}
