/* Message keys of an uncompressed batch payload, in C: the same keys as
 * dedup_broker.key_dedup.window's pure-Python path (tests compare both).
 *
 * batch_keys(data, count, kind, name) -> list of 16-byte keys (None for a message
 * without one), or None when anything is unusual (a malformed record, a group wire
 * type, a non-ASCII key text): the caller then takes the Python path, which reports
 * the exact error. kind: 0 content, 1 partition key, 2 property ``name``.
 *
 * batch_keys_packed(data, count, kind, name) -> (packed keys, indexes of the messages
 * without one), or None: the same keys with no object made per key.
 *
 * block_keys_packed(block, kind, name) -> (packed, missing, count): batch_keys_packed of
 * a message block's payload, read from the block itself (broker entry metadata and
 * checksum skipped, the metadata read for what it needs); None unless the block holds
 * an uncompressed batch that is neither encrypted, chunked nor a marker.
 *
 * batch_kept(data, count, keep) -> the kept messages' records, end to end, or None.
 *
 * SHA-256 runs on the x86 SHA extensions where the processor has them (checked once, at
 * import), else on portable C; accelerated(on) switches (tests compare both).
 *
 * table_add / table_find / table_get / table_remove / table_keys / table_move: an open-addressing table
 * of 16-byte keys with their anchors in a bytearray (window.py's KeyTable, whose
 * pure-Python path gives the same answers).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_le.h"
#include "_sha256.h"

/* --- protobuf wire format ------------------------------------------------------ */
static int varint(const uint8_t **p, const uint8_t *end, uint64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (*p >= end) return 0;
        uint8_t b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return 1;
        }
    }
    return 0;
}

/* Skips a field's value; 0 on a wire type this path leaves to Python (groups). */
static int skip(const uint8_t **p, const uint8_t *end, int wire) {
    uint64_t v;
    switch (wire) {
    case 0:
        return varint(p, end, &v);
    case 1:
        if (end - *p < 8) return 0;
        *p += 8;
        return 1;
    case 2:
        if (!varint(p, end, &v) || v > (uint64_t)(end - *p)) return 0;
        *p += v;
        return 1;
    case 5:
        if (end - *p < 4) return 0;
        *p += 4;
        return 1;
    default:
        return 0;
    }
}

static int ascii(const uint8_t *s, uint64_t n) {
    for (uint64_t i = 0; i < n; i++)
        if (s[i] & 0x80) return 0;
    return 1;
}

/* A KeyValue's key and value (last of each wins); 0 if malformed or non-ASCII. */
static int key_value(const uint8_t *p, const uint8_t *end, const uint8_t **k, uint64_t *kn,
                     const uint8_t **v, uint64_t *vn) {
    int has_k = 0, has_v = 0;
    while (p < end) {
        uint64_t tag, n;
        if (!varint(&p, end, &tag)) return 0;
        int field = (int)(tag >> 3), wire = (int)(tag & 7);
        if (field == 0 || tag > 0xFFFFFFFFu) return 0;
        if ((field == 1 || field == 2) && wire == 2) {
            if (!varint(&p, end, &n) || n > (uint64_t)(end - p) || !ascii(p, n)) return 0;
            if (field == 1) { *k = p; *kn = n; has_k = 1; }
            else { *v = p; *vn = n; has_v = 1; }
            p += n;
        } else if (!skip(&p, end, wire)) {
            return 0;
        }
    }
    return has_k && has_v;
}

/* Reads the keys of ``count`` messages of a batch payload into ``keys`` (16 bytes each)
 * and ``present`` (0: a message without a key); 0 when anything is unusual. */
