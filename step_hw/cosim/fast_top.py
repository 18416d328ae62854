"""The fast co-simulation tier's top module: the graph, its memory and its streams in one design.

:func:`wrapper` writes the Verilog of ``step_fast``, a behavioural harness (generated, like the
design, from the design's description; never edited by hand) around the elaborated graph
``step_top``. Everything that the cocotbext-axi tier does in Python on every clock edge happens
inside the simulation, so a run's Python only starts the design, waits for ``done`` and reads the
results back:

* **memory**: one array of ``axi_data_width``-bit words covering the memory map, loaded from
  ``+MEM_IN=<file>`` (``$readmemh``) at time 0 and written to ``+MEM_OUT=<file>`` when ``dump``
  is high; every ``m_axi_<port>`` gets a read or write front end with the timing of
  :class:`step_hw.memory_model.MemoryModel` (its fields from ``+LATENCY=``,
  ``+WRITE_RESPONSE=``, ``+OUTSTANDING=``, ``+BEAT_INTERVAL=`` and ``+START_UP=``, so one build
  serves every model; :func:`memory_plusargs`);
* **Source streams** ``src_<node>``: a ROM of payloads (``+SRC_<node>=<file>``, ``+SRC_<node>_N=``
  tokens), offered in order from the ``start`` cycle; **Sink streams** ``snk_<node>``: every
  payload taken is recorded (dumped to ``+SNK_<node>=<file>``), with ``snk_<node>_count``;
* **back-pressure**: ``+PATTERN=0|1|2`` (always, periodic, random) and ``+SEED=``, one LFSR per
  channel; a valid, once raised, holds until its handshake (AXI and stream rules);
* **the bench's inputs** ``rst``, ``start`` and the run-time settings (``queue_limits``,
  ``geometry``) reach the design and the rest of
  the harness through a register (:data:`REGISTERED`), so that Verilator does not evaluate the
  design's next-state logic on every call of its ``eval``; everything runs one cycle later, and
  every count is unchanged;
* **observation**: ``cycles`` counts the clock edges from the one that samples ``start`` to the
  first that samples ``done`` high, both included, as the cocotbext-axi bench does; ``last_hs`` is the last cycle any queue moved a token, ``q_levels`` and
  ``q_ovalid`` every queue's fill and output valid (read by hierarchical reference, so the design
  needs no public signals), for the watchdog's report; ``+TRACE=<file>`` writes every queue's
  input handshakes and every AXI channel's as ``<index> <cycle>`` lines (:func:`trace_names`).

Widths come from the design's Verilog text (:func:`ports`); the description gives the memory map,
the AXI ports and the queue instances.
"""

from __future__ import annotations

import re

from step_hw.memory_model import MAX_OUTSTANDING, POP_LEAD, MemoryModel
from step_hw.verilog_modules import instance_module, module_bodies

from .cell_tables import loader

__all__ = [
    "FAST_TOP",
    "QUEUE_LEVEL_BITS",
    "RING",
    "SINK_DEPTH",
    "SOURCE_DEPTH",
    "memory_plusargs",
    "memory_words",
    "ports",
    "queue_level_widths",
    "trace_names",
    "wrapper",
]

FAST_TOP = "step_fast"
#: The bench's inputs that the design and the whole harness see through a register, one cycle
#: late (every count and pattern is unchanged): Verilator evaluates the combinational logic that a
#: top-level input feeds on every call of its ``eval`` (its ``ico`` region, twice per clock
#: cycle), and with Amaranth's synchronous reset that is the next-state logic of every register
#: of the design, which it evaluates again after the clock edge. ``dump`` is read only at a
#: clock edge and is not delayed.
#: The design's run-time settings (``HwConfig.queue_capacity``'s depths,
#: ``HwConfig.geometry_bounds``' geometry): inputs that the bench sets before the reset and holds,
#: each from the run description's entry of the same name.
RUN_TIME_INPUTS = ("queue_limits", "geometry")
REGISTERED = ("rst", "start", *RUN_TIME_INPUTS)
#: Bursts a memory front end tracks at once (taken but not yet answered).
RING = 2 * MAX_OUTSTANDING
#: Tokens a Source ROM holds and payloads a Sink records (per stream).
SOURCE_DEPTH = 1 << 16
SINK_DEPTH = 1 << 16
#: The memory a run without memory plusargs gets (never, from the harness: it passes them all).
_DEFAULT = MemoryModel()
#: Each queue's fill level is reported in this many bits.
QUEUE_LEVEL_BITS = 16

