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

/* SHA-256 of `n` bytes at `data` into `digest`; x86-64 CPUs with the SHA extensions take a faster path. */
CUVIL_HASH_API void cuvil_sha256(const void *data, size_t n, uint8_t digest[32]);

/* CRC-32 as zlib's crc32(0, data, n) computes it. */
CUVIL_HASH_API uint32_t cuvil_crc32(const void *data, size_t n);

#endif
