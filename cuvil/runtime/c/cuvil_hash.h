/* cuvil_hash.h: the two checksums of the .cuv format, with no dependency: SHA-256 (sections, table) and zlib's
 * CRC-32 (the header). Internal to the runtime (not part of its public API). */
#ifndef CUVIL_HASH_H
#define CUVIL_HASH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __GNUC__
#define CUVIL_HASH_API __attribute__((visibility("hidden")))
#else
#define CUVIL_HASH_API
#endif

/* SHA-256 of `n` bytes at `data` into `digest`; CPUs with SHA instructions (x86 SHA-NI, ARMv8 SHA2) take them. */
CUVIL_HASH_API void cuvil_sha256(const void *data, size_t n, uint8_t digest[32]);

/* How many messages of one length cuvil_sha256_batch takes at once at its best: 16 (AVX-512 lanes), 2 (SHA-NI
 * rounds interleaved) or 1. */
CUVIL_HASH_API int cuvil_sha256_width(void);

/* The SHA-256s of `count` messages of `n` bytes each (pieces of sections), 16 (or 2) at once where the CPU can. */
CUVIL_HASH_API void cuvil_sha256_batch(const uint8_t *const *msgs, int count, size_t n, uint8_t (*digests)[32]);

/* The path in use: "sha_ni", "sha2" or "portable" (tests check that the override reaches the portable code). */
CUVIL_HASH_API const char *cuvil_sha256_path(void);

/* Whether CUVIL_DISABLE_CPU_FEATURES (comma- or space-separated names) lists `name`. */
CUVIL_HASH_API int cuvil_feature_disabled(const char *name);

/* CRC-32 as zlib's crc32(0, data, n) computes it. */
CUVIL_HASH_API uint32_t cuvil_crc32(const void *data, size_t n);

#endif