_PORT = re.compile(r"^\s*(input|output)\s+(?:\[(\d+):0\]\s+)?(\w+)\s*;", re.M)
_CHANNELS = {"read": ("ar", "r"), "write": ("aw", "w", "b")}


def ports(verilog: str, top: str = "step_top") -> dict[str, tuple[str, int]]:
    """The ports of module ``top`` in ``verilog``: name -> (direction, width)."""
    start = verilog.index(f"module {top}(")
    end = verilog.index("endmodule", start)
    return {
        m.group(3): (m.group(1), int(m.group(2)) + 1 if m.group(2) else 1)
        for m in _PORT.finditer(verilog, start, end)
    }


def queue_level_widths(verilog: str, queues: list[str], top: str = "step_top") -> dict[str, int]:
    """The width of each queue instance's ``fifo.level``, from its FIFO module's declaration
    (the module found by the instantiations, :mod:`step_hw.verilog_modules`)."""
    out = {}
    bodies = module_bodies(verilog)
    for q in queues:
        module = instance_module(bodies, f"{top}.{q}.fifo")
        if module is None:
            raise ValueError(f"fast tier: no FIFO module for queue instance '{q}' in the Verilog")
        m = re.search(
            r"^\s*(?:wire|reg|output)\s+(?:\[(\d+):0\]\s+)?level\s*[;=]", bodies[module], re.M
        )
        if m is None:
            raise ValueError(f"fast tier: queue instance '{q}' has no fifo.level signal")
        out[q] = int(m.group(1)) + 1 if m.group(1) else 1
    return out


