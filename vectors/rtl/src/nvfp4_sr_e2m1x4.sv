// nvfp4_sr_e2m1x4: stochastic rounding of four fp32 values to E2M1 with one 32-bit random word,
// what cvt.rs.satfinite.e2m1x4.f32 computes (docs/spec.md section 11), combinational.
//
// NVFP4-SR-2, the carry rule, in integers: |v| in units of 2^-32 is an integer for every fp32
// |v| >= 2^-9 ({1, mantissa} << (exponent - 118), at most 35 bits); below 2^-9 every value lies
// in the cell [0, 0.5) with D_top = 0 and never rounds up, so it counts as 0. The cell [lo, hi)
// is found by comparison with the grid points (0.5 = 2^31 units, ..., 6 = 3 * 2^33), D_top is
// (|v| - lo) >> (log2(hi - lo) - 8), and the magnitude code is lo's plus the carry out of
// D_top + r (8 bits each, NVFP4-SR-2: round away from zero iff D_top + r >= 256). The sign bit
// is v's (a negative that rounds to 0 gives 0x8).
// NVFP4-SR-3: NaN -> 0x7 (+6, the sign dropped), |v| >= 6 and the infinities -> sign | 0x7.
// NVFP4-SR-4: element i (v_i, its code at [4i +: 4]) takes byte ROUTE(profile, i) of rbits:
// profile 0 straight (0, 1, 2, 3), 1 ptx-e2m1x4 (0, 2, 1, 3), 2 sm103a (2, 0, 3, 1, the bytes of
// elements 1 and 3 bit-reversed).
// Planted bugs (vectors/rtl/run.py SR_BUGS): BUG == 1 "biased byte", a carry only when
// D_top + r > 256; BUG == 2 bytes in the wrong order, elements 1 and 2 take each other's byte
// under the straight profile (which then routes as ptx-e2m1x4); BUG == 3 a dropped carry, the
// carry out of the mantissa bit lost (lo's exponent kept: 0.5 -> 0, 1.5 -> 1, 3 -> 2).
`timescale 1ns / 1ps
module nvfp4_sr_e2m1x4 #(
  parameter int BUG = 0
) (
  input  logic [127:0] v,        // v_i at [32i +: 32]
  input  logic [31:0]  rbits,
  input  logic [1:0]   profile,  // 0 straight, 1 ptx-e2m1x4, 2 sm103a
  output logic [15:0]  codes     // code of v_i at [4i +: 4]
);
  function automatic logic [7:0] reverse8(input logic [7:0] b);
    for (int k = 0; k < 8; k++) reverse8[k] = b[7 - k];
  endfunction

  function automatic logic [7:0] routed(input logic [31:0] word, input logic [1:0] p,
                                        input int i);
    logic [1:0] slot;
    logic [7:0] b;
    case ((BUG == 2 && p == 2'd0) ? 2'd1 : p)
      2'd1:    slot = (i == 1) ? 2'd2 : (i == 2) ? 2'd1 : 2'(i);
      2'd2:    slot = (i == 0) ? 2'd2 : (i == 1) ? 2'd0 : (i == 2) ? 2'd3 : 2'd1;
      default: slot = 2'(i);
    endcase
    b = word[8 * slot +: 8];
    routed = (p == 2'd2 && (i % 2 == 1)) ? reverse8(b) : b;
  endfunction

  function automatic logic [3:0] round_one(input logic [31:0] x, input logic [7:0] r);
    logic sign;
    logic [7:0] e;
    logic [22:0] m;
    logic [39:0] mag, lo;
    logic [2:0] low;
    logic [7:0] top;
    logic [8:0] sum;
    int shift;
    sign = x[31];
    e = x[30:23];
    m = x[22:0];
    if (e == 8'hFF && m != 0) return 4'h7;                           // NaN
    if (e == 8'hFF || e > 8'd129 || (e == 8'd129 && m >= 23'h400000))
      return {sign, 3'b111};                                          // |v| >= 6, infinities
    mag = (e >= 8'd118) ? ({16'd0, 1'b1, m} << (e - 8'd118)) : 40'd0;
    if (mag >= 40'h0400000000)      begin low = 3'd6; lo = 40'h0400000000; shift = 25; end
    else if (mag >= 40'h0300000000) begin low = 3'd5; lo = 40'h0300000000; shift = 24; end
    else if (mag >= 40'h0200000000) begin low = 3'd4; lo = 40'h0200000000; shift = 24; end
    else if (mag >= 40'h0180000000) begin low = 3'd3; lo = 40'h0180000000; shift = 23; end
    else if (mag >= 40'h0100000000) begin low = 3'd2; lo = 40'h0100000000; shift = 23; end
    else if (mag >= 40'h0080000000) begin low = 3'd1; lo = 40'h0080000000; shift = 23; end
    else                            begin low = 3'd0; lo = 40'd0;          shift = 23; end
    top = 8'((mag - lo) >> shift);
    sum = {1'b0, top} + {1'b0, r};
    if (BUG == 1) return {sign, low + 3'(sum > 9'd256)};
    if (BUG == 3) return {sign, low[2:1], low[0] ^ sum[8]};
    return {sign, low + 3'(sum[8])};
  endfunction

  for (genvar i = 0; i < 4; i++) begin : elements
    assign codes[4 * i +: 4] = round_one(v[32 * i +: 32], routed(rbits, profile, i));
  end
endmodule
