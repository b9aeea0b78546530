// hscale_search: the H-Scale scale search for one group, one candidate per clock.
//
// HSCALE-WIN-1   K >= 1 candidates, U upward shifts, D = K - 1 - U downward; candidate
//                c(delta) = clip(c0 + delta, 0x01, 0x7E) on the E4M3 ladder, where the byte is
//                the ladder index (NVFP4-E4M3-3), so a shift is byte arithmetic. Shifts beyond
//                125 in either direction only repeat a clipped end already evaluated, so D and U
//                are limited to 125 (at most 251 candidates, bounded time, same answer).
// HSCALE-OBJ-1   each candidate's codes (nvfp4_e2m1_encode) and fp64 objective (hscale_objective)
// HSCALE-ARGMIN-1 candidates are visited in the PRIORITY order delta = 0, +1, -1, +2, -2, ...
//                (only shifts inside -D..+U), and the running best is replaced only by a
//                strictly smaller E. So an exact tie keeps the earlier candidate in that order:
//                the baseline, then the smaller move, then the larger scale; clipped duplicates
//                (same byte, same E) never replace one another; equal +inf objectives tie too.
// HSCALE-METHOD-1 scale-only is this search with h = 1 (the top feeds 1.0 to every h_j).
// The final codes are those of the chosen byte (kept from its evaluation cycle).
// Planted bug first-in-window: the visit order becomes the window order -D .. +U, so among
// equal minima the lowest byte wins.
// Latency: 1 (latch) + number of candidates + 1 (done) clocks; one group at a time.
`timescale 1ns / 1ps
module hscale_search
  import hscale_nvfp4_pkg::*;
#(
  parameter int BUG = 0
) (
  input  logic          clk,
  input  logic          rst_n,
  input  logic          start,
  input  logic [7:0]    c0,
  input  logic [511:0]  w,        // fp32 weights
  input  logic [1023:0] h,        // fp64 h (all 1.0 for scale-only)
  input  logic [31:0]   s_g,
  input  logic [31:0]   cfg_k,
  input  logic [31:0]   cfg_u,
  output logic          busy,
  output logic          done,      // one-cycle pulse; results valid while done
  output logic [7:0]    best_byte,
  output logic [63:0]   best_codes,
  output logic [63:0]   best_e     // the winning objective (fp64), for debug
);
  localparam logic WINDOW_ORDER = (BUG == BUG_FIRST_IN_WINDOW);

  typedef enum logic [1:0] {IDLE, RUN, DONE} state_t;
  state_t state;

  logic [7:0]    r_c0;
  logic [511:0]  r_w;
  logic [1023:0] r_h;
  logic [31:0]   r_sg;
  int            r_dl, r_ul;        // D and U limited to 125
  int            delta;
  logic          have_best;

  // ---- candidate datapath -------------------------------------------------------------------
  // HSCALE-WIN-1: c(delta) = clip(c0 + delta, 0x01, 0x7E)
  function automatic logic [7:0] clip_byte(input logic [7:0] base, input int d);
    int b;
    b = int'(base) + d;
    if (b < 1) b = 1;
    if (b > 126) b = 126;
    return 8'(b);
  endfunction

  logic [7:0]  cand;
  logic [63:0] cand_codes, cand_e;
  assign cand = clip_byte(r_c0, delta);
  hscale_candidate #(.USE_H(1'b1), .BUG(BUG)) u_cand (.w(r_w), .h(r_h), .s_g(r_sg), .c(cand),
                                                      .codes(cand_codes), .e_obj(cand_e));

  // ---- visit order --------------------------------------------------------------------------
  function automatic logic in_window(input int d, input int dl, input int ul);
    return (d >= -dl) && (d <= ul);
  endfunction
  // priority order 0, +1, -1, +2, -2, ...: the successor of +m is -m, of -m (and 0) is +(m+1)
  function automatic int prio_next(input int d);
    return (d > 0) ? -d : -d + 1;
  endfunction
  // the shift after d: {more (1 bit), next shift (32 bits)}
  function automatic logic [32:0] next_shift(input int d, input int dl, input int ul,
                                             input logic window_order);
    int n1, n2;
    if (window_order) return {d + 1 <= ul, 32'(d + 1)};       // planted bug: -D .. +U
    // from a valid shift the next valid one is one or two steps on (one side may be
    // exhausted); when neither is inside the window, every later shift is outside too
    n1 = prio_next(d);
    n2 = prio_next(n1);
    if (in_window(n1, dl, ul)) return {1'b1, 32'(n1)};
    if (in_window(n2, dl, ul)) return {1'b1, 32'(n2)};
    return {1'b0, 32'(n1)};
  endfunction

  logic [32:0] nxt;
  logic        next_ok;
  int          next_delta;
  assign nxt = next_shift(delta, r_dl, r_ul, WINDOW_ORDER);
  assign next_ok = nxt[32];
  assign next_delta = int'($signed(nxt[31:0]));

  // ---- control --------------------------------------------------------------------------------
  // D = K - 1 - U and U, each limited to 125 (HSCALE-WIN-1: longer shifts only repeat a clipped
  // end); K = 0 or U >= K (rejected by NVFP4-IN-3 upstream) are taken as D = 0.
  function automatic int lim_d(input logic [31:0] k, input logic [31:0] u);
    logic [32:0] d;
    d = (k > u) ? ({1'b0, k} - {1'b0, u} - 33'd1) : 33'd0;
    return (d > 33'd125) ? 125 : int'(d[6:0]);
  endfunction
  function automatic int lim_u(input logic [31:0] u);
    return (u > 32'd125) ? 125 : int'(u[6:0]);
  endfunction
  int dl_in, ul_in;
  assign dl_in = lim_d(cfg_k, cfg_u);
  assign ul_in = lim_u(cfg_u);

  assign busy = (state != IDLE);
  assign done = (state == DONE);

  always_ff @(posedge clk or negedge rst_n) begin
    if (!rst_n) begin
      state <= IDLE;
    end else begin
      case (state)
        IDLE: if (start) begin
          r_c0 <= c0; r_w <= w; r_h <= h; r_sg <= s_g;
          r_dl <= dl_in; r_ul <= ul_in;
          delta <= WINDOW_ORDER ? -dl_in : 0;
          have_best <= 1'b0;
          state <= RUN;
        end
        RUN: begin
          // HSCALE-ARGMIN-1: replace only on a strictly smaller objective
          if (!have_best || f64_lt(cand_e, best_e)) begin
            best_byte <= cand; best_codes <= cand_codes; best_e <= cand_e;
          end
          have_best <= 1'b1;
          if (next_ok) delta <= next_delta;
          else         state <= DONE;
        end
        default: state <= IDLE;   // DONE: results presented for one cycle
      endcase
    end
  end

endmodule
