/* cuda_none.c - cuda_ops.h in a build without nvcc: no device, every call unsupported.
 *
 * Lets tests and tools include cuda_ops.h unconditionally; cuda_device_count() says 0 with
 * the reason, so the GPU tests skip instead of failing to link.
 */
#include <stdio.h>

#include "common/base/status.h"
#include "kernels/cuda/cuda_ops.h"

#define NO_CUDA "this build has no CUDA backend (nvcc was not found at configure time)"

int backend_is_cuda(const backend_t *b)
{
    return 0;
}

int cuda_device_count(char *why, size_t why_len)
{
    if (why)
        snprintf(why, why_len, "%s", NO_CUDA);
    return 0;
}

void *backend_cuda_stream(backend_t *b)
{
    return NULL;
}

int backend_cuda_device_info(backend_t *b, char *name, size_t name_len, int *n_sms)
{
    return deras_fail(DERAS_EUNSUPPORTED, "%s", NO_CUDA);
}

int backend_cuda_download(backend_t *b, void *dst, const void *src, size_t bytes)
{
    return deras_fail(DERAS_EUNSUPPORTED, "%s", NO_CUDA);
}

int backend_cuda_set_decode_splits(backend_t *b, int n_splits)
{
    return deras_fail(DERAS_EUNSUPPORTED, "%s", NO_CUDA);
}

int backend_cuda_set_prefill_variant(backend_t *b, int variant)
{
    return deras_fail(DERAS_EUNSUPPORTED, "%s", NO_CUDA);
}

int backend_cuda_sample(backend_t *b, int32_t *tokens, const void *logits,
                        const cuda_sample_params *params, int n, int vocab)
{
    return deras_fail(DERAS_EUNSUPPORTED, "%s", NO_CUDA);
}

int backend_cuda_dequant(backend_t *b, void *dst, const void *src, int dtype, int64_t n_elems)
{
    return deras_fail(DERAS_EUNSUPPORTED, "%s", NO_CUDA);
}
