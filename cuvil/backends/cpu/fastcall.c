/* cuvil_fastcall: the C call path of a compiled CPU function (built and loaded by fastcall.py).
 *
 * A `Caller` holds what one compiled function needs per call: the entry and arena-size pointers of its library,
 * the expected dtype and rank of each input and output, and a small check program (see fastcall.py) that
 * compares input sizes with the signature, binds the symbolic sizes, checks the relations between them and
 * computes the output sizes. `caller(*arrays)` returns the list of outputs, or None when any input is not an
 * aligned C-contiguous ndarray of exactly the right dtype and sizes: the Python path then converts or raises.
 *
 * Outputs come from a pool of POOL arrays per output: an array returned before is returned again once only the
 * pool refers to it (the caller dropped it and every view, tensor or buffer made from it), so a steady call loop
 * touches no fresh pages; otherwise a new array is allocated and replaces the oldest pooled one. Two arrays
 * serve `y = f(x)` in a loop, where the previous result is still held while the next call runs.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuvil_checks.h" /* the check program's interpreter, shared with the standalone runtime */

typedef int (*entry_fn)(void *const *, void *const *, const int64_t *, uint8_t *, const void *const *);
typedef int64_t (*arena_fn)(const int64_t *);
typedef int (*swap_threads_fn)(int);

#define POOL 2

_Static_assert(sizeof(npy_intp) == sizeof(int64_t), "output sizes are written as int64");

typedef struct {
    PyObject_HEAD
    entry_fn entry;
    arena_fn arena_bytes;
    const void *const *consts;
    PyObject *error;             /* error(rc): the exception to raise when the entry returns non-zero */
    int n_in, n_out, n_sym, n_code, out_dims;
    PyArray_Descr **dtypes;      /* n_in inputs, then n_out outputs (owned references) */
    int *ranks;                  /* likewise */
    int64_t *code;
    PyObject **pool;             /* POOL slots per output: arrays returned before (owned), or NULL */
    unsigned turn;               /* the slot a new array replaces next */
    Py_ssize_t pool_bytes;       /* larger outputs are not pooled */
    uint8_t *arena;
    int64_t arena_size;
    int arena_busy;              /* another thread is running with the cached arena */
    int threads;                 /* this function's thread count, or 0: the process's (set_threads) */
    swap_threads_fn swap_threads; /* the library's cuvil_swap_call_threads, with threads */
} Caller;

static int64_t input_dim(const void *args, int64_t i, int64_t axis)
{
    return PyArray_DIM((PyArrayObject *)PyTuple_GET_ITEM((PyObject *)args, i), (int)axis);
}

/* Runs the check program: 0 when every check holds (sym and out filled), -1 otherwise. */
static int run_checks(const Caller *s, PyObject *args, int64_t *sym, npy_intp *out)
{
    int64_t why[2];
    return cuvil_run_checks(s->code, s->n_code, input_dim, args, sym, (int64_t *)out, why) == 0 ? 0 : -1;
}

static int input_ok(const Caller *s, int i, PyObject *o)
{
    if (!PyArray_Check(o)) return 0;
    PyArrayObject *a = (PyArrayObject *)o;
    PyArray_Descr *want = s->dtypes[i];
    return PyArray_NDIM(a) == s->ranks[i] && PyArray_IS_C_CONTIGUOUS(a) && PyArray_ISALIGNED(a)
           && (PyArray_DESCR(a) == want || PyArray_EquivTypes(PyArray_DESCR(a), want));
}

/* The pooled array if nothing but the pool refers to it and it is still what it was, else NULL. */
static PyObject *pooled(const Caller *s, int j, int slot, int nd, const npy_intp *dims)
{
    PyObject *o = s->pool[POOL * j + slot];
    if (o == NULL || Py_REFCNT(o) != 1) return NULL;
    PyArrayObject *a = (PyArrayObject *)o;
    const int need = NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_WRITEABLE | NPY_ARRAY_OWNDATA;
    if (((PyArrayObject_fields *)a)->weakreflist != NULL || (PyArray_FLAGS(a) & need) != need
        || PyArray_DESCR(a) != s->dtypes[s->n_in + j] || PyArray_NDIM(a) != nd
        || memcmp(PyArray_DIMS(a), dims, nd * sizeof(npy_intp)) != 0)
        return NULL;
    Py_INCREF(o);
    return o;
}

