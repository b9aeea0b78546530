// hscale_nvfp4_pkg: the arithmetic shared by the H-Scale NVFP4 RTL.
//
// Written from the normative text docs/spec.md (spec version 1.0); every rule cites its clause
// ID. Everything here is synthesizable: automatic functions of fixed-width vectors, no `real`,
// no DPI, loops only with constant bounds. A number is carried as an unsigned integer
// significand `m` and a signed exponent `e` meaning the exact value m * 2^e; the pack functions
// round such an exact value once, to nearest, ties to even (RNE), into a storage format.
//
// Sticky convention: a caller that has dropped nonzero bits below an integer's lsb ORs them
// into the lsb ("jamming"). As long as that lsb lies at least two bits below the rounding
// position (guard bit + one), RNE of the jammed value equals RNE of the exact value; every
// caller below keeps that margin (see the comments at each call).
`timescale 1ns / 1ps
package hscale_nvfp4_pkg;

  // ---- configuration encodings (inputs of hscale_nvfp4_top) --------------------------------
  localparam logic [1:0] DT_FP32 = 2'd0;   // NVFP4-IN-1: float32 weights
  localparam logic [1:0] DT_BF16 = 2'd1;   // NVFP4-IN-1: bfloat16 weights
  localparam logic [1:0] DT_FP16 = 2'd2;   // NVFP4-IN-1: float16 weights
  localparam logic [1:0] M_RTN        = 2'd0;  // HSCALE-METHOD-1
  localparam logic [1:0] M_SCALE_ONLY = 2'd1;
  localparam logic [1:0] M_HSCALE     = 2'd2;
  localparam logic INIT_MAXABS = 1'b0;     // NVFP4-INIT-1
  localparam logic INIT_4OVER6 = 1'b1;     // NVFP4-INIT-2

  // ---- planted bugs (vectors/rtl/run.py --bug NAME); BUG_NONE is the conforming design -----
  localparam int BUG_NONE                 = 0;
  localparam int BUG_TIES_AWAY            = 1;  // E2M1 ties away from zero (breaks NVFP4-E2M1-2)
  localparam int BUG_FIRST_IN_WINDOW      = 2;  // argmin in window order (breaks HSCALE-ARGMIN-1)
  localparam int BUG_LITTLE_ENDIAN_PACKED = 3;  // packed word byte 0 at [7:0] (breaks PACK-1 order)
  localparam int BUG_TRUNCATED_E4M3       = 4;  // initial byte truncated, not rounded
                                                // (NVFP4-E4M3-2 inside NVFP4-INIT-1/-2)
  localparam int BUG_NO_SUBNORMAL_SCALE   = 5;  // initial-byte quotients below 2^-6 flushed to
                                                // 0 (then the min-byte rule gives 0x01): the
                                                // subnormal quantum of NVFP4-E4M3-2 is lost

  localparam logic [63:0] F64_ONE  = 64'h3FF0_0000_0000_0000;
  localparam logic [63:0] F64_PINF = 64'h7FF0_0000_0000_0000;
  localparam logic [63:0] F64_QNAN = 64'h7FF8_0000_0000_0000;
  localparam logic [31:0] F32_ONE  = 32'h3F80_0000;
  localparam logic [31:0] F32_MIN_NORMAL = 32'h0080_0000;   // 2^-126

  // ---- bit utilities -----------------------------------------------------------------------

  // Index of the most significant set bit of x (0 when x == 0): a 7-level priority encoder.
  function automatic int msb128(input logic [127:0] x);
    /*verilator no_inline_task*/
    int n;
    logic [127:0] v;
    n = 0;
    v = x;
    if (v[127:64] != 64'd0) begin n = n + 64; v = v >> 64; end
    if (v[63:32] != 32'd0)  begin n = n + 32; v = v >> 32; end
    if (v[31:16] != 16'd0)  begin n = n + 16; v = v >> 16; end
    if (v[15:8] != 8'd0)    begin n = n + 8;  v = v >> 8;  end
    if (v[7:4] != 4'd0)     begin n = n + 4;  v = v >> 4;  end
    if (v[3:2] != 2'd0)     begin n = n + 2;  v = v >> 2;  end
    if (v[1])               n = n + 1;
    return n;
  endfunction

  // m * 2^-r rounded to an integer: to nearest, ties to even, or toward zero when trunc = 1.
  // r <= 0 is an exact left shift (the caller guarantees the result fits).
  function automatic logic [127:0] rshift_round(input logic [127:0] m, input int r,
                                                input logic trunc);
    logic [127:0] kept;
    logic [127:0] rest;
    logic guard, sticky;
    if (r <= 0) return m << (-r);
    if (r > 128) begin
      kept = 128'd0;
      guard = 1'b0;
      sticky = (m != 128'd0);
    end else begin
      kept = (r == 128) ? 128'd0 : (m >> r);
      guard = m[r-1];
      rest = m & ((128'd1 << (r - 1)) - 128'd1);
      sticky = (rest != 128'd0);
    end
    if (!trunc && guard && (sticky || kept[0])) kept = kept + 128'd1;
    return kept;
  endfunction

  // ---- IEEE binary64 / binary32 rounding (fp64(x), fp32(x) of the spec's notation) --------

  // fp64(s * m * 2^e): RNE, gradual underflow to subnormals, overflow to infinity.
  // Encoding trick: with t the exponent of the result's lsb (max(e_msb - 52, -1074)) and k the
  // rounded count of 2^t units, the bit pattern is ((t + 1074) << 52) + k; a rounding carry
  // into 2^53 moves to the next binade by itself, and a pattern reaching 0x7FF0... is +inf.
  function automatic logic [63:0] f64_pack(input logic s, input logic [127:0] m, input int e);
    /*verilator no_inline_task*/
    int t;
    logic [127:0] kept;
    logic [63:0] bits;
    if (m == 128'd0) return {s, 63'd0};
    t = e + msb128(m) - 52;
    if (t < -1074) t = -1074;
    if (t > 971) return {s, 11'h7FF, 52'd0};           // e_msb > 1023: overflow
    kept = rshift_round(m, t - e, 1'b0);
    bits = {32'd0, 32'(t + 1074)};
    bits = (bits << 52) + kept[63:0];
    if (bits >= F64_PINF) return {s, 11'h7FF, 52'd0};   // rounded up to 2^1024
    return {s, bits[62:0]};
  endfunction

  // fp32(s * m * 2^e), same construction: lsb exponent max(e_msb - 23, -149).
  function automatic logic [31:0] f32_pack(input logic s, input logic [127:0] m, input int e);
    /*verilator no_inline_task*/
    int t;
    logic [127:0] kept;
    logic [31:0] bits;
    if (m == 128'd0) return {s, 31'd0};
    t = e + msb128(m) - 23;
    if (t < -149) t = -149;
    if (t > 104) return {s, 8'hFF, 23'd0};
    kept = rshift_round(m, t - e, 1'b0);
    bits = 32'(t + 149);
    bits = (bits << 23) + kept[31:0];
    if (bits >= 32'h7F80_0000) return {s, 8'hFF, 23'd0};
    return {s, bits[30:0]};
  endfunction

  // Unpacked operands: value = (-1)^sign * m * 2^e (subnormals have no hidden bit).
  function automatic logic [23:0] f32_mant(input logic [31:0] x);
    return (x[30:23] == 8'd0) ? {1'b0, x[22:0]} : {1'b1, x[22:0]};
  endfunction
  function automatic int f32_exp(input logic [31:0] x);
    return (x[30:23] == 8'd0) ? -149 : int'(x[30:23]) - 150;
  endfunction
  function automatic logic [52:0] f64_mant(input logic [63:0] x);
    return (x[62:52] == 11'd0) ? {1'b0, x[51:0]} : {1'b1, x[51:0]};
  endfunction
  function automatic int f64_exp(input logic [63:0] x);
    return (x[62:52] == 11'd0) ? -1074 : int'(x[62:52]) - 1075;
  endfunction

  // A finite fp32 as fp64 (exact: 24 bits, and fp64's range contains fp32's).
  function automatic logic [63:0] f32_to_f64(input logic [31:0] x);
    /*verilator no_inline_task*/
    if (x[30:23] == 8'hFF) return {x[31], 11'h7FF, x[22:0], 29'd0};
    return f64_pack(x[31], {104'd0, f32_mant(x)}, f32_exp(x));
  endfunction

  // NVFP4-IN-1: a weight of the given dtype as fp32 bits. bfloat16 and float16 values are all
  // exactly representable in fp32 (float16 subnormals become fp32 normals).
  function automatic logic [31:0] weight_to_f32(input logic [31:0] raw, input logic [1:0] dtype);
    /*verilator no_inline_task*/
    logic [15:0] h;
    h = raw[15:0];
    case (dtype)
      DT_BF16: return {h, 16'd0};
      DT_FP16: begin
        if (h[14:10] == 5'h1F) return {h[15], 8'hFF, h[9:0], 13'd0};         // not finite
        if (h[14:10] == 5'd0) return f32_pack(h[15], {118'd0, h[9:0]}, -24);  // subnormal
        return {h[15], 3'd0, h[14:10], h[9:0], 13'd0} + 32'h3800_0000;        // rebias 15 -> 127
      end
      default: return raw;
    endcase
  endfunction

  // ---- IEEE binary64 arithmetic (HSCALE-OBJ-1 "fp64(...)": one RNE rounding per operation) --

  // fp64(a * b). The 53 x 53 bit product is exact in 106 bits; f64_pack rounds it once.
  function automatic logic [63:0] f64_mul(input logic [63:0] a, input logic [63:0] b);
    /*verilator no_inline_task*/
    logic s, a_nan, b_nan, a_inf, b_inf, a_zero, b_zero;
    logic [127:0] p;
    s = a[63] ^ b[63];
    a_nan = (a[62:52] == 11'h7FF) && (a[51:0] != 52'd0);
    b_nan = (b[62:52] == 11'h7FF) && (b[51:0] != 52'd0);
    a_inf = (a[62:52] == 11'h7FF) && (a[51:0] == 52'd0);
    b_inf = (b[62:52] == 11'h7FF) && (b[51:0] == 52'd0);
    a_zero = (a[62:0] == 63'd0);
    b_zero = (b[62:0] == 63'd0);
    if (a_nan || b_nan) return F64_QNAN;
    if (a_inf || b_inf) return (a_zero || b_zero) ? F64_QNAN : {s, 11'h7FF, 52'd0};
    if (a_zero || b_zero) return {s, 63'd0};
    p = {75'd0, f64_mant(a)} * {75'd0, f64_mant(b)};
    return f64_pack(s, p, f64_exp(a) + f64_exp(b));
  endfunction

  // fp64(a + b). The smaller-exponent operand is aligned to the larger with GX = 8 guard bits
  // and shifted-out bits jammed into its lsb; bits are lost only when the exponents differ by
  // more than GX, and then the result keeps its leading bit within one place of the larger
  // operand's, so the jammed lsb lies >= 6 places below the rounding position (the margin of
  // the sticky convention above). Exact zero sums are +0 (RNE), -0 + -0 = -0.
  function automatic logic [63:0] f64_add(input logic [63:0] a, input logic [63:0] b);
    /*verilator no_inline_task*/
    localparam int GX = 8;
    logic a_nan, b_nan, a_inf, b_inf, sx, sy, s, jam;
    logic [127:0] mx, my, x, y, sum, lost;
    int ea, eb, ex, ey, diff;
    a_nan = (a[62:52] == 11'h7FF) && (a[51:0] != 52'd0);
    b_nan = (b[62:52] == 11'h7FF) && (b[51:0] != 52'd0);
    a_inf = (a[62:52] == 11'h7FF) && (a[51:0] == 52'd0);
    b_inf = (b[62:52] == 11'h7FF) && (b[51:0] == 52'd0);
    if (a_nan || b_nan) return F64_QNAN;
    if (a_inf && b_inf) return (a[63] == b[63]) ? a : F64_QNAN;
    if (a_inf) return a;
    if (b_inf) return b;
    if (a[62:0] == 63'd0 && b[62:0] == 63'd0) return {a[63] & b[63], 63'd0};
    if (a[62:0] == 63'd0) return b;
    if (b[62:0] == 63'd0) return a;
    ea = f64_exp(a);
    eb = f64_exp(b);
    if (ea >= eb) begin
      mx = {75'd0, f64_mant(a)}; ex = ea; sx = a[63];
      my = {75'd0, f64_mant(b)}; ey = eb; sy = b[63];
    end else begin
      mx = {75'd0, f64_mant(b)}; ex = eb; sx = b[63];
      my = {75'd0, f64_mant(a)}; ey = ea; sy = a[63];
    end
    diff = ex - ey;
    x = mx << GX;
    if (diff > 64) begin
      y = 128'd1;                                    // all of it is sticky (my != 0)
    end else begin
      lost = (my << GX) & ((128'd1 << diff) - 128'd1);
      jam = (lost != 128'd0);
      y = ((my << GX) >> diff) | {127'd0, jam};
    end
    if (sx == sy) begin
      sum = x + y; s = sx;
    end else if (x >= y) begin
      sum = x - y; s = sx;
    end else begin
      sum = y - x; s = sy;
    end
    if (sum == 128'd0) return 64'd0;
    return f64_pack(s, sum, ex - GX);
  endfunction

  // a < b for non-NaN fp64 (HSCALE-ARGMIN-1 compares objectives; +0 == -0, inf == inf).
  function automatic logic f64_lt(input logic [63:0] a, input logic [63:0] b);
    if (a[62:0] == 63'd0 && b[62:0] == 63'd0) return 1'b0;
    if (a[63] != b[63]) return a[63];
    if (!a[63]) return a[62:0] < b[62:0];
    return a[62:0] > b[62:0];
  endfunction

  // ---- E4M3 (NVFP4-E4M3-1 .. -3) -------------------------------------------------------------

  // NVFP4-E4M3-1: the value of a scale byte (sign ignored: scale bytes are non-negative):
  // e >= 1: (8 + f) * 2^(e - 10); e = 0: f * 2^-9 (subnormals, 0x01 = 2^-9).
  function automatic logic [3:0] e4m3_mant(input logic [7:0] c);
    return (c[6:3] == 4'd0) ? {1'b0, c[2:0]} : {1'b1, c[2:0]};
  endfunction
  function automatic int e4m3_exp(input logic [7:0] c);
    return (c[6:3] == 4'd0) ? -9 : int'(c[6:3]) - 10;
  endfunction

  // NVFP4-E4M3-2: E4M3_RNE_satfinite(m * 2^e) for m * 2^e >= 0 (m may carry a jammed sticky
  // lsb). The quantum is 2^(max(floor(log2 x), -6) - 3); the byte is ((t + 9) << 3) + k with t
  // the lsb exponent and k the rounded count, so a carry to the next binade is automatic; a
  // result above 448 (0x7E) saturates to 0x7E, never NaN (0x7F). 0 encodes as 0x00.
  // trunc / ftz are the planted bugs truncated-e4m3 and no-subnormal-scale.
  function automatic logic [7:0] e4m3_rne_satfinite(input logic [127:0] m, input int e,
                                                    input logic trunc, input logic ftz);
    /*verilator no_inline_task*/
    int emsb, t, bits;
    logic [127:0] k;
    if (m == 128'd0) return 8'h00;
    emsb = e + msb128(m);
    if (ftz && emsb < -6) return 8'h00;               // BUG no-subnormal-scale: flushed
    if (emsb > 8) return 8'h7E;                       // >= 512 > 448: saturate
    t = emsb - 3;
    if (t < -9) t = -9;                               // subnormal quantum 2^-9
    k = rshift_round(m, t - e, trunc);
    bits = (t + 9) * 8 + int'(k[7:0]);
    if (bits > 126) return 8'h7E;                     // rounded above 448: saturate
    return 8'(bits);
  endfunction

  // Restoring division of a (< 2^96) by d (> 0), qbits (<= 32) quotient bits, returned jammed:
  // {quotient, remainder != 0}, i.e. the exact quotient a / d as an integer times 2^-1 whose
  // lsb is the sticky bit (the convention above).
  function automatic logic [127:0] div_jam(input logic [127:0] a, input logic [127:0] d,
                                           input int qbits);
    logic [127:0] r, q;
    r = a;
    q = 128'd0;
    for (int i = 31; i >= 0; i--) begin
      if (i < qbits && r >= (d << i)) begin
        r = r - (d << i);
        q[i] = 1'b1;
      end
    end
    return {q[126:0], r != 128'd0};
  endfunction

  // NVFP4-INIT-1 / NVFP4-INIT-2 "range byte": E4M3_RNE_satfinite(amax_g / (k * s_g)) of the
  // exact real quotient, k = 6 (maxabs, and the 6-candidate of 4over6) or 4; then the min-byte
  // rule: a nonzero group whose byte rounded to 0x00 gets 0x01.
  // Exactness: amax_g and s_g are normalised to 24-bit significands (msb at bit 23), the
  // dividend is shifted left by 12, so the integer quotient q has 9..11 bits; E4M3 keeps 4 and
  // rounds at the 5th, so the remainder's sticky bit, jammed below q, is >= 4 places below the
  // rounding position (exact RNE). amax_g = 0 returns 0x00 (NVFP4-ZERO-1 handles the group).
  function automatic logic [7:0] range_byte(input logic [31:0] amax_g, input logic [31:0] s_g,
                                            input logic div4, input logic trunc,
                                            input logic ftz);
    /*verilator no_inline_task*/
    logic [23:0] ma, ms;
    int ea, es, la, ls;
    logic [127:0] qj, num, den;
    logic [7:0] c;
    if (amax_g[30:0] == 31'd0) return 8'h00;
    ma = f32_mant(amax_g); ea = f32_exp(amax_g);
    ms = f32_mant(s_g);    es = f32_exp(s_g);
    la = 23 - msb128({104'd0, ma});                     // normalise subnormal inputs
    ls = 23 - msb128({104'd0, ms});
    num = {104'd0, ma} << (la + 12);
    den = div4 ? ({104'd0, ms} << (ls + 2)) : (({104'd0, ms} << ls) * 128'd6);
    qj = div_jam(num, den, 12);
    c = e4m3_rne_satfinite(qj, (ea - la) - (es - ls) - 12 - 1, trunc, ftz);
    if (c == 8'h00) c = 8'h01;                          // NVFP4-INIT-1 min-byte rule
    return c;
  endfunction

  // ---- E2M1 (NVFP4-E2M1-1 .. -3) -------------------------------------------------------------

  // NVFP4-E2M1-1: magnitude of a code in half units: 0, 0.5, 1, 1.5, 2, 3, 4, 6 -> 0..12.
  function automatic logic [3:0] e2m1_halves(input logic [2:0] mag);
    case (mag)
      3'd0: return 4'd0;
      3'd1: return 4'd1;
      3'd2: return 4'd2;
      3'd3: return 4'd3;
      3'd4: return 4'd4;
      3'd5: return 4'd6;
      3'd6: return 4'd8;
      default: return 4'd12;
    endcase
  endfunction

  // NVFP4-E2M1-2 midpoints mid_k = 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5 in quarter units.
  function automatic logic [4:0] e2m1_mid_quarters(input int k);
    case (k)
      0: return 5'd1;
      1: return 5'd3;
      2: return 5'd5;
      3: return 5'd7;
      4: return 5'd10;
      5: return 5'd14;
      default: return 5'd20;
    endcase
  endfunction

  // NVFP4-E2M1-2 thresholds of a scale byte: T_k = mid_k * s_g * e4m3(c), k = 0..6, each an
  // exact integer (4 mid_k) * ms * mc times 2^(es + ec - 2), normalised for comparison:
  // entry k = {exponent of the leading one (32 bits, two's complement), significand with its
  // leading one at bit 63}. c = 0x00 (zero groups) gives all-zero entries.
  function automatic logic [7*96-1:0] e2m1_thresholds(input logic [31:0] s_g, input logic [7:0] c);
    logic [7*96-1:0] thr;
    logic [127:0] b;
    int lb;
    thr = '0;
    if (e4m3_mant(c) != 4'd0) begin
      for (int k = 0; k < 7; k++) begin   // entries shift in from the top: entry k ends at [96k +: 96]
        b = {123'd0, e2m1_mid_quarters(k)} * {104'd0, f32_mant(s_g)} * {124'd0, e4m3_mant(c)};
        lb = msb128(b);
        thr = {32'(f32_exp(s_g) + e4m3_exp(c) - 2 + lb), 64'(b << (63 - lb)), thr[7*96-1:96]};
      end
    end
    return thr;
  endfunction

  // NVFP4-E2M1-2 / -3: the code of one fp32 weight against the thresholds above.
  //   magnitude = sum_{k even} [ |w| > T_k ] + sum_{k odd} [ |w| >= T_k ]
  // (strict at even k, >= at odd k: every exact tie goes to the even code; past T_6 = 5 s the
  // magnitude is 7 = 6.0, saturation). Both sides are normalised, so comparing (exponent of
  // the leading one, significand) is exact. The sign bit is w's, always (-0.0 -> 0x8).
  // ties_away = 1 is the planted bug ties-away ('>=' at every k).
  function automatic logic [3:0] e2m1_code(input logic [31:0] w, input logic [7*96-1:0] thr,
                                           input logic ties_away);
    /*verilator no_inline_task*/
    logic [127:0] a;
    logic [63:0] am, tm;
    int la, ea, te;
    logic [2:0] mag;
    logic gt, eq;
    mag = 3'd0;
    if (w[30:0] != 31'd0 && thr[63:0] != 64'd0) begin
      a = {104'd0, f32_mant(w)};
      la = msb128(a);
      ea = f32_exp(w) + la;
      am = 64'(a << (63 - la));
      for (int k = 0; k < 7; k++) begin
        te = int'($signed(thr[96*k + 64 +: 32]));
        tm = thr[96*k +: 64];
        gt = (ea > te) || (ea == te && am > tm);
        eq = (ea == te) && (am == tm);
        if (gt || (eq && ((k % 2) == 1 || ties_away))) mag = mag + 3'd1;
      end
    end
    return {w[31], mag};
  endfunction

  // max |w_j| of 16 fp32 weights (finite magnitudes order like their bits as unsigned ints)
  function automatic logic [31:0] group_amax(input logic [511:0] w);
    /*verilator no_inline_task*/
    logic [31:0] m;
    m = 32'd0;
    for (int j = 0; j < 16; j++)
      if (w[32*j +: 31] > m[30:0]) m = {1'b0, w[32*j +: 31]};
    return m;
  endfunction

  // The 16 codes of a group at byte c (NVFP4-E2M1-2/-3): thresholds once, 16 comparators.
  function automatic logic [63:0] e2m1_codes(input logic [511:0] w, input logic [31:0] s_g,
                                             input logic [7:0] c, input logic ties_away);
    /*verilator no_inline_task*/
    logic [7*96-1:0] thr;
    logic [63:0] codes;
    thr = e2m1_thresholds(s_g, c);
    codes = 64'd0;
    for (int j = 0; j < 16; j++)        // codes shift in from the top: code j ends at [4j +: 4]
      codes = {e2m1_code(w[32*j +: 32], thr, ties_away), codes[63:4]};
    return codes;
  endfunction

  // HSCALE-OBJ-1: E of a group at candidate byte c with codes q (see hscale_objective.sv):
  //   p_j = q_j * s (exact), d_j = fp64(w_j - p_j), e_j = fp64(h_j * fp64(d_j * d_j)),
  //   E = ((((e0+e1)+(e2+e3))+((e4+e5)+(e6+e7))) + (((e8+e9)+(e10+e11))+((e12+e13)+(e14+e15))))
  // use_h = 0: h = 1 (fp64(1 * x) = x, the multiplier is skipped).
  function automatic logic [63:0] objective_f64(input logic [511:0] w, input logic [1023:0] h,
                                                input logic [31:0] s_g, input logic [7:0] c,
                                                input logic [63:0] codes, input logic use_h);
    /*verilator no_inline_task*/
    logic [127:0] s_int;
    int s_exp;
    logic [3:0] code;
    logic [63:0] p, d, dd;
    logic [16*64-1:0] e, t;
    s_int = {104'd0, f32_mant(s_g)} * {124'd0, e4m3_mant(c)};   // s = s_g * e4m3(c), exact
    s_exp = f32_exp(s_g) + e4m3_exp(c);
    for (int j = 0; j < 16; j++) begin
      code = codes[4*j +: 4];
      // p_j = q_j * s: half units times s, <= 32 significant bits, packed exactly
      p = f64_pack(code[3], {124'd0, e2m1_halves(code[2:0])} * s_int, s_exp - 1);
      d = f64_add(f32_to_f64(w[32*j +: 32]), {~p[63], p[62:0]});   // fp64(w_j - p_j)
      dd = f64_mul(d, d);                                          // fp64(d_j * d_j)
      e = {(use_h ? f64_mul(h[64*j +: 64], dd) : dd), e[1023:64]}; // fp64(h_j * ...); e_j at [64j +: 64]
    end
    // balanced pairwise tree, adjacent pairs, every + rounded to fp64: each level shifts its
    // sums in from the top, so sum i of a level of n ends at [64i +: 64] after n steps
    for (int n = 8; n >= 1; n = n / 2) begin
      t = e;
      for (int i = 0; i < n; i++)
        e = {f64_add(t[128*i +: 64], t[128*i + 64 +: 64]), e[1023:64]};
      e = e >> (64 * (16 - n));
    end
    return e[63:0];
  endfunction

  // One candidate byte end to end: {codes (NVFP4-E2M1-2/-3), E (HSCALE-OBJ-1)}.
  function automatic logic [127:0] candidate_eval(input logic [511:0] w, input logic [1023:0] h,
                                                  input logic [31:0] s_g, input logic [7:0] c,
                                                  input logic use_h, input logic ties_away);
    logic [63:0] codes;
    codes = e2m1_codes(w, s_g, c, ties_away);
    return {codes, objective_f64(w, h, s_g, c, codes, use_h)};
  endfunction

  // NVFP4-PACK-1: byte k of a group = code[2k] | code[2k+1] << 4. The packed word this RTL
  // emits lists byte 0 LEFTMOST (bits [63:56]), the order of the .hex `packed` field and of the
  // observed-result files; on a little-endian 64-bit bus byte 0 is [7:0] instead (that word is
  // simply the codes vector {code15, ..., code0}). little_endian = 1 is the planted bug
  // little-endian-packed: the bus word emitted where the byte-0-first word is required.
  function automatic logic [63:0] pack_codes(input logic [63:0] codes, input logic little_endian);
    logic [63:0] word;
    for (int k = 0; k < 8; k++) begin
      if (little_endian) word[8*k +: 8] = {codes[4*(2*k+1) +: 4], codes[4*(2*k) +: 4]};
      else               word[56 - 8*k +: 8] = {codes[4*(2*k+1) +: 4], codes[4*(2*k) +: 4]};
    end
    return word;
  endfunction

endpackage
