/* SPDX-License-Identifier: Apache-2.0 */
/* dtype.h - element and block types of checkpoint tensors, and a typed view of tensor data.
 *
 * Type ids are ggml's, so a GGUF tensor's type field is used as is; safetensors' F32, F16
 * and BF16 map onto the same ids. Quantized types store blocks of 32 or 256 elements
 * (one scale or a small scale table per block); a row's length must be a whole number of
 * blocks. Dequantization here is the reference semantics (bit-exact with ggml's
 * reference dequantizers): the CPU model dequantizes to f32 at load, and the CUDA
 * kernels that dequantize to bf16 are tested against these functions.
 */
#ifndef DERAS_DTYPE_H
#define DERAS_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum deras_dtype {
    DT_F32 = 0,
    DT_F16 = 1,
    DT_Q4_0 = 2,
    DT_Q4_1 = 3,
    DT_Q5_0 = 6,
    DT_Q5_1 = 7,
    DT_Q8_0 = 8,
    DT_Q4_K = 12,
    DT_Q5_K = 13,
    DT_Q6_K = 14,
    DT_BF16 = 30,
    DT_UNSUPPORTED = -1, /* a type deras cannot compute with; the view still bounds its bytes */
};

/* True for the types above other than DT_UNSUPPORTED. */
bool dtype_supported(int dtype);

/* "F32", "Q4_K", ...; "unknown" for anything else. Never NULL. */
const char *dtype_name(int dtype);

/* The inverse of dtype_name, ignoring case ("q8_0", "BF16"). DERAS_EINVAL naming the
 * string and the accepted names for anything else (NULL included); out may be NULL. */
int dtype_parse(const char *name, int *out);

/* Elements per block (1 for F32/F16/BF16, 32 or 256 for quantized types) and bytes per
 * block; 0 for unsupported types. */
int dtype_block_elems(int dtype);
size_t dtype_block_bytes(int dtype);

/* Bytes taken by n_elems elements. DERAS_EFORMAT if n_elems is not a whole number of
 * blocks, DERAS_ERANGE on overflow, DERAS_EUNSUPPORTED for an unsupported dtype. */
int dtype_nbytes(int dtype, int64_t n_elems, size_t *out);

/* Convert n_elems elements of `src` (any alignment) to f32. n_elems must be a whole
 * number of blocks. Returns DERAS_EINVAL (NULL pointers with n_elems > 0, negative count),
 * DERAS_EFORMAT (partial block) or DERAS_EUNSUPPORTED (type). O(n_elems), allocates
 * nothing, thread-safe. */
int dtype_to_f32(int dtype, const void *src, float *dst, int64_t n_elems);

/* IEEE half and bfloat16 <-> f32, exact on the way up, round-to-nearest-even on the way
 * down (overflow gives infinity, subnormals are exact). NaN stays NaN with its sign and
 * top payload bits (a payload that would vanish becomes the quiet NaN), so
 * half -> f32 -> half and bf16 -> f32 -> bf16 are the identity on all 65536 patterns. */
float fp16_to_f32(uint16_t h);
uint16_t f32_to_fp16(float f);
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);

#define TENSOR_MAX_DIMS 4

/* A typed view of one tensor inside a mapped checkpoint file. Shapes are row-major,
 * outermost dimension first (numpy / safetensors order; GGUF's ne[] is reversed into
 * it), so a linear weight of out_features x in_features has shape {out, in}. All
 * pointers are owned by the file object the view came from. */
typedef struct tensor_view {
    const char *name;  /* NUL-terminated */
    int dtype;         /* enum deras_dtype, DT_UNSUPPORTED if deras cannot compute with it */
    const char *type_name; /* the file's own name for the type ("I64", "Q2_K"), for errors */
    int n_dims;
    int64_t shape[TENSOR_MAX_DIMS];
    const void *data;  /* no alignment guaranteed */
    size_t n_bytes;
} tensor_view;

/* Product of the shape (1 for a 0-dim scalar, 0 for NULL). */
int64_t tensor_view_numel(const tensor_view *v);

#endif
