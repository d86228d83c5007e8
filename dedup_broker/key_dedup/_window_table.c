/* The single writer's exact memory of a key window, in C: open-addressing tables of
 * 16-byte keys with a 32-bit anchor offset, 16 bytes a slot (memory.py's WindowKeys,
 * whose pure-Python path gives the same answers; tests compare both).
 *
 * A slot holds the key's first 12 bytes (96 bits tell keys apart at any realistic
 * count) and, little-endian, the key's anchor
 * offset from its table's base plus one (0: an empty slot; all ones: a key whose write
 * failed, held by none, its slot kept so probes go on past it). The keys are SHA-256
 * digests, so their bytes are uniform: the first 8 (little-endian) choose the home
 * slot as (h * slots) >> 64, for a table of any number of slots; linear probing from
 * there. Tables are never emptied key by key: a whole table is dropped once no window
 * reaches its anchors.
 *
 * add(table, packed, offset) -> keys not held before (new slots, freed ones); find(table, keys, minimum) ->
 * [(key, offset)] of the keys held with an offset of at least ``minimum``;
 * grow(table, slots) -> keys kept in the table lengthened in place; regrow(table, slots)
 * -> a growth into a new table on a thread of its own, regrown(growth) -> (the new
 * table, keys kept) once done; merge(into, source) -> the source's keys added; claim(tables, minimums, target, packed, offset) ->
 * the keys held already, the others added; free(table, packed, offset) -> the keys a
 * lost write claimed, held by none again.
 *
 * While ``regrow`` reads a table on another thread, the only write the table takes is
 * ``free`` marking a key freed; that 32-bit word is written and read atomically (the
 * grown table may then hold the key as kept: its owner frees it there again).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "_le.h"

#define SLOT 16
#define KEY 16
#define KEPT 12 /* the first 12 bytes of a key */
#define AHEAD 8 /* keys looked ahead of the probe: their slots are fetched meanwhile */
#define FREED 0xFFFFFFFFu  /* the write holding the key failed: held by none */
#define MAX_TABLES 16

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* A slot's offset word as one atomic access: ``free`` may mark it while ``regrow`` reads
 * the table on another thread. */
static uint32_t load_kept(const uint8_t *slot) {
    uint32_t raw = __atomic_load_n((const uint32_t *)(slot + KEPT), __ATOMIC_RELAXED);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    raw = __builtin_bswap32(raw);
#endif
    return raw;
}

static void store_kept(uint8_t *slot, uint32_t value) {
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    value = __builtin_bswap32(value);
#endif
    __atomic_store_n((uint32_t *)(slot + KEPT), value, __ATOMIC_RELAXED);
}

/* A slot's offset plus one, 0 when it holds no key (empty, or freed). */
static uint32_t held_value(uint32_t v) { return v == FREED ? 0 : v; }

static uint64_t home(const uint8_t *key, uint64_t slots) {
    return (uint64_t)(((unsigned __int128)le64(key) * slots) >> 64);
}

/* The slot holding ``key``, or the empty slot where it would go; NULL when the table is
 * full and does not hold it (the caller keeps room, so only a misuse gets there). */
static uint8_t *slot_of(uint8_t *base, uint64_t slots, const uint8_t *key) {
    uint64_t i = home(key, slots);
    for (uint64_t probes = 0; probes < slots; probes++) {
        uint8_t *slot = base + i * SLOT;
        if (le32(slot + KEPT) == 0 || memcmp(slot, key, KEPT) == 0) return slot;
        if (++i == slots) i = 0;
    }
    return NULL;
}

static int table_view(PyObject *table, Py_buffer *view, int writable, uint64_t *slots) {
    if (PyObject_GetBuffer(table, view, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0) return 0;
    if (view->len % SLOT != 0 || view->len == 0) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "a window table is 1 or more slots of 16 bytes");
        return 0;
    }
    *slots = (uint64_t)(view->len / SLOT);
    return 1;
}

static PyObject *full(void) {
    PyErr_SetString(PyExc_ValueError, "the window table has no room for these keys");
    return NULL;
}

