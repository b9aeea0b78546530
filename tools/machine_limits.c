/* The machine's physical limits for docs/performance.md's kernel race (tools/kernel_race.py
 * compiles and runs this): the peak float64 rate of its vector units and its memory bandwidth,
 * on one thread and on every thread (OpenMP).
 *
 *   fma:   16 independent chains of 8-lane float64 fused multiply-adds (AVX-512, else AVX2's 4
 *          lanes), 2 flops each: the float64 roofline. A plain multiply or add is one flop per
 *          lane at (at most) the same instruction rate, so half this figure is the peak of
 *          unfused float64 operations, which is what the exact H-Scale arithmetic may use.
 *   copy:  memcpy of 256 MiB (STREAM's "copy": bytes read + bytes written per second).
 *   triad: y[i] = 1.5 * x[i] + y[i] over 2 x 256 MiB (3 x 8 bytes per element).
 *
 * Build: gcc -O2 -march=native -fopenmp machine_limits.c -o machine_limits
 * Output: one JSON object on stdout; each figure is the best of 5 repetitions.
 */
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

#if defined(__AVX512F__)
typedef __m512d vec;
#define LANES 8
#define SET1 _mm512_set1_pd
#define FMA _mm512_fmadd_pd
#define ADD _mm512_add_pd
#define STORE _mm512_storeu_pd
#else
typedef __m256d vec;
#define LANES 4
#define SET1 _mm256_set1_pd
#define FMA _mm256_fmadd_pd
#define ADD _mm256_add_pd
#define STORE _mm256_storeu_pd
#endif

/* flops of `iterations` rounds of 16 FMA chains on this thread; the result is kept alive */
static double fma_chains(long iterations, double seed) {
    vec a[16];
    vec m = SET1(0.9999999), c = SET1(1e-9);
    for (int i = 0; i < 16; i++) a[i] = SET1(seed + i);
    for (long n = 0; n < iterations; n++) {
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) a[i] = FMA(a[i], m, c);
    }
    vec s = a[0];
    for (int i = 1; i < 16; i++) s = ADD(s, a[i]);
    double out[LANES];
    STORE(out, s);
    return out[0];
}

static double fma_gflops(int threads) {
    const long iterations = 20000000;
    double best = 1e30, sink = 0;
    for (int rep = 0; rep < 5; rep++) {
        double t = now();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
        sink += fma_chains(iterations, omp_get_thread_num());
        double dt = now() - t;
        if (dt < best) best = dt;
    }
    if (sink == 42.0) fprintf(stderr, " ");
    return (double)iterations * 16 * LANES * 2 * threads / best / 1e9;
}

static double copy_gbs(double *x, double *y, size_t n, int threads) {
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        double t = now();
#pragma omp parallel num_threads(threads)
        {
            size_t chunk = n / threads, lo = chunk * omp_get_thread_num();
            memcpy(y + lo, x + lo, chunk * sizeof(double));
        }
        double dt = now() - t;
        if (dt < best) best = dt;
    }
    return 2.0 * n * sizeof(double) / best / 1e9;
}

static double triad_gbs(double *x, double *y, size_t n, int threads) {
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        double t = now();
#pragma omp parallel for num_threads(threads) schedule(static)
        for (size_t i = 0; i < n; i++) y[i] = 1.5 * x[i] + y[i];
        double dt = now() - t;
        if (dt < best) best = dt;
    }
    return 3.0 * n * sizeof(double) / best / 1e9;
}

int main(void) {
    int all = omp_get_num_procs();
    size_t n = (size_t)1 << 25; /* 256 MiB per array */
    double *x = aligned_alloc(64, n * sizeof(double)), *y = aligned_alloc(64, n * sizeof(double));
    if (!x || !y) return 1;
#pragma omp parallel for num_threads(all) schedule(static)
    for (size_t i = 0; i < n; i++) {
        x[i] = (double)i;
        y[i] = 0.0;
    }
    printf("{\"threads\": %d, \"lanes\": %d, "
           "\"fma_gflops_1\": %.2f, \"fma_gflops_all\": %.2f, "
           "\"copy_gbs_1\": %.2f, \"copy_gbs_all\": %.2f, "
           "\"triad_gbs_1\": %.2f, \"triad_gbs_all\": %.2f}\n",
           all, LANES, fma_gflops(1), fma_gflops(all), copy_gbs(x, y, n, 1),
           copy_gbs(x, y, n, all), triad_gbs(x, y, n, 1), triad_gbs(x, y, n, all));
    free(x);
    free(y);
    return 0;
}
