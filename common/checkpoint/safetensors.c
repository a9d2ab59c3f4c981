/* SPDX-License-Identifier: Apache-2.0 */
/* safetensors.c - read-only safetensors files: tensor views over an mmap.
 *
 * Design: the 8-byte header length is checked against a cap and the file size before a
 * single byte of JSON is parsed; jansson then parses the header (duplicate names refused,
 * NUL bytes in strings refused) and each entry is checked with strict field types:
 * "dtype" a string naming a standard dtype, "shape" an array of non-negative integers,
 * "data_offsets" two non-negative integers. The byte size implied by dtype x shape must
 * equal end - begin, all data must lie inside the data section, and after sorting by
 * offset no two tensors may overlap. The JSON tree is freed before returning; what stays
 * is one array of views (in data order), one array of names and a name-sorted index, so
 * lookups are O(log n) and nothing allocates after open. The mapping, the open/destroy
 * shell and the index are tensor_file.c's, shared with gguf.c.
 *
 * Dtypes: every standard safetensors dtype is known for bounds checking (sub-byte F4/F6
 * types by bit count); F32, F16 and BF16 map to deras types, the rest become DT_UNSUPPORTED
 * with their own name, for callers to refuse.
 */
#include "safetensors.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_util.h"
#include "tensor_file.h"
#include "common/base/status.h"

#define ST_HEADER_CAP (100u * 1000u * 1000u) /* as the reference implementation */

struct st_file {
    tensor_file_t tf; /* first: name, bytes, mapping, tensor views (data order) */
    char *names;    /* all names, NUL-terminated, back to back */
};

struct st_dtype {
    const char *name;
    int bits; /* per element */
    int dtype;
};

static const struct st_dtype st_dtypes[] = {
    {"BOOL", 8, DT_UNSUPPORTED},    {"U8", 8, DT_UNSUPPORTED},      {"I8", 8, DT_UNSUPPORTED},
    {"F8_E5M2", 8, DT_UNSUPPORTED}, {"F8_E4M3", 8, DT_UNSUPPORTED}, {"F8_E8M0", 8, DT_UNSUPPORTED},
    {"I16", 16, DT_UNSUPPORTED},    {"U16", 16, DT_UNSUPPORTED},    {"F16", 16, DT_F16},
    {"BF16", 16, DT_BF16},      {"I32", 32, DT_UNSUPPORTED},    {"U32", 32, DT_UNSUPPORTED},
    {"F32", 32, DT_F32},        {"F64", 64, DT_UNSUPPORTED},    {"I64", 64, DT_UNSUPPORTED},
    {"U64", 64, DT_UNSUPPORTED},    {"C64", 64, DT_UNSUPPORTED},    {"F4", 4, DT_UNSUPPORTED},
    {"F6_E2M3", 6, DT_UNSUPPORTED}, {"F6_E3M2", 6, DT_UNSUPPORTED},
};

static const struct st_dtype *st_dtype_lookup(const char *s)
{
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (!strcmp(st_dtypes[i].name, s))
            return &st_dtypes[i];
    return NULL;
}

/* A name from the file (JSON: UTF-8), escaped and shortened for an error message. */
static const char *printable(const char *s, char *buf, size_t cap)
{
    return printable_name(s, strlen(s), true, buf, cap);
}