static int read_keys(const uint8_t *data, Py_ssize_t len, Py_ssize_t count, int kind,
                     const uint8_t *name, Py_ssize_t name_len, uint8_t *keys, uint8_t *present) {
    const uint8_t *end = data + len, *pos = data;
    int ok = 1;
    key_job waiting = {0}, job;
    int paired = 0; /* a key waits in ``waiting`` for one to be hashed with */
    for (Py_ssize_t index = 0; ok && index < count; index++) {
        ok = 0;
        if (end - pos < 4) break;
        int32_t meta_size = (int32_t)(((uint32_t)pos[0] << 24) | ((uint32_t)pos[1] << 16) |
                                      ((uint32_t)pos[2] << 8) | (uint32_t)pos[3]);
        pos += 4;
        if (meta_size < 0 || meta_size > end - pos) break;
        const uint8_t *p = pos, *mend = pos + meta_size;
        const uint8_t *found = NULL, *pk = NULL;
        uint64_t found_n = 0, pk_n = 0, null_pk = 0;
        int64_t payload_size = -1;
        int bad = 0;
        while (p < mend && !bad) {
            uint64_t tag, n;
            if (!varint(&p, mend, &tag)) { bad = 1; break; }
            int field = (int)(tag >> 3), wire = (int)(tag & 7);
            if (field == 0 || tag > 0xFFFFFFFFu) { bad = 1; break; }
            if (field == 1 && wire == 2) {
                if (!varint(&p, mend, &n) || n > (uint64_t)(mend - p)) { bad = 1; break; }
                if (kind == 2) {
                    const uint8_t *k = NULL, *v = NULL;
                    uint64_t kn = 0, vn = 0;
                    if (!key_value(p, p + n, &k, &kn, &v, &vn)) { bad = 1; break; }
                    if (found == NULL && kn == (uint64_t)name_len &&
                        memcmp(k, name, (size_t)kn) == 0) {
                        found = v;
                        found_n = vn;
                    }
                }
                p += n;
            } else if (field == 2 && wire == 2) {
                if (!varint(&p, mend, &n) || n > (uint64_t)(mend - p) || !ascii(p, n)) {
                    bad = 1;
                    break;
                }
                pk = p;
                pk_n = n;
                p += n;
            } else if (field == 3 && wire == 0) {
                if (!varint(&p, mend, &n)) { bad = 1; break; }
                payload_size = (int64_t)(int32_t)(uint32_t)n;
            } else if (field == 10 && wire == 0) {
                if (!varint(&p, mend, &null_pk)) { bad = 1; break; }
            } else if (!skip(&p, mend, wire)) {
                bad = 1;
            }
        }
        if (bad || p != mend || payload_size < 0 || payload_size > end - mend) break;
        const uint8_t *payload = mend;
        pos = mend + payload_size;
        present[index] = 1;
        job.out = keys + 16 * index;
        if (kind == 0) {
            job.prefix = -1, job.data = payload, job.len = (Py_ssize_t)payload_size;
        } else if (kind == 1 && pk != NULL && !null_pk) {
            job.prefix = 'k', job.data = pk, job.len = (Py_ssize_t)pk_n;
        } else if (kind == 2 && found != NULL) {
            job.prefix = 'p', job.data = found, job.len = (Py_ssize_t)found_n;
        } else {
            present[index] = 0;
        }
        if (present[index]) {
            if (paired) key16_two(&waiting, &job);
            else waiting = job;
            paired = !paired;
        }
        ok = 1;
    }
    if (!ok || pos != end) return 0;
    if (paired) key16(waiting.prefix, waiting.data, waiting.len, waiting.out);
    return 1;
}

/* The batch's keys read into one buffer: 16 bytes a message, then a flag a message;
 * NULL (no error set) when anything is unusual, NULL with an error when out of memory. */
static uint8_t *batch_read(PyObject *args, Py_ssize_t *count) {
    Py_buffer buf, name;
    int kind;
    if (!PyArg_ParseTuple(args, "y*niy*", &buf, count, &kind, &name)) return NULL;
    uint8_t *out = *count >= 0 ? PyMem_Malloc((size_t)*count * 17 + 1) : NULL;
    if (out == NULL && *count >= 0) PyErr_NoMemory();
    if (out != NULL && !read_keys((const uint8_t *)buf.buf, buf.len, *count, kind,
                                  (const uint8_t *)name.buf, name.len, out,
                                  out + 16 * *count)) {
        PyMem_Free(out);
        out = NULL;
    }
    PyBuffer_Release(&buf);
    PyBuffer_Release(&name);
    return out;
}

