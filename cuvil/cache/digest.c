/* cuvil_digest: 128-bit digests of byte ranges at memory speed, for the artifact cache's keys (cuvil/cache/keys.py).
 *
 * The structure is XXH3's long-input hash: eight 64-bit lanes take a 64-byte stripe at a time, each word XORed with
 * its own word of a fixed secret, multiplied high half by low half and added to its lane, the word itself added to
 * the neighbouring lane (so no bit of it is lost to a zero product); after every block of 16 stripes (1 KiB) the
 * lanes are scrambled, so the same words in another block or order give another digest. The last partial stripe is
 * taken zero-padded and the length joins the final mix. Two merges of the lanes with different secret words give
 * the two halves. It is a checksum, not a cryptographic hash: the key guards against stale entries, not against an
 * attacker who can write the cache (see keys.py). Integer arithmetic only: one digest on every compiler and level.
 *
 * cuvil_digest_ranges(n, ptrs, lens, out, threads) writes range i's digest to out[2i], out[2i + 1], the ranges
 * shared among `threads` threads (the calling one included).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#define STRIPE 64
#define LANES 8
#define BLOCK_STRIPES 16
#define MAX_THREADS 64

static const uint64_t secret[24] = {
    0x2cb0f69f4abea221ull, 0x9417034723148989ull, 0xdd555950609dfe03ull,
    0xdbafb150deb12800ull, 0x7e789b2e6c442cb6ull, 0xf41e5636c7e4f8c4ull,
    0x0959d150f8fba7e4ull, 0xa97316f13cdb9eeaull, 0x74cd8258f9520068ull,
    0x55c74a62e116868bull, 0xd2f4c799a2023cbdull, 0xdf98cb79a37b51b9ull,
    0x396f5885524f3905ull, 0xaf1d56386ca3b276ull, 0xa9ffbe6b5104e85aull,
    0x6bd0c51b9fd533b3ull, 0x980ce91c50ab4b56ull, 0x28ac395780fe62c5ull,
    0x768912e3a6bcedc7ull, 0x50b3e8c9332c7c88ull, 0xce3bbfe520bd47daull,
    0xcba6c8e8e0bb7c4full, 0xbf194db8434a346dull, 0x7d8f2a7b60416d7full,
};

typedef uint64_t lanes __attribute__((vector_size(LANES * 8))); /* GCC's and clang's vectors: any target's width */

static inline lanes load(const void *p)
{
    lanes v;
    memcpy(&v, p, sizeof v); /* unaligned; little-endian on every host Cuvil builds for (the key names the machine) */
    return v;
}

/* Each lane's low 32 bits times its high 32 bits: one pmuludq (compilers make a 64-bit multiply of the plain form). */
static inline lanes low_by_high(lanes k)
{
#if defined(__AVX512F__)
    return (lanes)_mm512_mul_epu32((__m512i)k, _mm512_srli_epi64((__m512i)k, 32));
#elif defined(__AVX2__)
    __m256i h[2];
    memcpy(h, &k, sizeof h);
    for (int i = 0; i < 2; i++)
        h[i] = _mm256_mul_epu32(h[i], _mm256_srli_epi64(h[i], 32));
    memcpy(&k, h, sizeof h);
    return k;
#else
    return (k & 0xffffffffu) * (k >> 32);
#endif
}

/* One stripe: the product of its words' halves (XORed with key words) into the lanes; the words themselves are
 * summed apart, in `words`, and join the neighbouring lanes at the block's end (as adding them stripe by stripe). */
static inline void accumulate(lanes *acc, lanes *words, const unsigned char *p, const uint64_t *key)
{
    lanes d = load(p), k = d ^ load(key);
    *acc += low_by_high(k);
    *words += d;
}

static inline void end_block(lanes *acc, lanes *words, int scrambled)
{
    uint64_t a[LANES], w[LANES];
    memcpy(a, acc, sizeof a);
    memcpy(w, words, sizeof w);
    for (int j = 0; j < LANES; j++) {
        a[j] += w[j ^ 1];
        if (scrambled)
            a[j] = ((a[j] ^ (a[j] >> 47)) ^ secret[16 + j]) * 0x9E3779B1u;
    }
    memcpy(acc, a, sizeof a);
    memset(words, 0, sizeof *words);
}

