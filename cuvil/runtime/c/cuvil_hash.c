/* SHA-256 (FIPS 180-4) and CRC-32 (zlib's polynomial) for the runtime's checks.
 *
 * Weights are hashed once per open, so the SHA-256 matters for start-up time. The path is chosen at run time:
 * sixteen pieces at once in AVX-512 lanes, the x86 SHA extensions (two messages' rounds interleaved when the caller
 * has two pieces, about 1.4x one at a time: the round instruction's latency, not its throughput, bounds one
 * message), the ARMv8 SHA2 instructions, else portable C (about 0.3 GB/s). CUVIL_DISABLE_CPU_FEATURES=sha_ni
 * (x86) or sha2 (aarch64) forces the portable code for one message, avx512f the pairs for sixteen: that is how
 * the tests reach every path on machines that have the instructions.
 */
#include "cuvil_hash.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define CUVIL_SHA_NI 1
#define FAST_NAME "sha_ni"
#elif defined(__aarch64__) && defined(__GNUC__) && defined(__linux__)
#include <arm_neon.h>
#include <sys/auxv.h>
#define CUVIL_SHA_ARM 1
#define FAST_NAME "sha2"
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
/* The SHA extensions' rounds, four at a time, for LANES messages at once (their rounds interleave: one message
 * waits on the round instruction's latency); w[l][k % 4] holds message words 4k..4k+3 (Intel's reference order). */
#define SHA_NI __attribute__((target("sha,sse4.1")))
static inline __attribute__((always_inline)) SHA_NI void blocks_sha_ni_lanes(uint32_t (*h)[8], const uint8_t **p,
                                                                              size_t nblocks, const int LANES)
{
    const __m128i mask = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
    __m128i s0[2], s1[2];
    for (int l = 0; l < LANES; l++) {
        __m128i tmp = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&h[l][0]), 0xB1);
        s1[l] = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&h[l][4]), 0x1B);
        s0[l] = _mm_alignr_epi8(tmp, s1[l], 8);
        s1[l] = _mm_blend_epi16(s1[l], tmp, 0xF0);
    }
    for (size_t b = 0; b < nblocks; b++) {
        __m128i abef[2], cdgh[2], w[2][4];
        for (int l = 0; l < LANES; l++) {
            abef[l] = s0[l], cdgh[l] = s1[l];
            for (int k = 0; k < 4; k++)
                w[l][k] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p[l] + 64 * b + 16 * k)), mask);
        }
#pragma GCC unroll 16
        for (int k = 0; k < 16; k++) {
            __m128i kk = _mm_loadu_si128((const __m128i *)&K[4 * k]);
#pragma GCC unroll 2
            for (int l = 0; l < LANES; l++) {
                __m128i cur = w[l][k % 4], msg = _mm_add_epi32(cur, kk);
                s1[l] = _mm_sha256rnds2_epu32(s1[l], s0[l], msg);
                if (k >= 3 && k <= 14) {
                    __m128i next = _mm_add_epi32(w[l][(k + 1) % 4], _mm_alignr_epi8(cur, w[l][(k + 3) % 4], 4));
                    w[l][(k + 1) % 4] = _mm_sha256msg2_epu32(next, cur);
                }
                s0[l] = _mm_sha256rnds2_epu32(s0[l], s1[l], _mm_shuffle_epi32(msg, 0x0E));
                if (k >= 1 && k <= 12) w[l][(k + 3) % 4] = _mm_sha256msg1_epu32(w[l][(k + 3) % 4], cur);
            }
        }
        for (int l = 0; l < LANES; l++) s0[l] = _mm_add_epi32(s0[l], abef[l]), s1[l] = _mm_add_epi32(s1[l], cdgh[l]);
    }
    for (int l = 0; l < LANES; l++) {
        __m128i tmp = _mm_shuffle_epi32(s0[l], 0x1B);
        s1[l] = _mm_shuffle_epi32(s1[l], 0xB1);
        _mm_storeu_si128((__m128i *)&h[l][0], _mm_blend_epi16(tmp, s1[l], 0xF0));
        _mm_storeu_si128((__m128i *)&h[l][4], _mm_alignr_epi8(s1[l], tmp, 8));
    }
}

