// tb_sr: the stochastic-rounding unit (src/nvfp4_sr_e2m1x4.sv) on the golden vectors
// vectors/level0/sr_e2m1x4.hex ($readmemh: one line per random word, fields MSB first: case,
// row, word, v0..v3, rbits, and the four codes under each routing profile, v3's first).
// For the profile +profile=N it writes +observed=FILE, lines 'sr_e2m1x4:CASE row word codes'
// (the four codes element 0 first, as `hscale vectors check --routing` reads them), and
// compares every profile's codes with the file's, printing the mismatches it counts.
`timescale 1ns / 1ps
module tb_sr #(
  parameter int MAX_LINES = 8192,
  parameter int BUG = 0
);
  localparam int LINE_W = 256;
  logic [LINE_W-1:0] mem [0:MAX_LINES-1];
  logic [127:0] v;
  logic [31:0] rbits;
  logic [1:0] profile;
  logic [15:0] codes [0:2];
  string vectors, observed;
  int fd, lines, mismatches, chosen;

  for (genvar p = 0; p < 3; p++) begin : units
    nvfp4_sr_e2m1x4 #(.BUG(BUG)) unit (.v(v), .rbits(rbits), .profile(2'(p)),
                                       .codes(codes[p]));
  end

  initial begin
    if (!$value$plusargs("vectors=%s", vectors)) $fatal(1, "+vectors=FILE missing");
    if (!$value$plusargs("observed=%s", observed)) $fatal(1, "+observed=FILE missing");
    if (!$value$plusargs("profile=%d", chosen)) chosen = 0;
    // every line all ones until read: the end of the file (a 2-state simulator has no x)
    for (int k = 0; k < MAX_LINES; k++) mem[k] = {LINE_W{1'b1}};
    $readmemh(vectors, mem);
    fd = $fopen(observed, "w");
    lines = 0;
    mismatches = 0;
    for (int k = 0; k < MAX_LINES && mem[k] != {LINE_W{1'b1}}; k++) begin
      // fields (MSB first): case 16, row 16, word 16, v0..v3 4 x 32, rbits 32, 3 x 16 codes
      v = {mem[k][80 +: 32], mem[k][112 +: 32], mem[k][144 +: 32], mem[k][176 +: 32]};
      rbits = mem[k][48 +: 32];
      #1;
      for (int p = 0; p < 3; p++)
        if (codes[p] !== mem[k][(2 - p) * 16 +: 16]) mismatches++;
      $fwrite(fd, "sr_e2m1x4:%0d %0d %0d %h%h%h%h\n", mem[k][255 -: 16], mem[k][239 -: 16],
              mem[k][223 -: 16], codes[chosen][3:0], codes[chosen][7:4], codes[chosen][11:8],
              codes[chosen][15:12]);
      lines++;
    end
    $fclose(fd);
    $display("tb_sr: %0d words, %0d mismatches over the three profiles", lines, mismatches);
    $finish;
  end
endmodule
