"""Timing profiles of the simulator."""

from .base import MemRequest, NodeTiming, TimingProfile
from .paper import PaperProfile
from .rtl import RtlProfile

PROFILES = {"paper": PaperProfile, "rtl": RtlProfile}

__all__ = ["PROFILES", "MemRequest", "NodeTiming", "PaperProfile", "RtlProfile", "TimingProfile"]
