/* wsprof's compiled recording path: the capture ring writer and the per-call hooks.
 *
 * The Python modules wsprof.capture.collectives and wsprof.capture.functional decide what is
 * hooked and hold every rare path (errors, unusual arguments, first sight of a dtype, group
 * or caller site); this file does the common case of each call in C:
 *
 *   Ring          the ring of fixed-size records in a shared file mapping
 *                 (format: wsprof/trace/ring.py); put() for Python writers.
 *   Tls           the open-call slot of the calling thread, shared with the Python hooks.
 *   ApiCore       the API-layer hook's work, called by a small Python function (so that
 *                 torch.compile still finds a Python function to remap).
 *   BackendHook   a ProcessGroup method (method descriptor): backend time of the open call.
 *   WaitHook      Work.wait: backend time of the open call, else completion of an async call.
 *   OpHook        the _op of a functional collective (DTensor, FSDP2, compiled graphs).
 *   WaitTensorHook the _op of wait_tensor: completion of a functional collective.
 *
 * A hook never changes a collective's arguments, result, exception or async handle: the
 * original is called with exactly what the caller passed and its result (or its exception,
 * untouched) is handed back. Every error of the recording itself is reported to the Python
 * side (internal_error) and cleared.
 *
 * The GIL is held throughout, so ring slots are taken without atomics.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#include <pythread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#define RECORD_WORDS 16
#define RECORD_BYTES 128
#define HEADER_BYTES 4096
#define CHECK_SALT 0x575350524F462121LL /* must equal wsprof.trace.ring.CHECK_SALT */
#define KIND_CALL 1
#define KIND_UPDATE 2
#define STEP_WORD 10 /* index of step in the 13 payload words */

static inline int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* ------------------------------------------------------------------------------------ Ring */

typedef struct {
    PyObject_HEAD
    Py_buffer view;
    int has_view;
    char *base;
    int64_t capacity;
    int64_t head;
    int64_t drained;
    int64_t dropped;
    int64_t calls; /* call records written */
    PyObject *dropped_by_step; /* dict step -> count */
    int closed;
} Ring;

static PyTypeObject RingType;

/* Write one record; w[0] is word 1 (kind | hook << 8), w[1..13] the payload. 0: dropped. */
static int ring_put(Ring *r, const int64_t *w) {
    if (r->closed) return 0;
    int64_t seq = r->head + 1;
    if (seq - r->drained > r->capacity) {
        r->dropped++;
        if ((w[0] & 0xFF) == KIND_CALL && r->dropped_by_step != NULL) {
            PyObject *err_t, *err_v, *err_tb;
            PyErr_Fetch(&err_t, &err_v, &err_tb);
            PyObject *key = PyLong_FromLongLong(w[1 + STEP_WORD]);
            if (key != NULL) {
                PyObject *old = PyDict_GetItemWithError(r->dropped_by_step, key);
                long long n = old != NULL ? PyLong_AsLongLong(old) : 0;
                PyObject *val = PyLong_FromLongLong(n + 1);
                if (val != NULL) {
                    PyDict_SetItem(r->dropped_by_step, key, val);
                    Py_DECREF(val);
                }
                Py_DECREF(key);
            }
            PyErr_Clear();
            PyErr_Restore(err_t, err_v, err_tb);
        }
        return 0;
    }
    int64_t *rec = (int64_t *)(r->base + HEADER_BYTES + (seq & (r->capacity - 1)) * RECORD_BYTES);
    int64_t check = CHECK_SALT ^ seq;
    for (int i = 0; i < 14; i++) check ^= w[i];
    rec[0] = seq;
    memcpy(rec + 1, w, 14 * sizeof(int64_t));
    rec[15] = check;
    r->head = seq;
    if ((w[0] & 0xFF) == KIND_CALL) r->calls++;
    return 1;
}

static int Ring_init(Ring *self, PyObject *args, PyObject *kwds) {
    PyObject *mm;
    long long capacity;
    if (!PyArg_ParseTuple(args, "OL", &mm, &capacity)) return -1;
    if (capacity < 1 || (capacity & (capacity - 1))) {
        PyErr_SetString(PyExc_ValueError, "ring capacity must be a power of two");
        return -1;
    }
    if (PyObject_GetBuffer(mm, &self->view, PyBUF_WRITABLE | PyBUF_SIMPLE) < 0) return -1;
    self->has_view = 1;
    if (self->view.len < HEADER_BYTES + capacity * RECORD_BYTES) {
        PyBuffer_Release(&self->view);
        self->has_view = 0;
        PyErr_SetString(PyExc_ValueError, "mapping smaller than the ring");
        return -1;
    }
    self->base = (char *)self->view.buf;
    self->capacity = capacity;
    self->head = self->drained = self->dropped = self->calls = 0;
    self->closed = 0;
    self->dropped_by_step = PyDict_New();
    return self->dropped_by_step == NULL ? -1 : 0;
}

static void ring_release(Ring *self) {
    self->closed = 1;
    if (self->has_view) {
        PyBuffer_Release(&self->view);
        self->has_view = 0;
    }
}

static void Ring_dealloc(Ring *self) {
    ring_release(self);
    Py_XDECREF(self->dropped_by_step);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Ring_put(Ring *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 14) {
        PyErr_SetString(PyExc_TypeError, "put() takes 14 integers");
        return NULL;
    }
    int64_t w[14];
    for (int i = 0; i < 14; i++) {
        w[i] = PyLong_AsLongLong(args[i]);
        if (w[i] == -1 && PyErr_Occurred()) return NULL;
    }
    if (ring_put(self, w)) Py_RETURN_TRUE;
    Py_RETURN_FALSE;
}