SHA_NI static void blocks_fast(uint32_t h[8], const uint8_t *p, size_t nblocks) { blocks_sha_ni_lanes((uint32_t (*)[8])h, &p, nblocks, 1); }
SHA_NI static void blocks_fast2(uint32_t (*h)[8], const uint8_t **p, size_t nblocks) { blocks_sha_ni_lanes(h, p, nblocks, 2); }

static int has_fast(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 19)) || !(c & (1u << 9))) return 0; /* SSE4.1, SSSE3 */
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & (1u << 29));
}

/* AVX-512: sixteen messages at once, one a 32-bit lane (the pieces of a large section), about 1.4x the SHA-NI
 * pair's bytes a second on one core here; h[i] lane l is word i of message l's state. */
#define AVX512 __attribute__((target("avx512f")))
#define VROR(x, n) _mm512_ror_epi32(x, n)
#define XOR3(a, b, c) _mm512_ternarylogic_epi32(a, b, c, 0x96)
/* Word t of the 16 messages' 64-byte blocks at p[l] + at, lane l of w[t]: the 16 x 16 words transposed in registers
 * (4 steps of 16 shuffles: cheaper than 32 gathers), then each word byte-swapped (SHA-256 is big-endian). */
static AVX512 void words_x16(const uint8_t *const *p, size_t at, __m512i w[16])
{
    const __m512i bytes = _mm512_set1_epi32(0x00ff00ff);
    __m512i r[16], t[16];
    for (int l = 0; l < 16; l++) r[l] = _mm512_loadu_si512(p[l] + at);
    for (int k = 0; k < 16; k += 2) /* per 128-bit lane j: words 4j..4j+3 of two messages, interleaved */
        t[k] = _mm512_unpacklo_epi32(r[k], r[k + 1]), t[k + 1] = _mm512_unpackhi_epi32(r[k], r[k + 1]);
    for (int k = 0; k < 16; k += 4) { /* r[k + i]: word 4j + i of messages k..k+3 */
        r[k] = _mm512_unpacklo_epi64(t[k], t[k + 2]), r[k + 1] = _mm512_unpackhi_epi64(t[k], t[k + 2]);
        r[k + 2] = _mm512_unpacklo_epi64(t[k + 1], t[k + 3]), r[k + 3] = _mm512_unpackhi_epi64(t[k + 1], t[k + 3]);
    }
    for (int h = 0; h < 16; h += 8) /* t[h + i] (words 0, 8 of 4 messages twice), t[h + 4 + i] (words 4, 12) */
        for (int i = 0; i < 4; i++)
            t[h + i] = _mm512_shuffle_i32x4(r[h + i], r[h + 4 + i], 0x88),
            t[h + 4 + i] = _mm512_shuffle_i32x4(r[h + i], r[h + 4 + i], 0xdd);
    for (int i = 0; i < 8; i++) {
        __m512i lo = _mm512_shuffle_i32x4(t[i], t[8 + i], 0x88), hi = _mm512_shuffle_i32x4(t[i], t[8 + i], 0xdd);
        w[i] = _mm512_ternarylogic_epi32(_mm512_rol_epi32(lo, 8), _mm512_ror_epi32(lo, 8), bytes, 0xE4);
        w[8 + i] = _mm512_ternarylogic_epi32(_mm512_rol_epi32(hi, 8), _mm512_ror_epi32(hi, 8), bytes, 0xE4);
    }
}

