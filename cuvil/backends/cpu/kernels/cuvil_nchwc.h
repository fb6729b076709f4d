/* What the blocked convolutions (conv_nchwc.c, winograd.c) share: the geometry of a conv_nchwc call and each
 * thread's scratch buffers. Both units include it; each has its own thread-local buffers.
 */
#ifndef CUVIL_NCHWC_H
#define CUVIL_NCHWC_H

#include "cuvil_internal.h"

typedef struct { int64_t n, cb, h, w, c, ob, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, oc; } nchwc_geom;

/* A CUVIL_ACT_* activation other than relu, out of line: expanded into every unrolled strip, sigmoid and hardswish
 * would multiply the units' code (and gcc's time) for a pass that costs a call per vector. */
static __attribute__((noinline)) cuvil_vf nchwc_activate_call(cuvil_vf v, int act) { return cuvil_activate(v, act); }

/* The epilogue's activation: relu inline (the common case, keeping NaN like its reference), others by call. */
CUVIL_INLINE cuvil_vf nchwc_activate(cuvil_vf v, int act)
{
    if (act == CUVIL_ACT_RELU) return (cuvil_vf)((cuvil_vi)v & ~(v < 0));
    return act ? nchwc_activate_call(v, act) : v;
}

/* Thread-local scratch, grown as needed and kept for the thread's life (freed when it exits): one slot for a
 * padded conv input (the calling thread's), one for each thread's Winograd buffers. */
enum { SCRATCH_PADDED, SCRATCH_WINOGRAD, SCRATCH_SLOTS };
typedef struct { int64_t floats[SCRATCH_SLOTS]; float *data[SCRATCH_SLOTS]; } scratch_set;
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void scratch_free(void *p)
{
    scratch_set *set = p;
    for (int i = 0; i < SCRATCH_SLOTS; i++) free(set->data[i]);
    free(set);
}

static void make_scratch_key(void) { pthread_key_create(&scratch_key, scratch_free); }

static float *thread_scratch(int slot, int64_t floats)
{
    pthread_once(&scratch_once, make_scratch_key);
    scratch_set *set = pthread_getspecific(scratch_key);
    if (!set) {
        set = alloc_or_die(sizeof *set);
        memset(set, 0, sizeof *set);
        pthread_setspecific(scratch_key, set);
    }
    if (set->floats[slot] < floats) {
        free(set->data[slot]);
        set->data[slot] = alloc_or_die(sizeof(float) * floats);
        set->floats[slot] = floats;
    }
    return set->data[slot];
}

#endif
