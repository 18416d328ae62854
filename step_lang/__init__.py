"""STeP: the Streaming Tensor Programs language.

Build a :class:`Graph` from operators (``step_lang.ops``), run it with :func:`interpret`, cost it
with :func:`metrics`. This package never imports Amaranth.
"""

from . import functions, ops
from .arrival import ArrivalPolicy, FixedOrder, LowestIndexFirst, RandomArrival, RoundRobin
from .dims import RaggedSymbol, ragged, regular
from .errors import (
    StepDeadlock,
    StepError,
    StepGraphError,
    StepRaceError,
    StepRuntimeError,
    StepTypeError,
    StepValueError,
)
from .graph import Graph, Node, OffChipTensor, Stream
from .interpret import InterpretResult, interpret
from .metrics import Metrics, metrics
from .ops import *  # noqa: F403 - the operators are the language
from .passes import insert_broadcasts, lower
from .tokens import (
    DONE,
    Stop,
    array_to_tokens,
    canonical,
    format_tokens,
    from_tokens,
    to_tokens,
    tokens_to_array,
)
from .types import BufferType, DType, Selector, StreamType, Tile, TupleType, dtype

__all__ = [
    "DONE",
    "ArrivalPolicy",
    "BufferType",
    "DType",
    "FixedOrder",
    "Graph",
    "InterpretResult",
    "LowestIndexFirst",
    "Metrics",
    "Node",
    "OffChipTensor",
    "RaggedSymbol",
    "RandomArrival",
    "RoundRobin",
    "Selector",
    "StepDeadlock",
    "StepError",
    "StepGraphError",
    "StepRaceError",
    "StepRuntimeError",
    "StepTypeError",
    "StepValueError",
    "Stop",
    "Stream",
    "StreamType",
    "Tile",
    "TupleType",
    "array_to_tokens",
    "canonical",
    "dtype",
    "format_tokens",
    "from_tokens",
    "functions",
    "insert_broadcasts",
    "interpret",
    "lower",
    "metrics",
    "ops",
    "ragged",
    "regular",
    "to_tokens",
    "tokens_to_array",
    *ops.__all__,
]
