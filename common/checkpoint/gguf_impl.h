/* SPDX-License-Identifier: Apache-2.0 */
/* gguf_impl.h - the layout of an open GGUF file, shared by the reader (gguf.c, which
 * fills it) and the accessors (gguf_get.c, which read it), with the little-endian value
 * helpers both need. Internal to deras_checkpoint; nothing here allocates.
 */
#ifndef DERAS_GGUF_IMPL_H
#define DERAS_GGUF_IMPL_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "gguf.h"
#include "tensor_file.h"

struct gguf_str {
    const char *s; /* NUL-terminated, in the arena */
    size_t len;
};

struct gguf_kv {
    struct gguf_str key;
    int type;     /* enum gguf_type */
    int arr_type; /* element type, for arrays */
    uint64_t n;   /* element count, for arrays */
    union {
        int64_t i;  /* signed integers */
        uint64_t u; /* unsigned integers and bool */
        double f;   /* float32, float64 */
    } num;
    struct gguf_str str;    /* string value */
    const uint8_t *arr;     /* numeric array: raw little-endian elements in the mapping */
    struct gguf_str *strs;  /* string array: n elements */
};

struct gguf {
    tensor_file_t tf;       /* first: name, bytes, mapping, tensor views (file order) */
    uint32_t version;
    uint32_t alignment;
    size_t data_offset;
    int64_t n_kv;
    struct gguf_kv *kv;     /* sorted by key */
    uint64_t *offsets;      /* per tensor, relative to the data section; used while opening */
    struct arena_chunk *arena;
};

/* The entry for `key` in the sorted table, or NULL. O(log n_kv). */
const struct gguf_kv *gguf_find_kv(const gguf_t *g, const char *key);

/* Bytes of one scalar of a fixed-size value type; 0 for string, array and invalid. */
static inline size_t value_size(uint32_t type)
{
    switch (type) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: return 4;
    case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: case GGUF_TYPE_FLOAT64: return 8;
    default: return 0;
    }
}

static inline const char *type_name(int type)
{
    static const char *names[] = {"uint8",  "int8",   "uint16", "int16",  "uint32",
                                  "int32",  "float32", "bool",  "string", "array",
                                  "uint64", "int64",  "float64"};
    return type >= 0 && type <= GGUF_TYPE_FLOAT64 ? names[type] : "invalid";
}

static inline bool is_int_type(int type)
{
    switch (type) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16:
    case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64:
        return true;
    default:
        return false;
    }
}

static inline bool is_signed_type(int type)
{
    return type == GGUF_TYPE_INT8 || type == GGUF_TYPE_INT16 || type == GGUF_TYPE_INT32 ||
           type == GGUF_TYPE_INT64;
}

/* Little-endian loads from unaligned memory. */
static inline uint64_t load_le(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Sign-extend an n-byte little-endian value. */
static inline int64_t load_le_signed(const uint8_t *p, size_t n)
{
    uint64_t v = load_le(p, n);
    if (n < 8 && (v >> (8 * n - 1)) & 1)
        v |= ~(uint64_t)0 << (8 * n);
    return (int64_t)v;
}

static inline double load_float(const uint8_t *p, int type)
{
    if (type == GGUF_TYPE_FLOAT32) {
        uint32_t u = (uint32_t)load_le(p, 4);
        float f;
        memcpy(&f, &u, sizeof f);
        return f;
    }
    uint64_t u = load_le(p, 8);
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

#endif
