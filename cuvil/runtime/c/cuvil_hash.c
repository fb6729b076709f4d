/* SHA-256 (FIPS 180-4) and CRC-32 (zlib's polynomial) for the runtime's checks.
 *
 * Weights are hashed once per open, so the SHA-256 matters for start-up time: CPUs with the x86 SHA extensions
 * use them (about 2 GB/s, against about 0.3 GB/s for the portable code).
 */
#include "cuvil_hash.h"

#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define CUVIL_SHA_NI 1
#endif

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
    0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
    0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
    0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
    0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
    0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
    0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2,
};

#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void blocks_portable(uint32_t h[8], const uint8_t *p, size_t nblocks)
{
    for (; nblocks--; p += 64) {
        uint32_t w[64], s[8];
        for (int i = 0; i < 16; i++)
            w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
        for (int i = 16; i < 64; i++) {
            uint32_t s0 = ROR(w[i - 15], 7) ^ ROR(w[i - 15], 18) ^ (w[i - 15] >> 3);
            uint32_t s1 = ROR(w[i - 2], 17) ^ ROR(w[i - 2], 19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16] + s0 + w[i - 7] + s1;
        }
        memcpy(s, h, sizeof s);
        for (int i = 0; i < 64; i++) {
            uint32_t t1 = s[7] + (ROR(s[4], 6) ^ ROR(s[4], 11) ^ ROR(s[4], 25)) + ((s[4] & s[5]) ^ (~s[4] & s[6])) + K[i]
                          + w[i];
            uint32_t t2 = (ROR(s[0], 2) ^ ROR(s[0], 13) ^ ROR(s[0], 22)) + ((s[0] & s[1]) ^ (s[0] & s[2]) ^ (s[1] & s[2]));
            memmove(s + 1, s, 7 * sizeof s[0]);
            s[4] += t1;
            s[0] = t1 + t2;
        }
        for (int i = 0; i < 8; i++) h[i] += s[i];
    }
}

#ifdef CUVIL_SHA_NI
/* The SHA extensions' rounds, four at a time; w[k % 4] holds message words 4k..4k+3 (Intel's reference order). */
__attribute__((target("sha,sse4.1"))) static void blocks_sha_ni(uint32_t h[8], const uint8_t *p, size_t nblocks)
{
    const __m128i mask = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
    __m128i tmp = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&h[0]), 0xB1);
    __m128i s1 = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&h[4]), 0x1B);
    __m128i s0 = _mm_alignr_epi8(tmp, s1, 8);
    s1 = _mm_blend_epi16(s1, tmp, 0xF0);
    for (; nblocks--; p += 64) {
        __m128i abef = s0, cdgh = s1, w[4];
        for (int k = 0; k < 4; k++) w[k] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * k)), mask);
#pragma GCC unroll 16
        for (int k = 0; k < 16; k++) {
            __m128i cur = w[k % 4];
            __m128i msg = _mm_add_epi32(cur, _mm_loadu_si128((const __m128i *)&K[4 * k]));
            s1 = _mm_sha256rnds2_epu32(s1, s0, msg);
            if (k >= 3 && k <= 14) {
                __m128i next = _mm_add_epi32(w[(k + 1) % 4], _mm_alignr_epi8(cur, w[(k + 3) % 4], 4));
                w[(k + 1) % 4] = _mm_sha256msg2_epu32(next, cur);
            }
            s0 = _mm_sha256rnds2_epu32(s0, s1, _mm_shuffle_epi32(msg, 0x0E));
            if (k >= 1 && k <= 12) w[(k + 3) % 4] = _mm_sha256msg1_epu32(w[(k + 3) % 4], cur);
        }
        s0 = _mm_add_epi32(s0, abef);
        s1 = _mm_add_epi32(s1, cdgh);
    }
    tmp = _mm_shuffle_epi32(s0, 0x1B);
    s1 = _mm_shuffle_epi32(s1, 0xB1);
    _mm_storeu_si128((__m128i *)&h[0], _mm_blend_epi16(tmp, s1, 0xF0));
    _mm_storeu_si128((__m128i *)&h[4], _mm_alignr_epi8(s1, tmp, 8));
}

static int has_sha_ni(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 19)) || !(c & (1u << 9))) return 0; /* SSE4.1, SSSE3 */
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & (1u << 29));
}
#endif

static void blocks(uint32_t h[8], const uint8_t *p, size_t nblocks)
{
#ifdef CUVIL_SHA_NI
    static int fast = -1;
    if (fast < 0) fast = has_sha_ni(); /* a benign race: every thread computes the same answer */
    if (fast) { blocks_sha_ni(h, p, nblocks); return; }
#endif
    blocks_portable(h, p, nblocks);
}

void cuvil_sha256(const void *data, size_t n, uint8_t digest[32])
{
    uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    const uint8_t *p = data;
    blocks(h, p, n / 64);
    uint8_t tail[128] = {0};
    size_t rest = n % 64, len = rest + 9 <= 64 ? 64 : 128;
    if (rest) memcpy(tail, p + n - rest, rest);
    tail[rest] = 0x80;
    for (int i = 0; i < 8; i++) tail[len - 1 - i] = (uint8_t)((uint64_t)n * 8 >> (8 * i));
    blocks(h, tail, len / 64);
    for (int i = 0; i < 32; i++) digest[i] = (uint8_t)(h[i / 4] >> (24 - 8 * (i % 4)));
}

uint32_t cuvil_crc32(const void *data, size_t n)
{
    const uint8_t *p = data;
    uint32_t crc = 0xFFFFFFFFu;
    while (n--) {
        crc ^= *p++;
        for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    }
    return ~crc;
}