static PyObject *Ring_close(Ring *self, PyObject *unused) {
    ring_release(self);
    Py_RETURN_NONE;
}

static PyObject *Ring_disable_in_child(Ring *self, PyObject *unused) {
    self->closed = 1; /* the mapping is the parent's: never write it */
    Py_RETURN_NONE;
}

static PyMethodDef Ring_methods[] = {
    {"put", (PyCFunction)(void (*)(void))Ring_put, METH_FASTCALL,
     "put(w1, *13 payload words) -> bool: write the next record (False: full, dropped)."},
    {"close", (PyCFunction)Ring_close, METH_NOARGS, "Stop writing and release the mapping."},
    {"disable_in_child", (PyCFunction)Ring_disable_in_child, METH_NOARGS,
     "After fork(), in the child: never write the parent's ring."},
    {NULL}};

static PyObject *Ring_get_int(Ring *self, void *which) {
    switch ((intptr_t)which) {
        case 0: return PyLong_FromLongLong(self->head);
        case 1: return PyLong_FromLongLong(self->drained);
        case 2: return PyLong_FromLongLong(self->dropped);
        case 3: return PyLong_FromLongLong(self->capacity);
        case 4: return PyBool_FromLong(self->closed);
        case 6: return PyLong_FromLongLong(self->calls);
        default: Py_RETURN_TRUE; /* native */
    }
}

static int Ring_set_drained(Ring *self, PyObject *value, void *unused) {
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete drained");
        return -1;
    }
    long long v = PyLong_AsLongLong(value);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (v < 0 || v > self->head) {
        PyErr_SetString(PyExc_ValueError, "drained must be between 0 and head");
        return -1;
    }
    self->drained = v;
    return 0;
}

static PyObject *Ring_get_dropped_by_step(Ring *self, void *unused) {
    Py_INCREF(self->dropped_by_step);
    return self->dropped_by_step;
}

static PyGetSetDef Ring_getset[] = {
    {"head", (getter)Ring_get_int, NULL, "last sequence number written", (void *)0},
    {"drained", (getter)Ring_get_int, (setter)Ring_set_drained,
     "last sequence number in the trace", (void *)1},
    {"dropped", (getter)Ring_get_int, NULL, "records refused by a full ring", (void *)2},
    {"capacity", (getter)Ring_get_int, NULL, "records", (void *)3},
    {"closed", (getter)Ring_get_int, NULL, "no longer written", (void *)4},
    {"native", (getter)Ring_get_int, NULL, "the compiled ring", (void *)5},
    {"calls", (getter)Ring_get_int, NULL, "call records written", (void *)6},
    {"dropped_by_step", (getter)Ring_get_dropped_by_step, NULL, "step -> dropped calls", NULL},
    {NULL}};

static PyTypeObject RingType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "wsprof.capture._fasthooks.Ring",
    .tp_basicsize = sizeof(Ring),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Ring(mapping, capacity): the capture ring writer (see wsprof.capture.buffer).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Ring_init,
    .tp_dealloc = (destructor)Ring_dealloc,
    .tp_methods = Ring_methods,
    .tp_getset = Ring_getset,
};

/* ----------------------------------------------------------------------- shared state */

/* The open API call of this thread: a Python list [backend_ns, n_backend, inside, pg], the
 * same record the Python hooks use. A strong reference while the call is open. */
static _Thread_local PyObject *t_call = NULL;

static struct {
    Ring *ring; /* strong; NULL: not recording */
    PyObject *tensor_type, *parameter_type, *dtype_ids, *group_ids, *group_name_ids;
    PyObject *fast_sites, *phase_ids, *markers, *phase_var, *coalescing, *pending_by_id;
    /* Python fallbacks */
    PyObject *record_slow, *intern_dtype, *site_of, *group_id, *async_flag, *payload_slow;
    PyObject *phase_id, *internal_error, *completed, *register_outputs, *intern_group;
    long long max_async;
    uint64_t epoch; /* bumped by configure(): caller-site caches are per trace */
} S;

static PyObject *str_nbytes, *str_dtype, *str_step, *str_main_stack, *str_group_name,
    *empty_tuple;

static inline int recording(void) { return S.ring != NULL && !S.ring->closed; }

/* Report the pending Python error of the recording path and clear it. */
static void report_error(const char *where) {
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyErr_NormalizeException(&t, &v, &tb);
    if (S.internal_error != NULL && v != NULL) {
        PyObject *r = PyObject_CallFunction(S.internal_error, "sO", where, v);
        Py_XDECREF(r);
        PyErr_Clear();
    }
    Py_XDECREF(t);
    Py_XDECREF(v);
    Py_XDECREF(tb);
}

/* A Python int result of a fallback, as int64; -1 and an error set on failure. */
static int64_t call_long(PyObject *fn, PyObject *const *args, size_t n) {
    PyObject *r = PyObject_Vectorcall(fn, args, n, NULL);
    if (r == NULL) return -1;
    int64_t v = PyLong_AsLongLong(r);
    Py_DECREF(r);
    return v;
}

static inline int64_t list_long(PyObject *c, Py_ssize_t i) {
    return PyLong_AsLongLong(PyList_GET_ITEM(c, i));
}