static PyObject *batch_keys(PyObject *self, PyObject *args) {
    Py_ssize_t count = 0;
    uint8_t *read = batch_read(args, &count);
    if (read == NULL) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    PyObject *out = PyList_New(count);
    for (Py_ssize_t i = 0; out != NULL && i < count; i++) {
        PyObject *item = read[16 * count + i]
                             ? PyBytes_FromStringAndSize((const char *)read + 16 * i, 16)
                             : Py_NewRef(Py_None);
        if (item == NULL) Py_CLEAR(out);
        else PyList_SET_ITEM(out, i, item);
    }
    PyMem_Free(read);
    return out;
}

static uint32_t be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* A message block's metadata and payload ([0x0e02 size bem][0x0e01 crc][size metadata]
 * payload): 0 when the block is cut short. */
static int block_parts(const uint8_t *block, Py_ssize_t len, Py_ssize_t *meta,
                       Py_ssize_t *payload) {
    Py_ssize_t pos = 0;
    if (len >= 2 && block[0] == 0x0e && block[1] == 0x02) {
        if (len < 6) return 0;
        int32_t size = (int32_t)be32(block + 2);
        if (size < 0 || size > len - 6) return 0;
        pos = 6 + size;
    }
    if (len - pos >= 2 && block[pos] == 0x0e && block[pos + 1] == 0x01) {
        if (len - pos < 6) return 0;
        pos += 6;
    }
    if (len - pos < 4) return 0;
    int32_t size = (int32_t)be32(block + pos);
    if (size < 0 || size > len - pos - 4) return 0;
    *meta = pos + 4;
    *payload = pos + 4 + size;
    return 1;
}

/* A MessageMetadata's batch size when its messages can be read here: a batch
 * (num_messages_in_batch, 11), uncompressed (compression, 8), with no encryption keys
 * (13), chunk count (27) or marker type (20); -1 otherwise. */
static Py_ssize_t plain_batch(const uint8_t *p, const uint8_t *end) {
    int64_t count = -1;
    uint64_t compression = 0;
    while (p < end) {
        uint64_t tag, v;
        if (!varint(&p, end, &tag)) return -1;
        int field = (int)(tag >> 3), wire = (int)(tag & 7);
        if (field == 0 || tag > 0xFFFFFFFFu) return -1;
        if (field == 13 || field == 20 || field == 27) return -1;
        if ((field == 8 || field == 11) && wire == 0) {
            if (!varint(&p, end, &v)) return -1;
            if (field == 8) compression = v;
            else count = (int64_t)(int32_t)(uint32_t)v;
        } else if (field == 8 || field == 11 || !skip(&p, end, wire)) {
            return -1;
        }
    }
    return compression == 0 ? (Py_ssize_t)count : -1;
}

/* The keys of a payload packed as (packed, missing); see batch_keys_packed. */
static PyObject *packed_result(uint8_t *read, Py_ssize_t count);

/* batch_keys_packed(data, count, kind, name) -> (packed, missing): the keys batch_keys
 * reads, those present end to end in order, and the indexes of the messages without a
 * key; None when anything is unusual. No object is made per key. */
static PyObject *batch_keys_packed(PyObject *self, PyObject *args) {
    Py_ssize_t count = 0;
    uint8_t *read = batch_read(args, &count);
    if (read == NULL) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    return packed_result(read, count);
}