/* Check one entry and fill its view (data holds the begin offset until placed). */
static int read_entry(struct st_file *f, const char *name, const json_t *e, tensor_view *v,
                      uint64_t *begin, size_t data_size)
{
    char nb[NAME_BUF];
    const char *pn = printable(name, nb, sizeof nb);
    if (!json_is_object(e))
        return deras_fail(DERAS_EFORMAT, "%s: tensor '%s': entry is %s, expected an object",
                          f->tf.name, pn, json_kind(e));
    const json_t *jd = json_object_get(e, "dtype");
    const json_t *js = json_object_get(e, "shape");
    const json_t *jo = json_object_get(e, "data_offsets");
    if (!jd || !js || !jo)
        return deras_fail(DERAS_EFORMAT, "%s: tensor '%s': missing field '%s'", f->tf.name, pn,
                          !jd ? "dtype" : !js ? "shape" : "data_offsets");
    if (!json_is_string(jd))
        return deras_fail(DERAS_EFORMAT, "%s: tensor '%s': dtype is %s, expected a string",
                          f->tf.name, pn, json_kind(jd));
    const struct st_dtype *dt = st_dtype_lookup(json_string_value(jd));
    if (!dt) {
        char db[NAME_BUF];
        return deras_fail(DERAS_EUNSUPPORTED, "%s: tensor '%s': unknown dtype '%s'", f->tf.name,
                          pn, printable(json_string_value(jd), db, sizeof db));
    }
    if (!json_is_array(js))
        return deras_fail(DERAS_EFORMAT, "%s: tensor '%s': shape is %s, expected an array",
                          f->tf.name, pn, json_kind(js));
    size_t n_dims = json_array_size(js);
    if (n_dims > TENSOR_MAX_DIMS)
        return deras_fail(DERAS_EUNSUPPORTED, "%s: tensor '%s': %zu dimensions (at most %d "
                          "supported)", f->tf.name, pn, n_dims, TENSOR_MAX_DIMS);
    uint64_t numel = 1;
    bool overflow = false;
    for (size_t d = 0; d < n_dims; d++) {
        const json_t *x = json_array_get(js, d);
        if (!json_is_integer(x))
            return deras_fail(DERAS_EFORMAT, "%s: tensor '%s': shape[%zu] is %s, expected an "
                              "integer", f->tf.name, pn, d, json_kind(x));
        json_int_t dim = json_integer_value(x);
        if (dim < 0)
            return deras_fail(DERAS_EFORMAT, "%s: tensor '%s': shape[%zu] is negative (%lld)",
                              f->tf.name, pn, d, (long long)dim);
        v->shape[d] = (int64_t)dim;
        if (dim && numel > (uint64_t)INT64_MAX / (uint64_t)dim)
            overflow = true; /* an earlier or later zero does not make the shape sane */
        else
            numel *= (uint64_t)dim;
    }
    if (overflow || numel > UINT64_MAX / (uint64_t)dt->bits)
        return deras_fail(DERAS_EFORMAT, "%s: tensor '%s': the element count overflows",
                          f->tf.name, pn);
    uint64_t bits = numel * (uint64_t)dt->bits;
    if (bits % 8)
        return deras_fail(DERAS_EFORMAT, "%s: tensor '%s': %llu %s elements are not a whole "
                          "number of bytes", f->tf.name, pn, (unsigned long long)numel, dt->name);
    uint64_t nbytes = bits / 8;
    if (!json_is_array(jo) || json_array_size(jo) != 2)
        return deras_fail(DERAS_EFORMAT, "%s: tensor '%s': data_offsets must be an array of "
                          "two integers", f->tf.name, pn);
    json_int_t off[2];
    for (int k = 0; k < 2; k++) {
        const json_t *x = json_array_get(jo, (size_t)k);
        if (!json_is_integer(x) || json_integer_value(x) < 0)
            return deras_fail(DERAS_EFORMAT, "%s: tensor '%s': data_offsets[%d] is not a "
                              "non-negative integer", f->tf.name, pn, k);
        off[k] = json_integer_value(x);
    }
    if (off[1] < off[0])
        return deras_fail(DERAS_EFORMAT, "%s: tensor '%s': data_offsets [%lld, %lld] end "
                          "before they begin", f->tf.name, pn, (long long)off[0], (long long)off[1]);
    if ((uint64_t)(off[1] - off[0]) != nbytes)
        return deras_fail(DERAS_EFORMAT, "%s: tensor '%s': data_offsets [%lld, %lld] span %llu "
                          "bytes, but %s x %llu elements need %llu", f->tf.name, pn,
                          (long long)off[0], (long long)off[1],
                          (unsigned long long)(off[1] - off[0]), dt->name,
                          (unsigned long long)numel, (unsigned long long)nbytes);
    if ((uint64_t)off[1] > data_size)
        return deras_fail(DERAS_EFORMAT, "%s: tensor '%s': data_offsets [%lld, %lld] end past "
                          "the %zu bytes of data in the file", f->tf.name, pn, (long long)off[0],
                          (long long)off[1], data_size);
    v->n_dims = (int)n_dims;
    v->dtype = dt->dtype;
    v->type_name = dt->name;
    v->n_bytes = (size_t)nbytes;
    *begin = (uint64_t)off[0];
    return DERAS_OK;
}