/* Checks packed keys and an offset and opens ``table`` for writing; releases ``packed``
 * and answers 0 with an error set when either is wrong. */
static int open_for_keys(PyObject *table, Py_buffer *packed, long long offset, Py_buffer *view,
                         uint64_t *slots) {
    if (packed->len % KEY != 0 || offset < 0 || offset >= 0x7FFFFFFFLL) {
        PyBuffer_Release(packed);
        PyErr_SetString(PyExc_ValueError, "packed 16-byte keys and an offset of 0..2**31-2");
        return 0;
    }
    if (!table_view(table, view, 1, slots)) {
        PyBuffer_Release(packed);
        return 0;
    }
    return 1;
}

/* ``key`` held with ``value`` (an offset plus one) unless it holds a later one, counted
 * as added (an empty slot taken) or reused (a freed key's slot); 0 when the table is full
 * and does not hold it. */
static int place(uint8_t *base, uint64_t slots, const uint8_t *key, uint32_t value,
                 Py_ssize_t *added, Py_ssize_t *reused) {
    uint8_t *slot = slot_of(base, slots, key);
    if (slot == NULL) return 0;
    uint32_t held = le32(slot + KEPT);
    if (held == 0) {
        memcpy(slot, key, KEPT);
        ++*added;
    }
    if (held == FREED) ++*reused;
    if (value > held_value(held)) put32(slot + KEPT, value);
    return 1;
}

/* add(table, packed, offset) -> (added, reused): every 16-byte key of ``packed`` gets
 * ``offset`` unless it holds a later one (a key stored again keeps its latest anchor);
 * counts of keys put in empty slots and in slots of freed keys. */
static PyObject *add(PyObject *self, PyObject *args) {
    PyObject *table;
    Py_buffer packed, view;
    long long offset;
    uint64_t slots;
    if (!PyArg_ParseTuple(args, "Oy*L", &table, &packed, &offset)) return NULL;
    if (!open_for_keys(table, &packed, offset, &view, &slots)) return NULL;
    const uint8_t *keys = (const uint8_t *)packed.buf;
    Py_ssize_t n = packed.len / KEY, added = 0, reused = 0;
    uint32_t value = (uint32_t)offset + 1;
    uint8_t *base = (uint8_t *)view.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i + AHEAD < n) __builtin_prefetch(base + home(keys + (i + AHEAD) * KEY, slots) * SLOT);
        if (!place(base, slots, keys + i * KEY, value, &added, &reused)) {
            added = -1;
            break;
        }
    }
    PyBuffer_Release(&view);
    PyBuffer_Release(&packed);
    return added < 0 ? full() : Py_BuildValue("(nn)", added, reused);
}

/* find(table, keys, minimum) -> [(key, offset)]: the keys (a sequence of 16-byte bytes)
 * held with an offset of at least ``minimum``, in order; under a load of new keys an
 * empty list, with no object made per key. */
static PyObject *find(PyObject *self, PyObject *args) {
    PyObject *table, *keys;
    long long minimum;
    Py_buffer view;
    uint64_t slots;
    if (!PyArg_ParseTuple(args, "OOL", &table, &keys, &minimum)) return NULL;
    PyObject *seq = PySequence_Fast(keys, "keys must be iterable");
    if (seq == NULL) return NULL;
    if (!table_view(table, &view, 0, &slots)) {
        Py_DECREF(seq);
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyObject *out = PyList_New(0);
    uint8_t *base = (uint8_t *)view.buf;
    for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
        PyObject *item = items[i];
        if (!PyBytes_Check(item) || PyBytes_GET_SIZE(item) != KEY) {
            PyErr_SetString(PyExc_ValueError, "window table keys are 16-byte bytes");
            Py_CLEAR(out);
            break;
        }
        if (i + AHEAD < n) {
            PyObject *next = items[i + AHEAD];
            if (PyBytes_Check(next) && PyBytes_GET_SIZE(next) == KEY)
                __builtin_prefetch(
                    base + home((const uint8_t *)PyBytes_AS_STRING(next), slots) * SLOT);
        }
        uint8_t *slot = slot_of(base, slots, (const uint8_t *)PyBytes_AS_STRING(item));
        uint32_t held = slot == NULL ? 0 : held_value(le32(slot + KEPT));
        if (held == 0 || (long long)held - 1 < minimum) continue;
        PyObject *pair = Py_BuildValue("(OI)", item, (unsigned int)(held - 1));
        if (pair == NULL || PyList_Append(out, pair) < 0) Py_CLEAR(out);
        Py_XDECREF(pair);
    }
    PyBuffer_Release(&view);
    Py_DECREF(seq);
    return out;
}

