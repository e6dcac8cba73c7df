/* FMA peak: each thread runs a loop of independent vfmadd231ps on zmm registers (no memory
   traffic); 2 FMA ports x 16 float32 lanes x 2 flops a cycle is the ceiling it measures.
   Build: cc -O3 -march=native -fopenmp bench/fma_peak.c -o fma_peak; ./fma_peak THREADS */
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double cpu_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define NACC 12  /* independent chains: FMA latency 4 x 2 ports = 8 needed, 12 hides jitter */

static double run(long iters) {
  double total = 0;
#pragma omp parallel reduction(+ : total)
  {
    /* 12 accumulators in zmm0-zmm11, the multiplicands in zmm12/zmm13: the loop body is 12
       register-only vfmadd231ps, so the compiler can neither spill nor fold them */
    float out[16] __attribute__((aligned(64)));
    long n = iters;  /* the asm counts it down: one per thread */
    __asm__ volatile(
        "vbroadcastss %[a], %%zmm12\n\t"
        "vbroadcastss %[b], %%zmm13\n\t"
        "vxorps %%zmm0, %%zmm0, %%zmm0\n\t" "vmovaps %%zmm0, %%zmm1\n\t" "vmovaps %%zmm0, %%zmm2\n\t"
        "vmovaps %%zmm0, %%zmm3\n\t" "vmovaps %%zmm0, %%zmm4\n\t" "vmovaps %%zmm0, %%zmm5\n\t"
        "vmovaps %%zmm0, %%zmm6\n\t" "vmovaps %%zmm0, %%zmm7\n\t" "vmovaps %%zmm0, %%zmm8\n\t"
        "vmovaps %%zmm0, %%zmm9\n\t" "vmovaps %%zmm0, %%zmm10\n\t" "vmovaps %%zmm0, %%zmm11\n\t"
        "1:\n\t"
        "vfmadd231ps %%zmm12, %%zmm13, %%zmm0\n\t" "vfmadd231ps %%zmm12, %%zmm13, %%zmm1\n\t"
        "vfmadd231ps %%zmm12, %%zmm13, %%zmm2\n\t" "vfmadd231ps %%zmm12, %%zmm13, %%zmm3\n\t"
        "vfmadd231ps %%zmm12, %%zmm13, %%zmm4\n\t" "vfmadd231ps %%zmm12, %%zmm13, %%zmm5\n\t"
        "vfmadd231ps %%zmm12, %%zmm13, %%zmm6\n\t" "vfmadd231ps %%zmm12, %%zmm13, %%zmm7\n\t"
        "vfmadd231ps %%zmm12, %%zmm13, %%zmm8\n\t" "vfmadd231ps %%zmm12, %%zmm13, %%zmm9\n\t"
        "vfmadd231ps %%zmm12, %%zmm13, %%zmm10\n\t" "vfmadd231ps %%zmm12, %%zmm13, %%zmm11\n\t"
        "dec %[n]\n\t"
        "jnz 1b\n\t"
        "vaddps %%zmm1, %%zmm0, %%zmm0\n\t"
        "vmovaps %%zmm0, %[out]\n\t"
        : [n] "+r"(n), [out] "=m"(out)
        : [a] "m"(*(const float[1]){0.999999f}), [b] "m"(*(const float[1]){1e-7f})
        : "zmm0", "zmm1", "zmm2", "zmm3", "zmm4", "zmm5", "zmm6", "zmm7", "zmm8", "zmm9", "zmm10",
          "zmm11", "zmm12", "zmm13", "cc");
    total += out[0];
  }
  return total;
}

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 1;
  long iters = argc > 2 ? atol(argv[2]) : 20000000;
  int reps = argc > 3 ? atoi(argv[3]) : 7;
  omp_set_num_threads(threads);
  /* wall: what the threads got on a shared machine; per CPU-second: the rate while running,
     which is what a core's peak is (the host is shared, so wall times include other work) */
  double best = 0, best_cpu = 0, sink = 0;
  for (int r = 0; r < reps; r++) {
    double t0 = omp_get_wtime(), c0 = cpu_seconds();
    sink += run(iters);
    double t = omp_get_wtime() - t0, c = cpu_seconds() - c0;
    double gflop = (double)iters * NACC * 16 * 2 * threads / 1e9;
    if (gflop / t > best) best = gflop / t;
    if (gflop / c > best_cpu) best_cpu = gflop / c;
  }
  printf("threads %d: FMA peak %.1f GFLOP/s wall, %.1f GFLOP/s per CPU-second (best of %d; sink %g)\n",
         threads, best, best_cpu, reps, sink);
  return 0;
}