static inline int list_set_long(PyObject *c, Py_ssize_t i, int64_t v) {
    PyObject *o = PyLong_FromLongLong(v);
    if (o == NULL) return -1;
    PyObject *old = PyList_GET_ITEM(c, i);
    PyList_SET_ITEM(c, i, o);
    Py_DECREF(old);
    return 0;
}

static inline void list_set(PyObject *c, Py_ssize_t i, PyObject *o) {
    Py_INCREF(o);
    PyObject *old = PyList_GET_ITEM(c, i);
    PyList_SET_ITEM(c, i, o);
    Py_DECREF(old);
}

static PyObject *new_call(long n_backend, int inside) {
    PyObject *c = PyList_New(4);
    if (c == NULL) return NULL;
    PyList_SET_ITEM(c, 0, PyLong_FromLong(0));
    PyList_SET_ITEM(c, 1, PyLong_FromLong(n_backend));
    PyObject *b = inside ? Py_True : Py_False;
    Py_INCREF(b);
    PyList_SET_ITEM(c, 2, b);
    Py_INCREF(Py_None);
    PyList_SET_ITEM(c, 3, Py_None);
    return c;
}

/* Payload bytes and dtype id of a plain tensor. */
static int tensor_payload(PyObject *a, int64_t *nbytes, int64_t *dt) {
    PyObject *nb = PyObject_GetAttr(a, str_nbytes);
    if (nb == NULL) {
        PyErr_Clear(); /* sparse: unknown bytes, still a call */
        *nbytes = -1;
    } else {
        *nbytes = PyLong_AsLongLong(nb);
        Py_DECREF(nb);
        if (*nbytes == -1 && PyErr_Occurred()) PyErr_Clear();
    }
    PyObject *dtype = PyObject_GetAttr(a, str_dtype);
    if (dtype == NULL) return -1;
    PyObject *id = PyDict_GetItemWithError(S.dtype_ids, dtype);
    if (id != NULL) {
        *dt = PyLong_AsLongLong(id);
    } else if (PyErr_Occurred()) {
        Py_DECREF(dtype);
        return -1;
    } else {
        *dt = call_long(S.intern_dtype, &dtype, 1);
    }
    Py_DECREF(dtype);
    return (*dt == -1 && PyErr_Occurred()) ? -1 : 0;
}

static int slow_payload(PyObject *args, PyObject *kwargs, int64_t *nbytes, int64_t *dt) {
    PyObject *a[2] = {args, kwargs != NULL ? kwargs : Py_None};
    PyObject *r = PyObject_Vectorcall(S.payload_slow, a, 2, NULL);
    if (r == NULL) return -1;
    if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) != 2) {
        Py_DECREF(r);
        PyErr_SetString(PyExc_TypeError, "payload_slow must return (bytes, dtype id)");
        return -1;
    }
    *nbytes = PyLong_AsLongLong(PyTuple_GET_ITEM(r, 0));
    *dt = PyLong_AsLongLong(PyTuple_GET_ITEM(r, 1));
    Py_DECREF(r);
    return PyErr_Occurred() ? -1 : 0;
}

/* Site id of frame f (a borrowed reference), with a one-entry cache per hook. */
typedef struct {
    PyObject *code; /* strong */
    int lasti;
    int64_t site;
    uint64_t epoch;
} SiteCache;

static int64_t site_id(PyFrameObject *f, SiteCache *cache) {
    if (f == NULL) return -1;
    PyCodeObject *code = PyFrame_GetCode(f);
    int lasti = PyFrame_GetLasti(f);
    if ((PyObject *)code == cache->code && lasti == cache->lasti && cache->epoch == S.epoch) {
        Py_DECREF(code);
        return cache->site;
    }
    int64_t site;
    PyObject *lasti_o = PyLong_FromLong(lasti);
    PyObject *key = lasti_o != NULL ? PyTuple_Pack(2, (PyObject *)code, lasti_o) : NULL;
    Py_XDECREF(lasti_o);
    if (key == NULL) {
        Py_DECREF(code);
        return -1;
    }
    PyObject *cached = PyDict_GetItemWithError(S.fast_sites, key);
    Py_DECREF(key);
    if (cached != NULL) {
        site = PyLong_AsLongLong(cached);
    } else if (PyErr_Occurred()) {
        Py_DECREF(code);
        return -1;
    } else {
        PyObject *fo = (PyObject *)f;
        site = call_long(S.site_of, &fo, 1);
    }
    if (!(site == -1 && PyErr_Occurred())) {
        Py_XSETREF(cache->code, (PyObject *)code); /* takes the reference */
        cache->lasti = lasti;
        cache->site = site;
        cache->epoch = S.epoch;
    } else {
        Py_DECREF(code);
    }
    return site;
}

static int64_t group_of(PyObject *pg) {
    if (pg == Py_None) return -1;
    PyObject *key = PyLong_FromVoidPtr(pg);
    if (key == NULL) return -1;
    PyObject *e = PyDict_GetItemWithError(S.group_ids, key);
    Py_DECREF(key);
    if (e != NULL && PyTuple_Check(e) && PyTuple_GET_SIZE(e) == 2) {
        PyObject *ref = PyTuple_GET_ITEM(e, 0);
        if (PyWeakref_Check(ref) && PyWeakref_GetObject(ref) == pg)
            return PyLong_AsLongLong(PyTuple_GET_ITEM(e, 1));
    }
    if (PyErr_Occurred()) return -1;
    return call_long(S.group_id, &pg, 1);
}