/* The 64 bits of a 64 x 64 -> 128-bit product's halves XORed (in 32-bit pieces: no __int128 on 32-bit targets). */
static inline uint64_t mul_fold(uint64_t a, uint64_t b)
{
    uint64_t al = a & 0xffffffffu, ah = a >> 32, bl = b & 0xffffffffu, bh = b >> 32;
    uint64_t ll = al * bl, lh = al * bh, hl = ah * bl, hh = ah * bh;
    uint64_t mid = (ll >> 32) + (lh & 0xffffffffu) + (hl & 0xffffffffu);
    uint64_t lo = (ll & 0xffffffffu) | (mid << 32);
    uint64_t hi = hh + (lh >> 32) + (hl >> 32) + (mid >> 32);
    return lo ^ hi;
}

static inline uint64_t avalanche(uint64_t h)
{
    h ^= h >> 37;
    h *= 0x165667919E3779F9ull;
    return h ^ (h >> 32);
}

static uint64_t merge(const uint64_t *acc, const uint64_t *key, uint64_t start)
{
    uint64_t h = start;
    for (int j = 0; j < LANES; j += 2)
        h += mul_fold(acc[j] ^ key[j], acc[j + 1] ^ key[j + 1]);
    return avalanche(h);
}

static void digest(const unsigned char *p, int64_t len, uint64_t *out)
{
    static const uint64_t start[LANES] = {0x9E3779B1u, 0x9E3779B185EBCA87ull, 0xC2B2AE3D27D4EB4Full,
                                          0x165667B19E3779F9ull, 0x85EBCA77C2B2AE63ull, 0x85EBCA77u,
                                          0x27D4EB2F165667C5ull, 0x61C8864Fu};
    lanes acc = load(start), words = {0};
    int64_t stripes = len / STRIPE, s = 0;
    for (; s + BLOCK_STRIPES <= stripes; s += BLOCK_STRIPES) {
        for (int k = 0; k < BLOCK_STRIPES; k++) /* stripe k of a block: secret words k to k + 7 */
            accumulate(&acc, &words, p + (s + k) * STRIPE, secret + k);
        end_block(&acc, &words, 1);
    }
    for (int k = 0; s < stripes; s++, k++)
        accumulate(&acc, &words, p + s * STRIPE, secret + k);
    unsigned char last[STRIPE] = {0};
    if (len > stripes * STRIPE)
        memcpy(last, p + stripes * STRIPE, (size_t)(len - stripes * STRIPE));
    accumulate(&acc, &words, last, secret + 9);
    end_block(&acc, &words, 0);
    uint64_t a[LANES], n = (uint64_t)len;
    memcpy(a, &acc, sizeof a);
    out[0] = merge(a, secret + 11, n * 0x9E3779B185EBCA87ull);
    out[1] = merge(a, secret + 3, ~(n * 0xC2B2AE3D27D4EB4Full));
}

typedef struct {
    int64_t n;
    const void *const *ptrs;
    const int64_t *lens;
    uint64_t *out;
    atomic_llong next;
} ranges_job;

static void *take_ranges(void *arg)
{
    ranges_job *job = arg;
    for (int64_t i; (i = atomic_fetch_add(&job->next, 1)) < job->n;)
        digest(job->ptrs[i], job->lens[i], job->out + 2 * i);
    return NULL;
}

void cuvil_digest_ranges(int64_t n, const void *const *ptrs, const int64_t *lens, uint64_t *out, int threads)
{
    ranges_job job = {n, ptrs, lens, out, 0};
    threads = threads < n ? threads : (int)n;
    threads = threads < MAX_THREADS ? threads : MAX_THREADS;
    pthread_t helpers[MAX_THREADS];
    int started = 0;
    while (started < threads - 1 && pthread_create(&helpers[started], NULL, take_ranges, &job) == 0)
        started++;
    take_ranges(&job);
    for (int k = 0; k < started; k++)
        pthread_join(helpers[k], NULL);
}
