/* SPDX-License-Identifier: Apache-2.0 */
/* tensor_file.c - the shell the checkpoint readers share (see tensor_file.h). */
#include "tensor_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mapped_file.h"
#include "common/base/status.h"

static int open_shell(const tensor_file_reader *rd, const void *data, size_t size,
                      const char *name, void *map, tensor_file_t **out)
{
    tensor_file_t *tf = calloc(1, rd->obj_size);
    if (!tf) {
        if (map)
            mapped_file_close(map, size);
        return deras_fail(DERAS_ENOMEM, "%s: out of memory", name);
    }
    tf->map = map;
    tf->base = data;
    tf->size = size;
    tf->name = strdup(name);
    int rc = DERAS_ENOMEM;
    if (!tf->name) {
        deras_fail(rc, "%s: out of memory", name);
        goto fail;
    }
    if ((rc = rd->parse(tf)))
        goto fail;
    *out = tf;
    return DERAS_OK;
fail:
    tensor_file_destroy(rd, &tf);
    return rc;
}

int tensor_file_open_memory(const tensor_file_reader *rd, const void *data, size_t size,
                            const char *name, tensor_file_t **out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "%s_open_memory: out is NULL", rd->api);
    *out = NULL;
    if (!name)
        name = "(memory)";
    if (!data && size)
        return deras_fail(DERAS_EINVAL, "%s: data is NULL", name);
    return open_shell(rd, data ? data : "", size, name, NULL, out);
}

int tensor_file_open(const tensor_file_reader *rd, const char *path, tensor_file_t **out)
{
    if (!out || !path)
        return deras_fail(DERAS_EINVAL, "%s_open: NULL argument", rd->api);
    *out = NULL;
    void *map;
    size_t size;
    int rc = mapped_file_open(path, rd->min_size, rd->what, &map, &size);
    return rc ? rc : open_shell(rd, map, size, path, map, out);
}

void tensor_file_destroy(const tensor_file_reader *rd, tensor_file_t **tfp)
{
    if (!tfp || !*tfp)
        return;
    tensor_file_t *tf = *tfp;
    rd->release(tf);
    free(tf->tensors);
    free(tf->by_name);
    if (tf->map)
        mapped_file_close(tf->map, tf->size);
    free(tf->name);
    free(tf);
    *tfp = NULL;
}

static int view_name_cmp(const void *a, const void *b)
{
    return strcmp((*(const tensor_view *const *)a)->name, (*(const tensor_view *const *)b)->name);
}

int tensor_file_index(tensor_file_t *tf)
{
    size_t n = (size_t)tf->n_tensors;
    tf->by_name = calloc(n ? n : 1, sizeof *tf->by_name);
    if (!tf->by_name)
        return deras_fail(DERAS_ENOMEM, "%s: out of memory for %zu tensors", tf->name, n);
    for (size_t i = 0; i < n; i++)
        tf->by_name[i] = &tf->tensors[i];
    qsort(tf->by_name, n, sizeof *tf->by_name, view_name_cmp);
    for (size_t i = 1; i < n; i++) {
        const char *a = tf->by_name[i - 1]->name, *b = tf->by_name[i]->name;
        if (!strcmp(a, b)) {
            char nb[NAME_BUF];
            return deras_fail(DERAS_EFORMAT, "%s: tensor '%s' appears more than once", tf->name,
                              printable_name(b, strlen(b), false, nb, sizeof nb));
        }
    }
    return DERAS_OK;
}

int tensor_file_at(const tensor_file_t *tf, int64_t i, tensor_view *out, const char *call)
{
    if (!tf || !out)
        return deras_fail(DERAS_EINVAL, "%s: NULL argument", call);
    if (i < 0 || i >= tf->n_tensors)
        return deras_fail(DERAS_ERANGE, "%s: tensor index %lld outside 0..%lld", tf->name,
                          (long long)i, (long long)tf->n_tensors - 1);
    *out = tf->tensors[i];
    return DERAS_OK;
}

int tensor_file_find(const tensor_file_t *tf, const char *name, tensor_view *out,
                     const char *call)
{
    if (!tf || !name)
        return deras_fail(DERAS_EINVAL, "%s: NULL argument", call);
    int64_t lo = 0, hi = tf->n_tensors;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        const tensor_view *v = tf->by_name[mid];
        int c = strcmp(name, v->name);
        if (c == 0) {
            if (out)
                *out = *v;
            return DERAS_OK;
        }
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return deras_fail(DERAS_ENOTFOUND, "%s: tensor '%s' not found", tf->name, name);
}

const char *printable_name(const char *s, size_t len, bool utf8, char *buf, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (o + 8 > cap) { /* room for one more escape, "..." and the NUL is gone */
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        unsigned char ch = (unsigned char)s[i];
        if (ch >= 0x20 && ch != '\'' && ch != '\\' && (utf8 ? ch != 0x7f : ch < 0x7f))
            buf[o++] = (char)ch;
        else
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", ch);
    }
    buf[o] = '\0';
    return buf;
}
