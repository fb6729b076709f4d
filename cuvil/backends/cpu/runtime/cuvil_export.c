/* The once-per-library part of an exported shared object's ABI (docs/artifact.md). cuvil_set_num_threads comes
 * with the kernel library linked in. */
#define CUVIL_ABI_VERSION 1

int cuvil_abi_version(void) { return CUVIL_ABI_VERSION; }

/* The message of this thread's last nonzero return. Weak: generated code that records its own errors (the
 * index-error channel) defines the real one, which replaces this at link time. */
__attribute__((weak)) const char *cuvil_last_error(void) { return ""; }