static PyObject *output(Caller *s, int j, int nd, npy_intp *dims)
{
    PyObject *o = NULL;
    for (int k = 0; k < POOL && o == NULL; k++) o = pooled(s, j, k, nd, dims);
    if (o != NULL) return o;
    PyArray_Descr *dt = s->dtypes[s->n_in + j];
    Py_INCREF(dt); /* stolen by the constructor */
    o = PyArray_NewFromDescr(&PyArray_Type, dt, nd, dims, NULL, NULL, 0, NULL);
    if (o == NULL) return NULL;
    int keep = PyArray_NBYTES((PyArrayObject *)o) <= s->pool_bytes;
    if (keep) Py_INCREF(o);
    int slot = POOL * j + (int)(s->turn++ % POOL); /* Py_XSETREF evaluates its target twice */
    Py_XSETREF(s->pool[slot], keep ? o : NULL);
    return o;
}

static uint8_t *aligned(int64_t size)
{
    void *p = NULL;
    return posix_memalign(&p, 64, size > 64 ? (size_t)size : 64) == 0 ? p : NULL;
}

/* The cached arena when no other thread uses it (grown if needed); else a private one (*owned = 1). */
static uint8_t *arena_take(Caller *s, int64_t size, int *owned)
{
    *owned = s->arena_busy;
    if (*owned) return aligned(size);
    if (size > s->arena_size || s->arena == NULL) {
        free(s->arena);
        s->arena = aligned(size);
        s->arena_size = s->arena ? size : 0;
    }
    if (s->arena) s->arena_busy = 1;
    return s->arena;
}

static void arena_give(Caller *s, uint8_t *arena, int owned)
{
    if (owned) free(arena);
    else s->arena_busy = 0;
}

static PyObject *Caller_call(PyObject *self, PyObject *args, PyObject *kwargs)
{
    Caller *s = (Caller *)self;
    if (kwargs != NULL || PyTuple_GET_SIZE(args) != s->n_in) Py_RETURN_NONE;
    for (int i = 0; i < s->n_in; i++)
        if (!input_ok(s, i, PyTuple_GET_ITEM(args, i))) Py_RETURN_NONE;
    int64_t sym[s->n_sym + 1];
    npy_intp dims[s->out_dims + 1];
    if (run_checks(s, args, sym, dims) != 0) Py_RETURN_NONE;
    void *ins[s->n_in + 1], *outs[s->n_out + 1];
    for (int i = 0; i < s->n_in; i++) ins[i] = PyArray_DATA((PyArrayObject *)PyTuple_GET_ITEM(args, i));
    PyObject *result = PyList_New(s->n_out);
    if (result == NULL) return NULL;
    for (int j = 0, at = 0; j < s->n_out; at += s->ranks[s->n_in + j], j++) {
        PyObject *o = output(s, j, s->ranks[s->n_in + j], dims + at);
        if (o == NULL) { Py_DECREF(result); return NULL; }
        PyList_SET_ITEM(result, j, o);
        outs[j] = PyArray_DATA((PyArrayObject *)o);
    }
    int owned, rc;
    uint8_t *arena = arena_take(s, s->arena_bytes(sym), &owned);
    if (arena == NULL) { Py_DECREF(result); return PyErr_NoMemory(); }
    int threads = s->threads;
    swap_threads_fn swap = threads > 0 ? s->swap_threads : NULL;
    Py_BEGIN_ALLOW_THREADS
    int before = swap ? swap(threads) : 0;
    rc = s->entry(ins, outs, sym, arena, s->consts);
    if (swap) swap(before);
    Py_END_ALLOW_THREADS
    arena_give(s, arena, owned);
    if (rc != 0) { /* the exception `failure(rc)` makes, from the library's message for this thread */
        Py_DECREF(result);
        PyObject *exc = PyObject_CallFunction(s->error, "i", rc);
        if (exc != NULL) {
            PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
            Py_DECREF(exc);
        }
        return NULL;
    }
    return result;
}

/* set_threads(n, swap): run with n threads (0: the process's count) through the library's cuvil_swap_call_threads. */
static PyObject *Caller_set_threads(PyObject *self, PyObject *args)
{
    Caller *s = (Caller *)self;
    int n;
    unsigned long long swap;
    if (!PyArg_ParseTuple(args, "iK", &n, &swap)) return NULL;
    s->swap_threads = (swap_threads_fn)(uintptr_t)swap;
    s->threads = n > 0 && swap ? n : 0;
    Py_RETURN_NONE;
}

