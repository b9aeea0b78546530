// nvfp4_e2m1_encode: the 16 E2M1 codes of one group at scale byte c (combinational).
//
// NVFP4-E2M1-2, threshold form (exact and division-free): with the group's effective scale
// s = s_g * e4m3(c) (NVFP4-DEQ-1) and the midpoints mid_k = 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5,
//     magnitude_code = sum over k even of [ |w| >  mid_k * s ] + sum over k odd of [ |w| >= mid_k * s ]
// Strict '>' at even k and '>=' at odd k send every exact tie to the even code (0.25->0,
// 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4); anything past the last threshold is code 7
// (magnitude 6): saturation, no overflow. mid_k * s = (4 mid_k) * ms * mc * 2^(es + ec - 2) is
// an exact integer times a power of two (5 + 24 + 4 bits), and so is |w| = mw * 2^ew; each
// comparison is exact: both sides normalised, compared as (exponent of the leading one,
// significand). The seven thresholds are computed once per byte and shared by the 16 element
// comparators (hscale_nvfp4_pkg::e2m1_thresholds, e2m1_code, e2m1_codes).
// NVFP4-E2M1-3: the sign bit of the code is the sign bit of w whatever the magnitude (-0.0 and
// a negative that rounds to magnitude 0 give 0x8).
// NVFP4-ZERO-1: at c = 0x00 (zero groups only, every |w| = 0) every magnitude is 0, so the codes
// carry just the signs.
// Planted bug ties-away (BUG == BUG_TIES_AWAY): '>=' at every k, i.e. ties away from zero.
`timescale 1ns / 1ps
module nvfp4_e2m1_encode
  import hscale_nvfp4_pkg::*;
#(
  parameter int BUG = 0
) (
  input  logic [511:0] w,      // 16 fp32 weights, element j at [32j +: 32]
  input  logic [31:0]  s_g,    // global scale, fp32 (NVFP4-GS-1)
  input  logic [7:0]   c,      // scale byte
  output logic [63:0]  codes   // code j at [4j +: 4]
);
  assign codes = e2m1_codes(w, s_g, c, BUG == BUG_TIES_AWAY);
endmodule
