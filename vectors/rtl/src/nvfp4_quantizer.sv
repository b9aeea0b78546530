// nvfp4_quantizer: the NVFP4 group quantizer, one 16-element group per clock, 3-stage pipeline.
//
//   stage 1  NVFP4-IN-1   weights of the configured dtype (fp32 / bf16 / fp16) to fp32, exact
//   stage 2  NVFP4-INIT-1 max-abs initial byte c6 = E4M3_RNE_satfinite(amax_g / (6 s_g)), exact
//                         quotient, saturating (NVFP4-E4M3-2), min-byte rule (0x00 -> 0x01)
//            NVFP4-INIT-2 4over6: c4 likewise with divisor 4; both scored by HSCALE-OBJ-1 with
//                         h = 1 (two hscale_objective units, USE_H = 0); c0 = c4 only if its
//                         error is strictly smaller (a tie keeps 6)
//            NVFP4-ZERO-1 amax_g == 0: byte 0x00, no search
//   stage 3  NVFP4-E2M1-2/-3 codes at c0, NVFP4-PACK-1 packing
// The outputs are the RTN result (HSCALE-METHOD-1 `rtn`: the scale byte is c0) plus what the
// separate search unit (hscale_search) needs: the fp32 weights, h, s_g, c0.
// Configuration (dtype, init) must be held stable while groups are in flight.
// Planted bugs: truncated-e4m3 and no-subnormal-scale act on the range bytes (stage 2);
// ties-away inside the E2M1 encoders; little-endian-packed in the packer.
`timescale 1ns / 1ps
module nvfp4_quantizer
  import hscale_nvfp4_pkg::*;
#(
  parameter int BUG = 0
) (
  input  logic          clk,
  input  logic          rst_n,
  input  logic [1:0]    cfg_dtype,
  input  logic          cfg_init,
  input  logic          in_valid,
  input  logic [31:0]   in_tag,
  input  logic [31:0]   in_sg,      // global scale s_g, fp32 (a positive normal, NVFP4-GS-2)
  input  logic [511:0]  in_w,       // raw weight j at [32j +: 32] (16-bit dtypes in [15:0])
  input  logic [1023:0] in_h,       // fp64 h_j at [64j +: 64]
  output logic          out_valid,
  output logic [31:0]   out_tag,
  output logic [31:0]   out_sg,
  output logic [511:0]  out_w,      // the weights as fp32
  output logic [1023:0] out_h,
  output logic          out_zero,   // NVFP4-ZERO-1 group
  output logic [7:0]    out_c0,     // initial byte
  output logic [63:0]   out_codes,  // codes at c0, code j at [4j +: 4]
  output logic [63:0]   out_packed  // NVFP4-PACK-1, byte 0 leftmost
);
  localparam logic TRUNC = (BUG == BUG_TRUNCATED_E4M3);
  localparam logic FTZ   = (BUG == BUG_NO_SUBNORMAL_SCALE);
  localparam logic LE    = (BUG == BUG_LITTLE_ENDIAN_PACKED);

  // ---- stage 1: dtype conversion -----------------------------------------------------------
  wire [511:0] w32_in;
  for (genvar j = 0; j < 16; j++) begin : g_cvt
    assign w32_in[32*j +: 32] = weight_to_f32(in_w[32*j +: 32], cfg_dtype);
  end

  logic          s1_valid;
  logic [31:0]   s1_tag, s1_sg;
  logic [511:0]  s1_w;
  logic [1023:0] s1_h;
  always_ff @(posedge clk or negedge rst_n) begin
    if (!rst_n) s1_valid <= 1'b0;
    else        s1_valid <= in_valid;
  end
  always_ff @(posedge clk) begin
    if (in_valid) begin
      s1_tag <= in_tag; s1_sg <= in_sg; s1_w <= w32_in; s1_h <= in_h;
    end
  end

  // ---- stage 2: initial byte -------------------------------------------------------------
  logic [31:0] amax_g;
  assign amax_g = group_amax(s1_w);                   // amax_g = max_j |w_j|

  logic [7:0] c6, c4, c0_sel;
  assign c6 = range_byte(amax_g, s1_sg, 1'b0, TRUNC, FTZ);    // NVFP4-INIT-1
  assign c4 = range_byte(amax_g, s1_sg, 1'b1, TRUNC, FTZ);    // NVFP4-INIT-2, divisor 4

  // the two 4over6 scores (h = 1); operands isolated (held at 0) under maxabs init
  logic          iso;
  logic [511:0]  w_4o6;
  logic [31:0]   sg_4o6;
  logic [7:0]    c6_4o6, c4_4o6;
  logic [63:0]   codes6, codes4, e6, e4;
  assign iso    = (cfg_init != INIT_4OVER6);
  assign w_4o6  = iso ? 512'd0 : s1_w;
  assign sg_4o6 = iso ? 32'd0 : s1_sg;
  assign c6_4o6 = iso ? 8'd0 : c6;
  assign c4_4o6 = iso ? 8'd0 : c4;
  hscale_candidate #(.USE_H(1'b0), .BUG(BUG)) u_cand6 (.w(w_4o6), .h(1024'd0), .s_g(sg_4o6),
                                                       .c(c6_4o6), .codes(codes6), .e_obj(e6));
  hscale_candidate #(.USE_H(1'b0), .BUG(BUG)) u_cand4 (.w(w_4o6), .h(1024'd0), .s_g(sg_4o6),
                                                       .c(c4_4o6), .codes(codes4), .e_obj(e4));

  assign c0_sel = (amax_g == 32'd0) ? 8'h00                          // NVFP4-ZERO-1
                : (cfg_init == INIT_4OVER6 && f64_lt(e4, e6)) ? c4   // strictly smaller
                : c6;                                                // a tie keeps 6

  logic          s2_valid, s2_zero;
  logic [31:0]   s2_tag, s2_sg;
  logic [511:0]  s2_w;
  logic [1023:0] s2_h;
  logic [7:0]    s2_c0;
  always_ff @(posedge clk or negedge rst_n) begin
    if (!rst_n) s2_valid <= 1'b0;
    else        s2_valid <= s1_valid;
  end
  always_ff @(posedge clk) begin
    if (s1_valid) begin
      s2_tag <= s1_tag; s2_sg <= s1_sg; s2_w <= s1_w; s2_h <= s1_h;
      s2_c0 <= c0_sel; s2_zero <= (amax_g == 32'd0);
    end
  end

  // ---- stage 3: codes at c0 and packing -----------------------------------------------------
  logic [63:0] codes0;
  nvfp4_e2m1_encode #(.BUG(BUG)) u_enc0 (.w(s2_w), .s_g(s2_sg), .c(s2_c0), .codes(codes0));

  always_ff @(posedge clk or negedge rst_n) begin
    if (!rst_n) out_valid <= 1'b0;
    else        out_valid <= s2_valid;
  end
  always_ff @(posedge clk) begin
    if (s2_valid) begin
      out_tag <= s2_tag; out_sg <= s2_sg; out_w <= s2_w; out_h <= s2_h;
      out_zero <= s2_zero; out_c0 <= s2_c0; out_codes <= codes0;
      out_packed <= pack_codes(codes0, LE);
    end
  end

endmodule
