// hscale_objective: HSCALE-OBJ-1 for one candidate byte (combinational IEEE binary64 datapath).
//
// For candidate byte c with codes q (NVFP4-E2M1-2 at c), exactly as the spec writes it, every
// operation rounding once to fp64 (RNE), no fused multiply-add:
//     p_j = q_j * s                 exact: the code's value in half units (<= 12) times the
//                                   28-bit s = s_g * e4m3(c), packed without rounding
//     d_j = fp64(w_j - p_j)         f64_add with the sign of p flipped
//     e_j = fp64(h_j * fp64(d_j * d_j))      two f64_mul, never fused
//     E   = ((((e0+e1)+(e2+e3))+((e4+e5)+(e6+e7))) + (((e8+e9)+(e10+e11))+((e12+e13)+(e14+e15))))
// f64_add / f64_mul (hscale_nvfp4_pkg) are this RTL's own binary64 units: exact integer
// significand arithmetic, one RNE rounding in f64_pack, gradual underflow (subnormal operands
// and results), overflow to +inf. With h near the fp64 maximum a term and E are +inf (never
// NaN: every term is >= 0). USE_H = 0 is the h = 1 objective (NVFP4-INIT-2's 4over6 score):
// fp64(1 * x) = x exactly, so the h multiplier is left out.
// Structure: 16 lanes of (f32->f64, exact p, add, mul, mul) and a 15-adder tree, one
// combinational cloud written as one function (objective_f64); a synthesis flow would
// pipeline or retime it. Used as the building block of hscale_candidate.
`timescale 1ns / 1ps
module hscale_objective
  import hscale_nvfp4_pkg::*;
#(
  parameter bit USE_H = 1'b1
) (
  input  logic [511:0]  w,       // fp32 weights, element j at [32j +: 32]
  input  logic [1023:0] h,       // fp64 Hessian diagonal, element j at [64j +: 64]
  input  logic [31:0]   s_g,
  input  logic [7:0]    c,
  input  logic [63:0]   codes,   // code j at [4j +: 4]
  output logic [63:0]   e_obj    // E, fp64 bits
);
  assign e_obj = objective_f64(w, h, s_g, c, codes, USE_H);
endmodule