struct placed {
    uint64_t begin;
    tensor_view v;
};

static int placed_cmp(const void *a, const void *b)
{
    const struct placed *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->v.n_bytes < y->v.n_bytes ? -1 : x->v.n_bytes > y->v.n_bytes;
}

static int check_metadata(struct st_file *f, const json_t *meta)
{
    if (!json_is_object(meta))
        return deras_fail(DERAS_EFORMAT, "%s: __metadata__ is %s, expected an object of strings",
                          f->tf.name, json_kind(meta));
    const char *k;
    const json_t *val;
    json_object_foreach((json_t *)meta, k, val) {
        if (!json_is_string(val)) {
            char nb[NAME_BUF];
            return deras_fail(DERAS_EFORMAT, "%s: __metadata__ key '%s' is %s, expected a string",
                              f->tf.name, printable(k, nb, sizeof nb), json_kind(val));
        }
    }
    return DERAS_OK;
}

static int parse(tensor_file_t *tf)
{
    struct st_file *f = (struct st_file *)tf;
    json_t *root = NULL;
    struct placed *tmp = NULL;
    int rc;
    if (f->tf.size < 8) {
        rc = deras_fail(DERAS_EFORMAT, "%s: %zu bytes is too short for a safetensors file",
                        f->tf.name, f->tf.size);
        goto fail;
    }
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++)
        hlen |= (uint64_t)f->tf.base[i] << (8 * i);
    if (hlen > ST_HEADER_CAP) {
        rc = deras_fail(DERAS_EFORMAT, "%s: header length %llu exceeds the %u byte cap",
                        f->tf.name, (unsigned long long)hlen, ST_HEADER_CAP);
        goto fail;
    }
    if (hlen > f->tf.size - 8) {
        rc = deras_fail(DERAS_EFORMAT, "%s: header length %llu is beyond the end of the file "
                        "(%zu bytes)", f->tf.name, (unsigned long long)hlen, f->tf.size);
        goto fail;
    }
    json_error_t err;
    root = json_loadb((const char *)f->tf.base + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &err);
    if (!root) {
        rc = deras_fail(DERAS_EFORMAT, "%s: header is not valid JSON: %s (at byte %d)", f->tf.name,
                        err.text, err.position);
        goto fail;
    }
    if (!json_is_object(root)) {
        rc = deras_fail(DERAS_EFORMAT, "%s: header is %s, expected a JSON object", f->tf.name,
                        json_kind(root));
        goto fail;
    }
    const size_t data_size = f->tf.size - 8 - (size_t)hlen;
    const uint8_t *data = f->tf.base + 8 + hlen;
    size_t n = json_object_size(root);
    size_t names_bytes = 0;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) names_bytes += strlen(key) + 1;
    tmp = calloc(n ? n : 1, sizeof *tmp);
    f->names = malloc(names_bytes ? names_bytes : 1);
    if (!tmp || !f->names) {
        rc = deras_fail(DERAS_ENOMEM, "%s: out of memory for %zu tensors", f->tf.name, n);
        goto fail;
    }
    size_t nt = 0, name_off = 0;
    json_object_foreach(root, key, val) {
        if (!strcmp(key, "__metadata__")) {
            if ((rc = check_metadata(f, val)))
                goto fail;
            continue;
        }
        if ((rc = read_entry(f, key, val, &tmp[nt].v, &tmp[nt].begin, data_size)))
            goto fail;
        size_t kl = strlen(key) + 1;
        memcpy(f->names + name_off, key, kl);
        tmp[nt].v.name = f->names + name_off;
        name_off += kl;
        nt++;
    }
    qsort(tmp, nt, sizeof *tmp, placed_cmp);
    for (size_t i = 1; i < nt; i++) {
        const struct placed *a = &tmp[i - 1], *b = &tmp[i];
        if (a->v.n_bytes && b->v.n_bytes && b->begin < a->begin + a->v.n_bytes) {
            char na[NAME_BUF], nb[NAME_BUF];
            rc = deras_fail(DERAS_EFORMAT, "%s: tensors '%s' and '%s' overlap (bytes %llu..%llu "
                            "and %llu..%llu)", f->tf.name, printable(a->v.name, na, sizeof na),
                            printable(b->v.name, nb, sizeof nb), (unsigned long long)a->begin,
                            (unsigned long long)(a->begin + a->v.n_bytes),
                            (unsigned long long)b->begin,
                            (unsigned long long)(b->begin + b->v.n_bytes));
            goto fail;
        }
    }
    f->tf.tensors = calloc(nt ? nt : 1, sizeof *f->tf.tensors);
    if (!f->tf.tensors) {
        rc = deras_fail(DERAS_ENOMEM, "%s: out of memory for %zu tensors", f->tf.name, nt);
        goto fail;
    }
    for (size_t i = 0; i < nt; i++) {
        f->tf.tensors[i] = tmp[i].v;
        f->tf.tensors[i].data = data + tmp[i].begin;
    }
    f->tf.n_tensors = (int64_t)nt;
    if ((rc = tensor_file_index(&f->tf))) /* names are unique: only ENOMEM */
        goto fail;
    free(tmp);
    json_decref(root);
    return DERAS_OK;
