/* SPDX-License-Identifier: Apache-2.0 */
/* safetensors.h - read-only safetensors files: tensor views over an mmap.
 *
 * Format: an 8-byte little-endian header length N, N bytes of JSON mapping tensor names
 * to {dtype, shape, data_offsets} (plus an optional "__metadata__" object of strings),
 * then the data. st_open() validates everything before returning: header length against
 * the file size and a cap, the JSON itself (parsed with jansson), every entry's fields and
 * types, shapes (non-negative, no overflow), that data_offsets match dtype x shape, lie
 * inside the data section and do not overlap. Every standard dtype is understood for
 * bounds checking; deras computes with F32, F16 and BF16, and other dtypes appear in views
 * as DT_UNSUPPORTED with their type_name, to be refused by whoever asks for them.
 *
 * Failures: DERAS_EFORMAT for anything malformed (header length over 100 MB or past the
 * file, invalid JSON or duplicate names, a field of the wrong type, negative dims, offsets
 * inconsistent with dtype x shape, outside the data or overlapping, __metadata__ values
 * that are not strings), DERAS_EUNSUPPORTED for a dtype name no safetensors version
 * defines or more than TENSOR_MAX_DIMS dimensions; the message names the file, the tensor
 * and the reason. An open object is read-only and may be shared between threads.
 */
#ifndef DERAS_SAFETENSORS_H
#define DERAS_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "common/base/dtype.h"

typedef struct st_file st_file_t;

/* Map and validate `path` (DERAS_EIO if it cannot be opened or mapped). On failure *out is
 * NULL. O(header size + n log n); the JSON tree is freed before returning, tensor data is
 * not touched. */
int st_open(const char *path, st_file_t **out);
/* Same over caller memory that must outlive the object; `name` (NULL: "(memory)") is used
 * in messages. */
int st_open_memory(const void *data, size_t size, const char *name, st_file_t **out);
/* Unmap and free; sets *f to NULL. NULL-safe. */
void st_destroy(st_file_t **f);

const char *st_name(const st_file_t *f); /* path or name given at open */
int64_t st_n_tensors(const st_file_t *f); /* not counting __metadata__ */
/* Tensor i in data order (ascending offsets), O(1); DERAS_ERANGE outside 0..n-1. */
int st_tensor_at(const st_file_t *f, int64_t i, tensor_view *out);
/* By name, O(log n); DERAS_ENOTFOUND if absent; out may be NULL. */
int st_find_tensor(const st_file_t *f, const char *name, tensor_view *out);

#endif
