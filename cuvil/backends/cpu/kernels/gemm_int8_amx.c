/* AMX-INT8 for the int8 GEMM (path 4 of gemm_int8.c): tdpbusd, uint8 x int8 into int32, exact like the other paths.
 * Included after gemm_lowp.c (one unit, kernels.LOWP): it uses gemm_int8.c's packed layout, register-block driver
 * and epilogue, and gemm_lowp.c's tile configuration, AMX permission request and CUVIL_DISABLE_CPU_FEATURES test.
 *
 * A block is 32 rows x 32 columns: two A tiles (16 rows x 16 groups of 4 bytes, read from cuvil_qlinear's padded
 * rows) against the two panels' B tiles (16 groups x 16 columns x 4 bytes: exactly 16 consecutive groups of a
 * packed panel, padded with zeros to whole tiles), four int32 C tiles. Chosen from 16 rows of A; below that the VNNI
 * blocks run. CUVIL_DISABLE_CPU_FEATURES=amx_int8 (or CUVIL_INT8_ISA=3) leaves it out. */
#if QGEMM_AMX

/* AMX-INT8 and the OS's tile state (XCR0 bits 17-18), not masked, and Linux's permission for this process. */
static int amx_int8_usable(void)
{
    static int usable = -1;
    int u = __atomic_load_n(&usable, __ATOMIC_RELAXED);
    if (u >= 0) return u;
    unsigned a, b, c, d, lo, hi;
    u = 0;
    if (__get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 27))) { /* OSXSAVE */
        __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        __get_cpuid_count(7, 0, &a, &b, &c, &d);
        int amx = (d & (1u << 24)) && (d & (1u << 25)); /* amx_tile, amx_int8 */
        u = amx && (lo & 0x60000u) == 0x60000u && !lp_masked("amx_int8") && lp_amx_permitted();
    }
    __atomic_store_n(&usable, u, __ATOMIC_RELAXED);
    return u;
}

/* acc[r][c] for r < mr (at most 32), c < 32: tiles 0-1 rows 0-15, 2-3 rows 16-31; 4-5 A; 6-7 B. */
__attribute__((target("amx-tile,amx-int8")))
static void tile_amx(int64_t mr, int64_t K4, const uint8_t *A, int64_t lda, const int8_t *w0, const int8_t *w1,
                     int32_t acc[][QT])
{
    const int8_t *w1p = w1 ? w1 : w0;
    int64_t kp = (K4 + 15) / 16 * 16;
    _tile_zero(0);
    _tile_zero(1);
    if (mr > 16) {
        _tile_zero(2);
        _tile_zero(3);
        for (int64_t g = 0; g < kp; g += 16) {
            _tile_loadd(6, w0 + g * 64, 64);
            _tile_loadd(7, w1p + g * 64, 64);
            _tile_loadd(4, A + g * 4, lda);
            _tile_loadd(5, A + 16 * lda + g * 4, lda);
            _tile_dpbusd(0, 4, 6);
            _tile_dpbusd(1, 4, 7);
            _tile_dpbusd(2, 5, 6);
            _tile_dpbusd(3, 5, 7);
        }
        _tile_stored(2, acc[16], QT * 4);
        _tile_stored(3, acc[16] + QP, QT * 4);
    } else {
        for (int64_t g = 0; g < kp; g += 16) {
            _tile_loadd(6, w0 + g * 64, 64);
            _tile_loadd(7, w1p + g * 64, 64);
            _tile_loadd(4, A + g * 4, lda);
            _tile_dpbusd(0, 4, 6);
            _tile_dpbusd(1, 4, 7);
        }
    }
    _tile_stored(0, acc[0], QT * 4);
    _tile_stored(1, acc[0] + QP, QT * 4);
}

/* qgemm_blocks with the tile configuration this thread's blocks use (every tile 16 rows x 64 bytes). */
__attribute__((target("amx-tile")))
static int qgemm_blocks_amx(void *ctx, int64_t lo, int64_t hi)
{
    struct lp_tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    _tile_loadconfig(&cfg);
    for (int64_t b = lo; b < hi; b++) qgemm_block(ctx, b);
    _tile_release();
    return 0;
}
#endif
