"""Files the fast co-simulation tier loads and dumps (:mod:`step_hw.cosim.fast_top`): the memory
image (``$readmemh`` / ``$writememh`` words of ``axi_data_width`` bits, little-endian bytes), the
Source ROMs, the Sink recordings and the handshake trace."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .fast_top import SINK_DEPTH, SOURCE_DEPTH, memory_words
from .raw_tensors import bit_patterns, raw_dtype

__all__ = ["read_memory", "read_sinks", "read_trace", "write_memory", "write_sources"]


def write_memory(path: Path, desc: dict, memory: Mapping[str, np.ndarray]) -> None:
    """The memory image of ``memory`` (input tensors by name) at the addresses of the memory map;
    the bytes of tensors it does not name are zeros. Each array must have its entry's dtype
    (:func:`step_hw.cosim.run` checks dtypes and shapes against the graph first): a value is
    never converted to another type."""
    bus = desc["config"]["axi_data_width"] // 8
    words = memory_words(desc)
    image = np.zeros(words * bus, np.uint8)
    layout = desc["memory_map"]
    unknown = sorted(map(str, set(memory) - set(layout)))
    if unknown:
        raise ValueError(
            f"write_memory: memory holds {', '.join(unknown)}, which the memory map does not"
        )
    for name, value in memory.items():
        info = layout[name]
        array = np.asarray(value)
        want = raw_dtype(info["dtype"])
        bits = bit_patterns(array)
        if not np.can_cast(bits.dtype, want, casting="equiv"):  # (byte order only)
            raise ValueError(
                f"write_memory: memory '{name}': array {array.dtype}, its memory map entry "
                f"{info['dtype']}"
            )
        raw = np.ascontiguousarray(bits.astype(want))
        data = raw.view(np.uint8).reshape(-1)
        if data.size != info["bytes"]:
            raise ValueError(
                f"write_memory: memory '{name}': array of {data.size} bytes (shape "
                f"{list(array.shape)}), its memory map entry {info['bytes']} (shape "
                f"{info['shape']})"
            )
        image[info["addr"] : info["addr"] + data.size] = data
    text = image.reshape(words, bus)[:, ::-1].tobytes().hex()
    n = 2 * bus
    path.write_text("\n".join(text[i : i + n] for i in range(0, len(text), n)) + "\n")


def _hex_lines(path: Path) -> list[str]:
    return [
        ln.strip()
        for ln in path.read_text().splitlines()
        if ln.strip() and not ln.lstrip().startswith(("//", "@"))
    ]


def read_memory(path: Path, desc: dict, names: list[str]) -> dict[str, np.ndarray]:
    """The tensors ``names`` (raw: floating point as bit patterns) from a ``$writememh`` dump."""
    bus = desc["config"]["axi_data_width"] // 8
    lines = _hex_lines(path)
    text = "".join(ln.rjust(2 * bus, "0").replace("x", "0").replace("z", "0") for ln in lines)
    image = np.frombuffer(bytes.fromhex(text), np.uint8).reshape(-1, bus)[:, ::-1].reshape(-1)
    out = {}
    for name in names:
        info = desc["memory_map"][name]
        raw = image[info["addr"] : info["addr"] + info["bytes"]]
        out[name] = np.frombuffer(raw.tobytes(), raw_dtype(info["dtype"])).reshape(info["shape"])
    return out


def write_sources(folder: Path, payloads: Mapping[str, list[str]]) -> list[str]:
    """One ROM file per Source port (hex payloads, one per line); the plusargs that name them."""
    args = []
    for port, values in payloads.items():
        if len(values) > SOURCE_DEPTH:
            raise ValueError(
                f"fast co-simulation: Source '{port.removeprefix('src_')}' has {len(values)} "
                f"tokens, its ROM holds {SOURCE_DEPTH} (run it on the axi tier)"
            )
        name = port.removeprefix("src_")
        f = folder / f"src_{name}.hex"
        f.write_text("".join(f"{int(v, 16):x}\n" for v in values) or "0\n")
        args += [f"+SRC_{name}={f}", f"+SRC_{name}_N={len(values)}"]
    return args


def read_sinks(folder: Path, counts: Mapping[str, int]) -> dict[str, list[str]]:
    """Each Sink port's recorded payloads (hex strings), the first ``counts[port]`` lines."""
    out = {}
    for port, n in counts.items():
        if n > SINK_DEPTH:
            raise ValueError(
                f"fast co-simulation: Sink '{port}' took {n} payloads, more than {SINK_DEPTH}"
            )
        lines = _hex_lines(folder / f"{port}.hex")[:n]
        out[port] = [hex(int(ln, 16)) for ln in lines]
    return out


def read_trace(path: Path, names: list[str], desc: dict) -> dict[str, Any]:
    """The ``+TRACE`` file as the AXI tier's trace: ``{name: {..queue info, "push": [cycles]}}``."""
    events: dict[str, list[int]] = {n: [] for n in names}
    for ln in path.read_text().splitlines():
        if ln.strip():
            k, c = ln.split()
            events[names[int(k)]].append(int(c))
    queues = desc.get("queues", {})
    return {n: {**queues.get(n, {}), "push": v} for n, v in events.items()}
