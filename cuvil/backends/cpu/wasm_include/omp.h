/* OpenMP on wasm32 is off (backends/cpu/wasm.py): its pragmas are ignored without -fopenmp, and these calls
 * describe the one thread a module runs on. */
#ifndef CUVIL_WASM_OMP_H
#define CUVIL_WASM_OMP_H
static inline int omp_get_num_procs(void) { return 1; }
static inline int omp_get_max_threads(void) { return 1; }
static inline int omp_get_num_threads(void) { return 1; }
static inline int omp_get_thread_num(void) { return 0; }
#endif
