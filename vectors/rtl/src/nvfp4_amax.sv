// nvfp4_amax: the tensor maximum |W| for the global scale (NVFP4-GS-1 "amax = max |W| over the
// whole tensor"), accumulated one 16-element group per clock. Weights are converted to fp32
// first (NVFP4-IN-1; exact for bf16 / fp16), so amax is an fp32 bit pattern with the sign
// cleared; magnitudes of finite floats order like their bit patterns read as unsigned integers.
`timescale 1ns / 1ps
module nvfp4_amax
  import hscale_nvfp4_pkg::*;
(
  input  logic         clk,
  input  logic         rst_n,
  input  logic [1:0]   cfg_dtype,
  input  logic         clear,     // start a new tensor
  input  logic         valid,
  input  logic [511:0] w,         // raw weight j at [32j +: 32]
  output logic [31:0]  amax
);
  wire [511:0] w32;
  for (genvar j = 0; j < 16; j++) begin : g_cvt
    assign w32[32*j +: 32] = weight_to_f32(w[32*j +: 32], cfg_dtype);
  end
  logic [31:0] gmax;
  assign gmax = group_amax(w32);
  always_ff @(posedge clk or negedge rst_n) begin
    if (!rst_n)                                       amax <= 32'd0;
    else if (clear)                                   amax <= 32'd0;
    else if (valid && gmax > amax)                    amax <= gmax;
  end
endmodule
