// tb_vectors: plain SystemVerilog bench that runs one golden-vector parameter set through
// hscale_nvfp4_top and writes an observed-result file for `hscale vectors check`.
//
// The set's <set>.hex (one line per 16-element group) and <set>.gs.hex (one line per case) are
// read with $readmemh. The line layout is fixed by three parameters the runner passes
// (vectors/rtl/run.py reads them from the file's // header and checks every field range):
//   LINE_W  line width in bits;  W_BITS  16 or 32 (weight dtype width);  HAS_H  1 for hscale sets
// Fields, from the lsb: deq0..15 [511:0], packed [575:512] (byte 0 LEFTMOST: byte 0 is [575:568],
// not [519:512]), delta [583:576], scale [591:584], c0 [599:592], then h15..h0 (64 bits each,
// hscale sets), w15..w0 (W_BITS each), s_g (32), group (16), row (16), case (16).
// Runtime settings are plusargs: +HEX= +GSHEX= +OUT= +SET= +NLINES= +NCASES= +DTYPE= +METHOD=
// +INIT= +K= +U=.
//
// Per case: pass 1 streams the case's groups through the amax unit (checked against the
// .gs.hex amax), the global-scale unit computes s_g (or passes the supplied one through); pass
// 2 streams the groups with that s_g. Output lines use the index key form
//     <set>:<case_index> gs <s_g 8 hex>
//     <set>:<case_index> <row> <group> <scale 2 hex> <packed 16 hex, byte 0 first>
// The bench also compares what the observed format does not carry (c0, the dequantized values,
// amax, the per-line s_g) and prints the counts in its TB_SUMMARY line.
`timescale 1ns / 1ps
module tb_vectors
  import hscale_nvfp4_pkg::*;
#(
  parameter int LINE_W    = 2216,
  parameter int W_BITS    = 32,
  parameter int HAS_H     = 1,
  parameter int MAX_LINES = 1024,
  parameter int MAX_CASES = 256,
  parameter int BUG       = 0
);
  localparam int OFF_DEQ    = 0;
  localparam int OFF_PACKED = 512;
  localparam int OFF_C0     = 592;
  localparam int OFF_H      = 600;
  localparam int OFF_W      = 600 + HAS_H * 1024;
  localparam int OFF_SG     = OFF_W + 16 * W_BITS;
  localparam int OFF_GROUP  = OFF_SG + 32;
  localparam int OFF_ROW    = OFF_GROUP + 16;
  localparam int OFF_CASE   = OFF_ROW + 16;

  logic [LINE_W-1:0] vec [0:MAX_LINES-1];
  // .gs.hex: case 16 | amax 32 | ceiling 64 | given 8 | s_g 32 | r 32 (r = fp32(1/s_g), NVFP4-GS-4,
  // not used: the RTL stores the multiplier)
  logic [183:0]      gsv [0:MAX_CASES-1];

  // ---- DUT -----------------------------------------------------------------------------------
  logic clk = 1'b0, rst_n = 1'b0;
  always #5 clk = ~clk;

  logic [1:0]    cfg_dtype = 2'd0, cfg_method = 2'd0;
  logic          cfg_init = 1'b0;
  logic [31:0]   cfg_k = 32'd16, cfg_u = 32'd6;
  logic          am_clear = 1'b0, am_valid = 1'b0;
  logic [511:0]  am_w = '0;
  logic [31:0]   am_amax;
  logic          gs_valid = 1'b0, gs_given = 1'b0, gs_out_valid, gs_reject;
  logic [31:0]   gs_amax = '0, gs_supplied = '0, gs_sg;
  logic [63:0]   gs_ceiling = '0;
  logic          in_valid = 1'b0, in_ready, out_valid;
  logic [31:0]   in_tag = '0, in_sg = '0, out_tag;
  logic [511:0]  in_w = '0, out_deq;
  logic [1023:0] in_h = '0;
  logic [7:0]    out_c0, out_scale, out_delta;
  logic [63:0]   out_codes, out_packed;

  hscale_nvfp4_top #(.BUG(BUG)) dut (.*);

  // ---- settings --------------------------------------------------------------------------------
  string hexfile, gsfile, outfile, setname;
  int nlines, ncases, dtype, method, init, kk, uu, fd;
  int received = 0, c0_bad = 0, deq_bad = 0, amax_bad = 0, sg_bad = 0, reject_n = 0;
  longint cycles = 0;
  always @(posedge clk) cycles <= cycles + 1;

  function automatic logic [511:0] weights_of(input logic [LINE_W-1:0] line);
    logic [511:0] lanes;
    lanes = '0;
    for (int j = 0; j < 16; j++)
      lanes[32*j +: 32] = 32'(line[OFF_W + W_BITS * (15 - j) +: W_BITS]);   // w0 leftmost
    return lanes;
  endfunction

  function automatic logic [1023:0] hessian_of(input logic [LINE_W-1:0] line);
    logic [1023:0] lanes;
    lanes = '0;
    if (HAS_H != 0)
      for (int j = 0; j < 16; j++)
        lanes[64*j +: 64] = line[(HAS_H != 0 ? OFF_H + 64 * (15 - j) : 0) +: 64];
    return lanes;
  endfunction

  // ---- monitor: one observed line per result -------------------------------------------------
  always @(negedge clk) begin
    if (out_valid) begin : mon
      logic [LINE_W-1:0] line;
      logic [511:0] want_deq;
      line = vec[out_tag];
      $fwrite(fd, "%s:%0d %0d %0d %02x %016x\n", setname, line[OFF_CASE +: 16],
              line[OFF_ROW +: 16], line[OFF_GROUP +: 16], out_scale, out_packed);
      if (out_c0 !== line[OFF_C0 +: 8]) begin
        c0_bad = c0_bad + 1;
        if (c0_bad <= 3)
          $display("TB_NOTE c0 case %0d row %0d group %0d: %02x expected %02x",
                   line[OFF_CASE +: 16], line[OFF_ROW +: 16], line[OFF_GROUP +: 16], out_c0,
                   line[OFF_C0 +: 8]);
      end
      for (int j = 0; j < 16; j++) want_deq[32*j +: 32] = line[OFF_DEQ + 32 * (15 - j) +: 32];
      if (out_deq !== want_deq) begin
        deq_bad = deq_bad + 1;
        if (deq_bad <= 3)
          $display("TB_NOTE deq case %0d row %0d group %0d differs", line[OFF_CASE +: 16],
                   line[OFF_ROW +: 16], line[OFF_GROUP +: 16]);
      end
      received = received + 1;
    end
  end

  // ---- driver ----------------------------------------------------------------------------------
  initial begin : drive
    int l, l0, l1, target;
    logic [31:0] sg;
    if (OFF_CASE + 16 != LINE_W)
      $fatal(1, "LINE_W %0d does not match W_BITS %0d / HAS_H %0d (layout needs %0d bits)",
             LINE_W, W_BITS, HAS_H, OFF_CASE + 16);
    if (!$value$plusargs("HEX=%s", hexfile) || !$value$plusargs("GSHEX=%s", gsfile) ||
        !$value$plusargs("OUT=%s", outfile) || !$value$plusargs("SET=%s", setname) ||
        !$value$plusargs("NLINES=%d", nlines) || !$value$plusargs("NCASES=%d", ncases) ||
        !$value$plusargs("DTYPE=%d", dtype) || !$value$plusargs("METHOD=%d", method) ||
        !$value$plusargs("INIT=%d", init) || !$value$plusargs("K=%d", kk) ||
        !$value$plusargs("U=%d", uu))
      $fatal(1, "missing plusargs: HEX GSHEX OUT SET NLINES NCASES DTYPE METHOD INIT K U");
    if (nlines > MAX_LINES || ncases > MAX_CASES)
      $fatal(1, "set too large: %0d lines (MAX_LINES %0d), %0d cases (MAX_CASES %0d)",
             nlines, MAX_LINES, ncases, MAX_CASES);
    $readmemh(hexfile, vec, 0, nlines - 1);
    $readmemh(gsfile, gsv, 0, ncases - 1);
    fd = $fopen(outfile, "w");
    if (fd == 0) $fatal(1, "cannot write %s", outfile);
    $fwrite(fd, "# tb_vectors (SystemVerilog bench), set %s, BUG=%0d\n", setname, BUG);
    cfg_dtype = 2'(dtype); cfg_method = 2'(method); cfg_init = 1'(init);
    cfg_k = 32'(kk); cfg_u = 32'(uu);
    repeat (3) @(negedge clk);
    rst_n = 1'b1;
    @(negedge clk);

    l = 0;
    for (int c = 0; c < ncases; c++) begin
      if (gsv[c][183:168] != 16'(c)) $fatal(1, "%s line %0d is case %0d", gsfile, c, gsv[c][183:168]);
      l0 = l;
      while (l < nlines && vec[l][OFF_CASE +: 16] == 16'(c)) l = l + 1;
      l1 = l;
      // pass 1: the tensor's amax (NVFP4-GS-1)
      am_clear = 1'b1;
      @(negedge clk);
      am_clear = 1'b0;
      for (int i = l0; i < l1; i++) begin
        am_valid = 1'b1;
        am_w = weights_of(vec[i]);
        @(negedge clk);
      end
      am_valid = 1'b0;
      if (l1 > l0 && am_amax !== gsv[c][167:136]) begin
        amax_bad = amax_bad + 1;
        $display("TB_NOTE amax case %0d: %08x expected %08x", c, am_amax, gsv[c][167:136]);
      end
      // the global scale (NVFP4-GS-1..3)
      gs_valid = 1'b1;
      gs_amax = am_amax;
      gs_ceiling = gsv[c][135:72];
      gs_given = gsv[c][64];
      gs_supplied = gsv[c][63:32];     // the caller's s_g, when given
      @(negedge clk);
      gs_valid = 1'b0;
      sg = gs_sg;
      if (gs_reject) reject_n = reject_n + 1;
      $fwrite(fd, "%s:%0d gs %08x\n", setname, c, sg);
      // pass 2: every group of the case
      target = received + (l1 - l0);
      for (int i = l0; i < l1; i++) begin
        if (vec[i][OFF_SG +: 32] !== sg) sg_bad = sg_bad + 1;
        in_valid = 1'b1;
        in_tag = 32'(i);
        in_sg = sg;
        in_w = weights_of(vec[i]);
        in_h = hessian_of(vec[i]);
        while (!in_ready) @(negedge clk);
        @(negedge clk);                  // accepted at the posedge just passed
      end
      in_valid = 1'b0;
      while (received < target) @(negedge clk);
    end
    if (l != nlines) $fatal(1, "%0d of %0d lines belong to no case (cases not contiguous?)",
                            nlines - l, nlines);
    $fclose(fd);
    $display("TB_SUMMARY set=%s groups=%0d cases=%0d c0_mismatches=%0d deq_mismatches=%0d amax_mismatches=%0d sg_mismatches=%0d gs_rejects=%0d cycles=%0d",
             setname, received, ncases, c0_bad, deq_bad, amax_bad, sg_bad, reject_n, cycles);
    $finish;
  end

  initial begin : watchdog
    #500000000;
    $fatal(1, "watchdog: simulation did not finish");
  end
endmodule