static int64_t current_step(void) {
    PyObject *v = PyObject_GetAttr(S.markers, str_step);
    if (v == NULL) return -1;
    int64_t s = PyLong_AsLongLong(v);
    Py_DECREF(v);
    return s;
}

static int64_t current_phase(int64_t ident) {
    PyObject *stack = NULL;
    if (PyContextVar_Get(S.phase_var, NULL, &stack) < 0) return -1;
    if (stack == NULL || !PyTuple_Check(stack) || PyTuple_GET_SIZE(stack) == 0) {
        Py_XDECREF(stack);
        stack = PyObject_GetAttr(S.markers, str_main_stack);
        if (stack == NULL) return -1;
        if (!PyTuple_Check(stack) || PyTuple_GET_SIZE(stack) == 0) {
            Py_DECREF(stack);
            return -1;
        }
    }
    PyObject *name = PyTuple_GET_ITEM(stack, PyTuple_GET_SIZE(stack) - 1);
    PyObject *id = PyDict_GetItemWithError(S.phase_ids, name);
    int64_t out;
    if (id != NULL) {
        out = PyLong_AsLongLong(id);
    } else if (PyErr_Occurred()) {
        out = -1;
    } else {
        PyObject *i = PyLong_FromLongLong(ident);
        out = i != NULL ? call_long(S.phase_id, &i, 1) : -1;
        Py_XDECREF(i);
    }
    Py_DECREF(stack);
    return out;
}

/* The async flag: 0 for None, else what the Python side registers. */
static int64_t async_of(PyObject *ret, int64_t t0, int64_t ident) {
    if (ret == Py_None) return 0;
    PyObject *a1 = PyLong_FromLongLong(t0), *a2 = PyLong_FromLongLong(ident);
    int64_t v = -1;
    if (a1 != NULL && a2 != NULL) {
        PyObject *a[3] = {ret, a1, a2};
        v = call_long(S.async_flag, a, 3);
    }
    Py_XDECREF(a1);
    Py_XDECREF(a2);
    return v;
}

/* The error path of any hook: the Python recorder handles it; the caller's exception is kept. */
static void record_error(int64_t word, int64_t t0, int64_t t1, PyObject *c, PyObject *args,
                         PyObject *kwargs, int depth) {
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyErr_NormalizeException(&t, &v, &tb);
    if (tb != NULL && v != NULL) PyException_SetTraceback(v, tb);
    PyObject *r = PyObject_CallFunction(S.record_slow, "OLLLOOOOOi", Py_None, (long long)word,
                                        (long long)t0, (long long)t1, c, args,
                                        kwargs != NULL ? kwargs : Py_None, Py_None,
                                        v != NULL ? v : Py_None, depth);
    Py_XDECREF(r);
    PyErr_Clear();
    PyErr_Restore(t, v, tb);
}

/* ------------------------------------------------------------------------------ Tls */

typedef struct {
    PyObject_HEAD
} Tls;

static PyObject *Tls_get_call(Tls *self, void *unused) {
    PyObject *c = t_call != NULL ? t_call : Py_None;
    Py_INCREF(c);
    return c;
}

static int Tls_set_call(Tls *self, PyObject *value, void *unused) {
    PyObject *old = t_call;
    if (value == NULL || value == Py_None) {
        t_call = NULL;
    } else {
        Py_INCREF(value);
        t_call = value;
    }
    Py_XDECREF(old);
    return 0;
}

static PyGetSetDef Tls_getset[] = {
    {"call", (getter)Tls_get_call, (setter)Tls_set_call, "the open API call of this thread",
     NULL},
    {NULL}};

static PyTypeObject TlsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "wsprof.capture._fasthooks.Tls",
    .tp_basicsize = sizeof(Tls),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The calling thread's open-call slot (``call``), shared with the C hooks.",
    .tp_new = PyType_GenericNew,
    .tp_getset = Tls_getset,
};

/* ---------------------------------------------------------------------------- ApiCore */

typedef struct {
    PyObject_HEAD
    PyObject *orig;
    int64_t word;
    SiteCache cache;
    vectorcallfunc vectorcall;
} ApiCore;

