"""The ``rtl`` profile: the cycle timing of the hardware that ``step_hw`` generates.

Derived from :class:`step_hw.config.HwConfig` and the documented latency and initiation interval
of every hardware block (their docstrings; ``docs/hardware.md``), it predicts the cycles from
``start`` to ``done`` of an elaborated graph run against cocotbext-axi RAMs
(``step_hw/cosim/harness.py``). What it models:

* **Streams.** Every token, stop and done tokens included, is one beat on a ready/valid stream
  and takes a queue slot. A queue has the graph's depth (``Graph.set_queue_depth``, else
  ``HwConfig.queue_depth``); a token that enters it in cycle *t* is offered at *t + 2* (*t + 1*
  for depth 1: ``step_hw.queue.Queue``), and a queue of depth 1 or 2 moves one token every two
  cycles. A Feedback is a wire (``step_hw.elaborate`` aliases its output to its input): the
  stream into it has no latency of its own, and the loop's queue is the Feedback output's.
* **Blocks.** A block takes at most one token per input per cycle. Registered blocks (compute
  units, shape operators, ToSelector) offer a result one cycle after the take and one token per
  output per cycle. A MAC array spends ``ceil(M*K*N / lanes)`` cycles per tile pair
  (``compute/matmul.py``), from the cycle its operands are offered (its last result may still
  wait in the output register) to the take in the last; RetileStreamify one cycle per row of a
  tile, RepeatStatic one cycle per copy. FlatMap generators, RetileStreamify and RepeatStatic
  write a piece (copy) per cycle as the output register frees and take their element with the
  last (:class:`_Expander`); an Expand walks its reference from the cycle after it loads an
  element, dropping the element's stop meanwhile, and loads the next in the walk's last cycle
  (:class:`_Expand`); a masked RetileStreamify spends a padding row's cycle without the
  register and takes the tile with its last row (:class:`_MaskedRetile`). An Accum folds the
  next group's data while its last token waits in the output register
  (``_Block._fold_while_full``); a Reshape or Promote of rank 0 writes a held ``S1`` (and a short
  chunk's padding) before it takes the input that needs them (``contract.held_stop_chunk``), and
  a Reshape's output and pad flags drain apart. A paper-form Promote of rank 1 or more takes the
  token that releases a held ``S_a`` into a skid register as the stop goes out, and while the
  skid holds a token takes the next input in the cycle the register frees for it
  (:class:`_PromoteOutermost`).
* **Routers and Broadcast** are combinational (latency 0): a token leaves in the cycle its
  input queue offers it, to each of several outputs in the first cycle that output has room, and
  is taken from its queue only when the (last) output takes it; a selector is taken with what it
  routes; Reassemble writes a group's held closing stop once the next selector token is offered;
  EagerMerge grants the lowest-indexed input offering a token, offers the chunk's selector from
  then until taken, passes the chunk as the data output takes it, and its done tokens the cycle
  after it took the last input's (:class:`_Router`).
* **On-chip buffers** (``memory/buffer.py``: static buffers, and buffers with one dynamic dim,
  sized by its bound). An element is ``contract.buffer_words`` memory words, one per cycle on
  either side. Bufferize takes an element after its writes, the closing stop (and done) once its
  output register is empty, and offers the reference (done) a cycle later; the first element of
  buffer *n* (a dynamic buffer's closing stop too: an empty buffer takes a slot) waits until the
  Streamify reading it released buffer *n* - ``BUFFER_SLOTS`` (``BUFFER_RELEASE`` cycles after).
  Streamify replays its sequencer (``memory/sequence.py``) cycle by cycle: driving-token takes,
  entries committed with credit from its output queue (``STREAMIFY_QUEUE_DEPTH``), each offered
  ``BUFFER_READ_LATENCY`` + 2 cycles after its commit as one beat, or two (an element and its
  stop); a buffer is released when its last entry commits (:class:`_Streamify`). A dynamic
  buffer's walk is the interpreter's read of each buffer (``Streamify.read_tokens``): an empty
  one is stop entries alone, ending with a cycle of no entry for the held stop. Both take their
  inputs at the hardware's cycles while their nodes wait to send (:class:`_TakesEarly`).
* **Loads** (``memory/load.py``). Entries (tiles and stops) leave the sequencer one per cycle,
  :attr:`RtlProfile.load_start` cycles after start or one cycle after the reference token that
  starts a walk; a tile's bursts issue ``load_issue`` cycles after its entry, one per cycle, at
  most ``max_outstanding`` between AR and the last R beat (a slot is reused the cycle after);
  R beats return ``memory_latency`` cycles after AR, one per cycle per port; a tile is offered
  two cycles after its last beat. Its tile queue (3) and order queue (``max_outstanding + 8``)
  bound how far a load reads ahead of its consumer: a tile's last burst is requested only once
  the tile three before it has left the tile queue (the cycle after), so R never waits for the
  load. A tile's entry waits for room in the address queue (3), which frees as the burst
  generator takes a tile (``_Load._issue``). A RandomLoad takes each address from its queue in
  the cycle of its entry, while earlier tiles wait to leave (``_take_ahead``). A RandomLoad with
  ``fetch`` blocks and a LinearLoad with a reference replay their sequencer cycle by cycle
  (:class:`_BlockLoad`; on a shared port ``_Load._more`` plans the same entries): a data token
  taken the cycle after the entry before, then its block's entries (a tile and a stop inside
  the block one entry of two beats), a stop or done taken with its entry, all while earlier
  tiles wait to leave.
* **Stores** (``memory/store.py``). A tile's AW leaves ``store_issue`` cycles after the take, its
  W beats ``aw_to_w`` cycles after AW, one per cycle; B follows the last beat after
  ``write_response`` cycles; ``done`` rises ``done_latency`` cycles after the last B. A
  RandomStore takes its next tiles while earlier acks wait in its order queue (``max_outstanding
  + 8`` entries); an ack leaves ``ACK_AFTER_B`` cycles after its write's last B, in order
  (:class:`_RandomStore`). With ``fetch`` blocks it takes a block's address, tiles and stops one
  per cycle and acknowledges the block after its last B (:class:`_BlockStore`).
* **Shared AXI ports** (``HwConfig.axi_ports``). The memory operators share ports as the
  elaborator assigns them (``step_hw.elaborate.axi_managers``); a port with several is an
  ``AxiReadArbiter`` / ``AxiWriteArbiter`` (``step_hw/memory/arbiter.py``) in front of one
  cocotbext-axi RAM, simulated cycle by cycle (:class:`ReadPort`, :class:`WritePort`). The
  arbiter adds no latency: AR (AW) is round-robin from the manager granted last, combinational,
  and a request the RAM does not take at once stays granted until it does; R beats return in AR
  order, one per cycle for the whole port, so a load's tile-queue back-pressure on a tile's last
  beat stalls every load behind it (and can deadlock the graph, as in hardware); W beats pass in
  AW order, one per cycle. The RAM's AR (AW) queue holds two requests: the RAM's own process
  takes one burst at a time from it, so ``arready`` drops when two wait (``ReadPort``). A port
  with one operator is wires, modelled as above.
* **The end of the run.** The graph's ``done`` (``step_hw.elaborate``) is the AND of ``running``,
  every LinearStore's sticky ``done`` and, per Sink, a "done token seen" register set at the
  clock edge that ends the cycle the Sink takes its done token. The bench
  (``step_hw/cosim/bench.py``) counts clock edges, the first being the one that ends cycle 0
  (``start`` high), and reads ``done`` after each; cocotb's Verilator loop runs ``RisingEdge``
  callbacks before it evaluates the design on the edge, so it reads the value of the cycle the
  edge ends: the count is the first cycle ``done`` is high, plus one. A Sink that takes its done
  token in cycle *t* ends the run at *t* + ``sink_done`` (2: the register, the bench), as a store
  ends it ``done_latency`` cycles after its last B (which counts the bench's cycle too). Every
  bit is sticky, so the run ends at the latest of them, whatever other blocks still do
  (:meth:`RtlProfile.run_cycles`).

The memory is :class:`step_hw.memory_model.MemoryModel` (the fast co-simulation tier builds the
same one, ``step_hw/cosim/fast_top.py``); :meth:`RtlProfile.for_memory` takes its timing. A
memory with a beat interval above 1, a start-up, or a request queue shorter than the
controllers' ``max_outstanding`` (and two) shapes every port, so then every port, also one of a
single operator, takes the cycle-by-cycle port model (``ReadPort``, ``WritePort``). The
defaults are its ``axi_ram`` preset, cocotbext-axi ``AxiRam``'s timing, measured on the generated
SwiGLU layer (``docs/validation.md``): AR to the first R beat 2 cycles, last W beat to B 2
cycles. Every ``m_axi`` port has its own memory front end over one memory, so different ports do
not share bandwidth; the operators on one shared port do.

The model is split by hardware block: :mod:`.clocked` (the clock, Source, Sink, blocks that take
early), :mod:`.blocks`, :mod:`.expand` and :mod:`.promote` (registered blocks), :mod:`.routers`,
:mod:`.buffers`, :mod:`.loads`, :mod:`.block_loads`, :mod:`.sequencer`, :mod:`.axi`,
:mod:`.stores`, :mod:`.ports` (shared AXI ports), :mod:`.registry` (:data:`RTL_TIMING`) and
:mod:`.profile`.
"""

from .profile import RtlProfile
from .registry import RTL_TIMING

__all__ = ["RTL_TIMING", "RtlProfile"]
