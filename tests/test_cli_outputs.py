"""Every path a command writes is checked before any work (``stepcli.outputs``): an empty one,
a folder given for a file, a file given for a folder, a folder that is a file, a name that
cannot be the Verilog module, a ``--json`` that ``--verilog`` would overwrite."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from stepcli.main import main
from tests.test_bad_input_cli import check


@pytest.fixture
def here(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    Path("afile").write_text("x")
    Path("adir").mkdir()
    Path("p.svg").mkdir()
    return tmp_path


SWEEP = "example = 'moe'\n[fixed]\nmodel = 'small'\nbatch = 8\n[grid]\ntile_n = [2, 4]\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["graph", "swiglu", "-o", ""], "-o: an empty path names no file"),
        (["graph", "swiglu", "-o", "g/x.svg"], "-o 'g/x.svg' must name a .dot file"),
        (["graph", "swiglu", "-o", "g/trail/"], "-o 'g/trail/' names a folder; give a file name"),
        (["graph", "swiglu", "-o", "afile/x.dot"], "-o 'afile/x.dot': afile is a file, not a folder"),
        (["graph", "swiglu", "-o", "p.dot"], "-o 'p.svg' is a folder; give a file name"),
        (["rtl", "swiglu", "-o", ""], "-o: an empty path names no folder"),
        (["rtl", "swiglu", "-o", "afile"], "-o 'afile' is a file, not a folder"),
        (["rtl", "swiglu", "-o", "afile/deeper"], "-o 'afile/deeper': afile is a file, not a folder"),
        (["paper", "-o", "afile", "--only", "time_multiplexing"], "-o 'afile' is a file, not a folder"),
        (["sim", "swiglu", "--trace", ""], "--trace: an empty path names no file"),
        (["sim", "swiglu", "--trace", "adir"], "--trace 'adir' is a folder; give a file name"),
        (["size-queues", "swiglu", "--json", "t/"], "--json 't/' names a folder; give a file name"),
        (["size-queues", "moe", "--hardware", "--verilog", "v/sized.v2"],
         "--verilog 'v/sized.v2': the file name 'sized.v2' names the Verilog module; use letters, "
         "digits and _ (not a digit first)"),
        (["size-queues", "moe", "--hardware", "--verilog", "v/my design"],
         "--verilog 'v/my design': the file name 'my design' names the Verilog module; use "
         "letters, digits and _ (not a digit first)"),
        (["size-queues", "moe", "--hardware", "--json", "v/r.json", "--verilog", "v/r"],
         "--json 'v/r.json' is the description --verilog 'v/r' writes; give another --json"),
        (["sweep", "s.toml", "-o", "afile/x.csv"], "-o 'afile/x.csv': afile is a file, not a folder"),
        (["sweep", "s.toml", "-o", ""], "-o: an empty path names no file"),
        (["sweep", ""], "sweep spec: an empty path names no file"),
    ],
)  # fmt: skip
def test_bad_output_paths_are_refused_before_any_work(here, capsys, argv, message):
    Path("s.toml").write_text(SWEEP)
    check(capsys, argv, message)
    assert sorted(os.listdir(here)) == ["adir", "afile", "p.svg", "s.toml"]  # nothing written


def test_a_spec_whose_output_is_a_folder_is_refused(here, capsys):
    Path("s.toml").write_text(SWEEP + "")
    Path("o.toml").write_text(SWEEP.replace("[fixed]", "output = 'adir/'\n[fixed]"))
    check(capsys, ["sweep", "o.toml"],
          "sweep spec o.toml: output 'adir/' names a folder; give a file name")  # fmt: skip


def test_a_spec_that_is_not_utf8_names_the_file(here, capsys):
    Path("bad.toml").write_bytes(b"\xffexample = 'moe'\n")
    check(capsys, ["sweep", "bad.toml"],
          "cannot read sweep spec bad.toml: not UTF-8 text (invalid start byte at byte 0)")  # fmt: skip


def test_a_read_only_folder_is_refused_before_the_sweep_runs(here, capsys, monkeypatch):
    """(The permission is asked of ``os.access``; root may write anywhere, so the test
    answers for it.)"""
    import stepcli.outputs

    Path("s.toml").write_text(SWEEP)
    Path("ro").mkdir()
    access = os.access
    monkeypatch.setattr(stepcli.outputs.os, "access",
                        lambda p, mode: Path(p).name != "ro" and access(p, mode))  # fmt: skip
    check(capsys, ["sweep", "s.toml", "-o", "ro/x.csv"], "-o 'ro/x.csv': cannot write in ro")
    assert not Path("ro/x.csv").exists()


def test_verilog_stem_keeps_its_name_whole(here, capsys):
    """``--verilog v/sized_2`` writes ``v/sized_2.v`` and ``v/sized_2.json`` next to ``--json``,
    the module named ``sized_2``."""
    assert main(["size-queues", "swiglu", "--hardware", "--json", "v/report.json",
                 "--verilog", "v/sized_2"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "wrote v/sized_2.v and v/sized_2.json (sized queues)" in out
    assert "module sized_2(" in Path("v/sized_2.v").read_text()
    assert "depths" in Path("v/report.json").read_text()


def test_a_refused_example_leaves_no_folder(here, capsys):
    from step_hw.rtl import EXAMPLES

    for name in ("nosuch", "decoder"):
        check(capsys, ["rtl", name, "-o", "r/made_for_nothing"],
              f"no hardware-size variant of {name}; available: {', '.join(EXAMPLES)}")  # fmt: skip
    assert not Path("r").exists()
