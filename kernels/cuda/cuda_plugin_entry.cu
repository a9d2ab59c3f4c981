/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_plugin_entry.cu - the plugin's one exported symbol (cuda_plugin.h) and its
 * deras_fail, which hands messages to the host's per-thread status so that the host's
 * deras_errmsg() reads them. Everything else in libderas_cuda.so is hidden. */
#include <stdarg.h>

extern "C" {
#include "common/base/status.h"
#include "kernels/backend_impl.h"
#include "kernels/cuda/cuda_plugin.h"
}

static const cuda_plugin_host *g_host;

extern "C" int deras_fail(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = g_host ? g_host->vfail(status, fmt, ap) : status;
    va_end(ap);
    return rc;
}

static const cuda_plugin g_plugin = {
    CUDA_PLUGIN_ABI,
    sizeof(struct backend),
    sizeof(struct backend_ops),
    cuda_device_count,
    backend_cuda_new,
    backend_is_cuda,
    backend_cuda_stream,
    backend_cuda_device_info,
    backend_cuda_download,
    backend_cuda_set_decode_splits,
    backend_cuda_set_prefill_variant,
    backend_cuda_sample,
    backend_cuda_dequant,
};

extern "C" __attribute__((visibility("default"))) const cuda_plugin *
deras_cuda_plugin(const cuda_plugin_host *host)
{
    if (!host || host->abi != CUDA_PLUGIN_ABI || host->backend_size != sizeof(struct backend) ||
        host->ops_size != sizeof(struct backend_ops))
        return NULL;
    g_host = host;
    return &g_plugin;
}
