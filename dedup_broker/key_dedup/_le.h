/* Little-endian words of the key tables, shared by the compiled helpers: one unaligned
 * load each (the byte-by-byte form compiles to one load a byte, in loops every probe
 * runs). */
#ifndef DEDUP_BROKER_LE_H
#define DEDUP_BROKER_LE_H

#include <stdint.h>
#include <string.h>

static inline uint64_t le64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

static inline uint32_t le32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap32(v);
#endif
    return v;
}

#endif