static PyObject *api_call(ApiCore *self, PyObject *args, PyObject *kwargs) {
    if (t_call != NULL || !recording()) return PyObject_Call(self->orig, args, kwargs);
    PyObject *c = new_call(0, 0);
    if (c == NULL) return PyObject_Call(self->orig, args, kwargs);
    t_call = c; /* the slot owns this reference while the call is open */
    Py_INCREF(c); /* and this function one */
    int64_t t0 = now_ns();
    PyObject *ret = PyObject_Call(self->orig, args, kwargs);
    int64_t t1 = now_ns();
    if (t_call == c) {
        t_call = NULL;
        Py_DECREF(c);
    }
    if (ret == NULL) {
        if (recording()) record_error(self->word, t0, t1, c, args, kwargs, 2);
        Py_DECREF(c);
        return NULL;
    }
    if (!recording()) {
        Py_DECREF(c);
        return ret;
    }
    int64_t n_backend = list_long(c, 1);
    if (S.coalescing != Py_None && PyDict_Check(S.coalescing) && PyDict_GET_SIZE(S.coalescing) &&
        n_backend == 0) {
        Py_DECREF(c); /* deferred into a coalescing block: its backend call is recorded */
        return ret;
    }
    int64_t w[14];
    int64_t ident = (int64_t)PyThread_get_thread_ident();
    Py_ssize_t nargs = PyTuple_GET_SIZE(args);
    PyObject *a = nargs ? PyTuple_GET_ITEM(args, 0) : NULL;
    int ok;
    if (a != NULL && (PyObject *)Py_TYPE(a) == S.tensor_type)
        ok = tensor_payload(a, &w[6], &w[7]) == 0;
    else
        ok = slow_payload(args, kwargs, &w[6], &w[7]) == 0;
    if (ok) {
        PyFrameObject *frame = PyEval_GetFrame(); /* the Python hook's own frame */
        PyFrameObject *caller = frame != NULL ? PyFrame_GetBack(frame) : NULL;
        w[10] = site_id(caller, &self->cache);
        Py_XDECREF(caller);
        ok = !(w[10] == -1 && PyErr_Occurred());
    }
    if (ok) {
        w[8] = group_of(PyList_GET_ITEM(c, 3));
        ok = !(w[8] == -1 && PyErr_Occurred());
    }
    if (ok) {
        w[9] = async_of(ret, t0, ident);
        ok = !(w[9] == -1 && PyErr_Occurred());
    }
    if (ok) {
        w[11] = current_step();
        ok = !(w[11] == -1 && PyErr_Occurred());
    }
    if (ok) {
        w[12] = current_phase(ident);
        ok = !(w[12] == -1 && PyErr_Occurred());
    }
    if (ok) {
        w[0] = self->word;
        w[1] = t0;
        w[2] = t1;
        w[3] = list_long(c, 0);
        w[4] = n_backend;
        w[5] = ident;
        w[13] = -1;
        ring_put(S.ring, w);
    } else {
        report_error("record");
    }
    Py_DECREF(c);
    return ret;
}

static PyObject *ApiCore_vectorcall(ApiCore *self, PyObject *const *args, size_t nargsf,
                                    PyObject *kwnames) {
    /* core(args_tuple, kwargs_dict): what the Python hook passes on */
    if (PyVectorcall_NARGS(nargsf) != 2 || kwnames != NULL || !PyTuple_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "core(args: tuple, kwargs: dict | None)");
        return NULL;
    }
    PyObject *k = args[1];
    return api_call(self, args[0], (k == Py_None || (PyDict_Check(k) && !PyDict_GET_SIZE(k)))
                                       ? NULL : k);
}

static int ApiCore_init(ApiCore *self, PyObject *args, PyObject *kwds) {
    PyObject *orig;
    long long word;
    if (!PyArg_ParseTuple(args, "OL", &orig, &word)) return -1;
    Py_INCREF(orig);
    Py_XSETREF(self->orig, orig);
    self->word = word;
    self->vectorcall = (vectorcallfunc)ApiCore_vectorcall;
    return 0;
}

static void ApiCore_dealloc(ApiCore *self) {
    Py_XDECREF(self->orig);
    Py_XDECREF(self->cache.code);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject ApiCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "wsprof.capture._fasthooks.ApiCore",
    .tp_basicsize = sizeof(ApiCore),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "ApiCore(orig, word): core(args, kwargs) times orig(*args, **kwargs), records it.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)ApiCore_init,
    .tp_dealloc = (destructor)ApiCore_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(ApiCore, vectorcall),
};

/* ----------------------------------------------------------- BackendHook and WaitHook */

typedef struct {
    PyObject_HEAD
    PyObject *orig;     /* the method as looked up on the class */
    PyObject *fallback; /* the Python hook: no open call, or not a C++ class */
    PyObject *native;   /* dict type -> bool: instances of torch's C++ classes */
    PyObject *classify; /* callable(type) -> bool, fills native */
    int is_wait;
    vectorcallfunc vectorcall;
    PyObject *dict;
} MethodHook;

static int is_native(MethodHook *self, PyObject *obj) {
    PyObject *tp = (PyObject *)Py_TYPE(obj);
    PyObject *v = PyDict_GetItemWithError(self->native, tp);
    if (v == NULL) {
        if (PyErr_Occurred()) return -1;
        v = PyObject_CallOneArg(self->classify, tp);
        if (v == NULL) return -1;
        int r = PyDict_SetItem(self->native, tp, v);
        Py_DECREF(v);
        if (r < 0) return -1;
        v = PyDict_GetItemWithError(self->native, tp);
        if (v == NULL) return -1;
    }
    return PyObject_IsTrue(v);
}

static PyObject *method_vectorcall(MethodHook *self, PyObject *const *args, size_t nargsf,
                                   PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *c = t_call;
    if (nargs < 1 || c == NULL) return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    int native = is_native(self, args[0]);
    if (native != 1) {
        if (native < 0) PyErr_Clear();
        return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    }
    if (PyList_GET_ITEM(c, 2) == Py_True) return PyObject_Vectorcall(self->orig, args, nargsf, kwnames);
    Py_INCREF(c);
    list_set(c, 2, Py_True);
    if (!self->is_wait) list_set(c, 3, args[0]);
    int64_t t0 = now_ns();
    PyObject *ret = PyObject_Vectorcall(self->orig, args, nargsf, kwnames);
    int64_t dt = now_ns() - t0;
    PyObject *et, *ev, *etb;
    PyErr_Fetch(&et, &ev, &etb);
    if (list_set_long(c, 0, list_long(c, 0) + dt) < 0 ||
        (!self->is_wait && list_set_long(c, 1, list_long(c, 1) + 1) < 0))
        report_error("record");
    list_set(c, 2, Py_False);
    PyErr_Restore(et, ev, etb);
    Py_DECREF(c);
    return ret;
}