static PyMethodDef Caller_methods[] = {
    {"set_threads", Caller_set_threads, METH_VARARGS, "set_threads(n, swap_address): this function's thread count"},
    {NULL, NULL, 0, NULL},
};

static void Caller_dealloc(PyObject *self)
{
    Caller *s = (Caller *)self;
    for (int k = 0; s->dtypes && k < s->n_in + s->n_out; k++) Py_XDECREF(s->dtypes[k]);
    for (int k = 0; s->pool && k < POOL * s->n_out; k++) Py_XDECREF(s->pool[k]);
    Py_XDECREF(s->error);
    free(s->dtypes); free(s->ranks); free(s->code); free(s->pool); free(s->arena);
    Py_TYPE(self)->tp_free(self);
}

/* dtypes: a sequence of n_in + n_out numpy dtypes; ranks likewise; code: the program as int64 bytes. */
static int Caller_init(PyObject *self, PyObject *args, PyObject *kwargs)
{
    Caller *s = (Caller *)self;
    unsigned long long entry, arena_bytes, consts;
    PyObject *dtypes, *ranks, *error;
    Py_buffer code;
    if (s->dtypes != NULL || kwargs != NULL) {
        PyErr_SetString(PyExc_TypeError, "Caller takes positional arguments, once");
        return -1;
    }
    if (!PyArg_ParseTuple(args, "KKKiOOiy*On", &entry, &arena_bytes, &consts, &s->n_in, &dtypes, &ranks, &s->n_sym,
                          &code, &error, &s->pool_bytes))
        return -1;
    int n = (int)PySequence_Size(dtypes);
    s->n_out = n - s->n_in;
    s->n_code = (int)(code.len / sizeof(int64_t));
    s->dtypes = calloc(n + 1, sizeof(PyArray_Descr *));
    s->ranks = calloc(n + 1, sizeof(int));
    s->code = malloc(code.len + sizeof(int64_t));
    s->pool = calloc(POOL * (s->n_out > 0 ? s->n_out : 0) + 1, sizeof(PyObject *));
    if (!s->dtypes || !s->ranks || !s->code || !s->pool || s->n_out < 0 || PySequence_Size(ranks) != n) {
        PyBuffer_Release(&code);
        PyErr_SetString(PyExc_ValueError, "Caller: inconsistent arguments (or out of memory)");
        return -1;
    }
    memcpy(s->code, code.buf, code.len);
    PyBuffer_Release(&code);
    for (int k = 0; k < n; k++) {
        PyObject *d = PySequence_GetItem(dtypes, k), *r = PySequence_GetItem(ranks, k);
        int ok = d && r && PyArray_DescrCheck(d);
        s->ranks[k] = ok ? (int)PyLong_AsLong(r) : -1;
        if (k >= s->n_in && ok) s->out_dims += s->ranks[k];
        s->dtypes[k] = ok ? (PyArray_Descr *)d : NULL;
        if (!ok) Py_XDECREF(d);
        Py_XDECREF(r);
        if (!ok || s->ranks[k] < 0 || s->ranks[k] > NPY_MAXDIMS) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "Caller: dtypes must be numpy dtypes, ranks ints");
            return -1;
        }
    }
    s->entry = (entry_fn)(uintptr_t)entry;
    s->arena_bytes = (arena_fn)(uintptr_t)arena_bytes;
    s->consts = (const void *const *)(uintptr_t)consts;
    Py_INCREF(error);
    s->error = error;
    return 0;
}

static PyTypeObject CallerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cuvil_fastcall.Caller",
    .tp_doc = "Caller(entry, arena_bytes, consts, n_in, dtypes, ranks, n_sym, code, error, pool_bytes)",
    .tp_basicsize = sizeof(Caller),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = Caller_init,
    .tp_dealloc = Caller_dealloc,
    .tp_call = Caller_call,
    .tp_methods = Caller_methods,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, .m_name = "cuvil_fastcall", .m_size = -1};

PyMODINIT_FUNC PyInit_cuvil_fastcall(void)
{
    import_array();
    if (PyType_Ready(&CallerType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&CallerType);
    if (PyModule_AddObject(m, "Caller", (PyObject *)&CallerType) < 0) {
        Py_DECREF(&CallerType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
