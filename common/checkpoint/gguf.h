/* SPDX-License-Identifier: Apache-2.0 */
/* gguf.h - read-only GGUF (v2, v3) files: metadata and tensor views over an mmap.
 *
 * gguf_open() maps the file and validates everything before returning: magic, version,
 * every count and length against the bytes that remain, value types, string lengths,
 * tensor ranks and dimensions (no overflow), tensor types, alignment, and that every
 * tensor's data lies inside the file. After that, no accessor can read outside the
 * mapping, whatever the file held. A bad file gives DERAS_EFORMAT (or DERAS_EUNSUPPORTED
 * for a version, a tensor type id unknown to ggml, or a nested array) with a message
 * naming the file, the key or tensor, and the reason.
 *
 * Also refused at open: duplicate keys or tensor names (lookups are unambiguous), keys and
 * tensor names containing NUL bytes, bool values other than 0/1, a general.alignment that
 * is not a uint32 power of two (default 32), tensor offsets that are not multiples of it,
 * quantized rows that are not whole blocks. Tensor types ggml knows but deras cannot
 * compute with (Q2_K, IQ*, I32, ...) are fine: their views have dtype DT_UNSUPPORTED, the
 * ggml type name and an exact byte size. A big-endian file is refused with a message
 * saying so.
 *
 * Strings (keys, string values, string array elements) are copied once at open into a
 * NUL-terminated arena, so callers get C strings; their lengths are also given because
 * GGUF strings may contain NUL bytes. Numeric values of any integer or float width are
 * converted on access. An open object is read-only: any number of threads may use its
 * accessors at once.
 */
#ifndef DERAS_GGUF_H
#define DERAS_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/dtype.h"

typedef struct gguf gguf_t;

enum gguf_type {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
};

/* Map and validate `path`. On success *out owns the mapping; on failure *out is NULL and
 * the status is DERAS_EIO (cannot open, not a regular file, mmap failed), DERAS_EFORMAT or
 * DERAS_EUNSUPPORTED. O(header size + n log n in keys and tensors); tensor data is not
 * touched. Allocates the string arena and tables, bounded by the header size. */
int gguf_open(const char *path, gguf_t **out);

/* Same over caller memory (used by the fuzzer and tests); `data` must outlive the object
 * and is not copied. `name` (NULL: "(memory)") is used in error messages. */
int gguf_open_memory(const void *data, size_t size, const char *name, gguf_t **out);

/* Unmap and free; sets *g to NULL. NULL-safe. */
void gguf_destroy(gguf_t **g);

const char *gguf_name(const gguf_t *g);  /* path or name given at open */
uint32_t gguf_version(const gguf_t *g);

/* Metadata, each O(log n_keys). Each getter returns DERAS_EINVAL for a NULL object or key,
 * DERAS_ENOTFOUND if the key is absent and DERAS_EFORMAT (naming the key and both types)
 * if the value has an incompatible type; out-pointers may be NULL. gguf_get_int gives
 * DERAS_ERANGE for a uint64 above INT64_MAX. Returned strings live as long as the object. */
bool gguf_has_key(const gguf_t *g, const char *key);
int gguf_get_int(const gguf_t *g, const char *key, int64_t *out);   /* any integer type */
int gguf_get_float(const gguf_t *g, const char *key, double *out);  /* f32, f64 or integer */
int gguf_get_bool(const gguf_t *g, const char *key, bool *out);
int gguf_get_str(const gguf_t *g, const char *key, const char **s, size_t *len);

/* Arrays: element type (enum gguf_type) and count. */
int gguf_get_arr_info(const gguf_t *g, const char *key, int *elem_type, uint64_t *n);
/* Element i of a string array, O(1). DERAS_ERANGE if i >= n. */
int gguf_get_arr_str(const gguf_t *g, const char *key, uint64_t i, const char **s, size_t *len);
/* Copy a numeric array into dst (n elements, converted): any integer type -> int32
 * (DERAS_ERANGE if a value does not fit), f32/f64 -> float. n must equal the array's
 * length (DERAS_EINVAL otherwise). O(n). */
int gguf_get_arr_i32(const gguf_t *g, const char *key, int32_t *dst, uint64_t n);
int gguf_get_arr_f32(const gguf_t *g, const char *key, float *dst, uint64_t n);

/* Tensors, in file order; views point into the mapping and live as long as the object.
 * gguf_tensor_at: O(1), DERAS_ERANGE outside 0..n-1. gguf_find_tensor: O(log n),
 * DERAS_ENOTFOUND if absent; out may be NULL to test presence. */
int64_t gguf_n_tensors(const gguf_t *g);
int gguf_tensor_at(const gguf_t *g, int64_t i, tensor_view *out);
int gguf_find_tensor(const gguf_t *g, const char *name, tensor_view *out);

#endif
