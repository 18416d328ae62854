"""Hardware elaborator for STeP graphs (Amaranth 0.5)."""

from .queue import Queue

__all__ = ["Queue"]
