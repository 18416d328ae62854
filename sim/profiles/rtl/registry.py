"""The operators with a timing model of their own under the rtl profile (:data:`RTL_TIMING`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from step_lang import ops
from step_lang.graph import Node
from step_lang.registry import NodeRegistry

from ..base import NodeTiming
from .block_loads import _BlockLoad
from .buffers import _buffer_pair, _Bufferize, _Streamify
from .clocked import _Sink, _Source
from .expand import _Expand
from .loads import _Load
from .promote import promote_timing
from .routers import _Broadcast, _EagerMerge, _Parallelize, _Partition, _Reassemble
from .stores import _BlockStore, _RandomStore, _Store

if TYPE_CHECKING:
    from .profile import RtlProfile


#: The operators with a timing model of their own under the rtl profile: ``(profile, node) ->
#: NodeTiming`` (the memory operators' AXI pipelines, the on-chip buffers, the top level's ports
#: and wires). Every other operator is timed as a block from its hardware-contract entry
#: (``step_hw.contract.BLOCKS``: latency, input joining, initiation interval).
RTL_TIMING: NodeRegistry = NodeRegistry("rtl-profile timing")


def _load(profile: RtlProfile, node: Node) -> NodeTiming:
    random = isinstance(node, ops.RandomOffChipLoad)
    load = _Load(profile, node, random=random)
    port = profile._shared_port(node, load)
    if port is None and (node.fetch is not None if random else bool(node.inputs)):
        return _BlockLoad(profile, node)
    load.share(port)
    return load


def _store(profile: RtlProfile, node: Node) -> NodeTiming:
    kind = _RandomStore if isinstance(node, ops.RandomOffChipStore) else _Store
    if kind is _RandomStore and node.fetch is not None:
        kind = _BlockStore
    store = kind(profile, node)
    store.share(profile._shared_port(node, store))
    return store


RTL_TIMING.add(_load, ops.LinearOffChipLoad, ops.RandomOffChipLoad)
RTL_TIMING.add(_store, ops.LinearOffChipStore, ops.RandomOffChipStore)
RTL_TIMING.add(lambda profile, node: _Sink(profile), ops.Sink)
RTL_TIMING.add(_Source, ops.Source)
RTL_TIMING.add(lambda profile, node: NodeTiming(), ops.Feedback)  # a wire: no timing of its own
RTL_TIMING.add(_buffer_pair(_Bufferize), ops.Bufferize)
RTL_TIMING.add(_buffer_pair(_Streamify), ops.Streamify)
RTL_TIMING.add(_Broadcast, ops.Broadcast)
RTL_TIMING.add(_Partition, ops.Partition)
RTL_TIMING.add(_Reassemble, ops.Reassemble)
RTL_TIMING.add(_EagerMerge, ops.EagerMerge)
RTL_TIMING.add(_Parallelize, ops.Parallelize)
RTL_TIMING.add(_Expand, ops.Expand)
RTL_TIMING.add(promote_timing, ops.Promote)
# Every other operator is timed as the block its hardware-contract entry describes
# (``step_hw.contract.BLOCKS``; ``_Block``): a new operator needs no entry here.
