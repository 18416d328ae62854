"""step_hw.verilog_modules: an instance's module found by the instantiations, merged or not."""

from __future__ import annotations

from step_hw.verilog_modules import instance_module, module_bodies

# Two queue instances of one merged module, each with a `fifo` of one merged module.
TEXT = """module step_top(clk);
  input clk;
  \\step_top.q_a  q_a (
    .clk(clk)
  );
  \\step_top.q_a  q_b (
    .clk(clk)
  );
endmodule

module \\step_top.q_a (clk);
  input clk;
  \\step_top.q_a.fifo  fifo (
    .clk(clk)
  );
endmodule

module \\step_top.q_a.fifo (clk);
  input clk;
  reg [2:0] level;
endmodule
"""


def test_an_instance_is_found_by_its_instantiation():
    bodies = module_bodies(TEXT)
    assert list(bodies) == ["step_top", "step_top.q_a", "step_top.q_a.fifo"]
    assert bodies["step_top.q_a.fifo"].rstrip().endswith("endmodule")
    assert instance_module(bodies, "step_top.q_b") == "step_top.q_a"
    assert instance_module(bodies, "step_top.q_b.fifo") == "step_top.q_a.fifo"
    assert instance_module(bodies, "step_top") == "step_top"
    assert instance_module(bodies, "step_top.q_c") is None
    assert instance_module(bodies, "step_top.q_b.other") is None


def test_the_fast_tier_reads_each_queues_level_width_through_merged_modules():
    from step_hw.cosim.fast_top import queue_level_widths

    assert queue_level_widths(TEXT, ["q_a", "q_b"]) == {"q_a": 3, "q_b": 3}