/* block_keys_packed(block, kind, name) -> (packed, missing, count), or None. */
static PyObject *block_keys_packed(PyObject *self, PyObject *args) {
    Py_buffer block, name;
    int kind;
    if (!PyArg_ParseTuple(args, "y*iy*", &block, &kind, &name)) return NULL;
    const uint8_t *data = (const uint8_t *)block.buf;
    Py_ssize_t meta = 0, start = 0, count = -1;
    if (block_parts(data, block.len, &meta, &start)) count = plain_batch(data + meta, data + start);
    uint8_t *read = count >= 0 ? PyMem_Malloc((size_t)count * 17 + 1) : NULL;
    int ok = read != NULL && read_keys(data + start, block.len - start, count, kind,
                                       (const uint8_t *)name.buf, name.len, read, read + 16 * count);
    PyBuffer_Release(&block);
    PyBuffer_Release(&name);
    if (!ok) {
        PyMem_Free(read);
        if (read == NULL && count >= 0) return PyErr_NoMemory();
        Py_RETURN_NONE;
    }
    PyObject *keys = packed_result(read, count);
    if (keys == NULL) return NULL;
    PyObject *out = Py_BuildValue("(OOn)", PyTuple_GET_ITEM(keys, 0), PyTuple_GET_ITEM(keys, 1),
                                  count);
    Py_DECREF(keys);
    return out;
}

/* Takes ``read`` (keys then flags, as batch_read fills it) and frees it. */
static PyObject *packed_result(uint8_t *read, Py_ssize_t count) {
    const uint8_t *present = read + 16 * count;
    Py_ssize_t kept = 0;
    PyObject *missing = PyList_New(0);
    for (Py_ssize_t i = 0; missing != NULL && i < count; i++) {
        if (present[i]) {
            if (kept != i) memmove(read + 16 * kept, read + 16 * i, 16);
            kept++;
        } else {
            PyObject *index = PyLong_FromSsize_t(i);
            if (index == NULL || PyList_Append(missing, index) < 0) Py_CLEAR(missing);
            Py_XDECREF(index);
        }
    }
    PyObject *out = missing == NULL ? NULL
                                    : Py_BuildValue("(y#N)", (const char *)read,
                                                    (Py_ssize_t)(16 * kept), missing);
    PyMem_Free(read);
    return out;
}

/* batch_kept(data, count, keep) -> the records of the messages ``keep`` flags (one byte
 * per message, nonzero: kept), concatenated as the producer wrote them; None when
 * anything is unusual (the Python path reports it). Only the record sizes are read. */
static PyObject *batch_kept(PyObject *self, PyObject *args) {
    Py_buffer buf, keep;
    Py_ssize_t count;
    if (!PyArg_ParseTuple(args, "y*ny*", &buf, &count, &keep)) return NULL;
    const uint8_t *data = (const uint8_t *)buf.buf, *flags = (const uint8_t *)keep.buf;
    const uint8_t *end = data + buf.len, *pos = data;
    uint8_t *out = count >= 0 && keep.len == count ? PyMem_Malloc(buf.len ? buf.len : 1) : NULL;
    Py_ssize_t size = 0, index = 0;
    for (; out != NULL && index < count; index++) {
        if (end - pos < 4) break;
        int32_t meta_size = (int32_t)(((uint32_t)pos[0] << 24) | ((uint32_t)pos[1] << 16) |
                                      ((uint32_t)pos[2] << 8) | (uint32_t)pos[3]);
        if (meta_size < 0 || meta_size > end - pos - 4) break;
        const uint8_t *p = pos + 4, *mend = pos + 4 + meta_size;
        int64_t payload_size = -1;
        int bad = 0;
        while (p < mend && !bad) {
            uint64_t tag, n;
            if (!varint(&p, mend, &tag) || (tag >> 3) == 0 || tag > 0xFFFFFFFFu) {
                bad = 1;
            } else if ((tag >> 3) == 3 && (tag & 7) == 0) {
                if (!varint(&p, mend, &n)) bad = 1;
                else payload_size = (int64_t)(int32_t)(uint32_t)n;
            } else if (!skip(&p, mend, (int)(tag & 7))) {
                bad = 1;
            }
        }
        if (bad || p != mend || payload_size < 0 || payload_size > end - mend) break;
        const uint8_t *next = mend + payload_size;
        if (flags[index]) {
            memcpy(out + size, pos, (size_t)(next - pos));
            size += next - pos;
        }
        pos = next;
    }
    PyObject *result;
    if (out != NULL && index == count && pos == end) {
        result = PyBytes_FromStringAndSize((const char *)out, size);
    } else {
        result = Py_NewRef(Py_None);
    }
    PyMem_Free(out);
    PyBuffer_Release(&buf);
    PyBuffer_Release(&keep);
    return result;
}