/* grow(table, slots) -> keys kept: the table (a bytearray) lengthened in place to
 * ``slots`` slots and its keys placed anew (freed keys dropped). Only the added slots
 * are new memory: a table grown into a fresh one touches every page of it, and a page
 * touched for the first time is what growing costs most (about 3 us a page on a
 * virtual machine).
 *
 * The old slots are taken from the last to the first. A key goes to the first slot from
 * its new home that holds no key placed anew: an empty one, or one still holding an old
 * key, which is then carried on and placed the same way. A key placed anew never moves
 * again and every slot on its probe path holds one too, so emptying an old key's slot
 * never cuts a path. Keys go to a home at least as far as their old one, mostly past the
 * slots still to be read: few are carried. */
static PyObject *grow(PyObject *self, PyObject *args) {
    PyObject *table;
    Py_ssize_t wanted;
    if (!PyArg_ParseTuple(args, "O!n", &PyByteArray_Type, &table, &wanted)) return NULL;
    Py_ssize_t length = PyByteArray_GET_SIZE(table);
    if (length % SLOT != 0 || wanted <= 0 || wanted > PY_SSIZE_T_MAX / SLOT ||
        wanted * SLOT < length) {
        PyErr_SetString(PyExc_ValueError, "grow(a window table, at least as many slots)");
        return NULL;
    }
    uint64_t old_slots = (uint64_t)length / SLOT, slots = (uint64_t)wanted;
    uint8_t *placed = calloc((size_t)(slots + 7) / 8, 1); /* a bit per slot placed anew */
    if (placed == NULL) return PyErr_NoMemory();
    if (PyByteArray_Resize(table, wanted * SLOT) < 0) {
        free(placed);
        return NULL;
    }
    uint8_t *base = (uint8_t *)PyByteArray_AS_STRING(table);
    memset(base + length, 0, (size_t)(wanted * SLOT - length));
#define PLACED(j) (placed[(j) >> 3] & (1u << ((j) & 7)))
    Py_ssize_t kept = 0;
    uint64_t full_probes = 0;
    for (uint64_t i = old_slots; i-- > 0;) {
        uint8_t *slot = base + i * SLOT;
        if (PLACED(i) || le32(slot + KEPT) == 0) continue;
        uint8_t carried[SLOT], held[SLOT];
        memcpy(carried, slot, SLOT);
        memset(slot, 0, SLOT);
        while (le32(carried + KEPT) != FREED) { /* a freed key is dropped */
            uint64_t j = home(carried, slots), probes = 0;
            while (PLACED(j)) {
                if (++probes == slots) break;
                if (++j == slots) j = 0;
            }
            if (probes == slots) { /* more keys than slots: only a misuse gets here */
                full_probes = 1;
                break;
            }
            placed[j >> 3] |= (uint8_t)(1u << (j & 7));
            kept++;
            uint8_t *dest = base + j * SLOT;
            int occupied = le32(dest + KEPT) != 0;
            if (occupied) memcpy(held, dest, SLOT);
            memcpy(dest, carried, SLOT);
            if (!occupied) break;
            memcpy(carried, held, SLOT);
        }
        if (full_probes) break;
    }
#undef PLACED
    free(placed);
    return full_probes ? full() : PyLong_FromSsize_t(kept);
}

