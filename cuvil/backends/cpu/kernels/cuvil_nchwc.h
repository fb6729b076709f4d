/* What the blocked convolutions (conv_nchwc.c, winograd.c) share: the geometry of a conv_nchwc call and each
 * thread's scratch buffers. Both units include it; each has its own thread-local buffers.
 */
#ifndef CUVIL_NCHWC_H
#define CUVIL_NCHWC_H

#include "cuvil_internal.h"

typedef struct { int64_t n, cb, h, w, c, ob, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, oc; } nchwc_geom;

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