def memory_words(desc: dict) -> int:
    """Words of the memory array: the memory map's extent in ``axi_data_width``-bit words."""
    bus = desc["config"]["axi_data_width"] // 8
    end = max((t["addr"] + t["bytes"] for t in desc["memory_map"].values()), default=0)
    return max(2, -(-end // bus))


def _axi_kind(port: str, top: dict) -> str:
    return "read" if f"{port}_arvalid" in top else "write"


def trace_names(desc: dict, verilog: str) -> list[str]:
    """The names of a ``+TRACE`` file's indices: the queue instances (sorted), then every AXI
    channel as ``<port>.<channel>``."""
    top = ports(verilog)
    names = sorted(desc.get("queues", {}))
    for port in desc["axi_ports"]:
        names += [f"{port}.{ch}" for ch in _CHANNELS[_axi_kind(port, top)]]
    return names


def memory_plusargs(model: MemoryModel) -> list[str]:
    """The plusargs that give a ``step_fast`` build the timing of ``model``."""
    return [
        f"+LATENCY={model.latency}",
        f"+WRITE_RESPONSE={model.write_response}",
        f"+OUTSTANDING={model.outstanding}",
        f"+BEAT_INTERVAL={model.beat_interval}",
        f"+START_UP={model.start_up}",
    ]


def _pause(name: str, index: int) -> str:
    """A per-channel pause flag ``<name>_pause`` (pattern and seed from the plusargs)."""
    salt = (0x9E3779B1 * (index + 1)) & 0xFFFFFFFF
    return f"""\
  reg [31:0] {name}_lfsr;
  wire {name}_pause = (pattern == 2) ? {name}_lfsr[0] : (pattern == 1) ? (now[1:0] == 2'd3) : 1'b0;
  always @(posedge clk) begin
    if (rst_q) {name}_lfsr <= seed ^ 32'h{salt:08x} ^ 32'h1;
    else {name}_lfsr <= {{{name}_lfsr[30:0], {name}_lfsr[31] ^ {name}_lfsr[21] ^ {name}_lfsr[1] ^ {name}_lfsr[0]}};
  end
"""


def _read_port(p: str, aw: int, iw: int, bus: int, words: int, index: int) -> str:
    shift = bus.bit_length() - 1
    ring = RING.bit_length() - 1
    return f"""\
  // ---- read port {p}: AR queue of `outstanding`, first beat `latency` cycles after AR
  // (`latency + start_up` for the first burst), then a beat every `beat_interval` cycles
{_pause(f"{p}_ar", 2 * index)}{_pause(f"{p}_r", 2 * index + 1)}\
  reg [{aw - 1}:0] {p}_addr [0:{RING - 1}];
  reg [7:0] {p}_len [0:{RING - 1}];
  reg [2:0] {p}_size [0:{RING - 1}];
  reg [{iw - 1}:0] {p}_id [0:{RING - 1}];
  reg [31:0] {p}_at [0:{RING - 1}];
  reg [31:0] {p}_end [0:{RING - 1}];
  reg {p}_bad [0:{RING - 1}];
  reg [31:0] {p}_ar_cnt, {p}_pop_cnt, {p}_prev_end, {p}_head, {p}_r_cnt, {p}_beats, {p}_r_next;
  reg [7:0] {p}_beat;
  reg {p}_r_hold;
  wire [{ring - 1}:0] {p}_h = {p}_head[{ring - 1}:0];
  wire {p}_ar_room = ({p}_ar_cnt < outstanding) || ({p}_pop_cnt + outstanding - 32'd1 >= {p}_ar_cnt);
  assign {p}_arready = !{p}_ar_pause && {p}_ar_room && ({p}_ar_cnt - {p}_head < {RING});
  wire [31:0] {p}_wait = {{16'd0, latency}} + (({p}_head == 0) ? {{16'd0, start_up}} : 32'd0);
  wire {p}_r_due = ({p}_head < {p}_ar_cnt) && (now >= {p}_at[{p}_h] + {p}_wait) && (now >= {p}_r_next);
  assign {p}_rvalid = {p}_r_hold || ({p}_r_due && !{p}_r_pause);
  wire [{aw - 1}:0] {p}_beat_addr = {p}_addr[{p}_h] + ({{{aw - 8}'d0, {p}_beat}} << {p}_size[{p}_h]);
  wire [{aw - shift - 1}:0] {p}_word = {p}_beat_addr[{aw - 1}:{shift}];
  wire {p}_unused_lanes = &{{1'b0, {p}_beat_addr[{shift - 1}:0]}};  // the word's byte lanes
  wire {p}_out = {p}_bad[{p}_h] || ({p}_word >= {aw - shift}'d{words});
  assign {p}_rdata = {p}_out ? {bus * 8}'d0 : mem[{p}_word[{max(1, (words - 1).bit_length()) - 1}:0]];
  assign {p}_rresp = {p}_out ? 2'b10 : 2'b00;
  assign {p}_rlast = ({p}_beat == {p}_len[{p}_h]);
  assign {p}_rid = {p}_id[{p}_h];
  wire {p}_ar_hs = {p}_arvalid && {p}_arready;
  wire {p}_r_hs = {p}_rvalid && {p}_rready;
  always @(posedge clk) begin
    if (rst_q) begin
      {p}_ar_cnt <= 0; {p}_pop_cnt <= 0; {p}_prev_end <= 0; {p}_head <= 0;
      {p}_r_cnt <= 0; {p}_beats <= 0; {p}_beat <= 0; {p}_r_hold <= 0; {p}_r_next <= 0;
    end else begin
      if ({p}_ar_hs) begin
        {p}_addr[{p}_ar_cnt[{ring - 1}:0]] <= {p}_araddr;
        {p}_len[{p}_ar_cnt[{ring - 1}:0]] <= {p}_arlen;
        {p}_size[{p}_ar_cnt[{ring - 1}:0]] <= {p}_arsize;
        {p}_id[{p}_ar_cnt[{ring - 1}:0]] <= {p}_arid;
        {p}_at[{p}_ar_cnt[{ring - 1}:0]] <= now;
        {p}_end[{p}_ar_cnt[{ring - 1}:0]] <= {p}_beats + {{24'd0, {p}_arlen}} + 32'd1;
        {p}_bad[{p}_ar_cnt[{ring - 1}:0]] <= ({p}_arburst != 2'b01) || ({p}_arsize > 3'd{shift});
        {p}_beats <= {p}_beats + {{24'd0, {p}_arlen}} + 32'd1;
        {p}_ar_cnt <= {p}_ar_cnt + 1;
      end
      // the memory takes burst `pop_cnt` from its AR queue (decided one cycle late): after its
      // AR, and once the beat {POP_LEAD} before the previous burst's last has been offered
      if ({p}_pop_cnt < {p}_ar_cnt && {p}_prev_end < {p}_r_cnt + {{31'd0, {p}_rvalid}} + 32'd{POP_LEAD + 1}) begin
        {p}_prev_end <= {p}_end[{p}_pop_cnt[{ring - 1}:0]];
        {p}_pop_cnt <= {p}_pop_cnt + 1;
      end
      {p}_r_hold <= {p}_rvalid && !{p}_rready;
      if ({p}_r_hs) begin
        {p}_r_cnt <= {p}_r_cnt + 1;
        {p}_r_next <= now + {{16'd0, beat_interval}};
        if ({p}_out) mem_error <= 1'b1;
        if ({p}_rlast) begin
          {p}_beat <= 0;
          {p}_head <= {p}_head + 1;
        end else {p}_beat <= {p}_beat + 1;
      end
    end
  end
"""


def _write_port(p: str, aw: int, iw: int, bus: int, words: int, index: int) -> str:
    shift = bus.bit_length() - 1
    ring = RING.bit_length() - 1
    wbits = max(1, (words - 1).bit_length())
    mask = " ".join(f"{{8{{{p}_wstrb[{i}]}}}}" + ("," if i else "") for i in reversed(range(bus)))
    return f"""\
  // ---- write port {p}: AW queue of `outstanding`, W after AW (a beat every `beat_interval`
  // cycles), B `write_response` after the last W (`write_response + start_up` for the first)
{_pause(f"{p}_aw", 3 * index)}{_pause(f"{p}_w", 3 * index + 1)}{_pause(f"{p}_b", 3 * index + 2)}\
  reg [{aw - 1}:0] {p}_addr [0:{RING - 1}];
  reg [7:0] {p}_len [0:{RING - 1}];
  reg [2:0] {p}_size [0:{RING - 1}];
  reg [{iw - 1}:0] {p}_id [0:{RING - 1}];
  reg [31:0] {p}_wlast_at [0:{RING - 1}];
  reg {p}_bad [0:{RING - 1}];
  reg [31:0] {p}_aw_cnt, {p}_pop_cnt, {p}_wburst, {p}_b_cnt, {p}_w_next;
  reg [7:0] {p}_wbeat;
  reg {p}_b_hold;
  wire [{ring - 1}:0] {p}_wh = {p}_wburst[{ring - 1}:0];
  wire [{ring - 1}:0] {p}_bh = {p}_b_cnt[{ring - 1}:0];
  wire {p}_aw_room = ({p}_aw_cnt < outstanding) || ({p}_pop_cnt + outstanding - 32'd1 >= {p}_aw_cnt);
  assign {p}_awready = !{p}_aw_pause && {p}_aw_room && ({p}_aw_cnt - {p}_b_cnt < {RING});
  assign {p}_wready = !{p}_w_pause && ({p}_wburst < {p}_aw_cnt) && (now >= {p}_w_next);
  wire [31:0] {p}_b_wait = {{16'd0, write_response}} + (({p}_b_cnt == 0) ? {{16'd0, start_up}} : 32'd0);
  wire {p}_b_due = ({p}_b_cnt < {p}_wburst) && (now >= {p}_wlast_at[{p}_bh] + {p}_b_wait);
  assign {p}_bvalid = {p}_b_hold || ({p}_b_due && !{p}_b_pause);
  assign {p}_bid = {p}_id[{p}_bh];
  assign {p}_bresp = {p}_bad[{p}_bh] ? 2'b10 : 2'b00;
  wire [{aw - 1}:0] {p}_beat_addr = {p}_addr[{p}_wh] + ({{{aw - 8}'d0, {p}_wbeat}} << {p}_size[{p}_wh]);
  wire [{aw - shift - 1}:0] {p}_word = {p}_beat_addr[{aw - 1}:{shift}];
  wire {p}_unused_lanes = &{{1'b0, {p}_beat_addr[{shift - 1}:0]}};  // the word's byte lanes
  wire {p}_out = {p}_bad[{p}_wh] || ({p}_word >= {aw - shift}'d{words});
  wire [{bus * 8 - 1}:0] {p}_mask = {{{mask}}};
  wire {p}_last = ({p}_wbeat == {p}_len[{p}_wh]);
  wire {p}_aw_hs = {p}_awvalid && {p}_awready;
  wire {p}_w_hs = {p}_wvalid && {p}_wready;
  always @(posedge clk) begin
    if (rst_q) begin
      {p}_aw_cnt <= 0; {p}_pop_cnt <= 0; {p}_wburst <= 0; {p}_b_cnt <= 0;
      {p}_wbeat <= 0; {p}_b_hold <= 0; {p}_w_next <= 0;
    end else begin
      if ({p}_aw_hs) begin
        {p}_addr[{p}_aw_cnt[{ring - 1}:0]] <= {p}_awaddr;
        {p}_len[{p}_aw_cnt[{ring - 1}:0]] <= {p}_awlen;
        {p}_size[{p}_aw_cnt[{ring - 1}:0]] <= {p}_awsize;
        {p}_id[{p}_aw_cnt[{ring - 1}:0]] <= {p}_awid;
        {p}_bad[{p}_aw_cnt[{ring - 1}:0]] <= ({p}_awburst != 2'b01) || ({p}_awsize > 3'd{shift});
        {p}_aw_cnt <= {p}_aw_cnt + 1;
      end
      // the memory takes burst `pop_cnt` from its AW queue once the previous burst's W is done
      if ({p}_pop_cnt < {p}_aw_cnt && {p}_wburst >= {p}_pop_cnt) {p}_pop_cnt <= {p}_pop_cnt + 1;
      if ({p}_w_hs) begin
        {p}_w_next <= now + {{16'd0, beat_interval}};
        if ({p}_out) begin
          {p}_bad[{p}_wh] <= 1'b1;
          mem_error <= 1'b1;
        end else
          mem[{p}_word[{wbits - 1}:0]] <= (mem[{p}_word[{wbits - 1}:0]] & ~{p}_mask) | ({p}_wdata & {p}_mask);
        if ({p}_wlast != {p}_last) mem_error <= 1'b1;
        if ({p}_last) begin
          {p}_wlast_at[{p}_wh] <= now;
          {p}_wburst <= {p}_wburst + 1;
          {p}_wbeat <= 0;
        end else {p}_wbeat <= {p}_wbeat + 1;
      end
      {p}_b_hold <= {p}_bvalid && !{p}_bready;
      if ({p}_bvalid && {p}_bready) {p}_b_cnt <= {p}_b_cnt + 1;
    end
  end
"""


def _source(p: str, width: int, index: int) -> str:
    name = p.removeprefix("src_")
    return f"""\
  // ---- Source stream {p}: payloads from +SRC_{name}=<file>, +SRC_{name}_N tokens
{_pause(p, index)}\
  reg [{width - 1}:0] {p}_rom [0:{SOURCE_DEPTH - 1}];
  reg [31:0] {p}_n, {p}_idx;
  reg {p}_hold;
  initial begin
    string f;
    {p}_n = 0;
    if ($value$plusargs("SRC_{name}=%s", f)) $readmemh(f, {p}_rom);
    if (!$value$plusargs("SRC_{name}_N=%d", {p}_n)) {p}_n = 0;
  end
  assign {p}__valid = {p}_hold || ((start_q || running) && {p}_idx < {p}_n && !{p}_pause);
  assign {p}__payload = {p}_rom[{p}_idx[{(SOURCE_DEPTH - 1).bit_length() - 1}:0]];
  always @(posedge clk) begin
    if (rst_q) begin
      {p}_idx <= 0; {p}_hold <= 0;
    end else begin
      {p}_hold <= {p}__valid && !{p}__ready;
      if ({p}__valid && {p}__ready) {p}_idx <= {p}_idx + 1;
    end
  end
"""


def _sink(p: str, width: int, index: int) -> str:
    name = p.removeprefix("snk_")
    return f"""\
  // ---- Sink stream {p}: every payload recorded, dumped to +SNK_{name}=<file>
{_pause(p, index)}\
  reg [{width - 1}:0] {p}_mem [0:{SINK_DEPTH - 1}];
  reg [31:0] {p}_cnt;
  assign {p}__ready = !{p}_pause;
  assign {p}_count = {p}_cnt;
  always @(posedge clk) begin
    if (rst_q) {p}_cnt <= 0;
    else if ({p}__valid && {p}__ready) begin
      if ({p}_cnt < {SINK_DEPTH}) {p}_mem[{p}_cnt[{(SINK_DEPTH - 1).bit_length() - 1}:0]] <= {p}__payload;
      else sink_overflow <= 1'b1;
      {p}_cnt <= {p}_cnt + 1;
    end
  end
  always @(posedge clk) if (dump) begin : dump_{p}
    string f;
    if ($value$plusargs("SNK_{name}=%s", f)) $writememh(f, {p}_mem);
  end
"""


def _width_decl(top_ports: dict[str, tuple[str, int]], name: str) -> str:
    """The range of a declaration of port ``name`` (``"[w-1:0] "``, empty for one bit)."""
    width = top_ports[name][1]
    return f"[{width - 1}:0] " if width > 1 else ""


def wrapper(desc: dict, verilog: str, top: str = "step_top") -> str:
    """The Verilog of :data:`FAST_TOP` around the design ``top`` (its text ``verilog``, its
    description ``desc``); see the module docstring."""
    cfg = desc["config"]
    bus = cfg["axi_data_width"] // 8
    words = memory_words(desc)
    top_ports = ports(verilog, top)
    queues = sorted(desc.get("queues", {}))
    levels = queue_level_widths(verilog, queues, top)
    out_ports = [
        "input wire clk", "input wire rst", "input wire start", "input wire dump",
        "output wire done", "output wire error", "output wire [31:0] cycles",
        "output wire [31:0] last_hs", "output reg mem_error", "output reg sink_overflow",
        f"output wire [{max(1, len(queues)) * QUEUE_LEVEL_BITS - 1}:0] q_levels",
        f"output wire [{max(1, len(queues)) - 1}:0] q_ovalid",
    ]  # fmt: skip
    # the design's other outputs (flags, overflow, ...) pass through
    passed = ("clk", "rst", "start", "done", "error")
    for k, name in enumerate(n for n in RUN_TIME_INPUTS if n in top_ports):
        # run-time settings (RUN_TIME_INPUTS): the bench sets them before `start`
        out_ports.insert(4 + k, f"input wire {_width_decl(top_ports, name)}{name}")
        passed += (name,)
    for name, (direction, _) in top_ports.items():
        if (
            direction == "output"
            and name not in passed
            and not name.startswith(("m_axi_", "src_", "snk_"))
        ):
            out_ports.append(f"output wire {_width_decl(top_ports, name)}{name}")
            passed += (name,)
    registered = [n for n in REGISTERED if n in top_ports]
    sinks = [
        p[: -len("__valid")] for p in top_ports if p.startswith("snk_") and p.endswith("__valid")
    ]
    sources = [
        p[: -len("__valid")] for p in top_ports if p.startswith("src_") and p.endswith("__valid")
    ]
    out_ports += [f"output wire [31:0] {p}_count" for p in sinks]
    body = [
        # (no graph's name: one build serves every graph whose Verilog is this design's, e.g.
        # the tilings of run-time geometry)
        "// Generated by step_hw.cosim.fast_top.",
        f"module {FAST_TOP}(",
        # the ports are the only signals cocotb reaches (the build has no --public-flat-rw)
        ",\n".join(f"  {p} /*verilator public_flat_rw*/" for p in out_ports),
        ");",
        f"  reg [{bus * 8 - 1}:0] mem [0:{words - 1}];",
        "  reg [31:0] now, t0, count, hs_at;",
        "  reg running, finished;",
        "  reg [15:0] latency, write_response, beat_interval, start_up;",
        "  reg [31:0] outstanding;",
        "  reg [31:0] seed, pattern;",
        "  integer trace_fd;",
        "  initial begin",
        "    string f;",
        '    if ($value$plusargs("MEM_IN=%s", f)) $readmemh(f, mem);',
        # without a plusarg, MemoryModel()'s own defaults (its fields, one home)
        f'    if (!$value$plusargs("LATENCY=%d", latency)) latency = 16\'d{_DEFAULT.latency};',
        f'    if (!$value$plusargs("WRITE_RESPONSE=%d", write_response)) '
        f"write_response = 16'd{_DEFAULT.write_response};",
        f'    if (!$value$plusargs("OUTSTANDING=%d", outstanding)) '
        f"outstanding = 32'd{_DEFAULT.outstanding};",
        f'    if (!$value$plusargs("BEAT_INTERVAL=%d", beat_interval)) '
        f"beat_interval = 16'd{_DEFAULT.beat_interval};",
        f'    if (!$value$plusargs("START_UP=%d", start_up)) start_up = 16\'d{_DEFAULT.start_up};',
        '    if (!$value$plusargs("SEED=%d", seed)) seed = 0;',
        '    if (!$value$plusargs("PATTERN=%d", pattern)) pattern = 0;',
        "    trace_fd = 0;",
        '    if ($value$plusargs("TRACE=%s", f)) trace_fd = $fopen(f, "w");',
        *loader(desc.get("cell_tables", [])),
        "    mem_error = 1'b0;",
        "    sink_overflow = 1'b0;",
        "  end",
        "  always @(posedge clk) if (dump) begin : dump_memory",
        "    string f;",
        '    if ($value$plusargs("MEM_OUT=%s", f)) $writememh(f, mem);',
        "    if (trace_fd != 0) $fflush(trace_fd);",
        "  end",
        # the bench's inputs, one cycle late (REGISTERED)
        *(f"  reg {_width_decl(top_ports, n)}{n}_q;" for n in registered),
        "  always @(posedge clk) begin",
        *(f"    {n}_q <= {n};" for n in registered),
        "  end",
        "  // cycles: the clock edges from the one that samples `start` to the first that samples",
        "  // `done` high, both counted (the AXI tier's bench counts the same)",
        "  always @(posedge clk) begin",
        "    if (rst_q) begin",
        "      now <= 0; running <= 0; finished <= 0; count <= 0; t0 <= 0;",
        "    end else begin",
        "      now <= now + 1;",
        "      if (start_q && !running) begin",
        "        running <= 1; count <= 1; t0 <= now;",
        "      end else if (running && !finished) begin",
        "        count <= count + 1;",
        "        if (done) finished <= 1;",
        "      end",
        "    end",
        "  end",
        "  assign cycles = count;",
        "  wire [31:0] rel = start_q ? 32'd0 : now - t0;  // trace cycle: 0 is the `start` cycle",
    ]
    conns = []
    for name in top_ports:
        if name in registered:
            conns.append(f".{name}({name}_q)")
            continue
        if name in passed:
            conns.append(f".{name}({name})")
            continue
        decl = _width_decl(top_ports, name)
        body.append(f"  wire {decl}{name};")
        conns.append(f".{name}({name})")
    for i, port in enumerate(desc["axi_ports"]):
        # a shared port's IDs carry the manager's number: widths from the port itself
        if _axi_kind(port, top_ports) == "read":
            aw, iw = top_ports[f"{port}_araddr"][1], top_ports[f"{port}_arid"][1]
            body.append(_read_port(port, aw, iw, bus, words, i))
        else:
            aw, iw = top_ports[f"{port}_awaddr"][1], top_ports[f"{port}_awid"][1]
            body.append(_write_port(port, aw, iw, bus, words, i))
    n_axi = len(desc["axi_ports"])
    for i, p in enumerate(sources):
        body.append(_source(p, top_ports[f"{p}__payload"][1], 3 * n_axi + i))
    for i, p in enumerate(sinks):
        body.append(_sink(p, top_ports[f"{p}__payload"][1], 3 * n_axi + len(sources) + i))
    body.append(f"  {top} dut (\n" + ",\n".join(f"    {c}" for c in conns) + "\n  );")
    # queue observation, by hierarchical reference
    pushes = []
    for i, q in enumerate(queues):
        w = levels[q]
        pad = f"{QUEUE_LEVEL_BITS - w}'d0, " if w < QUEUE_LEVEL_BITS else ""
        body.append(f"  wire [{w - 1}:0] lvl_{i} = dut.{q}.fifo.level;")
        body.append(
            f"  assign q_levels[{QUEUE_LEVEL_BITS * (i + 1) - 1}:{QUEUE_LEVEL_BITS * i}] = {{{pad}lvl_{i}}};"
        )
        body.append(f"  assign q_ovalid[{i}] = dut.{q}.o__valid;")
        body.append(f"  wire push_{i} = dut.{q}.i__valid && dut.{q}.i__ready;")
        body.append(f"  wire pop_{i} = dut.{q}.o__valid && dut.{q}.o__ready;")
        pushes.append(i)
    if not queues:
        body += ["  assign q_levels = 0;", "  assign q_ovalid = 0;"]
    moved = " || ".join(f"push_{i} || pop_{i}" for i in pushes) or "1'b0"
    body += [
        f"  wire queue_moved = {moved};",
        "  always @(posedge clk) if (rst_q) hs_at <= 0; else if (queue_moved) hs_at <= count;",
        "  assign last_hs = hs_at;",
    ]
    # handshake trace
    events = [f"push_{i}" for i in pushes]
    for port in desc["axi_ports"]:
        for ch in _CHANNELS[_axi_kind(port, top_ports)]:
            events.append(f"({port}_{ch}valid && {port}_{ch}ready)")
    if events:
        body.append(
            "  always @(posedge clk) if (trace_fd != 0 && (start_q || running) && !finished) begin"
        )
        body += [
            f'    if ({e}) $fwrite(trace_fd, "{k} %0d\\n", rel);' for k, e in enumerate(events)
        ]
        body.append("  end")
    body.append("endmodule")
    return "\n".join(body) + "\n"
