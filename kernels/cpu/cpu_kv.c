/* SPDX-License-Identifier: Apache-2.0 */
/* cpu_kv.c - the CPU backend's KV cache: which element types it keeps, writes into it
 * (converting f32 K/V rows to the cache's type) and copy-on-write block copies.
 *
 * The CPU keeps F32, F16 and BF16 caches (backend.h); the arithmetic is f32 either way,
 * a 16-bit cache only rounds K and V once, on write, to nearest even. The conversion runs
 * on the path qmatmul.h's switch names (F16C / AVX2 where the CPU has them, else plain C)
 * and every path writes the same bytes (attn_impl.h; test_attention checks it). Cost:
 * O(tokens x KV width) per write, O(block bytes) per copied block; nothing allocated.
 */
#include <string.h>

#include "common/base/dtype.h"
#include "common/base/status.h"
#include "kernels/cpu/attn_impl.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/qmatmul.h"

bool cpu_keeps_kv(int dtype)
{
    return dtype == DT_F32 || dtype == DT_F16 || dtype == DT_BF16;
}

int cpu_kv_write(backend_t *b, void *k_cache, void *v_cache, const void *k, const void *v,
                 int row_stride, const int32_t *slots, int n, int n_kv_heads, int head_dim,
                 int block_size, int kv_dtype)
{
    const size_t es = dtype_block_bytes(kv_dtype);
    attn_cvt_fn cvt = NULL;
    if (kv_dtype != DT_F32) {
        const int isa = qmm_isa_active();
        if (isa < 0)
            return isa;
        const attn_path *p = &attn_path_scalar;
#ifdef ATTN_X86
        if (isa >= QMM_ISA_AVX2)
            p = &attn_path_avx2;
#endif
        cvt = kv_dtype == DT_F16 ? p->to_f16 : p->to_bf16;
    }
    for (int i = 0; i < n; i++) { /* serial: a parallel region costs more than the copy */
        const size_t block = (size_t)slots[i] / (size_t)block_size;
        const size_t off = (size_t)slots[i] % (size_t)block_size;
        for (int g = 0; g < n_kv_heads; g++) {
            const size_t dst = (((block * n_kv_heads + g) * block_size + off) * head_dim) * es;
            const float *ks = (const float *)k + (size_t)i * row_stride + (size_t)g * head_dim;
            const float *vs = (const float *)v + (size_t)i * row_stride + (size_t)g * head_dim;
            if (cvt) {
                cvt(ks, (uint16_t *)((char *)k_cache + dst), head_dim);
                cvt(vs, (uint16_t *)((char *)v_cache + dst), head_dim);
            } else {
                memcpy((char *)k_cache + dst, ks, (size_t)head_dim * sizeof(float));
                memcpy((char *)v_cache + dst, vs, (size_t)head_dim * sizeof(float));
            }
        }
    }
    return DERAS_OK;
}

int cpu_copy_blocks(backend_t *b, void *cache, const int32_t *pairs, int n, size_t block_bytes)
{
    char *c = cache;
    for (int i = 0; i < n; i++)
        memcpy(c + (size_t)pairs[2 * i + 1] * block_bytes, c + (size_t)pairs[2 * i] * block_bytes,
               block_bytes);
    return DERAS_OK;
}
