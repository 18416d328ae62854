"""Hardware elaborator for STeP graphs (Amaranth 0.5).

The hardware contract (:mod:`step_hw.contract`: :class:`~step_hw.config.HwConfig`, token formats,
port assignment, block timing facts) imports no Amaranth, so the simulator's ``rtl`` profile can
read it; everything else here builds Amaranth components.
"""

__all__ = ["Queue"]


def __getattr__(name: str):
    if name == "Queue":  # Amaranth is loaded only when a block is asked for
        from .queue import Queue

        return Queue
    raise AttributeError(f"module 'step_hw' has no attribute {name!r}")
