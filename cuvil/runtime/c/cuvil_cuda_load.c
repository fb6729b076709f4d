/* The CUDA path's door in libcuvilrt: a `.cuv` for CUDA is run by libcuvilcuda.so (cuvil_cuda_rt.c), opened with
 * dlopen at the first such file, so the CPU runtime carries none of the driver code. The library is CUVIL_CUDA_RT
 * when set, else the libcuvilcuda.so beside libcuvilrt.so (or beside the program that links libcuvilrt.a), else
 * the one the loader finds. It gets the runtime's helpers through a table and gives back its load, run and close. */
#define _GNU_SOURCE
#include "cuvil_internal.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CUDA_TRIPLE "nvptx64-nvidia-cuda"
#define CUDA_LIBRARY "libcuvilcuda.so"

static const cuvil_cuda_host HOST = {cuvil_fail, cuvil_take, cuvil_find_section, cuvil_last_message, cuvil_dtype_size};
static cuvil_cuda_library library;
static char why[512];
static pthread_once_t once = PTHREAD_ONCE_INIT;

int cuvil_cuda_target(const cuvil_model *m)
{
    return memcmp(m->data + 48, CUDA_TRIPLE, sizeof CUDA_TRIPLE) == 0;
}

/* dlopen of the CUDA library in the folder of `file` (a path), or NULL. */
static void *beside(const char *file)
{
    const char *slash = file ? strrchr(file, '/') : NULL;
    char path[4096];
    if (!slash || (size_t)(slash - file) + sizeof CUDA_LIBRARY + 1 > sizeof path) return NULL;
    memcpy(path, file, (size_t)(slash - file) + 1);
    strcpy(path + (slash - file) + 1, CUDA_LIBRARY);
    return dlopen(path, RTLD_NOW | RTLD_LOCAL);
}

static void open_library(void)
{
    const char *env = getenv("CUVIL_CUDA_RT");
    void *h = NULL;
    Dl_info self;
    char exe[4096];
    ssize_t n;
    if (env && *env) h = dlopen(env, RTLD_NOW | RTLD_LOCAL);
    else {
        if (dladdr((void *)cuvil_cuda_load, &self)) h = beside(self.dli_fname);
        if (!h && (n = readlink("/proc/self/exe", exe, sizeof exe - 1)) > 0) exe[n] = 0, h = beside(exe);
        if (!h) h = dlopen(CUDA_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    }
    cuvil_cuda_entry_fn entry = h ? (cuvil_cuda_entry_fn)(uintptr_t)dlsym(h, CUVIL_CUDA_ENTRY) : NULL;
    if (!entry || entry(&HOST, &library) != 0) {
        const char *e = h ? "it lacks " CUVIL_CUDA_ENTRY : dlerror();
        snprintf(why, sizeof why, "running a .cuv for CUDA needs %s (%s): %s", env && *env ? env : CUDA_LIBRARY,
                 env && *env ? "CUVIL_CUDA_RT" : "beside libcuvilrt or cuvil-run, or set CUVIL_CUDA_RT",
                 e ? e : "not found");
        memset(&library, 0, sizeof library);
    }
}

cuvil_status cuvil_cuda_load(cuvil_model *m)
{
    pthread_once(&once, open_library);
    if (!library.load) return cuvil_fail(CUVIL_ERR_DEVICE, "%s: %s", m->where, why);
    return library.load(m);
}

cuvil_status cuvil_cuda_run(const cuvil_model *m, int index, const cuvil_tensor *in, cuvil_tensor *out)
{
    return library.run(m, index, in, out); /* only models that loaded: the library is open */
}

void cuvil_cuda_close(cuvil_model *m)
{
    if (m->cuda && library.close) library.close(m);
}