/* A growth on a thread of its own, which never takes the interpreter's lock (so the
 * event loop never waits for it): the old table held open (it cannot be resized
 * meanwhile), the new one, and ``done`` set once every key is placed. */
typedef struct {
    Py_buffer from;
    PyObject *grown;
    uint8_t *into;
    uint64_t slots;
    Py_ssize_t kept;
    pthread_t thread;
    int threaded, joined, done;
} Growth;

static const char GROWTH[] = "window_table.growth";

static void *growth_run(void *arg) {
    Growth *g = (Growth *)arg;
    const uint8_t *from = (const uint8_t *)g->from.buf;
    uint64_t old_slots = (uint64_t)g->from.len / SLOT, slots = g->slots;
    Py_ssize_t kept = 0;
    memset(g->into, 0, (size_t)(slots * SLOT));
    for (uint64_t i = 0; i < old_slots; i++) {
        const uint8_t *slot = from + i * SLOT;
        uint32_t value = load_kept(slot);
        if (value == 0 || value == FREED) continue;
        uint64_t j = home(slot, slots);
        while (le32(g->into + j * SLOT + KEPT) != 0) /* more slots than keys: one is free */
            if (++j == slots) j = 0;
        memcpy(g->into + j * SLOT, slot, KEPT);
        put32(g->into + j * SLOT + KEPT, value);
        kept++;
    }
    g->kept = kept;
    __atomic_store_n(&g->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static void growth_join(Growth *g) {
    if (!g->threaded || g->joined) return;
    Py_BEGIN_ALLOW_THREADS
    pthread_join(g->thread, NULL);
    Py_END_ALLOW_THREADS
    g->joined = 1;
}

static void growth_destroy(PyObject *capsule) {
    Growth *g = (Growth *)PyCapsule_GetPointer(capsule, GROWTH);
    if (g == NULL) return;
    growth_join(g);
    PyBuffer_Release(&g->from);
    Py_XDECREF(g->grown);
    free(g);
}

/* regrow(table, slots) -> growth: a new table of ``slots`` slots taking the table's keys
 * (freed keys dropped) on a thread of its own; ``regrown`` answers it. The caller
 * writes nothing to ``table`` meanwhile but ``free``'s marks. The new table's memory is
 * first touched there too. With no thread to be had, the growth is done here. */
static PyObject *regrow(PyObject *self, PyObject *args) {
    PyObject *table;
    Py_ssize_t wanted;
    uint64_t old_slots;
    if (!PyArg_ParseTuple(args, "On", &table, &wanted)) return NULL;
    Growth *g = (Growth *)calloc(1, sizeof(Growth));
    if (g == NULL) return PyErr_NoMemory();
    if (!table_view(table, &g->from, 0, &old_slots)) {
        free(g);
        return NULL;
    }
    if (wanted <= 0 || wanted > PY_SSIZE_T_MAX / SLOT || (uint64_t)wanted < old_slots) {
        PyBuffer_Release(&g->from);
        free(g);
        PyErr_SetString(PyExc_ValueError, "regrow(a window table, at least as many slots)");
        return NULL;
    }
    g->grown = PyByteArray_FromStringAndSize(NULL, wanted * SLOT);
    PyObject *capsule = g->grown == NULL ? NULL : PyCapsule_New(g, GROWTH, growth_destroy);
    if (capsule == NULL) {
        Py_XDECREF(g->grown);
        PyBuffer_Release(&g->from);
        free(g);
        return NULL;
    }
    g->into = (uint8_t *)PyByteArray_AS_STRING(g->grown);
    g->slots = (uint64_t)wanted;
    if (pthread_create(&g->thread, NULL, growth_run, g) == 0)
        g->threaded = 1;
    else
        growth_run(g);
    return capsule;
}

/* regrown(growth, wait=False) -> (grown, kept): the new table and the keys it holds;
 * None while the thread works, unless ``wait``. */
static PyObject *regrown(PyObject *self, PyObject *args) {
    PyObject *capsule;
    int wait = 0;
    if (!PyArg_ParseTuple(args, "O|p", &capsule, &wait)) return NULL;
    Growth *g = (Growth *)PyCapsule_GetPointer(capsule, GROWTH);
    if (g == NULL) return NULL;
    if (!wait && !__atomic_load_n(&g->done, __ATOMIC_ACQUIRE)) Py_RETURN_NONE;
    growth_join(g);
    return Py_BuildValue("(On)", g->grown, g->kept);
}

/* merge(into, source) -> (added, reused): the keys ``source`` holds, with their offsets,
 * into ``into`` (a key both hold keeps the later offset); counts as ``add``'s. */
static PyObject *merge(PyObject *self, PyObject *args) {
    PyObject *into_table, *source;
    Py_buffer into_view, source_view;
    uint64_t into_slots, source_slots;
    if (!PyArg_ParseTuple(args, "OO", &into_table, &source)) return NULL;
    if (!table_view(into_table, &into_view, 1, &into_slots)) return NULL;
    if (!table_view(source, &source_view, 0, &source_slots)) {
        PyBuffer_Release(&into_view);
        return NULL;
    }
    uint8_t *into = (uint8_t *)into_view.buf;
    const uint8_t *from = (const uint8_t *)source_view.buf;
    Py_ssize_t added = 0, reused = 0;
    for (uint64_t i = 0; i < source_slots && added >= 0; i++) {
        const uint8_t *key = from + i * SLOT;
        uint32_t value = held_value(le32(key + KEPT));
        if (value != 0 && !place(into, into_slots, key, value, &added, &reused)) added = -1;
    }
    PyBuffer_Release(&source_view);
    PyBuffer_Release(&into_view);
    return added < 0 ? full() : Py_BuildValue("(nn)", added, reused);
}

/* claim(tables, minimums, target, packed, offset) -> (added, reused, [(index, table,
 * offset)]): each 16-byte key of ``packed``, in order, is looked for in every table (held
 * with an offset of at least that table's minimum); a key held nowhere is added to
 * ``tables[target]`` with ``offset``. The list names the keys held already (by a
 * stored write, one in flight, or an earlier key of ``packed``): under a load of
 * new keys it is empty. ``added``: keys put in empty slots; ``reused``: in slots of freed
 * keys. The target table has room for every key (the caller grows it). */
static PyObject *claim(PyObject *self, PyObject *args) {
    PyObject *tables, *minimums;
    Py_ssize_t target;
    Py_buffer packed;
    long long offset;
    if (!PyArg_ParseTuple(args, "OOny*L", &tables, &minimums, &target, &packed, &offset))
        return NULL;
    Py_buffer views[MAX_TABLES];
    uint64_t slots[MAX_TABLES];
    long long mins[MAX_TABLES];
    Py_ssize_t count = 0, n = packed.len / KEY, added = 0, reused = 0;
    PyObject *repeats = NULL;
    if (!PyTuple_Check(tables) || !PyTuple_Check(minimums) ||
        PyTuple_GET_SIZE(tables) != PyTuple_GET_SIZE(minimums) ||
        PyTuple_GET_SIZE(tables) > MAX_TABLES || target < 0 ||
        target >= PyTuple_GET_SIZE(tables) || packed.len % KEY != 0 || offset < 0 ||
        offset >= 0x7FFFFFFFLL) {
        PyErr_SetString(PyExc_ValueError,
                        "claim(tables, minimums, target, packed keys, offset of 0..2**31-2)");
        goto done;
    }
    for (; count < PyTuple_GET_SIZE(tables); count++) {
        mins[count] = PyLong_AsLongLong(PyTuple_GET_ITEM(minimums, count));
        if (mins[count] == -1 && PyErr_Occurred()) goto done;
        if (!table_view(PyTuple_GET_ITEM(tables, count), &views[count], count == target,
                        &slots[count]))
            goto done;
    }
    repeats = PyList_New(0);
    if (repeats == NULL) goto done;
    const uint8_t *keys = (const uint8_t *)packed.buf;
    uint32_t value = (uint32_t)offset + 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i + AHEAD < n) {
            const uint8_t *ahead = keys + (i + AHEAD) * KEY;
            for (Py_ssize_t t = 0; t < count; t++)
                __builtin_prefetch((uint8_t *)views[t].buf + home(ahead, slots[t]) * SLOT);
        }
        const uint8_t *key = keys + i * KEY;
        int found = 0;
        uint8_t *at_target = NULL;
        for (Py_ssize_t t = 0; t < count && !found; t++) {
            uint8_t *slot = slot_of((uint8_t *)views[t].buf, slots[t], key);
            if (t == target) at_target = slot; /* where a new key goes */
            uint32_t raw = slot == NULL ? 0 : le32(slot + KEPT);
            uint32_t held = held_value(raw);
            if (held == 0 || (long long)held - 1 < mins[t]) continue;
            found = 1;
            PyObject *repeat = Py_BuildValue("(nnI)", i, t, (unsigned int)(held - 1));
            if (repeat == NULL || PyList_Append(repeats, repeat) < 0) {
                Py_XDECREF(repeat);
                Py_CLEAR(repeats);
                goto done;
            }
            Py_DECREF(repeat);
        }
        if (found) continue;
        uint8_t *slot = at_target;
        if (slot == NULL) {
            Py_CLEAR(repeats);
            full();
            goto done;
        }
        uint32_t was = le32(slot + KEPT);
        if (was == 0) {
            memcpy(slot, key, KEPT);
            added++;
        }
        if (was == FREED) reused++;
        put32(slot + KEPT, value);
    }
done:
    for (Py_ssize_t t = 0; t < count; t++) PyBuffer_Release(&views[t]);
    PyBuffer_Release(&packed);
    if (repeats == NULL) return NULL;
    PyObject *out = Py_BuildValue("(nnN)", added, reused, repeats);
    return out;
}

