"""Timing profiles of the simulator."""

from .base import MemRequest, NodeTiming, TimingProfile
from .paper import PaperProfile

PROFILES = {"paper": PaperProfile}

__all__ = ["PROFILES", "MemRequest", "NodeTiming", "PaperProfile", "TimingProfile"]
