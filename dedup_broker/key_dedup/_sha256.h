/* SHA-256 (FIPS 180-4) of message keys, for _batch_keys.c (its only includer, after
 * Python.h): key16 gives the first 16 bytes of SHA-256(prefix || data), key16_two those
 * of two messages hashed in step. Blocks run on the x86 SHA extensions where the
 * processor has them (sha256_accelerate, called at import), else on portable C; both
 * give the same digests (tested against hashlib). */
#ifndef DEDUP_BROKER_SHA256_H
#define DEDUP_BROKER_SHA256_H

/* --- SHA-256 (FIPS 180-4) ------------------------------------------------------ */
static const uint32_t K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
    0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
    0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
    0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
    0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
    0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
    0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2};

#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void sha256_block_portable(uint32_t h[8], const uint8_t *p) {
    uint32_t w[64];
    for (int i = 0; i < 16; i++) {
        w[i] = ((uint32_t)p[4 * i] << 24) | ((uint32_t)p[4 * i + 1] << 16) |
               ((uint32_t)p[4 * i + 2] << 8) | (uint32_t)p[4 * i + 3];
    }
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ROR(w[i - 15], 7) ^ ROR(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ROR(w[i - 2], 17) ^ ROR(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = k + (ROR(e, 6) ^ ROR(e, 11) ^ ROR(e, 25)) + ((e & f) ^ (~e & g)) +
                      K256[i] + w[i];
        uint32_t t2 = (ROR(a, 2) ^ ROR(a, 13) ^ ROR(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        k = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d;
    h[4] += e; h[5] += f; h[6] += g; h[7] += k;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define HAVE_SHA_NI 1
/* One block with the x86 SHA extensions (SHA-NI: about a tenth of the portable block's
 * time). The state is kept as the instructions want it: ABEF and CDGH; each
 * sha256rnds2 does two rounds, sha256msg1/msg2 extend the message schedule four words
 * at a time. */
/* ``blocks`` independent blocks (1 or 2: h[s] takes p[s]) with the x86 SHA extensions
 * (SHA-NI: about a tenth of the portable block's time). The state is kept as the
 * instructions want it: ABEF and CDGH; each sha256rnds2 does two rounds, sha256msg1/msg2
 * extend the message schedule four words at a time. A block's rounds wait on each
 * other, so two blocks in step keep the unit busy: about the time of one. */
__attribute__((target("sha,sse4.1,ssse3"))) static inline void sha256_ni(
    int blocks, uint32_t *const h[2], const uint8_t *const p[2]) {
    const __m128i swap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
    __m128i abef[2], cdgh[2], abef_in[2], cdgh_in[2], w[2][4];
    for (int s = 0; s < blocks; s++) {
        __m128i abcd = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&h[s][0]), 0xB1);
        __m128i efgh = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&h[s][4]), 0x1B);
        abef_in[s] = abef[s] = _mm_alignr_epi8(abcd, efgh, 8);
        cdgh_in[s] = cdgh[s] = _mm_blend_epi16(efgh, abcd, 0xF0);
    }
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) {
        const __m128i constants = _mm_loadu_si128((const __m128i *)&K256[4 * i]);
#pragma GCC unroll 2
        for (int s = 0; s < blocks; s++) {
            __m128i words;
            if (i < 4) {
                words = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p[s] + 16 * i)), swap);
            } else { /* W[t..t+3] from W[t-16..], W[t-12..], W[t-8..], W[t-4..] */
                __m128i t = _mm_sha256msg1_epu32(w[s][i % 4], w[s][(i + 1) % 4]);
                t = _mm_add_epi32(t, _mm_alignr_epi8(w[s][(i + 3) % 4], w[s][(i + 2) % 4], 4));
                words = _mm_sha256msg2_epu32(t, w[s][(i + 3) % 4]);
            }
            w[s][i % 4] = words;
            __m128i k = _mm_add_epi32(words, constants);
            cdgh[s] = _mm_sha256rnds2_epu32(cdgh[s], abef[s], k);
            abef[s] = _mm_sha256rnds2_epu32(abef[s], cdgh[s], _mm_shuffle_epi32(k, 0x0E));
        }
    }
    for (int s = 0; s < blocks; s++) {
        __m128i feba = _mm_shuffle_epi32(_mm_add_epi32(abef[s], abef_in[s]), 0x1B);
        __m128i dchg = _mm_shuffle_epi32(_mm_add_epi32(cdgh[s], cdgh_in[s]), 0xB1);
        _mm_storeu_si128((__m128i *)&h[s][0], _mm_blend_epi16(feba, dchg, 0xF0));
        _mm_storeu_si128((__m128i *)&h[s][4], _mm_alignr_epi8(dchg, feba, 8));
    }
}

__attribute__((target("sha,sse4.1,ssse3"))) static void sha256_block_ni(uint32_t h[8],
                                                                         const uint8_t *p) {
    uint32_t *const hs[2] = {h, h};
    const uint8_t *const ps[2] = {p, p};
    sha256_ni(1, hs, ps);
}

__attribute__((target("sha,sse4.1,ssse3"))) static void sha256_pair_ni(uint32_t *const h[2],
                                                                        const uint8_t *const p[2]) {
    sha256_ni(2, h, p);
}

/* The processor has the SHA extensions and the SSE levels the block above uses. */
static int sha_ni_present(void) {
    unsigned int a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 19)) || !(c & (1u << 9))) return 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    return (b >> 29) & 1;
}
#endif

static void sha256_pair_portable(uint32_t *const h[2], const uint8_t *const p[2]) {
    sha256_block_portable(h[0], p[0]);
    sha256_block_portable(h[1], p[1]);
}

