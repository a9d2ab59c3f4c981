/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_loader.c - the host side of the CUDA plugin (cuda_plugin.h): finds and loads
 * libderas_cuda.so the first time a CUDA device is asked for, and forwards backend_new
 * ("cuda:N") and every cuda_ops.h call to it.
 *
 * Where it looks, first match wins: $DERAS_CUDA_PLUGIN (a file), then the directory of the
 * running executable, then the install location and the build tree's (both fixed when the
 * project was configured: DERAS_CUDA_PLUGIN_DIRS). The attempt is made once per process
 * (pthread_once); its outcome, including why it failed (dlerror() names a missing CUDA
 * library), is kept and repeated by every later call. Cost: one dlopen, at the first CUDA
 * call; afterwards one indirect call per function.
 */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/base/status.h"
#include "kernels/backend_impl.h"
#include "kernels/cuda/cuda_plugin.h"

#ifndef DERAS_CUDA_PLUGIN_DIRS
#define DERAS_CUDA_PLUGIN_DIRS ""
#endif

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static const cuda_plugin *g_plugin;
static char g_why[768];

static int host_vfail(int status, const char *fmt, va_list ap)
{
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    return deras_fail(status, "%s", msg);
}

static const cuda_plugin_host g_host = {CUDA_PLUGIN_ABI, sizeof(struct backend),
                                        sizeof(struct backend_ops), host_vfail};

/* Try one file: 1 loaded, 0 not there (keep looking), -1 there but unusable (g_why says). */
static int try_file(const char *path)
{
    if (access(path, F_OK) != 0)
        return 0;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(g_why, sizeof g_why, "cannot load %s: %s", path, dlerror());
        return -1;
    }
    cuda_plugin_entry_fn entry = (cuda_plugin_entry_fn)dlsym(h, CUDA_PLUGIN_ENTRY);
    const cuda_plugin *p = entry ? entry(&g_host) : NULL;
    if (!p || p->abi != CUDA_PLUGIN_ABI || p->backend_size != sizeof(struct backend) ||
        p->ops_size != sizeof(struct backend_ops)) {
        snprintf(g_why, sizeof g_why,
                 "%s is not a CUDA plugin of this build (entry %s, ABI %d with structs of %zu "
                 "and %zu bytes expected)",
                 path, entry ? "found" : "missing", CUDA_PLUGIN_ABI, sizeof(struct backend),
                 sizeof(struct backend_ops));
        dlclose(h);
        return -1;
    }
    g_plugin = p; /* never unloaded: backends made by it may live until exit */
    return 1;
}

static int try_dir(const char *dir)
{
    char path[PATH_MAX];
    if (!*dir || snprintf(path, sizeof path, "%s/%s", dir, CUDA_PLUGIN_FILE) >= (int)sizeof path)
        return 0;
    return try_file(path);
}

static void load_once(void)
{
    const char *env = getenv("DERAS_CUDA_PLUGIN");
    if (env && *env) {
        if (try_file(env) == 0)
            snprintf(g_why, sizeof g_why, "DERAS_CUDA_PLUGIN=%s: no such file", env);
        return;
    }
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = '\0';
        char *slash = strrchr(self, '/');
        if (slash) {
            *slash = '\0';
            if (try_dir(self))
                return;
        }
    }
    char dirs[2 * PATH_MAX];
    snprintf(dirs, sizeof dirs, "%s", DERAS_CUDA_PLUGIN_DIRS);
    char *save = NULL;
    for (char *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save))
        if (try_dir(d))
            return;
    snprintf(g_why, sizeof g_why,
             "%s not found (looked next to the executable and in %s; set DERAS_CUDA_PLUGIN to "
             "its path, or build where nvcc is found)",
             CUDA_PLUGIN_FILE, *DERAS_CUDA_PLUGIN_DIRS ? DERAS_CUDA_PLUGIN_DIRS : "no other place");
}

/* The plugin, or NULL with the reason in g_why. */
static const cuda_plugin *plugin(void)
{
    pthread_once(&g_once, load_once);
    return g_plugin;
}

static int unavailable(void)
{
    return deras_fail(DERAS_EUNSUPPORTED, "CUDA backend unavailable: %s", g_why);
}

int backend_cuda_new(int device, int dtype, backend_t **out)
{
    const cuda_plugin *p = plugin();
    return p ? p->backend_new(device, dtype, out) : unavailable();
}

int cuda_device_count(char *why, size_t why_len)
{
    const cuda_plugin *p = plugin();
    if (p)
        return p->device_count(why, why_len);
    if (why && why_len)
        snprintf(why, why_len, "%s", g_why);
    return 0;
}

void backend_describe_cuda(char *buf, size_t cap)
{
    char why[sizeof g_why] = "";
    int n = cuda_device_count(why, sizeof why);
    if (n > 0)
        snprintf(buf, cap, "plugin loaded, %d device%s", n, n == 1 ? "" : "s");
    else if (g_plugin)
        snprintf(buf, cap, "plugin loaded, no device usable: %.600s", why);
    else
        snprintf(buf, cap, "unavailable here: %.600s", why);
}

int backend_is_cuda(const backend_t *b)
{
    /* no CUDA backend can exist without the plugin: do not load it to answer no */
    return g_plugin && b && g_plugin->is_cuda(b);
}

void *backend_cuda_stream(backend_t *b)
{
    return backend_is_cuda(b) ? g_plugin->stream(b) : NULL;
}

/* The plugin checks its own arguments (a CPU backend is DERAS_EINVAL there); without it
 * every call is DERAS_EUNSUPPORTED with the reason. */
#define FORWARD(call)                                                                          \
    do {                                                                                       \
        const cuda_plugin *p = plugin();                                                       \
        return p ? p->call : unavailable();                                                    \
    } while (0)

int backend_cuda_device_info(backend_t *b, char *name, size_t name_len, int *n_sms)
{
    FORWARD(device_info(b, name, name_len, n_sms));
}

int backend_cuda_download(backend_t *b, void *dst, const void *src, size_t bytes)
{
    FORWARD(download(b, dst, src, bytes));
}

int backend_cuda_set_decode_splits(backend_t *b, int n_splits)
{
    FORWARD(set_decode_splits(b, n_splits));
}

int backend_cuda_set_prefill_variant(backend_t *b, int variant)
{
    FORWARD(set_prefill_variant(b, variant));
}

int backend_cuda_sample(backend_t *b, int32_t *tokens, const void *logits,
                        const cuda_sample_params *params, int n, int vocab)
{
    FORWARD(sample(b, tokens, logits, params, n, vocab));
}

int backend_cuda_dequant(backend_t *b, void *dst, const void *src, int dtype, int64_t n_elems)
{
    FORWARD(dequant(b, dst, src, dtype, n_elems));
}