static AVX512 void blocks_x16(uint32_t h[8][16], const uint8_t *const *p, size_t nblocks)
{
    __m512i s[8], w[16];
    for (int i = 0; i < 8; i++) s[i] = _mm512_loadu_si512(h[i]);
    for (size_t b = 0; b < nblocks; b++) {
        __m512i a = s[0], bb = s[1], c = s[2], d = s[3], e = s[4], f = s[5], g = s[6], hh = s[7];
        words_x16(p, 64 * b, w);
        for (int t = 0; t < 64; t++) {
            __m512i wt = w[t & 15];
            if (t >= 16) {
                __m512i x = w[(t - 15) & 15], y = w[(t - 2) & 15];
                wt = _mm512_add_epi32(_mm512_add_epi32(wt, w[(t - 7) & 15]),
                                      _mm512_add_epi32(XOR3(VROR(x, 7), VROR(x, 18), _mm512_srli_epi32(x, 3)),
                                                       XOR3(VROR(y, 17), VROR(y, 19), _mm512_srli_epi32(y, 10))));
                w[t & 15] = wt;
            }
            __m512i t1 = _mm512_add_epi32(_mm512_add_epi32(hh, XOR3(VROR(e, 6), VROR(e, 11), VROR(e, 25))),
                                          _mm512_add_epi32(_mm512_ternarylogic_epi32(e, f, g, 0xCA),
                                                           _mm512_add_epi32(wt, _mm512_set1_epi32((int)K[t]))));
            __m512i t2 = _mm512_add_epi32(XOR3(VROR(a, 2), VROR(a, 13), VROR(a, 22)),
                                          _mm512_ternarylogic_epi32(a, bb, c, 0xE8));
            hh = g, g = f, f = e, e = _mm512_add_epi32(d, t1), d = c, c = bb, bb = a, a = _mm512_add_epi32(t1, t2);
        }
        const __m512i v[8] = {a, bb, c, d, e, f, g, hh};
        for (int i = 0; i < 8; i++) s[i] = _mm512_add_epi32(s[i], v[i]);
    }
    for (int i = 0; i < 8; i++) _mm512_storeu_si512(h[i], s[i]);
}

static int has_x16(void)
{
    unsigned a, b, c, d, lo, hi;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return 0; /* OSXSAVE */
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    (void)hi;
    return (lo & 0xe6) == 0xe6 && __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & (1u << 16)); /* zmm state, F */
}
#endif

#ifdef CUVIL_SHA_ARM
/* The ARMv8 SHA2 instructions, four rounds at a time; m[k % 4] holds message words 4k..4k+3. */
__attribute__((target("+crypto"))) static void blocks_fast(uint32_t h[8], const uint8_t *p, size_t nblocks)
{
    uint32x4_t abcd = vld1q_u32(&h[0]), efgh = vld1q_u32(&h[4]);
    for (; nblocks--; p += 64) {
        uint32x4_t abcd0 = abcd, efgh0 = efgh, m[4];
        for (int k = 0; k < 4; k++) m[k] = vreinterpretq_u32_u8(vrev32q_u8(vld1q_u8(p + 16 * k)));
        for (int k = 0; k < 16; k++) {
            uint32x4_t wk = vaddq_u32(m[k % 4], vld1q_u32(&K[4 * k])), was = abcd;
            if (k < 12) m[k % 4] = vsha256su1q_u32(vsha256su0q_u32(m[k % 4], m[(k + 1) % 4]), m[(k + 2) % 4], m[(k + 3) % 4]);
            abcd = vsha256hq_u32(abcd, efgh, wk);
            efgh = vsha256h2q_u32(efgh, was, wk);
        }
        abcd = vaddq_u32(abcd, abcd0), efgh = vaddq_u32(efgh, efgh0);
    }
    vst1q_u32(&h[0], abcd);
    vst1q_u32(&h[4], efgh);
}

static int has_fast(void) { return (getauxval(AT_HWCAP) >> 6) & 1; } /* HWCAP_SHA2 */
#endif