fail:
    free(tmp);
    if (root)
        json_decref(root);
    return rc;
}

/* What the shell does not free: the names. */
static void release(tensor_file_t *tf)
{
    free(((struct st_file *)tf)->names);
}

static const tensor_file_reader reader = {
    .api = "st",
    .what = "a safetensors file",
    .min_size = 8,
    .obj_size = sizeof(struct st_file),
    .parse = parse,
    .release = release,
};

int st_open_memory(const void *data, size_t size, const char *name, st_file_t **out)
{
    tensor_file_t *tf = NULL;
    int rc = tensor_file_open_memory(&reader, data, size, name, out ? &tf : NULL);
    if (out)
        *out = (st_file_t *)tf;
    return rc;
}

int st_open(const char *path, st_file_t **out)
{
    tensor_file_t *tf = NULL;
    int rc = tensor_file_open(&reader, path, out ? &tf : NULL);
    if (out)
        *out = (st_file_t *)tf;
    return rc;
}

void st_destroy(st_file_t **fp)
{
    if (!fp || !*fp)
        return;
    tensor_file_t *tf = &(*fp)->tf;
    tensor_file_destroy(&reader, &tf);
    *fp = NULL;
}

const char *st_name(const st_file_t *f)
{
    return f ? f->tf.name : "";
}

int64_t st_n_tensors(const st_file_t *f)
{
    return f ? f->tf.n_tensors : 0;
}

int st_tensor_at(const st_file_t *f, int64_t i, tensor_view *out)
{
    return tensor_file_at(f ? &f->tf : NULL, i, out, "st_tensor_at");
}

int st_find_tensor(const st_file_t *f, const char *name, tensor_view *out)
{
    return tensor_file_find(f ? &f->tf : NULL, name, out, "st_find_tensor");
}
