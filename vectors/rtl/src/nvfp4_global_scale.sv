// nvfp4_global_scale: the tensor's global scale s_g (combinational; the top registers it).
//
// NVFP4-GS-1  s_g = fp32(amax / (6 C)), the exact real quotient rounded once (RNE). amax is an
//             fp32 (max |W|, from nvfp4_amax), C the scale ceiling as fp64 bits (448, or 256 for
//             4over6; any C in (0, 448]). Both significands are normalised (amax to 24 bits,
//             C to 53), the dividend shifted left by 59, so the integer quotient has 27..29 bits
//             and fp32 keeps 24: the remainder's sticky bit, jammed below the quotient, lies >= 3
//             places under the rounding position (exact RNE). (An exact tie cannot occur, see
//             docs/vectors.md, but the rounding would handle one.)
// NVFP4-GS-2  amax == 0 gives 1.0; an exact quotient below 2^-126 gives 2^-126 (s_g is always
//             a positive normal fp32); `reject` flags a tensor whose fp32(6 * 448 * s_g) would
//             overflow (the spec's ValueError; also set for a quotient that overflows fp32).
// NVFP4-GS-3  given = 1: the caller's s_g is used unchanged (nothing recomputed, rounded or
//             clamped); `reject` flags one that is not a positive normal fp32 with
//             fp32(2688 * s_g) finite (NVFP4-IN-4).
// Not covered: NVFP4-GS-4 (a reciprocal stored r = fp32(1/s_g)), a reader/writer concern.
`timescale 1ns / 1ps
module nvfp4_global_scale
  import hscale_nvfp4_pkg::*;
(
  input  logic [31:0] amax,       // fp32 bits, >= 0
  input  logic [63:0] ceiling,    // C, fp64 bits
  input  logic        given,
  input  logic [31:0] supplied,   // the caller's s_g when given
  output logic [31:0] s_g,
  output logic        reject
);
  // fp32(2688 * x) overflows (NVFP4-GS-2, NVFP4-IN-4); x a positive finite fp32
  function automatic logic top_overflows(input logic [31:0] x);
    logic [31:0] y;
    y = f32_pack(1'b0, {104'd0, f32_mant(x)} * 128'd2688, f32_exp(x));
    return (y[30:23] == 8'hFF);
  endfunction

  // {reject, s_g} for amax `am`, ceiling `ceil` (fp64), and the caller's `sup` when `gv`
  function automatic logic [32:0] global_scale(input logic [31:0] am, input logic [63:0] ceil,
                                               input logic gv, input logic [31:0] sup);
    logic [23:0] ma;
    logic [52:0] mc;
    int la, lc, e, emsb;
    logic [127:0] num, den, qj;
    logic bad_c, rej;
    logic [31:0] sg;
    sg = F32_ONE;
    rej = 1'b0;
    bad_c = ceil[63] || (ceil[62:0] == 63'd0) || (ceil[62:52] == 11'h7FF);  // C must be > 0
    if (gv) begin
      sg = sup;                                          // NVFP4-GS-3: used unchanged
      rej = sup[31] || (sup[30:23] == 8'd0) || (sup[30:23] == 8'hFF) || top_overflows(sup);
    end else if (am[30:0] == 31'd0) begin
      sg = F32_ONE;                                      // NVFP4-GS-2: amax == 0 gives 1.0
      rej = bad_c;
    end else if (bad_c || am[30:23] == 8'hFF) begin
      rej = 1'b1;
    end else begin
      ma = f32_mant(am);
      mc = f64_mant(ceil);
      la = 23 - msb128({104'd0, ma});                    // normalise: amax to 24 bits,
      lc = 52 - msb128({75'd0, mc});                     // C to 53 bits
      num = {104'd0, ma} << (la + 59);
      den = ({75'd0, mc} << lc) * 128'd6;                // 6 C
      qj = div_jam(num, den, 30);
      // amax / (6 C) = (q + rem/den) * 2^e; qj = {q, rem != 0} is the same times 2^(e-1)
      e = (f32_exp(am) - la - 59) - (f64_exp(ceil) - lc);
      emsb = e - 1 + msb128(qj);                         // floor(log2(amax / (6 C)))
      if (emsb < -126) begin
        sg = F32_MIN_NORMAL;                             // NVFP4-GS-2: raised to 2^-126
      end else begin
        sg = f32_pack(1'b0, qj, e - 1);                  // NVFP4-GS-1: RNE, once
        rej = (sg[30:23] == 8'hFF) || top_overflows(sg); // NVFP4-GS-2: 6 * 448 * s_g overflows
      end
    end
    return {rej, sg};
  endfunction

  assign {reject, s_g} = global_scale(amax, ceiling, given, supplied);
endmodule