int cuvil_feature_disabled(const char *name)
{
    const char *env = getenv("CUVIL_DISABLE_CPU_FEATURES");
    size_t len = strlen(name);
    while (env && *env) {
        size_t n = strcspn(env, ", ");
        if (n == len && strncmp(env, name, n) == 0) return 1;
        env += n + (env[n] != 0);
    }
    return 0;
}

/* Which path hashes: 1 the instructions, 0 portable C (decided once; a benign race, every thread agrees). */
static int fast_path(void)
{
#if defined(CUVIL_SHA_NI) || defined(CUVIL_SHA_ARM)
    static int fast = -1;
    if (fast < 0) fast = has_fast() && !cuvil_feature_disabled(FAST_NAME);
    return fast;
#else
    return 0;
#endif
}

#ifndef FAST_NAME
#define FAST_NAME "portable"
#endif
const char *cuvil_sha256_path(void) { return fast_path() ? FAST_NAME : "portable"; }

#ifdef CUVIL_SHA_NI
static int x16_path(void)
{
    static int wide = -1;
    if (wide < 0) wide = has_x16() && !cuvil_feature_disabled("avx512f");
    return wide;
}
#endif

int cuvil_sha256_width(void)
{
#ifdef CUVIL_SHA_NI
    return x16_path() ? 16 : fast_path() ? 2 : 1;
#else
    return 1;
#endif
}

static void blocks(uint32_t h[8], const uint8_t *p, size_t nblocks)
{
#if defined(CUVIL_SHA_NI) || defined(CUVIL_SHA_ARM)
    if (fast_path()) { blocks_fast(h, p, nblocks); return; }
#endif
    blocks_portable(h, p, nblocks);
}

static const uint32_t H0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab,
                               0x5be0cd19};

/* The padding of an `n`-byte message whose last `n % 64` bytes are at `end - n % 64`, then the digest. */
static void finish(uint32_t h[8], const uint8_t *end, uint64_t n, uint8_t digest[32])
{
    uint8_t tail[128] = {0};
    size_t rest = n % 64, len = rest + 9 <= 64 ? 64 : 128;
    if (rest) memcpy(tail, end - rest, rest);
    tail[rest] = 0x80;
    for (int i = 0; i < 8; i++) tail[len - 1 - i] = (uint8_t)(n * 8 >> (8 * i));
    blocks(h, tail, len / 64);
    for (int i = 0; i < 32; i++) digest[i] = (uint8_t)(h[i / 4] >> (24 - 8 * (i % 4)));
}

void cuvil_sha256(const void *data, size_t n, uint8_t digest[32])
{
    uint32_t h[8];
    memcpy(h, H0, sizeof h);
    blocks(h, data, n / 64);
    finish(h, (const uint8_t *)data + n, n, digest);
}

void cuvil_sha256_batch(const uint8_t *const *msgs, int count, size_t n, uint8_t (*digests)[32])
{
    int k = 0;
#ifdef CUVIL_SHA_NI
    if (count == 16 && x16_path()) {
        uint32_t h[8][16], one[8];
        for (int i = 0; i < 8 * 16; i++) h[i / 16][i % 16] = H0[i / 16];
        blocks_x16(h, msgs, n / 64);
        for (int l = 0; l < 16; l++) {
            for (int i = 0; i < 8; i++) one[i] = h[i][l];
            finish(one, msgs[l] + n, n, digests[l]);
        }
        return;
    }
    for (; k + 1 < count && fast_path(); k += 2) {
        uint32_t h[2][8];
        memcpy(h[0], H0, sizeof H0), memcpy(h[1], H0, sizeof H0);
        blocks_fast2(h, (const uint8_t **)msgs + k, n / 64);
        finish(h[0], msgs[k] + n, n, digests[k]);
        finish(h[1], msgs[k + 1] + n, n, digests[k + 1]);
    }
#endif
    for (; k < count; k++) cuvil_sha256(msgs[k], n, digests[k]);
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
