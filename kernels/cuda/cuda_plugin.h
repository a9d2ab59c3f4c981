/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_plugin.h - the boundary between the CPU-side build and the CUDA backend, which is a
 * plugin (libderas_cuda.so) loaded at run time.
 *
 * Every deras binary is one build for CPU and GPU hosts: none links the CUDA runtime or
 * cuBLAS. When a CUDA device is asked for (backend_new("cuda:N"), cuda_device_count, any
 * cuda_ops.h call), kernels/cuda_loader.c dlopens the plugin, calls its one exported
 * function with the host's services and gets this table back; the cuda_ops.h functions
 * forward to it. A host without the plugin or without the CUDA libraries it needs gets
 * DERAS_EUNSUPPORTED naming the file that could not be loaded (the loader's message
 * quotes dlerror(), which names the missing library).
 *
 * The plugin and the host are built from the same tree: CUDA_PLUGIN_ABI and the sizes of
 * the shared structs are checked both ways, and a mismatch is refused with both numbers.
 * Failure messages cross through host->vfail, so deras_errmsg() in the host reads what the
 * plugin said (the plugin has no status.c of its own).
 */
#ifndef DERAS_CUDA_PLUGIN_H
#define DERAS_CUDA_PLUGIN_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_ops.h"

#define CUDA_PLUGIN_ABI 1
#define CUDA_PLUGIN_FILE "libderas_cuda.so"
#define CUDA_PLUGIN_ENTRY "deras_cuda_plugin"

typedef struct cuda_plugin_host {
    int abi;
    size_t backend_size;      /* sizeof(struct backend) */
    size_t ops_size;          /* sizeof(struct backend_ops) */
    int (*vfail)(int status, const char *fmt, va_list ap); /* deras_fail for the plugin */
} cuda_plugin_host;

typedef struct cuda_plugin {
    int abi;
    size_t backend_size, ops_size;
    int (*device_count)(char *why, size_t why_len);
    int (*backend_new)(int device, int dtype, backend_t **out);
    int (*is_cuda)(const backend_t *b);
    void *(*stream)(backend_t *b);
    int (*device_info)(backend_t *b, char *name, size_t name_len, int *n_sms);
    int (*download)(backend_t *b, void *dst, const void *src, size_t bytes);
    int (*set_decode_splits)(backend_t *b, int n_splits);
    int (*set_prefill_variant)(backend_t *b, int variant);
    int (*sample)(backend_t *b, int32_t *tokens, const void *logits,
                  const cuda_sample_params *params, int n, int vocab);
    int (*dequant)(backend_t *b, void *dst, const void *src, int dtype, int64_t n_elems);
} cuda_plugin;

/* The plugin's one exported function (CUDA_PLUGIN_ENTRY): NULL when host's ABI or sizes
 * differ from the plugin's (the host then says so with its own numbers). */
typedef const cuda_plugin *(*cuda_plugin_entry_fn)(const cuda_plugin_host *host);

#endif