/* free(table, packed, offset) -> keys freed: the keys ``claim`` added with ``offset``
 * for a write that was lost are held by none again (their slots stay, marked, so probes
 * go on past them). A key the table holds otherwise is left as it is. */
static PyObject *free_keys(PyObject *self, PyObject *args) {
    PyObject *table;
    Py_buffer packed, view;
    long long offset;
    uint64_t slots;
    if (!PyArg_ParseTuple(args, "Oy*L", &table, &packed, &offset)) return NULL;
    if (!open_for_keys(table, &packed, offset, &view, &slots)) return NULL;
    const uint8_t *keys = (const uint8_t *)packed.buf;
    Py_ssize_t n = packed.len / KEY, freed = 0;
    uint32_t claimed = (uint32_t)offset + 1;
    uint8_t *base = (uint8_t *)view.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint8_t *slot = slot_of(base, slots, keys + i * KEY);
        if (slot == NULL || le32(slot + KEPT) != claimed) continue;
        store_kept(slot, FREED);
        freed++;
    }
    PyBuffer_Release(&view);
    PyBuffer_Release(&packed);
    return PyLong_FromSsize_t(freed);
}

static PyMethodDef methods[] = {
    {"add", add, METH_VARARGS,
     "Adds packed 16-byte keys with one anchor offset to a window table; answers how many "
     "were new."},
    {"find", find, METH_VARARGS,
     "(key, offset) of the keys a window table holds with an offset of at least a minimum."},
    {"grow", grow, METH_VARARGS,
     "Lengthens a window table (a bytearray) in place, its keys placed anew."},
    {"regrow", regrow, METH_VARARGS,
     "Starts a new window table taking a table's keys, on a thread of its own."},
    {"regrown", regrown, METH_VARARGS, "The new table of a growth, once it is done."},
    {"merge", merge, METH_VARARGS, "Adds the keys one window table holds to another."},
    {"claim", claim, METH_VARARGS,
     "Looks packed keys up in window tables; adds those held nowhere."},
    {"free", free_keys, METH_VARARGS, "The keys a lost write claimed, held by none again."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_window_table",
                                    "Exact key windows, compiled.", -1, methods};

PyMODINIT_FUNC PyInit__window_table(void) { return PyModule_Create(&module); }
