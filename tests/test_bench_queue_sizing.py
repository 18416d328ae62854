"""``bench/queue_sizing.py``: the report's held-out images, on one paper-size and one
hardware-size case (the module's example tables cut down to them)."""

from __future__ import annotations

import json

import pytest

from bench import queue_sizing
from stepcli.sizing import HARDWARE, SCHEDULES


@pytest.fixture
def two_cases(monkeypatch, tmp_path):
    monkeypatch.setattr(
        queue_sizing, "SCHEDULES", {"moe": {"static-small": SCHEDULES["moe"]["static-small"]}}
    )
    monkeypatch.setattr(
        queue_sizing, "HARDWARE", {"moe": {"time-mux": HARDWARE["moe"]["time-mux"]}}
    )
    monkeypatch.setattr(queue_sizing, "OUT", tmp_path / "queue_sizing.json")
    return tmp_path / "queue_sizing.json"


def test_every_case_is_checked_on_held_out_images(two_cases, capsys):
    assert queue_sizing.main(["--held-out", "2"]) == 0
    cases = json.loads(two_cases.read_text())["cases"]
    assert [(c["example"], c["schedule"], c["profile"]) for c in cases] == [
        ("moe", "static-small", "paper"), ("moe", "time-mux", "rtl")]  # fmt: skip
    for c in cases:
        assert c["held_out"] == 2 and c["held_out_missed"] == 0
        assert c["images"] == queue_sizing.IMAGES + c["held_out_added"]
        assert isinstance(c["held_out_worst"], float) and c["held_out_worst"] <= 1.01
        assert c["bits_sized"] <= c["bits_uniform"] and c["deadlock_free"]
    assert "wrote" in capsys.readouterr().out


def test_without_held_out_images_the_report_says_so(two_cases):
    assert queue_sizing.main(["--held-out", "0"]) == 0
    for c in json.loads(two_cases.read_text())["cases"]:
        assert c["held_out"] == c["held_out_added"] == 0 and c["held_out_worst"] is None
        assert c["images"] == queue_sizing.IMAGES


def test_a_negative_held_out_count_is_refused(two_cases, capsys):
    with pytest.raises(SystemExit):
        queue_sizing.main(["--held-out", "-1"])
    assert "--held-out must be 0 or more, not -1" in capsys.readouterr().err
    assert not two_cases.exists()


def test_the_worst_held_out_image_is_a_ratio_or_a_deadlock():
    assert queue_sizing._worst([(101, 100), (99, 100)]) == 1.01
    assert queue_sizing._worst([(99, 100), (None, 100)]) == "deadlock"
    assert queue_sizing._worst([]) is None