static PyObject *MethodHook_descr_get(PyObject *self, PyObject *obj, PyObject *type) {
    if (obj == NULL || obj == Py_None) {
        Py_INCREF(self);
        return self;
    }
    return PyMethod_New(self, obj);
}

static int MethodHook_init(MethodHook *self, PyObject *args, PyObject *kwds) {
    PyObject *orig, *fallback, *classify;
    int is_wait;
    if (!PyArg_ParseTuple(args, "OOOp", &orig, &fallback, &classify, &is_wait)) return -1;
    Py_INCREF(orig);
    Py_XSETREF(self->orig, orig);
    Py_INCREF(fallback);
    Py_XSETREF(self->fallback, fallback);
    Py_INCREF(classify);
    Py_XSETREF(self->classify, classify);
    Py_XSETREF(self->native, PyDict_New());
    self->is_wait = is_wait;
    self->vectorcall = (vectorcallfunc)method_vectorcall;
    return self->native == NULL ? -1 : 0;
}

static int MethodHook_traverse(MethodHook *self, visitproc visit, void *arg) {
    Py_VISIT(self->dict);
    Py_VISIT(self->fallback);
    return 0;
}

static int MethodHook_clear(MethodHook *self) {
    Py_CLEAR(self->dict);
    return 0;
}

static void MethodHook_dealloc(MethodHook *self) {
    PyObject_GC_UnTrack(self);
    Py_XDECREF(self->orig);
    Py_XDECREF(self->fallback);
    Py_XDECREF(self->native);
    Py_XDECREF(self->classify);
    Py_XDECREF(self->dict);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyGetSetDef dict_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL}, {NULL}};

static PyTypeObject MethodHookType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "wsprof.capture._fasthooks.MethodHook",
    .tp_basicsize = sizeof(MethodHook),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR |
                Py_TPFLAGS_HAVE_GC,
    .tp_doc = "MethodHook(orig, fallback, classify, is_wait): a ProcessGroup method or Work.wait "
              "that adds its time to the open API call (see wsprof.capture.collectives).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)MethodHook_init,
    .tp_dealloc = (destructor)MethodHook_dealloc,
    .tp_traverse = (traverseproc)MethodHook_traverse,
    .tp_clear = (inquiry)MethodHook_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(MethodHook, vectorcall),
    .tp_descr_get = MethodHook_descr_get,
    .tp_dictoffset = offsetof(MethodHook, dict),
    .tp_getset = dict_getset,
};

/* -------------------------------------------------------------- OpHook, WaitTensorHook */

typedef struct {
    PyObject_HEAD
    PyObject *orig;
    PyObject *fallback; /* the Python hook: any call this one does not take */
    int64_t word;
    int p2p;
    int is_wait;
    SiteCache cache;
    vectorcallfunc vectorcall;
    PyObject *dict;
} OpHook;

static inline int plain_tensor(PyObject *t) {
    PyObject *tp = (PyObject *)Py_TYPE(t);
    return tp == S.tensor_type || tp == S.parameter_type;
}

static PyObject *wait_tensor_call(OpHook *self, PyObject *const *args, size_t nargsf,
                                  PyObject *kwnames) {
    PyObject *ret = PyObject_Vectorcall(self->orig, args, nargsf, kwnames);
    if (ret == NULL || !recording() || PyVectorcall_NARGS(nargsf) < 1 ||
        PyDict_GET_SIZE(S.pending_by_id) == 0)
        return ret;
    PyObject *key = PyLong_FromVoidPtr(args[0]);
    if (key == NULL) {
        report_error("wait_tensor");
        return ret;
    }
    PyObject *e = PyDict_GetItemWithError(S.pending_by_id, key);
    if (e != NULL && PyTuple_Check(e) && PyTuple_GET_SIZE(e) == 2) {
        int64_t w[14] = {KIND_UPDATE, PyLong_AsLongLong(PyTuple_GET_ITEM(e, 0)),
                         PyLong_AsLongLong(PyTuple_GET_ITEM(e, 1)), now_ns(), -1};
        if (PyDict_DelItem(S.pending_by_id, key) == 0 && !PyErr_Occurred()) ring_put(S.ring, w);
    }
    if (PyErr_Occurred()) report_error("wait_tensor");
    Py_DECREF(key);
    return ret;
}