/* accelerated(on) -> whether the SHA extensions hash keys now: ``on`` True uses them
 * where the processor has them, False the portable code (tests compare both). */
static PyObject *accelerated(PyObject *self, PyObject *args) {
    int on;
    if (!PyArg_ParseTuple(args, "p", &on)) return NULL;
    return PyBool_FromLong(sha256_accelerate(on));
}

static PyObject *digest16(PyObject *self, PyObject *args) {
    Py_buffer buf;
    int prefix;
    if (!PyArg_ParseTuple(args, "iy*", &prefix, &buf)) return NULL;
    uint8_t key[16];
    key16(prefix, (const uint8_t *)buf.buf, buf.len, key);
    PyBuffer_Release(&buf);
    return PyBytes_FromStringAndSize((const char *)key, 16);
}

/* --- tables of keys with anchors ------------------------------------------------- */
/* An open-addressing table (linear probing) of 16-byte keys, each with an anchor, in a
 * bytearray of 2**n slots of 24 bytes: the key, then the anchor plus one as a
 * little-endian uint64 (0: an empty slot). The keys are SHA-256 digests: their first
 * 8 bytes choose the slot. The caller keeps it at most half full. */
#define SLOT_BYTES 24

static int table_buffer(PyObject *table, Py_buffer *view, int writable, uint64_t *mask) {
    if (PyObject_GetBuffer(table, view, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0) return 0;
    Py_ssize_t slots = view->len / SLOT_BYTES;
    if (view->len % SLOT_BYTES != 0 || slots == 0 || (slots & (slots - 1)) != 0) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "a key table is 2**n slots of 24 bytes");
        return 0;
    }
    *mask = (uint64_t)slots - 1;
    return 1;
}

static const uint8_t *table_key(PyObject *key) {
    if (!PyBytes_Check(key) || PyBytes_GET_SIZE(key) != 16) {
        PyErr_SetString(PyExc_ValueError, "table keys are 16-byte bytes");
        return NULL;
    }
    return (const uint8_t *)PyBytes_AS_STRING(key);
}

/* The slot holding ``k``, or the empty slot where it would go. */
static uint8_t *table_slot(uint8_t *base, uint64_t mask, const uint8_t *k) {
    uint64_t i = le64(k) & mask;
    for (;;) {
        uint8_t *slot = base + i * SLOT_BYTES;
        if (le64(slot + 16) == 0 || memcmp(slot, k, 16) == 0) return slot;
        i = (i + 1) & mask;
    }
}

static void put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* table_add(table, keys, anchor) -> how many of ``keys`` were not in the table; each
 * key gets ``anchor`` (the latest wins). */
static PyObject *table_add(PyObject *self, PyObject *args) {
    PyObject *table, *keys;
    long long anchor;
    Py_buffer view;
    uint64_t mask;
    if (!PyArg_ParseTuple(args, "OOL", &table, &keys, &anchor)) return NULL;
    if (anchor < 0) {
        PyErr_SetString(PyExc_ValueError, "anchors are not negative");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(keys, "keys must be iterable");
    if (seq == NULL) return NULL;
    if (!table_buffer(table, &view, 1, &mask)) {
        Py_DECREF(seq);
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), added = 0;
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < n; i++) { /* all or nothing: the count stays right */
        if (table_key(items[i]) == NULL) {
            added = -1;
            break;
        }
    }
    if ((uint64_t)n > mask) { /* the caller keeps room: never fill a table */
        PyErr_SetString(PyExc_ValueError, "the key table has no room for these keys");
        added = -1;
    }
    for (Py_ssize_t i = 0; added >= 0 && i < n; i++) {
        const uint8_t *k = (const uint8_t *)PyBytes_AS_STRING(items[i]);
        uint8_t *slot = table_slot((uint8_t *)view.buf, mask, k);
        if (le64(slot + 16) == 0) {
            memcpy(slot, k, 16);
            added++;
        }
        put64(slot + 16, (uint64_t)anchor + 1);
    }
    PyBuffer_Release(&view);
    Py_DECREF(seq);
    return added < 0 ? NULL : PyLong_FromSsize_t(added);
}

