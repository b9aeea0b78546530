// H-Scale NVFP4: one group per thread. See hscale/backends/cupy_backend.py for the exactness
// argument of every step. No float32 arithmetic anywhere: weights are read as their bit patterns
// (CuPy compiles every kernel with -ftz=true, which would flush float32 subnormals to zero).
#ifdef HSCALE_HOST_HARNESS
#include <math.h>
#include <string.h>
#define HS_FN static inline
#define HS_MUL(a, b) ((a) * (b))
#define HS_ADD(a, b) ((a) + (b))
#define HS_DIV(a, b) ((a) / (b))
#define HS_FMA(a, b, c) fma((a), (b), (c))
#else
#define HS_FN __device__ __forceinline__
#define HS_MUL(a, b) __dmul_rn((a), (b))
#define HS_ADD(a, b) __dadd_rn((a), (b))
#define HS_DIV(a, b) __ddiv_rn((a), (b))
#define HS_FMA(a, b, c) __fma_rn((a), (b), (c))
#endif

#define HS_GROUP 16
#define HS_LAST_BYTE 126   // 0x7E, the ladder's largest byte (NVFP4-E4M3-3)
#define HS_SIGN_BITS 0x80000000u

// The exact float64 value of a finite float32 magnitude given by its bits: the 24-bit
// significand (implicit bit included for normals) times 2^(exponent - 150).
HS_FN double hs_magnitude_value(unsigned int bits) {
    int exponent = (int)(bits >> 23);
    unsigned int significand = bits & 0x7fffffu;
    if (exponent) significand |= 0x800000u; else exponent = 1;  // subnormal: 0.m * 2^-126
    return ldexp((double)significand, exponent - 150);  // exact
}

// The float32 bit pattern of a float16 one (IEEE binary16), exactly: float16 subnormals are
// float32 normals; Inf and NaN stay Inf and NaN (the amax pass rejects them).
HS_FN unsigned int hs_f16_to_f32_bits(unsigned int f16_bits) {
    unsigned int sign = (f16_bits & 0x8000u) << 16;
    int exponent = (int)((f16_bits >> 10) & 0x1fu);
    unsigned int mantissa = f16_bits & 0x3ffu;
    if (exponent == 0x1f) return sign | 0x7f800000u | (mantissa << 13);
    if (exponent == 0) {
        if (mantissa == 0) return sign;
        exponent = 1;
        while (!(mantissa & 0x400u)) { mantissa <<= 1; --exponent; }  // normalise
        mantissa &= 0x3ffu;
    }
    return sign | ((unsigned int)(exponent + 112) << 23) | (mantissa << 13);  // bias 15 -> 127
}

// The 7 E2M1 rounding thresholds m_k * s for the midpoints m = .25 .75 1.25 1.75 2.5 3.5 5
// (NVFP4-E2M1-2), exact in float64.
HS_FN void hs_make_thresholds(double s, double* t) {
    t[0] = HS_MUL(0.25, s); t[1] = HS_MUL(0.75, s); t[2] = HS_MUL(1.25, s);
    t[3] = HS_MUL(1.75, s); t[4] = HS_MUL(2.5, s); t[5] = HS_MUL(3.5, s); t[6] = HS_MUL(5.0, s);
}

// Magnitude code 0..7 of |w|: the number of thresholds it passes; a tie above an even code
// stays (>), above an odd one moves up (>=).
HS_FN int hs_magnitude_code(double a, const double* t) {
    return (a > t[0]) + (a >= t[1]) + (a > t[2]) + (a >= t[3])
         + (a > t[4]) + (a >= t[5]) + (a > t[6]);
}

// Twice the E2M1 magnitude, 2q in {0, 1, 2, 3, 4, 6, 8, 12}: the grid steps 0.5 0.5 0.5 0.5 1 1 2
// summed over the thresholds passed (so no table lookup by code).
HS_FN int hs_twice_magnitude(double a, const double* t) {
    return (a > t[0]) + (a >= t[1]) + (a > t[2]) + (a >= t[3])
         + 2 * ((a > t[4]) + (a >= t[5])) + 4 * (a > t[6]);
}

// HSCALE-OBJ-1: E = pairwise_sum(h * (d * d)), d = |w| - q*s; h null means h = 1 (1 * x = x).
HS_FN double hs_group_error(const double* aw, const double* h, double s) {
    double t[7];
    hs_make_thresholds(s, t);
    const double s_over_2 = HS_MUL(0.5, s);  // exact
    double e[HS_GROUP];
#ifndef HSCALE_HOST_HARNESS
#pragma unroll
#endif
    for (int j = 0; j < HS_GROUP; ++j) {
        double q2 = (double)hs_twice_magnitude(aw[j], t);
        double d = HS_FMA(-q2, s_over_2, aw[j]);  // |w| - q*s, q*s = 2q * s/2 exact: one rounding
        double dd = HS_MUL(d, d);
        e[j] = h ? HS_MUL(h[j], dd) : dd;
    }
#ifndef HSCALE_HOST_HARNESS
#pragma unroll
#endif
    for (int step = 1; step < HS_GROUP; step *= 2)
        for (int j = 0; j < HS_GROUP; j += 2 * step)
            e[j] = HS_ADD(e[j], e[j + step]);  // ((e0+e1)+(e2+e3))+...
    return e[0];
}

