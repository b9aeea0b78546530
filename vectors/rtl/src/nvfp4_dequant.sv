// nvfp4_dequant: NVFP4-DEQ-1, element j dequantizes to fp32(q_j * e4m3(c) * s_g). The product
// is exact as an integer (half units <= 12, times the 4-bit E4M3 significand, times the 24-bit
// s_g significand) and rounded once to fp32 (RNE; results below the normal range become fp32
// subnormals). Overflow cannot happen for an accepted s_g (NVFP4-GS-2, NVFP4-IN-4). The sign
// is the code's sign bit, so code 0x8 gives -0.0.
`timescale 1ns / 1ps
module nvfp4_dequant
  import hscale_nvfp4_pkg::*;
(
  input  logic [63:0]  codes,    // code j at [4j +: 4]
  input  logic [7:0]   c,
  input  logic [31:0]  s_g,
  output wire  [511:0] deq       // fp32 j at [32j +: 32]
);
  for (genvar j = 0; j < 16; j++) begin : g_deq
    logic [3:0] code;
    assign code = codes[4*j +: 4];
    assign deq[32*j +: 32] = f32_pack(code[3],
        {124'd0, e2m1_halves(code[2:0])} * {124'd0, e4m3_mant(c)} * {104'd0, f32_mant(s_g)},
        e4m3_exp(c) + f32_exp(s_g) - 1);
  end
endmodule
