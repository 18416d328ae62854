"""Writing build files in place: ``step_hw.paths.private_name``, ``write_atomically`` and
``abandoned_private_names``."""

import subprocess
import sys
import threading

from step_hw.paths import abandoned_private_names, private_name, write_atomically


def test_two_threads_of_one_process_get_different_private_names(tmp_path):
    """A name by process alone was shared by two threads of one process: one renamed the
    other's half-written file into place, the other's rename then found nothing (a CI run of
    two threads asking for the same design died of it)."""
    names = []
    both_alive = threading.Barrier(2)  # (a finished thread's identity can be reused)

    def name():
        both_alive.wait()
        names.append(private_name(tmp_path / "key.json"))

    threads = [threading.Thread(target=name) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(names)) == 2
    assert all(n.parent == tmp_path and n.name.startswith(".key.json.") for n in names)


def test_threads_writing_one_file_at_once_leave_one_whole_version(tmp_path):
    path = tmp_path / "desc.json"
    errors = []

    def write(i):
        try:
            for _ in range(200):
                write_atomically(path, str(i) * 1000)
        except OSError as exc:  # pragma: no cover - the failure this test is for
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    text = path.read_text()
    assert len(text) == 1000 and len(set(text)) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["desc.json"]


def test_bytes_are_written_as_they_are(tmp_path):
    write_atomically(tmp_path / "a.npz", b"\x00\xff")
    assert (tmp_path / "a.npz").read_bytes() == b"\x00\xff"


def test_private_names_of_processes_that_are_gone_are_abandoned(tmp_path):
    # a build killed or interrupted before its rename leaves its folder (up to 250 MB): the next
    # build of the design removes it, and never one whose process still runs
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    folder = tmp_path / "0123abcd"
    dead = tmp_path / f".0123abcd.{gone.stdout.strip()}.140449453222784"
    mine = private_name(folder)
    other_design = tmp_path / f".fedc3210.{gone.stdout.strip()}.1"
    not_private = tmp_path / ".0123abcd.lock"
    for f in (dead, mine, other_design, not_private):
        f.mkdir()
    assert abandoned_private_names(folder) == [dead]
    assert abandoned_private_names(tmp_path / "missing" / "x") == []
