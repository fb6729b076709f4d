/* OpenMP where the toolchain has it; otherwise (zig's clang ships no OpenMP runtime) the kernels run on one
 * thread: the parallel pragmas are ignored, `omp simd` still applies (-fopenmp-simd), and these stand in for the
 * library calls. */
#ifndef CUVIL_OMP_H
#define CUVIL_OMP_H
#ifdef _OPENMP
#include <omp.h>
#else
static inline int omp_get_num_procs(void) { return 1; }
static inline int omp_get_thread_num(void) { return 0; }
static inline int omp_get_num_threads(void) { return 1; }
#endif
#endif
