"""Every STeP operator."""

from .higher_order import Accum, FlatMap, Map, RetileStreamify, Scan, Zip
from .misc import Feedback, Sink, Source
from .offchip import LinearOffChipLoad, LinearOffChipStore, RandomOffChipLoad, RandomOffChipStore
from .onchip import Bufferize, BufferValue, Streamify
from .routing import Broadcast, EagerMerge, Parallelize, Partition, Reassemble
from .shape import Expand, Flatten, Promote, RepeatStatic, Reshape

__all__ = [
    "Accum",
    "Broadcast",
    "BufferValue",
    "Bufferize",
    "EagerMerge",
    "Expand",
    "Feedback",
    "FlatMap",
    "Flatten",
    "LinearOffChipLoad",
    "LinearOffChipStore",
    "Map",
    "Parallelize",
    "Partition",
    "Promote",
    "RandomOffChipLoad",
    "RandomOffChipStore",
    "Reassemble",
    "RepeatStatic",
    "Reshape",
    "RetileStreamify",
    "Scan",
    "Sink",
    "Source",
    "Streamify",
    "Zip",
]
