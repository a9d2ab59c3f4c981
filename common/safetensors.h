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
 */
#ifndef DERAS_SAFETENSORS_H
#define DERAS_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"

typedef struct st_file st_file_t;

int st_open(const char *path, st_file_t **out);
int st_open_memory(const void *data, size_t size, const char *name, st_file_t **out);
void st_destroy(st_file_t **f);

const char *st_name(const st_file_t *f);
int64_t st_n_tensors(const st_file_t *f);
int st_tensor_at(const st_file_t *f, int64_t i, tensor_view *out);
int st_find_tensor(const st_file_t *f, const char *name, tensor_view *out); /* DERAS_ENOTFOUND */

#endif