static PyObject *op_vectorcall(OpHook *self, PyObject *const *args, size_t nargsf,
                               PyObject *kwnames) {
    if (self->is_wait) return wait_tensor_call(self, args, nargsf, kwnames);
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (t_call != NULL || !recording() || nargs == 0)
        return PyObject_Vectorcall(self->orig, args, nargsf, kwnames);
    PyObject *a = args[0];
    PyObject *first = (PyList_CheckExact(a) && PyList_GET_SIZE(a)) ? PyList_GET_ITEM(a, 0) : a;
    if (!plain_tensor(first)) /* not first (batch_p2p_ops), or a fake/functional tensor */
        return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    PyObject *c = new_call(1, 1);
    if (c == NULL) return PyObject_Vectorcall(self->orig, args, nargsf, kwnames);
    t_call = c;
    Py_INCREF(c);
    int64_t t0 = now_ns();
    PyObject *ret = PyObject_Vectorcall(self->orig, args, nargsf, kwnames);
    int64_t t1 = now_ns();
    if (t_call == c) {
        t_call = NULL;
        Py_DECREF(c);
    }
    if (ret == NULL) {
        if (recording()) {
            /* raised: counted as issuing nothing (the audit's side) */
            PyObject *et, *ev, *etb;
            PyErr_Fetch(&et, &ev, &etb);
            list_set_long(c, 0, t1 - t0);
            list_set_long(c, 1, 0);
            PyObject *tup = PyTuple_New(nargs);
            PyObject *kw = kwnames != NULL ? PyDict_New() : NULL;
            if (tup != NULL) {
                for (Py_ssize_t i = 0; i < nargs; i++) {
                    Py_INCREF(args[i]);
                    PyTuple_SET_ITEM(tup, i, args[i]);
                }
            }
            if (kw != NULL) {
                for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); i++)
                    PyDict_SetItem(kw, PyTuple_GET_ITEM(kwnames, i), args[nargs + i]);
            }
            PyErr_Clear();
            PyErr_Restore(et, ev, etb);
            if (tup != NULL) record_error(self->word, t0, t1, c, tup, kw, 1);
            Py_XDECREF(tup);
            Py_XDECREF(kw);
        }
        Py_DECREF(c);
        return NULL;
    }
    if (!recording()) {
        Py_DECREF(c);
        return ret;
    }
    int64_t w[14];
    int64_t ident = (int64_t)PyThread_get_thread_ident();
    int ok;
    if ((PyObject *)Py_TYPE(a) == S.tensor_type) {
        ok = tensor_payload(a, &w[6], &w[7]) == 0;
    } else {
        PyObject *one = PyTuple_Pack(1, a);
        ok = one != NULL && slow_payload(one, NULL, &w[6], &w[7]) == 0;
        Py_XDECREF(one);
    }
    if (ok) { /* the group: keyword group_name, else a str last positional argument */
        PyObject *g = NULL;
        if (kwnames != NULL) {
            for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); i++) {
                if (PyUnicode_Compare(PyTuple_GET_ITEM(kwnames, i), str_group_name) == 0) {
                    g = args[nargs + i];
                    break;
                }
            }
            if (PyErr_Occurred()) PyErr_Clear();
        }
        if (g == NULL && PyUnicode_CheckExact(args[nargs - 1])) g = args[nargs - 1];
        if (g == NULL || g == Py_None) {
            w[8] = -1;
        } else {
            PyObject *id = PyDict_GetItemWithError(S.group_name_ids, g);
            w[8] = id != NULL ? PyLong_AsLongLong(id)
                              : (PyErr_Occurred() ? -1 : call_long(S.intern_group, &g, 1));
        }
        ok = !(w[8] == -1 && PyErr_Occurred());
    }
    if (ok) {
        /* the caller is OpOverload(Packet).__call__ (torch): start above it */
        PyFrameObject *frame = PyEval_GetFrame();
        PyFrameObject *caller = frame != NULL ? PyFrame_GetBack(frame) : NULL;
        if (caller == NULL && frame != NULL) {
            Py_INCREF(frame);
            caller = frame;
        }
        w[10] = site_id(caller, &self->cache);
        Py_XDECREF(caller);
        ok = !(w[10] == -1 && PyErr_Occurred());
    }
    if (ok) {
        PyObject *t0o = PyLong_FromLongLong(t0), *io = PyLong_FromLongLong(ident);
        PyObject *val = (t0o && io) ? PyTuple_Pack(2, t0o, io) : NULL;
        Py_XDECREF(t0o);
        Py_XDECREF(io);
        if (val == NULL) {
            ok = 0;
        } else if ((PyObject *)Py_TYPE(ret) == S.tensor_type &&
                   PyDict_GET_SIZE(S.pending_by_id) < S.max_async) {
            PyObject *key = PyLong_FromVoidPtr(ret);
            ok = key != NULL && PyDict_SetItem(S.pending_by_id, key, val) == 0;
            Py_XDECREF(key);
            w[9] = 1;
        } else {
            PyObject *t0p = PyTuple_GET_ITEM(val, 0), *ip = PyTuple_GET_ITEM(val, 1);
            PyObject *ca[3] = {ret, t0p, ip};
            w[9] = call_long(S.register_outputs, ca, 3);
            ok = !(w[9] == -1 && PyErr_Occurred());
        }
        Py_XDECREF(val);
    }
    if (ok) {
        w[11] = current_step();
        ok = !(w[11] == -1 && PyErr_Occurred());
    }
    if (ok) {
        w[12] = current_phase(ident);
        ok = !(w[12] == -1 && PyErr_Occurred());
    }
    if (ok) {
        w[0] = self->word;
        w[1] = t0;
        w[2] = t1;
        w[3] = t1 - t0;
        w[4] = self->p2p && PyList_Check(a) ? PyList_GET_SIZE(a) : 1;
        w[5] = ident;
        w[13] = -1;
        ring_put(S.ring, w);
    } else {
        report_error("record");
    }
    Py_DECREF(c);
    return ret;
}

static int OpHook_init(OpHook *self, PyObject *args, PyObject *kwds) {
    PyObject *orig, *fallback;
    long long word;
    int p2p, is_wait;
    if (!PyArg_ParseTuple(args, "OOLpp", &orig, &fallback, &word, &p2p, &is_wait)) return -1;
    Py_INCREF(orig);
    Py_XSETREF(self->orig, orig);
    Py_INCREF(fallback);
    Py_XSETREF(self->fallback, fallback);
    self->word = word;
    self->p2p = p2p;
    self->is_wait = is_wait;
    self->vectorcall = (vectorcallfunc)op_vectorcall;
    return 0;
}

