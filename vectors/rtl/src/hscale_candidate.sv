`timescale 1ns / 1ps
// hscale_candidate: one candidate byte end to end, codes and objective (the encoder and
// hscale_objective fused into one combinational function, candidate_eval, so that an
// event-driven simulator evaluates the fp64 datapath once per candidate, not once per
// changing code).
module hscale_candidate
  import hscale_nvfp4_pkg::*;
#(
  parameter bit USE_H = 1'b1,
  parameter int BUG = 0
) (
  input  logic [511:0]  w,
  input  logic [1023:0] h,
  input  logic [31:0]   s_g,
  input  logic [7:0]    c,
  output logic [63:0]   codes,
  output logic [63:0]   e_obj
);
  assign {codes, e_obj} = candidate_eval(w, h, s_g, c, USE_H, BUG == BUG_TIES_AWAY);
endmodule
