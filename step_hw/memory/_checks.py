"""Parameter checks shared by the memory blocks (messages in Amaranth's style: the rule and the value)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from step_lang.errors import StepTypeError, op_message

from ..config import HwConfig
from ..payload import TokenFormat


def config(who: str, value: Any) -> HwConfig:
    if not isinstance(value, HwConfig):
        raise TypeError(f"{who} config must be a HwConfig, not {value!r}")
    return value


def positive(who: str, what: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{who} {what} must be a positive integer, not {value!r}")
    if value < 1:
        raise ValueError(f"{who} {what} must be a positive integer, not {value!r}")
    return value


def non_negative(who: str, what: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{who} {what} must be a non-negative integer, not {value!r}")
    if value < 0:
        raise ValueError(f"{who} {what} must be a non-negative integer, not {value!r}")
    return value


def int_tuple(who: str, what: str, value: Any, *, minimum: int) -> tuple[int, ...]:
    kind = "positive" if minimum == 1 else "non-negative"
    if not isinstance(value, (tuple, list)) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= minimum for v in value
    ):
        raise ValueError(f"{who} {what} must be a sequence of {kind} integers, not {value!r}")
    return tuple(value)


def token_format(
    who: str, what: str, value: Any, *, kinds: tuple[str, ...] = ("tile",)
) -> TokenFormat:
    if not isinstance(value, TokenFormat):
        raise TypeError(f"{who} {what} must be a TokenFormat, not {value!r}")
    if value.kind not in kinds:
        raise ValueError(
            f"{who} {what} must be a {' or '.join(kinds)} format, not a {value.kind} format"
        )
    return value


def memory_tile(who: str, what: str, value: Any) -> TokenFormat:
    """A tile format whose elements are whole bytes (so they have a memory layout)."""
    fmt = token_format(who, what, value)
    if fmt.dynamic:
        # Memory layouts are static tilings; a dynamic tile reaches memory as its rows
        # (RetileStreamify) or through Bufferize of those rows.
        raise ValueError(
            f"{who} {what} is a dynamic tile (up to {fmt.rows} rows); memory operators move "
            "static tiles"
        )
    if fmt.elem_bits not in (8, 16, 32):
        raise ValueError(
            f"{who} {what} elements must be 8, 16 or 32 bits wide to have a byte layout in memory, "
            f"not {fmt.elem_bits}"
        )
    return fmt


def address_tile(who: str, what: str, value: Any) -> TokenFormat:
    fmt = token_format(who, what, value)
    if (fmt.rows, fmt.cols) != (1, 1) or fmt.elem_bits < 2:
        raise ValueError(
            f"{who} {what} must be a 1x1 tile of integers, not {fmt.rows}x{fmt.cols} of "
            f"{fmt.elem_bits}-bit elements"
        )
    return fmt


def levels_fit(who: str, what: str, rank: int, level_bits: int) -> None:
    if rank > 2**level_bits - 1:
        raise ValueError(
            f"{who} {what} has rank {rank}, whose stop tokens do not fit {level_bits} level bits"
        )


def from_node(node: Any, kind: str, build: Callable[[], Any]) -> Any:
    """Run ``build`` for ``node``; rejections become :class:`StepTypeError` naming the node."""
    if getattr(node, "kind", None) != kind:
        raise StepTypeError(
            f"expected a {kind} node, not {getattr(node, 'kind', type(node).__name__)} "
            f"'{getattr(node, 'name', '?')}'"
        )
    try:
        return build()
    except StepTypeError:
        raise
    except (TypeError, ValueError) as exc:
        raise StepTypeError(op_message(node.kind, node.name, None, str(exc))) from exc


def where(node: Any, port: str) -> str:
    """The ``where`` of :meth:`TokenFormat.for_elem` for a port of ``node``."""
    return f"{node.kind} '{node.name}', port '{port}'"


def geometry(who: str, config: HwConfig, tensor_shape: Any, fmt: TokenFormat, addr: int):
    """The :class:`~step_hw.memory.axi.TileGeometry` of a controller's tensor in ``fmt`` tiles."""
    from .axi import TileGeometry

    return TileGeometry.build(
        tensor_shape=tensor_shape,
        tile=(fmt.rows, fmt.cols),
        elem_bytes=fmt.elem_bits // 8,
        addr=addr,
        config=config,
        who=who,
    )


def address_format(who: str, value: Any, fmt: TokenFormat) -> TokenFormat:
    """A random controller's address format; its stop levels must match the tiles'."""
    addr_fmt = address_tile(who, "addr_format", value)
    if addr_fmt.level_bits != fmt.level_bits:
        raise ValueError(
            f"{who} addr_format has {addr_fmt.level_bits} level bits but tile_format has "
            f"{fmt.level_bits}"
        )
    return addr_fmt


def outstanding(who: str, value: Any, config: HwConfig) -> int:
    """Bursts in flight: ``config.max_outstanding`` by default, at most 256."""
    if value is None:
        return config.max_outstanding
    value = positive(who, "max_outstanding", value)
    if value > 256:
        raise ValueError(f"{who} max_outstanding must be at most 256, not {value}")
    return value
