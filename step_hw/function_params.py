"""The parameters of the blocks that compute a function, taken from a node and checked.

The address generators (``step_hw.addrgen``: ``cache_read_addr``, ``last_tile_flags``,
``block_row_offsets``, ``pad_bias``/``pad_mask``), the ``region_id`` unit
(``step_hw.compute.rowops``) and the ``expert_addr`` generator (``step_hw.expert_addr``) are
built from a function's ``params`` and the node's token formats. Each ``*_params(node, config)``
here returns the keyword arguments of its block's constructor, or raises
:class:`~step_lang.errors.StepTypeError` naming the node and the offending parameter (before the
block exists: a constructor that raised would leave a half-built block, which Amaranth reports
as never used). The blocks' ``from_node`` build with them, and
:func:`step_hw.block_rules.check_node` calls them (by the block name
:func:`step_hw.unit_functions.block_for` gives), so that the ``rtl`` timing profile refuses such a
node with the elaborator's message before it times it. No Amaranth here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from step_lang import functions, ops
from step_lang.types import Selector

from .checks import (
    INT_BITS,
    check_choice,
    check_int,
    check_node,
    node_call,
    node_formats,
    operand_ports,
)
from .config import HwConfig
from .payload import TokenFormat

__all__ = [
    "FUNCTION_PARAMS",
    "block_row_offsets_params",
    "cache_read_addr_params",
    "check_block_row_offsets",
    "check_expert_addresses",
    "check_fill",
    "check_pieces",
    "check_region",
    "check_row_offset",
    "expert_addr_params",
    "last_tile_flags_params",
    "pad_tiles_params",
    "region_id_params",
]


# -- checks of single parameters (the constructors call them too) --------------------------------


def check_row_offset(owner: str, row_offset: Any) -> int:
    check_int(owner, "row_offset", row_offset)
    if row_offset > 2**16:
        raise ValueError(f"{owner} row_offset must be at most 65536, not {row_offset}")
    return row_offset


def check_block_row_offsets(owner: str, rows: Any, n_rows: Any, n_cols: Any) -> None:
    for name, v in (("rows", rows), ("n_rows", n_rows), ("n_cols", n_cols)):
        check_int(owner, name, v)


def check_pieces(owner: str, kv_tile: int, pieces: Any) -> int:
    check_int(owner, "pieces", pieces)
    if kv_tile % pieces:
        raise ValueError(f"{owner} pieces must divide kv_tile {kv_tile}, not {pieces}")
    return pieces


def check_fill(owner: str, name: str, v: Any, elem_bits: int) -> int:
    lo, hi = -(2 ** (elem_bits - 1)), 2 ** (elem_bits - 1) - 1
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{owner} {name} must be an integer, not {v!r}")
    if not lo <= v <= hi:
        raise ValueError(f"{owner} {name} must fit a {elem_bits}-bit element [{lo}, {hi}], not {v}")
    return v


def check_region(owner: str, region: Any, elem_bits: int) -> int:
    if isinstance(region, bool) or not isinstance(region, int):
        raise TypeError(f"{owner} region must be a non-negative integer, not {region!r}")
    if not 0 <= region < 2 ** (elem_bits - 1):
        raise ValueError(
            f"{owner} region must be a non-negative integer below {2 ** (elem_bits - 1)}, "
            f"not {region}"
        )
    return region


def check_expert_addresses(
    owner: str, n: Any, tiles: Any, base: Any, elem_bits: Any, level_bits: Any
) -> None:
    """``n`` experts of ``tiles`` tiles from tile ``base`` on: every address fits a signed
    ``elem_bits``-bit element."""
    check_int(owner, "n", n)
    check_int(owner, "tiles", tiles)
    if isinstance(base, bool) or not isinstance(base, int):
        raise TypeError(f"{owner} base must be a non-negative integer, not {base!r}")
    if base < 0:
        raise ValueError(f"{owner} base must be a non-negative integer, not {base!r}")
    check_choice(owner, "elem_bits", elem_bits, (8, 16, 32))
    check_int(owner, "level_bits", level_bits)
    top = base + n * tiles - 1
    if top >= 2 ** (elem_bits - 1):
        raise ValueError(
            f"{owner} addresses up to {top} do not fit {elem_bits}-bit elements "
            f"(n={n}, tiles={tiles}, base={base})"
        )


def _bit_pattern(v: Any, float_dtype: str) -> Any:
    """The bit pattern of the number ``v`` as a ``float_dtype`` element, as the signed integer
    a tile element of that width holds (``v`` unchanged if it is not a number)."""
    from step_lang.types import dtype

    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        return v
    dt = dtype(float_dtype)
    bits = int(np.array(v, dtype=dt.numpy).view(f"uint{dt.nbytes * 8}"))
    width = dt.nbytes * 8
    return bits - (1 << width) if bits >> (width - 1) else bits


def _is_int(v: Any) -> bool:
    """An integer parameter, also as a whole float (numpy scalars included); ``-inf`` is not."""
    try:
        return not isinstance(v, bool) and float(v).is_integer()
    except (TypeError, ValueError, OverflowError):
        return False


# -- a node's formats and parameters ------------------------------------------------------------


def _check_flatmap(node: Any, names: tuple[str, ...], unit: str) -> None:
    check_node(node, (ops.FlatMap,), unit)
    if getattr(node.fn, "name", None) not in names:
        raise node.error(
            None, f"function '{node.fn.name}' has no {unit} (it builds {', '.join(names)})"
        )


def _int_formats(node: Any, config: HwConfig, unit: str) -> tuple[list[TokenFormat], TokenFormat]:
    ins, out = node_formats(node, config)
    for port, f in zip(operand_ports(node), ins, strict=True):
        if f.kind != "tile" or (f.rows, f.cols) != (1, 1) or f.elem_bits not in INT_BITS:
            raise node.error(port, f"{unit} needs [1,1] 8-, 16- or 32-bit integer tiles")
    return ins, out


def _param(node: Any, name: str) -> Any:
    params = dict(node.fn.params)
    if name not in params:
        raise node.error(None, f"function '{node.fn.name}' has no parameter '{name}'")
    return params[name]


# -- each block's parameters --------------------------------------------------------------------


def cache_read_addr_params(node: Any, config: HwConfig) -> dict[str, Any]:
    """:class:`~step_hw.addrgen.CacheReadAddr`'s parameters for a FlatMap of ``cache_read_addr``."""
    _check_flatmap(node, ("cache_read_addr",), "CacheReadAddr")
    ins, out = _int_formats(node, config, "CacheReadAddr")
    row_offset = _param(node, "row_offset")
    node_call(node, check_row_offset, "CacheReadAddr", row_offset)
    return {
        "row_offset": row_offset,
        "in_bits": tuple(f.elem_bits for f in ins),
        "elem_bits": out.elem_bits,
        "level_bits": config.level_bits,
    }


