/* The wasm32 module's allocator for its host (docs/artifact.md, "The wasm32 module's ABI"): inputs, outputs,
 * constants, the workspace and the pointer tables live in the module's linear memory, placed there by the loader. */
#include <stdint.h>
#include <stdlib.h>

/* `nbytes` of memory aligned to 64 bytes, or 0 when the memory cannot grow that far. */
void *cuvil_alloc(uint32_t nbytes) { return aligned_alloc(64, ((size_t)nbytes + 63) / 64 * 64); }

void cuvil_free(void *p) { free(p); }
