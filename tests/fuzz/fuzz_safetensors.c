/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_safetensors.c - libFuzzer target: arbitrary bytes through st_open_memory and every
 * accessor. On success every view must lie inside the input: its bytes are all read (ASan
 * checks) and computable ones converted to f32.
 */
#include <stdint.h>
#include <stdlib.h>

#include "common/base/dtype.h"
#include "common/checkpoint/safetensors.h"
#include "common/base/status.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    st_file_t *f = NULL;
    if (st_open_memory(data, size, "fuzz.safetensors", &f) != DERAS_OK) {
        if (f || !deras_errmsg()[0])
            abort();
        return 0;
    }
    (void)st_name(f);
    int64_t n = st_n_tensors(f);
    for (int64_t i = 0; i < n; i++) {
        tensor_view v, w;
        if (st_tensor_at(f, i, &v) != DERAS_OK)
            abort();
        if (st_find_tensor(f, v.name, &w) != DERAS_OK || w.data != v.data)
            abort();
        if ((const uint8_t *)v.data < data || (const uint8_t *)v.data + v.n_bytes > data + size)
            abort();
        unsigned sum = 0;
        for (size_t k = 0; k < v.n_bytes; k++)
            sum += ((const uint8_t *)v.data)[k];
        (void)sum;
        int64_t numel = tensor_view_numel(&v);
        if (v.dtype != DT_UNSUPPORTED && numel > 0 && numel <= (1 << 16)) {
            float *out = malloc((size_t)numel * sizeof *out);
            if (out && dtype_to_f32(v.dtype, v.data, out, numel) != DERAS_OK)
                abort();
            free(out);
        }
    }
    tensor_view v;
    (void)st_tensor_at(f, n, &v);
    (void)st_find_tensor(f, "model.embed_tokens.weight", &v);
    st_destroy(&f);
    return 0;
}
