"""The hardware one's own graph runs on, from the command line: ``--hw-tile`` and ``--hw``.

A graph file (``path/to/file.py:function``) is built for ``HwConfig()`` with the number format
of its functions (:func:`step_hw.config.config_for`) unless the command line says otherwise:

* ``--hw-tile ROWSxCOLS`` rewrites the graph onto hardware tiles of that size (hierarchical
  tiling, ``docs/hierarchical_tiling.md``) and builds the hardware for them: ``tile_rows`` and
  ``tile_cols`` are ``ROWS`` and ``COLS``;
* ``--hw KEY=VALUE`` (repeatable) sets an integer parameter of
  :class:`~step_hw.config.HwConfig`: ``lanes=64``, ``queue_depth=2``, ``axi_ports=1`` (or
  ``none``), ``tile_rows=8``, ... (:data:`HW_SETTINGS`).

The number format is the graph's (``elem_dtype``, ``acc_dtype``, ``frac_bits``: build the
functions with ``numerics.functions(config)``), and ``queue_capacity`` and ``geometry_bounds``
(one build for several depth settings or tilings) are Python-only; ``--hw`` refuses them. A
value ``HwConfig`` refuses is a one-line error naming the setting and the value.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from step_hw.config import HwConfig, config_for

from .registry import UsageError

__all__ = ["HW_SETTINGS", "file_config", "hw_settings"]

# Set by the graph's hardware functions (``numerics.functions(config)``), not by ``--hw``.
_FROM_THE_GRAPH = ("elem_dtype", "acc_dtype", "frac_bits")
# Settings of several runs on one build, given in Python (``HwConfig`` docstring).
_PYTHON_ONLY = ("queue_capacity", "geometry_bounds")
# Settings that may be ``None`` (``--hw axi_ports=none``: a port per memory operator).
_NONE_ALLOWED = ("axi_ports",)

#: The ``HwConfig`` parameters ``--hw KEY=VALUE`` sets, each an integer.
HW_SETTINGS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(HwConfig) if f.name not in _FROM_THE_GRAPH + _PYTHON_ONLY
)


def hw_settings(texts: Sequence[str]) -> dict[str, int | None]:
    """The ``--hw KEY=VALUE`` options as ``{key: value}``, each key a setting of
    :data:`HW_SETTINGS` given once and each value an integer (``none`` where allowed)."""
    settings: dict[str, int | None] = {}
    for text in texts:
        key, sep, raw = (part.strip() for part in text.partition("="))
        if not sep or not key:
            raise UsageError(f"--hw {text!r}: expected KEY=VALUE, e.g. lanes=64")
        if key in _FROM_THE_GRAPH:
            raise UsageError(
                f"--hw {key}: the number format is the graph's; build its functions with "
                "numerics.functions(config)"
            )
        if key in _PYTHON_ONLY:
            raise UsageError(f"--hw {key}: a run-time setting of one build, given in Python")
        if key not in HW_SETTINGS:
            raise UsageError(
                f"--hw {key}: HwConfig has no such setting; settings: {', '.join(HW_SETTINGS)}"
            )
        if key in settings:
            raise UsageError(f"--hw {key} given twice ({settings[key]} and {raw})")
        settings[key] = _value(key, raw)
    return settings


def _value(key: str, raw: str) -> int | None:
    if key in _NONE_ALLOWED and raw.lower() == "none":
        return None
    try:
        return int(raw)
    except ValueError:
        also = " or none" if key in _NONE_ALLOWED else ""
        raise UsageError(f"--hw {key} must be an integer{also}, not {raw!r}") from None


def file_config(
    graph: Any, settings: Mapping[str, int | None], hw_tile: tuple[int, int] | None
) -> HwConfig:
    """The hardware of a graph file: ``HwConfig(**settings)`` with the tile of ``--hw-tile``
    (``hw_tile``) and the number format of ``graph``'s functions."""
    settings = dict(settings)
    if hw_tile is not None:
        for key, value in zip(("tile_rows", "tile_cols"), hw_tile, strict=True):
            if settings.get(key, value) != value:
                raise UsageError(
                    f"--hw {key}={settings[key]} contradicts --hw-tile {hw_tile[0]}x{hw_tile[1]}"
                )
            settings[key] = value
    try:
        base = HwConfig(**settings)
    except ValueError as exc:
        raise UsageError(f"--hw: {exc}") from None
    try:
        return config_for(graph, base)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