static int OpHook_traverse(OpHook *self, visitproc visit, void *arg) {
    Py_VISIT(self->dict);
    Py_VISIT(self->fallback);
    Py_VISIT(self->orig);
    return 0;
}

static int OpHook_clear(OpHook *self) {
    Py_CLEAR(self->dict);
    return 0;
}

static void OpHook_dealloc(OpHook *self) {
    PyObject_GC_UnTrack(self);
    Py_XDECREF(self->orig);
    Py_XDECREF(self->fallback);
    Py_XDECREF(self->cache.code);
    Py_XDECREF(self->dict);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject OpHookType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "wsprof.capture._fasthooks.OpHook",
    .tp_basicsize = sizeof(OpHook),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "OpHook(orig, fallback, word, p2p, is_wait): the _op of a functional collective "
              "(or of wait_tensor) (see wsprof.capture.functional).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)OpHook_init,
    .tp_dealloc = (destructor)OpHook_dealloc,
    .tp_traverse = (traverseproc)OpHook_traverse,
    .tp_clear = (inquiry)OpHook_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(OpHook, vectorcall),
    .tp_dictoffset = offsetof(OpHook, dict),
    .tp_getset = dict_getset,
};

/* ---------------------------------------------------------------------------- module */

#define STATE_FIELDS(X)                                                                     \
    X(tensor_type) X(parameter_type) X(dtype_ids) X(group_ids) X(group_name_ids)               \
    X(fast_sites) X(phase_ids) X(markers) X(phase_var) X(coalescing) X(pending_by_id)          \
    X(record_slow) X(intern_dtype) X(site_of) X(group_id) X(async_flag) X(payload_slow)        \
    X(phase_id) X(internal_error) X(completed) X(register_outputs) X(intern_group)

static PyObject *configure(PyObject *mod, PyObject *args, PyObject *kwargs) {
    if (kwargs == NULL) Py_RETURN_NONE;
#define SET_FIELD(name)                                                                      \
    {                                                                                         \
        PyObject *v = PyDict_GetItemString(kwargs, #name);                                    \
        if (v != NULL) {                                                                      \
            Py_INCREF(v);                                                                     \
            Py_XSETREF(S.name, v);                                                            \
        }                                                                                     \
    }
    STATE_FIELDS(SET_FIELD)
#undef SET_FIELD
    PyObject *m = PyDict_GetItemString(kwargs, "max_async");
    if (m != NULL) S.max_async = PyLong_AsLongLong(m);
    S.epoch++;
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_NONE;
}

static PyObject *set_ring(PyObject *mod, PyObject *ring) {
    if (ring == Py_None) {
        Py_CLEAR(S.ring);
        Py_RETURN_NONE;
    }
    if (!PyObject_TypeCheck(ring, &RingType)) {
        PyErr_SetString(PyExc_TypeError, "set_ring takes a Ring or None");
        return NULL;
    }
#define MISSING(name) || S.name == NULL
    if (0 STATE_FIELDS(MISSING)) {
        PyErr_SetString(PyExc_RuntimeError, "configure() every field before set_ring()");
        return NULL;
    }
#undef MISSING
    Py_INCREF(ring);
    Py_XSETREF(S.ring, (Ring *)ring);
    Py_RETURN_NONE;
}

static PyObject *get_ring(PyObject *mod, PyObject *unused) {
    PyObject *r = S.ring != NULL ? (PyObject *)S.ring : Py_None;
    Py_INCREF(r);
    return r;
}

static PyMethodDef module_methods[] = {
    {"configure", (PyCFunction)(void (*)(void))configure, METH_VARARGS | METH_KEYWORDS,
     "configure(**state): the objects and Python fallbacks the hooks use."},
    {"set_ring", set_ring, METH_O, "set_ring(ring | None): where the hooks write (None: off)."},
    {"get_ring", get_ring, METH_NOARGS, "The ring the hooks write to, or None."},
    {NULL}};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_fasthooks",
    "wsprof's compiled recording path (see wsprof/capture/_fasthooks.c).", -1, module_methods};

PyMODINIT_FUNC PyInit__fasthooks(void) {
    PyTypeObject *types[] = {&RingType, &TlsType, &ApiCoreType, &MethodHookType, &OpHookType};
    const char *names[] = {"Ring", "Tls", "ApiCore", "MethodHook", "OpHook"};
    for (int i = 0; i < 5; i++)
        if (PyType_Ready(types[i]) < 0) return NULL;
    str_nbytes = PyUnicode_InternFromString("nbytes");
    str_dtype = PyUnicode_InternFromString("dtype");
    str_step = PyUnicode_InternFromString("step");
    str_main_stack = PyUnicode_InternFromString("main_stack");
    str_group_name = PyUnicode_InternFromString("group_name");
    empty_tuple = PyTuple_New(0);
    if (!str_nbytes || !str_dtype || !str_step || !str_main_stack || !str_group_name ||
        !empty_tuple)
        return NULL;
    S.max_async = 65536;
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL) return NULL;
    for (int i = 0; i < 5; i++) {
        Py_INCREF(types[i]);
        if (PyModule_AddObject(m, names[i], (PyObject *)types[i]) < 0) return NULL;
    }
    if (PyModule_AddObject(m, "CHECK_SALT", PyLong_FromLongLong(CHECK_SALT)) < 0) return NULL;
    return m;
}