def last_tile_flags_params(node: Any, config: HwConfig) -> dict[str, Any]:
    """:class:`~step_hw.addrgen.LastTileFlags`' parameters for a FlatMap of ``last_tile_flags``."""
    _check_flatmap(node, ("last_tile_flags",), "LastTileFlags")
    ins, _ = _int_formats(node, config, "LastTileFlags")
    if node.fn is not functions.last_tile_flags or not isinstance(node.out_types[0].elem, Selector):
        raise node.error(None, "LastTileFlags builds step_lang.functions.last_tile_flags only")
    return {"in_bits": ins[0].elem_bits, "level_bits": config.level_bits}


def block_row_offsets_params(node: Any, config: HwConfig) -> dict[str, Any]:
    """:class:`~step_hw.addrgen.BlockRowOffsets`' parameters for a FlatMap of
    ``block_row_offsets``."""
    _check_flatmap(node, ("block_row_offsets",), "BlockRowOffsets")
    ins, _ = _int_formats(node, config, "BlockRowOffsets")
    rows, n_rows, n_cols = (_param(node, p) for p in ("rows", "n_rows", "n_cols"))
    node_call(node, check_block_row_offsets, "BlockRowOffsets", rows, n_rows, n_cols)
    return {
        "rows": rows,
        "n_rows": n_rows,
        "n_cols": n_cols,
        "elem_bits": ins[0].elem_bits,
        "level_bits": config.level_bits,
    }