/* table_find(table, keys, first) -> the keys the table holds, in order (first: only
 * whether one is held, as a bool). */
static PyObject *table_find(PyObject *self, PyObject *args) {
    PyObject *table, *keys;
    int first;
    Py_buffer view;
    uint64_t mask;
    if (!PyArg_ParseTuple(args, "OOp", &table, &keys, &first)) return NULL;
    PyObject *seq = PySequence_Fast(keys, "keys must be iterable");
    if (seq == NULL) return NULL;
    if (!table_buffer(table, &view, 0, &mask)) {
        Py_DECREF(seq);
        return NULL;
    }
    PyObject *out = first ? NULL : PyList_New(0);
    int any = 0, failed = !first && out == NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; !failed && i < n; i++) {
        const uint8_t *k = table_key(items[i]);
        if (k == NULL) {
            failed = 1;
            break;
        }
        if (le64(table_slot((uint8_t *)view.buf, mask, k) + 16) == 0) continue;
        any = 1;
        if (first) break;
        if (PyList_Append(out, items[i]) < 0) failed = 1;
    }
    PyBuffer_Release(&view);
    Py_DECREF(seq);
    if (failed) {
        Py_XDECREF(out);
        return NULL;
    }
    return first ? PyBool_FromLong(any) : out;
}

/* table_get(table, key) -> the key's anchor, or None. */
static PyObject *table_get(PyObject *self, PyObject *args) {
    PyObject *table, *key;
    Py_buffer view;
    uint64_t mask;
    if (!PyArg_ParseTuple(args, "OO", &table, &key)) return NULL;
    const uint8_t *k = table_key(key);
    if (k == NULL || !table_buffer(table, &view, 0, &mask)) return NULL;
    uint64_t stored = le64(table_slot((uint8_t *)view.buf, mask, k) + 16);
    PyBuffer_Release(&view);
    if (stored == 0) Py_RETURN_NONE;
    return PyLong_FromUnsignedLongLong(stored - 1);
}

/* table_remove(table, key) -> whether the table held ``key`` (removed: the slots after
 * it shifted back, so no probe sequence is broken). */
static PyObject *table_remove(PyObject *self, PyObject *args) {
    PyObject *table, *key;
    Py_buffer view;
    uint64_t mask;
    if (!PyArg_ParseTuple(args, "OO", &table, &key)) return NULL;
    const uint8_t *k = table_key(key);
    if (k == NULL || !table_buffer(table, &view, 1, &mask)) return NULL;
    uint8_t *base = (uint8_t *)view.buf;
    uint8_t *hole = table_slot(base, mask, k);
    int held = le64(hole + 16) != 0;
    if (held) {
        uint64_t i = (uint64_t)(hole - base) / SLOT_BYTES, j = i;
        for (;;) {
            j = (j + 1) & mask;
            uint8_t *slot = base + j * SLOT_BYTES;
            if (le64(slot + 16) == 0) break;
            uint64_t home = le64(slot) & mask;
            /* stays when its home lies in (i, j], cyclically */
            int stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
            if (!stays) {
                memcpy(base + i * SLOT_BYTES, slot, SLOT_BYTES);
                i = j;
            }
        }
        memset(base + i * SLOT_BYTES, 0, SLOT_BYTES);
    }
    PyBuffer_Release(&view);
    return PyBool_FromLong(held);
}

