/* The once-per-library part of an exported shared object's ABI (docs/artifact.md). cuvil_set_num_threads comes
 * with the kernel library linked in. */
#define CUVIL_ABI_VERSION 1

int cuvil_abi_version(void) { return CUVIL_ABI_VERSION; }