def pad_tiles_params(node: Any, config: HwConfig) -> dict[str, Any]:
    """:class:`~step_hw.addrgen.PadTiles`' parameters for a FlatMap of ``pad_bias`` or
    ``pad_mask`` with integer ``valid`` and ``pad`` values (BF16/FP32 tiles: the values' bit
    patterns; a float bias of ``-inf`` is refused)."""
    _check_flatmap(node, ("pad_bias", "pad_mask"), "PadTiles")
    ins, out = _int_formats(node, config, "PadTiles")
    valid, pad = (_param(node, p) for p in ("valid", "pad"))
    pieces = dict(node.fn.params).get("pieces", 1)
    if out.float_dtype is not None:
        valid, pad = (_bit_pattern(v, out.float_dtype) for v in (valid, pad))
    valid, pad = (int(v) if _is_int(v) else v for v in (valid, pad))
    for name, v in (("valid", valid), ("pad", pad)):
        node_call(node, check_fill, "PadTiles", name, v, out.elem_bits)
    node_call(node, check_int, "PadTiles", "pieces", pieces)
    kv_tile = out.cols * pieces
    if _param(node, "kv_tile") != kv_tile:
        raise node.error(
            None,
            f"function '{node.fn.name}' has kv_tile {_param(node, 'kv_tile')}, but writes "
            f"{pieces} piece(s) of {out.cols} columns",
        )
    return {
        "kv_tile": kv_tile,
        "valid": valid,
        "pad": pad,
        "in_bits": tuple(f.elem_bits for f in ins),
        "elem_bits": out.elem_bits,
        "level_bits": config.level_bits,
        "pieces": pieces,
    }


def region_id_params(node: Any, config: HwConfig) -> dict[str, Any]:
    """:class:`~step_hw.compute.RegionIdUnit`'s parameters for a Map of ``region_id``
    (``examples.attention``): the region fits the output element."""
    check_node(node, (ops.Map,), "RegionIdUnit")
    params = dict(getattr(node.fn, "params", ()))
    if not node.fn.name.startswith("region_id") or "region" not in params:
        raise node.error(None, f"function '{node.fn.name}' is not region_id")
    ins, out = node_formats(node, config)
    if out.kind != "tile" or (out.rows, out.cols) != (1, 1):
        raise node.error("out", "RegionIdUnit writes [1,1] integer tiles")
    node_call(node, check_region, "RegionIdUnit", params["region"], out.elem_bits)
    return {"in_format": ins[0], "region": params["region"], "elem_bits": out.elem_bits}


def expert_addr_params(node: Any, config: HwConfig) -> dict[str, Any]:
    """:class:`~step_hw.expert_addr.ExpertAddr`'s parameters for a FlatMap of ``expert_addr``
    (``step_lang.numerics.expert_addr``): every address fits the output element."""
    if not isinstance(node, ops.FlatMap) or getattr(node.fn, "name", None) != "expert_addr":
        raise node.error(None, "ExpertAddr builds FlatMap nodes of 'expert_addr' only")
    if not isinstance(node.inputs[0].elem, Selector):
        raise node.error(node.input_names[0], "ExpertAddr needs a selector stream")
    ins, out = node_formats(node, config)
    params = dict(node.fn.params)
    kwargs = {
        "n": ins[0].n,
        "tiles": params["tiles"],
        "base": params["base"],
        "elem_bits": out.elem_bits,
        "level_bits": config.level_bits,
    }
    node_call(node, check_expert_addresses, "ExpertAddr", *kwargs.values())
    return kwargs


#: block name (:func:`step_hw.unit_functions.block_for`) -> its parameters from a node
FUNCTION_PARAMS: dict[str, Callable[[Any, HwConfig], dict[str, Any]]] = {
    "CacheReadAddr": cache_read_addr_params,
    "LastTileFlags": last_tile_flags_params,
    "BlockRowOffsets": block_row_offsets_params,
    "PadTiles": pad_tiles_params,
    "RegionIdUnit": region_id_params,
    "ExpertAddr": expert_addr_params,
}