/* table_keys(table) -> every key held (slot order). */
static PyObject *table_keys(PyObject *self, PyObject *args) {
    PyObject *table;
    Py_buffer view;
    uint64_t mask;
    if (!PyArg_ParseTuple(args, "O", &table)) return NULL;
    if (!table_buffer(table, &view, 0, &mask)) return NULL;
    PyObject *out = PyList_New(0);
    const uint8_t *base = (const uint8_t *)view.buf;
    for (uint64_t i = 0; out != NULL && i <= mask; i++) {
        const uint8_t *slot = base + i * SLOT_BYTES;
        if (le64(slot + 16) == 0) continue;
        PyObject *key = PyBytes_FromStringAndSize((const char *)slot, 16);
        if (key == NULL || PyList_Append(out, key) < 0) Py_CLEAR(out);
        Py_XDECREF(key);
    }
    PyBuffer_Release(&view);
    return out;
}

/* table_move(source, target) -> how many keys moved: every key of ``source`` with its
 * anchor into ``target`` (a larger table), as when a table grows. */
static PyObject *table_move(PyObject *self, PyObject *args) {
    PyObject *source, *target;
    Py_buffer from, to;
    uint64_t from_mask, to_mask;
    if (!PyArg_ParseTuple(args, "OO", &source, &target)) return NULL;
    if (!table_buffer(source, &from, 0, &from_mask)) return NULL;
    if (!table_buffer(target, &to, 1, &to_mask)) {
        PyBuffer_Release(&from);
        return NULL;
    }
    Py_ssize_t moved = 0;
    for (uint64_t i = 0; i <= from_mask; i++) {
        const uint8_t *slot = (const uint8_t *)from.buf + i * SLOT_BYTES;
        if (le64(slot + 16) == 0) continue;
        uint8_t *dest = table_slot((uint8_t *)to.buf, to_mask, slot);
        if (le64(dest + 16) == 0) moved++;
        memcpy(dest, slot, SLOT_BYTES);
    }
    PyBuffer_Release(&from);
    PyBuffer_Release(&to);
    return PyLong_FromSsize_t(moved);
}

static PyMethodDef methods[] = {
    {"batch_keys_packed", batch_keys_packed, METH_VARARGS,
     "The keys batch_keys reads, packed end to end, and the indexes of messages without "
     "one."},
    {"block_keys_packed", block_keys_packed, METH_VARARGS,
     "(packed keys, messages without one, count) of a message block holding a plain "
     "batch, read from the block itself; or None."},
    {"batch_keys", batch_keys, METH_VARARGS,
     "Keys of an uncompressed batch payload's messages, or None (take the Python path)."},
    {"batch_kept", batch_kept, METH_VARARGS,
     "The kept messages' records of an uncompressed batch payload, or None (Python path)."},
    {"digest16", digest16, METH_VARARGS,
     "The first 16 bytes of SHA-256 of an optional one-byte prefix (-1: none) and data."},
    {"accelerated", accelerated, METH_VARARGS,
     "Hash with the processor's SHA extensions where it has them (True) or not; answers "
     "whether they are used."},
    {"table_add", table_add, METH_VARARGS,
     "Adds 16-byte keys with one anchor to a key table; answers how many were new."},
    {"table_find", table_find, METH_VARARGS,
     "The keys a key table holds (or, first=True, whether it holds one)."},
    {"table_get", table_get, METH_VARARGS, "A key's anchor in a key table, or None."},
    {"table_remove", table_remove, METH_VARARGS, "Removes a key from a key table."},
    {"table_keys", table_keys, METH_VARARGS, "Every key a key table holds."},
    {"table_move", table_move, METH_VARARGS, "Every key of a key table into a larger one."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_batch_keys",
                                    "Message keys of batches, compiled.", -1, methods};

PyMODINIT_FUNC PyInit__batch_keys(void) {
    sha256_accelerate(1);
    return PyModule_Create(&module);
}