typedef void (*block_fn)(uint32_t h[8], const uint8_t *p);
typedef void (*pair_fn)(uint32_t *const h[2], const uint8_t *const p[2]);
static block_fn sha256_block = sha256_block_portable;
static pair_fn sha256_pair = sha256_pair_portable;

/* Blocks on the SHA extensions when ``on`` and the processor has them, else on the
 * portable code; answers whether the extensions are used. */
static int sha256_accelerate(int on) {
    sha256_block = sha256_block_portable;
    sha256_pair = sha256_pair_portable;
#ifdef HAVE_SHA_NI
    if (on && sha_ni_present()) {
        sha256_block = sha256_block_ni;
        sha256_pair = sha256_pair_ni;
    }
#endif
    return sha256_block != sha256_block_portable;
}

static const uint32_t SHA256_H0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                      0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

static void key16_out(const uint32_t h[8], uint8_t out[16]) {
    for (int i = 0; i < 4; i++) {
        out[4 * i] = (uint8_t)(h[i] >> 24);
        out[4 * i + 1] = (uint8_t)(h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(h[i] >> 8);
        out[4 * i + 3] = (uint8_t)h[i];
    }
}

/* The first 16 bytes of SHA-256(prefix || data) (prefix: 0 or 1 byte). */
static void key16(int prefix, const uint8_t *data, Py_ssize_t len, uint8_t out[16]) {
    uint32_t h[8];
    memcpy(h, SHA256_H0, sizeof h);
    uint8_t block[64];
    Py_ssize_t fill = 0;
    uint64_t total = (uint64_t)len + (prefix >= 0 ? 1 : 0);
    if (prefix >= 0) block[fill++] = (uint8_t)prefix;
    while (len > 0) {
        Py_ssize_t take = 64 - fill;
        if (take > len) take = len;
        if (fill == 0 && take == 64) {
            sha256_block(h, data);
        } else {
            memcpy(block + fill, data, (size_t)take);
            fill += take;
            if (fill == 64) {
                sha256_block(h, block);
                fill = 0;
            }
        }
        data += take;
        len -= take;
    }
    block[fill++] = 0x80;
    if (fill > 56) {
        memset(block + fill, 0, (size_t)(64 - fill));
        sha256_block(h, block);
        fill = 0;
    }
    memset(block + fill, 0, (size_t)(56 - fill));
    uint64_t bits = total * 8;
    for (int i = 0; i < 8; i++) block[56 + i] = (uint8_t)(bits >> (56 - 8 * i));
    sha256_block(h, block);
    key16_out(h, out);
}

/* One key's message as blocks: ``full`` 64-byte blocks read in place from ``data``, then
 * the rest with the padding and the length, staged (one or two blocks). */
typedef struct {
    const uint8_t *data;
    Py_ssize_t full, blocks;
    uint8_t staged[128];
} key_blocks;

/* 0 when the rest does not fit the staging (a prefixed message over 119 bytes). */
static int key_blocks_of(int prefix, const uint8_t *data, Py_ssize_t len, key_blocks *kb) {
    Py_ssize_t full = prefix >= 0 ? 0 : len / 64, rest = len - 64 * full;
    Py_ssize_t fill = 0;
    if (rest + (prefix >= 0) > 119) return 0;
    uint8_t *staged = kb->staged;
    if (prefix >= 0) staged[fill++] = (uint8_t)prefix;
    memcpy(staged + fill, data + 64 * full, (size_t)rest);
    fill += rest;
    staged[fill++] = 0x80;
    Py_ssize_t end = fill + 8 <= 64 ? 64 : 128;
    memset(staged + fill, 0, (size_t)(end - 8 - fill));
    uint64_t bits = ((uint64_t)len + (prefix >= 0 ? 1 : 0)) * 8;
    for (int i = 0; i < 8; i++) staged[end - 8 + i] = (uint8_t)(bits >> (56 - 8 * i));
    kb->data = data;
    kb->full = full;
    kb->blocks = full + end / 64;
    return 1;
}

static const uint8_t *key_block(const key_blocks *kb, Py_ssize_t i) {
    return i < kb->full ? kb->data + 64 * i : kb->staged + 64 * (i - kb->full);
}

/* A message to key: its prefix (-1: none), its bytes, where its key goes. */
typedef struct {
    int prefix;
    const uint8_t *data;
    Py_ssize_t len;
    uint8_t *out;
} key_job;

/* key16 of two messages at once: their blocks in step (``sha256_pair``). */
static void key16_two(const key_job *a, const key_job *b) {
    key_blocks blocks[2];
    if (!key_blocks_of(a->prefix, a->data, a->len, &blocks[0]) ||
        !key_blocks_of(b->prefix, b->data, b->len, &blocks[1])) {
        key16(a->prefix, a->data, a->len, a->out);
        key16(b->prefix, b->data, b->len, b->out);
        return;
    }
    uint32_t ha[8], hb[8];
    memcpy(ha, SHA256_H0, sizeof ha);
    memcpy(hb, SHA256_H0, sizeof hb);
    uint32_t *const h[2] = {ha, hb};
    Py_ssize_t both = blocks[0].blocks < blocks[1].blocks ? blocks[0].blocks : blocks[1].blocks;
    for (Py_ssize_t i = 0; i < both; i++) {
        const uint8_t *const p[2] = {key_block(&blocks[0], i), key_block(&blocks[1], i)};
        sha256_pair(h, p);
    }
    for (Py_ssize_t i = both; i < blocks[0].blocks; i++) sha256_block(ha, key_block(&blocks[0], i));
    for (Py_ssize_t i = both; i < blocks[1].blocks; i++) sha256_block(hb, key_block(&blocks[1], i));
    key16_out(ha, a->out);
    key16_out(hb, b->out);
}

#endif