// NVFP4-E4M3-2: the E4M3 byte of a finite v >= 0, to nearest, ties to even, saturating at 0x7E.
HS_FN int hs_e4m3_byte(double v) {
    int binary_exponent;
    frexp(v, &binary_exponent);  // v = f * 2^binary_exponent, f in [0.5, 1)
    int quantum_exponent = (v < 0.015625 ? -6 : binary_exponent - 1) - 3;  // subnormals: 2^-9
    double steps = ldexp(v, -quantum_exponent);  // exact
    int byte = 8 * (quantum_exponent + 9) + (int)rint(steps);  // rint: half to even
    return byte < HS_LAST_BYTE ? byte : HS_LAST_BYTE;
}

// NVFP4-INIT-1: the byte mapping amax_g onto top; a non-zero group gets at least 0x01.
HS_FN int hs_range_byte(double amax, double sg, double top) {
    int byte = hs_e4m3_byte(HS_DIV(amax, HS_MUL(top, sg)));  // top * s_g exact
    return byte > 1 ? byte : 1;
}

// One group from its 16 weights (float32 bit patterns) to its bytes and codes.
// scales[c] = s_g * e4m3(c), exact; window: 127 rows of k bytes, row c the distinct candidates
// around initial byte c in priority order (the first is c itself), window_len[c] of them;
// h null: the objective with h = 1.
HS_FN void hs_quantize_group(const unsigned int* w, const double* h, const double* scales,
                             double sg, int init_4over6, int search,
                             const unsigned char* window, const unsigned char* window_len, int k,
                             unsigned char* chosen, unsigned char* initial, unsigned char* codes) {
    double aw[HS_GROUP];
    unsigned int amax_bits = 0;  // non-negative floats order as their bit patterns
    for (int j = 0; j < HS_GROUP; ++j) {
        unsigned int magnitude = w[j] & ~HS_SIGN_BITS;
        aw[j] = hs_magnitude_value(magnitude);
        amax_bits = magnitude > amax_bits ? magnitude : amax_bits;
    }
    if (amax_bits == 0) {  // NVFP4-ZERO-1: byte 0x00, only the signs, no search
        *chosen = 0;
        *initial = 0;
        for (int j = 0; j < HS_GROUP; ++j) codes[j] = (unsigned char)((w[j] >> 31) << 3);
        return;
    }
    double amax = hs_magnitude_value(amax_bits);
    int c0 = hs_range_byte(amax, sg, 6.0);  // NVFP4-INIT-1
    if (init_4over6) {  // NVFP4-INIT-2: the byte at 4 only when strictly better (unweighted)
        int c4 = hs_range_byte(amax, sg, 4.0);
        if (hs_group_error(aw, 0, scales[c4]) < hs_group_error(aw, 0, scales[c0])) c0 = c4;
    }
    int best = c0;
    if (search) {  // HSCALE-WIN-1 .. HSCALE-ARGMIN-1
        const unsigned char* row = window + (long long)c0 * k;
        int n = window_len[c0];
        double best_e = hs_group_error(aw, h, scales[best]);
        for (int r = 1; r < n; ++r) {
            int c = row[r];
            double e = hs_group_error(aw, h, scales[c]);
            if (e < best_e) { best_e = e; best = c; }
        }
    }
    *chosen = (unsigned char)best;
    *initial = (unsigned char)c0;
    double t[7];  // NVFP4-E2M1-2, -3: the codes at the chosen byte
    hs_make_thresholds(scales[best], t);
    for (int j = 0; j < HS_GROUP; ++j)
        codes[j] = (unsigned char)(((w[j] >> 31) << 3) | hs_magnitude_code(aw[j], t));
}

// NVFP4-PACK-1: element 2i in the low nibble of byte i, as two little-endian 32-bit words.
HS_FN void hs_pack_group(const unsigned char* codes, unsigned int* words) {
    words[0] = 0;
    words[1] = 0;
    for (int j = 0; j < 8; ++j) {
        words[0] |= (unsigned int)codes[j] << (4 * j);
        words[1] |= (unsigned int)codes[8 + j] << (4 * j);
    }
}

// |x| of a float32 as bits, NaN counted as +Inf (either is rejected).
HS_FN unsigned int hs_amax_bits(unsigned int bits) {
    unsigned int u = bits & ~HS_SIGN_BITS;
    return u > 0x7f800000u ? 0x7f800000u : u;
}

