/* SPDX-License-Identifier: Apache-2.0 */
/* gguf_get.c - the accessors of an open GGUF file (see gguf.h): metadata by key, numeric
 * arrays converted on access, tensor views. Read-only over what gguf.c validated, so any
 * number of threads may call them at once. Lookups are binary searches, O(log n); array
 * copies O(n); nothing allocates.
 */
#include <string.h>

#include "gguf_impl.h"
#include "common/base/status.h"

const struct gguf_kv *gguf_find_kv(const gguf_t *g, const char *key)
{
    int64_t lo = 0, hi = g->n_kv;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(key, g->kv[mid].key.s);
        if (c == 0)
            return &g->kv[mid];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

const char *gguf_name(const gguf_t *g)
{
    return g ? g->tf.name : "";
}

uint32_t gguf_version(const gguf_t *g)
{
    return g ? g->version : 0;
}

static int lookup(const gguf_t *g, const char *key, const struct gguf_kv **kv)
{
    if (!g || !key)
        return deras_fail(DERAS_EINVAL, "gguf: NULL argument");
    *kv = gguf_find_kv(g, key);
    if (!*kv)
        return deras_fail(DERAS_ENOTFOUND, "%s: key '%s' not found", g->tf.name, key);
    return DERAS_OK;
}

static int wrong_type(const gguf_t *g, const struct gguf_kv *kv, const char *expected)
{
    if (kv->type == GGUF_TYPE_ARRAY)
        return deras_fail(DERAS_EFORMAT, "%s: key '%s' has type array of %s, expected %s",
                          g->tf.name, kv->key.s, type_name(kv->arr_type), expected);
    return deras_fail(DERAS_EFORMAT, "%s: key '%s' has type %s, expected %s", g->tf.name,
                      kv->key.s, type_name(kv->type), expected);
}

bool gguf_has_key(const gguf_t *g, const char *key)
{
    return g && key && gguf_find_kv(g, key) != NULL;
}

int gguf_get_int(const gguf_t *g, const char *key, int64_t *out)
{
    const struct gguf_kv *kv;
    int rc = lookup(g, key, &kv);
    if (rc)
        return rc;
    if (!is_int_type(kv->type))
        return wrong_type(g, kv, "an integer");
    if (!is_signed_type(kv->type) && kv->num.u > (uint64_t)INT64_MAX)
        return deras_fail(DERAS_ERANGE, "%s: key '%s': %llu does not fit in int64", g->tf.name,
                          key, (unsigned long long)kv->num.u);
    if (out)
        *out = is_signed_type(kv->type) ? kv->num.i : (int64_t)kv->num.u;
    return DERAS_OK;
}

int gguf_get_float(const gguf_t *g, const char *key, double *out)
{
    const struct gguf_kv *kv;
    int rc = lookup(g, key, &kv);
    if (rc)
        return rc;
    double v;
    if (kv->type == GGUF_TYPE_FLOAT32 || kv->type == GGUF_TYPE_FLOAT64)
        v = kv->num.f;
    else if (is_signed_type(kv->type))
        v = (double)kv->num.i;
    else if (is_int_type(kv->type))
        v = (double)kv->num.u;
    else
        return wrong_type(g, kv, "a number");
    if (out)
        *out = v;
    return DERAS_OK;
}

int gguf_get_bool(const gguf_t *g, const char *key, bool *out)
{
    const struct gguf_kv *kv;
    int rc = lookup(g, key, &kv);
    if (rc)
        return rc;
    if (kv->type != GGUF_TYPE_BOOL)
        return wrong_type(g, kv, "bool");
    if (out)
        *out = kv->num.u != 0;
    return DERAS_OK;
}

int gguf_get_str(const gguf_t *g, const char *key, const char **s, size_t *len)
{
    const struct gguf_kv *kv;
    int rc = lookup(g, key, &kv);
    if (rc)
        return rc;
    if (kv->type != GGUF_TYPE_STRING)
        return wrong_type(g, kv, "string");
    if (s)
        *s = kv->str.s;
    if (len)
        *len = kv->str.len;
    return DERAS_OK;
}

int gguf_get_arr_info(const gguf_t *g, const char *key, int *elem_type, uint64_t *n)
{
    const struct gguf_kv *kv;
    int rc = lookup(g, key, &kv);
    if (rc)
        return rc;
    if (kv->type != GGUF_TYPE_ARRAY)
        return wrong_type(g, kv, "array");
    if (elem_type)
        *elem_type = kv->arr_type;
    if (n)
        *n = kv->n;
    return DERAS_OK;
}

int gguf_get_arr_str(const gguf_t *g, const char *key, uint64_t i, const char **s, size_t *len)
{
    const struct gguf_kv *kv;
    int rc = lookup(g, key, &kv);
    if (rc)
        return rc;
    if (kv->type != GGUF_TYPE_ARRAY || kv->arr_type != GGUF_TYPE_STRING)
        return wrong_type(g, kv, "array of string");
    if (i >= kv->n)
        return deras_fail(DERAS_ERANGE, "%s: key '%s': index %llu past the %llu elements",
                          g->tf.name, key, (unsigned long long)i, (unsigned long long)kv->n);
    if (s)
        *s = kv->strs[i].s;
    if (len)
        *len = kv->strs[i].len;
    return DERAS_OK;
}

static int numeric_array(const gguf_t *g, const char *key, uint64_t n, bool want_int,
                         const struct gguf_kv **kvp)
{
    const struct gguf_kv *kv;
    int rc = lookup(g, key, &kv);
    if (rc)
        return rc;
    bool ok = kv->type == GGUF_TYPE_ARRAY &&
              (want_int ? is_int_type(kv->arr_type)
                        : kv->arr_type == GGUF_TYPE_FLOAT32 || kv->arr_type == GGUF_TYPE_FLOAT64);
    if (!ok)
        return wrong_type(g, kv, want_int ? "an integer array" : "a float array");
    if (n != kv->n)
        return deras_fail(DERAS_EINVAL, "%s: key '%s': asked for %llu elements, the array has %llu",
                          g->tf.name, key, (unsigned long long)n, (unsigned long long)kv->n);
    *kvp = kv;
    return DERAS_OK;
}

int gguf_get_arr_i32(const gguf_t *g, const char *key, int32_t *dst, uint64_t n)
{
    const struct gguf_kv *kv;
    int rc = numeric_array(g, key, n, true, &kv);
    if (rc)
        return rc;
    if (n && !dst)
        return deras_fail(DERAS_EINVAL, "gguf_get_arr_i32: dst is NULL");
    size_t es = value_size((uint32_t)kv->arr_type);
    bool sig = is_signed_type(kv->arr_type);
    for (uint64_t i = 0; i < n; i++) {
        const uint8_t *p = kv->arr + i * es;
        if (sig) {
            int64_t v = load_le_signed(p, es);
            if (v < INT32_MIN || v > INT32_MAX)
                return deras_fail(DERAS_ERANGE, "%s: key '%s': element %llu (%lld) does not fit "
                                  "in int32", g->tf.name, key, (unsigned long long)i, (long long)v);
            dst[i] = (int32_t)v;
        } else {
            uint64_t v = load_le(p, es);
            if (v > INT32_MAX)
                return deras_fail(DERAS_ERANGE, "%s: key '%s': element %llu (%llu) does not fit "
                                  "in int32", g->tf.name, key, (unsigned long long)i,
                                  (unsigned long long)v);
            dst[i] = (int32_t)v;
        }
    }
    return DERAS_OK;
}

int gguf_get_arr_f32(const gguf_t *g, const char *key, float *dst, uint64_t n)
{
    const struct gguf_kv *kv;
    int rc = numeric_array(g, key, n, false, &kv);
    if (rc)
        return rc;
    if (n && !dst)
        return deras_fail(DERAS_EINVAL, "gguf_get_arr_f32: dst is NULL");
    size_t es = value_size((uint32_t)kv->arr_type);
    for (uint64_t i = 0; i < n; i++)
        dst[i] = (float)load_float(kv->arr + i * es, kv->arr_type);
    return DERAS_OK;
}

/* ---- tensor accessors ---- */

int64_t gguf_n_tensors(const gguf_t *g)
{
    return g ? g->tf.n_tensors : 0;
}

int gguf_tensor_at(const gguf_t *g, int64_t i, tensor_view *out)
{
    return tensor_file_at(g ? &g->tf : NULL, i, out, "gguf_tensor_at");
}

int gguf_find_tensor(const gguf_t *g, const char *name, tensor_view *out)
{
    return tensor_file_find(g ? &g->tf : NULL, name, out, "gguf_find_tensor");
}