#ifdef HSCALE_HOST_HARNESS
void hs_quantize_host(long long G, long long group_cols, const unsigned int* w, const double* h,
                      const double* scales, double sg, int init_4over6, int search,
                      const unsigned char* window, const unsigned char* window_len, int k,
                      unsigned char* chosen, unsigned char* initial, unsigned char* packed,
                      unsigned char* codes) {
    for (long long g = 0; g < G; ++g) {
        unsigned char cv[HS_GROUP];
        unsigned int words[2];
        hs_quantize_group(w + g * HS_GROUP, h ? h + (g % group_cols) * HS_GROUP : 0, scales, sg,
                          init_4over6, search, window, window_len, k, chosen + g, initial + g, cv);
        hs_pack_group(cv, words);
        memcpy(packed + 8 * g, words, 8);  // x86-64 is little-endian, like the GPU
        if (codes) memcpy(codes + HS_GROUP * g, cv, HS_GROUP);
    }
}
void hs_amax_host(long long n, const unsigned int* w, unsigned int* result) {
    unsigned int m = 0;
    for (long long i = 0; i < n; ++i) { unsigned int u = hs_amax_bits(w[i]); m = u > m ? u : m; }
    *result = m;
}
void hs_widen_f16_host(long long n, const unsigned short* in, unsigned int* out) {
    for (long long i = 0; i < n; ++i) out[i] = hs_f16_to_f32_bits(in[i]);
}
#else
extern "C" __global__ void hs_quantize_kernel(
        long long G, long long group_cols, const unsigned int* __restrict__ w,
        const double* __restrict__ h, const double* __restrict__ scales, double sg,
        int init_4over6, int search, const unsigned char* __restrict__ window,
        const unsigned char* __restrict__ window_len, int k, unsigned char* __restrict__ chosen,
        unsigned char* __restrict__ initial, unsigned char* __restrict__ packed,
        unsigned char* __restrict__ codes) {
    long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= G) return;
    unsigned int wv[HS_GROUP];
    const uint4* w4 = reinterpret_cast<const uint4*>(w) + 4 * g;  // 64-byte aligned groups
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        uint4 v = w4[q];
        wv[4 * q] = v.x; wv[4 * q + 1] = v.y; wv[4 * q + 2] = v.z; wv[4 * q + 3] = v.w;
    }
    double hv[HS_GROUP];
    if (h) {
        const double2* h2 = reinterpret_cast<const double2*>(h + (g % group_cols) * HS_GROUP);
#pragma unroll
        for (int q = 0; q < 8; ++q) { double2 v = h2[q]; hv[2 * q] = v.x; hv[2 * q + 1] = v.y; }
    }
    unsigned char cv[HS_GROUP];
    unsigned char best, c0;
    hs_quantize_group(wv, h ? hv : 0, scales, sg, init_4over6, search, window, window_len, k,
                      &best, &c0, cv);
    chosen[g] = best;
    initial[g] = c0;
    unsigned int words[2];
    hs_pack_group(cv, words);
    reinterpret_cast<uint2*>(packed)[g] = make_uint2(words[0], words[1]);
    if (codes) {
        uint4 c;
        c.x = cv[0] | (cv[1] << 8) | (cv[2] << 16) | ((unsigned int)cv[3] << 24);
        c.y = cv[4] | (cv[5] << 8) | (cv[6] << 16) | ((unsigned int)cv[7] << 24);
        c.z = cv[8] | (cv[9] << 8) | (cv[10] << 16) | ((unsigned int)cv[11] << 24);
        c.w = cv[12] | (cv[13] << 8) | (cv[14] << 16) | ((unsigned int)cv[15] << 24);
        reinterpret_cast<uint4*>(codes)[g] = c;
    }
}

// max |w| over n float32 bit patterns (n a multiple of 4), NaN and Inf as +Inf, into *result
// (set to 0 first).
extern "C" __global__ void hs_amax_kernel(long long n, const unsigned int* __restrict__ w,
                                          unsigned int* __restrict__ result) {
    unsigned int m = 0;
    const uint4* w4 = reinterpret_cast<const uint4*>(w);
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n / 4;
         i += (long long)gridDim.x * blockDim.x) {
        uint4 v = w4[i];
        m = max(m, max(max(hs_amax_bits(v.x), hs_amax_bits(v.y)),
                       max(hs_amax_bits(v.z), hs_amax_bits(v.w))));
    }
    for (int offset = 16; offset > 0; offset >>= 1)
        m = max(m, __shfl_xor_sync(0xffffffffu, m, offset));
    if ((threadIdx.x & 31) == 0) atomicMax(result, m);
}

extern "C" __global__ void hs_widen_f16_kernel(long long n, const unsigned short* __restrict__ in,
                                               unsigned int* __restrict__ out) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        out[i] = hs_f16_to_f32_bits(in[i]);
}
#endif
