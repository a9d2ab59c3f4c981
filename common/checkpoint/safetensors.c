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
 * lookups are O(log n) and nothing allocates after open.
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
#include "mapped_file.h"
#include "common/base/status.h"

#define ST_HEADER_CAP (100u * 1000u * 1000u) /* as the reference implementation */
#define NAME_BUF 96

struct st_file {
    char *name;
    const uint8_t *base;
    size_t size;
    void *map; /* non-NULL when st_open mapped the file */
    int64_t n_tensors;
    tensor_view *tensors;          /* data order */
    const tensor_view **by_name;   /* sorted by name */
    char *names;                   /* all names, NUL-terminated, back to back */
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

/* A name from the file, escaped and shortened for an error message. */
static const char *printable(const char *s, char *buf, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; s[i]; i++) {
        if (o + 8 > cap) {
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        unsigned char ch = (unsigned char)s[i];
        if (ch >= 0x20 && ch != 0x7f && ch != '\'' && ch != '\\')
            buf[o++] = (char)ch; /* UTF-8 bytes pass through */
        else
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", ch);
    }
    buf[o] = '\0';
    return buf;
}

/* Check one entry and fill its view (data holds the begin offset until placed). */
static int read_entry(struct st_file *f, const char *name, const json_t *e, tensor_view *v,
                      uint64_t *begin, size_t data_size)
{
    char nb[NAME_BUF];
    const char *pn = printable(name, nb, sizeof nb);
    if (!json_is_object(e))
        return deras_fail(DERAS_EFORMAT, "%s: tensor '%s': entry is %s, expected an object",
                          f->name, pn, json_kind(e));
    const json_t *jd = json_object_get(e, "dtype");
    const json_t *js = json_object_get(e, "shape");
    const json_t *jo = json_object_get(e, "data_offsets");
    if (!jd || !js || !jo)
        return deras_fail(DERAS_EFORMAT, "%s: tensor '%s': missing field '%s'", f->name, pn,
                          !jd ? "dtype" : !js ? "shape" : "data_offsets");
    if (!json_is_string(jd))
        return deras_fail(DERAS_EFORMAT, "%s: tensor '%s': dtype is %s, expected a string",
                          f->name, pn, json_kind(jd));
    const struct st_dtype *dt = st_dtype_lookup(json_string_value(jd));
    if (!dt) {
        char db[NAME_BUF];
        return deras_fail(DERAS_EUNSUPPORTED, "%s: tensor '%s': unknown dtype '%s'", f->name,
                          pn, printable(json_string_value(jd), db, sizeof db));
    }
    if (!json_is_array(js))
        return deras_fail(DERAS_EFORMAT, "%s: tensor '%s': shape is %s, expected an array",
                          f->name, pn, json_kind(js));
    size_t n_dims = json_array_size(js);
    if (n_dims > TENSOR_MAX_DIMS)
        return deras_fail(DERAS_EUNSUPPORTED, "%s: tensor '%s': %zu dimensions (at most %d "
                          "supported)", f->name, pn, n_dims, TENSOR_MAX_DIMS);
    uint64_t numel = 1;
    bool overflow = false;
    for (size_t d = 0; d < n_dims; d++) {
        const json_t *x = json_array_get(js, d);
        if (!json_is_integer(x))
            return deras_fail(DERAS_EFORMAT, "%s: tensor '%s': shape[%zu] is %s, expected an "
                              "integer", f->name, pn, d, json_kind(x));
        json_int_t dim = json_integer_value(x);
        if (dim < 0)
            return deras_fail(DERAS_EFORMAT, "%s: tensor '%s': shape[%zu] is negative (%lld)",
                              f->name, pn, d, (long long)dim);
        v->shape[d] = (int64_t)dim;
        if (dim && numel > (uint64_t)INT64_MAX / (uint64_t)dim)
            overflow = true; /* an earlier or later zero does not make the shape sane */
        else
            numel *= (uint64_t)dim;
    }
    if (overflow || numel > UINT64_MAX / (uint64_t)dt->bits)
        return deras_fail(DERAS_EFORMAT, "%s: tensor '%s': the element count overflows",
                          f->name, pn);
    uint64_t bits = numel * (uint64_t)dt->bits;
    if (bits % 8)
        return deras_fail(DERAS_EFORMAT, "%s: tensor '%s': %llu %s elements are not a whole "
                          "number of bytes", f->name, pn, (unsigned long long)numel, dt->name);
    uint64_t nbytes = bits / 8;
    if (!json_is_array(jo) || json_array_size(jo) != 2)
        return deras_fail(DERAS_EFORMAT, "%s: tensor '%s': data_offsets must be an array of "
                          "two integers", f->name, pn);
    json_int_t off[2];
    for (int k = 0; k < 2; k++) {
        const json_t *x = json_array_get(jo, (size_t)k);
        if (!json_is_integer(x) || json_integer_value(x) < 0)
            return deras_fail(DERAS_EFORMAT, "%s: tensor '%s': data_offsets[%d] is not a "
                              "non-negative integer", f->name, pn, k);
        off[k] = json_integer_value(x);
    }
    if (off[1] < off[0])
        return deras_fail(DERAS_EFORMAT, "%s: tensor '%s': data_offsets [%lld, %lld] end "
                          "before they begin", f->name, pn, (long long)off[0], (long long)off[1]);
    if ((uint64_t)(off[1] - off[0]) != nbytes)
        return deras_fail(DERAS_EFORMAT, "%s: tensor '%s': data_offsets [%lld, %lld] span %llu "
                          "bytes, but %s x %llu elements need %llu", f->name, pn,
                          (long long)off[0], (long long)off[1],
                          (unsigned long long)(off[1] - off[0]), dt->name,
                          (unsigned long long)numel, (unsigned long long)nbytes);
    if ((uint64_t)off[1] > data_size)
        return deras_fail(DERAS_EFORMAT, "%s: tensor '%s': data_offsets [%lld, %lld] end past "
                          "the %zu bytes of data in the file", f->name, pn, (long long)off[0],
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

static int view_name_cmp(const void *a, const void *b)
{
    return strcmp((*(const tensor_view *const *)a)->name, (*(const tensor_view *const *)b)->name);
}

static int check_metadata(struct st_file *f, const json_t *meta)
{
    if (!json_is_object(meta))
        return deras_fail(DERAS_EFORMAT, "%s: __metadata__ is %s, expected an object of strings",
                          f->name, json_kind(meta));
    const char *k;
    const json_t *val;
    json_object_foreach((json_t *)meta, k, val) {
        if (!json_is_string(val)) {
            char nb[NAME_BUF];
            return deras_fail(DERAS_EFORMAT, "%s: __metadata__ key '%s' is %s, expected a string",
                              f->name, printable(k, nb, sizeof nb), json_kind(val));
        }
    }
    return DERAS_OK;
}

static int parse(struct st_file *f)
{
    json_t *root = NULL;
    struct placed *tmp = NULL;
    int rc;
    if (f->size < 8) {
        rc = deras_fail(DERAS_EFORMAT, "%s: %zu bytes is too short for a safetensors file",
                        f->name, f->size);
        goto fail;
    }
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++)
        hlen |= (uint64_t)f->base[i] << (8 * i);
    if (hlen > ST_HEADER_CAP) {
        rc = deras_fail(DERAS_EFORMAT, "%s: header length %llu exceeds the %u byte cap",
                        f->name, (unsigned long long)hlen, ST_HEADER_CAP);
        goto fail;
    }
    if (hlen > f->size - 8) {
        rc = deras_fail(DERAS_EFORMAT, "%s: header length %llu is beyond the end of the file "
                        "(%zu bytes)", f->name, (unsigned long long)hlen, f->size);
        goto fail;
    }
    json_error_t err;
    root = json_loadb((const char *)f->base + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &err);
    if (!root) {
        rc = deras_fail(DERAS_EFORMAT, "%s: header is not valid JSON: %s (at byte %d)", f->name,
                        err.text, err.position);
        goto fail;
    }
    if (!json_is_object(root)) {
        rc = deras_fail(DERAS_EFORMAT, "%s: header is %s, expected a JSON object", f->name,
                        json_kind(root));
        goto fail;
    }
    const size_t data_size = f->size - 8 - (size_t)hlen;
    const uint8_t *data = f->base + 8 + hlen;
    size_t n = json_object_size(root);
    size_t names_bytes = 0;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) names_bytes += strlen(key) + 1;
    tmp = calloc(n ? n : 1, sizeof *tmp);
    f->names = malloc(names_bytes ? names_bytes : 1);
    if (!tmp || !f->names) {
        rc = deras_fail(DERAS_ENOMEM, "%s: out of memory for %zu tensors", f->name, n);
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
                            "and %llu..%llu)", f->name, printable(a->v.name, na, sizeof na),
                            printable(b->v.name, nb, sizeof nb), (unsigned long long)a->begin,
                            (unsigned long long)(a->begin + a->v.n_bytes),
                            (unsigned long long)b->begin,
                            (unsigned long long)(b->begin + b->v.n_bytes));
            goto fail;
        }
    }
    f->tensors = calloc(nt ? nt : 1, sizeof *f->tensors);
    f->by_name = calloc(nt ? nt : 1, sizeof *f->by_name);
    if (!f->tensors || !f->by_name) {
        rc = deras_fail(DERAS_ENOMEM, "%s: out of memory for %zu tensors", f->name, nt);
        goto fail;
    }
    for (size_t i = 0; i < nt; i++) {
        f->tensors[i] = tmp[i].v;
        f->tensors[i].data = data + tmp[i].begin;
        f->by_name[i] = &f->tensors[i];
    }
    qsort(f->by_name, nt, sizeof *f->by_name, view_name_cmp);
    f->n_tensors = (int64_t)nt;
    free(tmp);
    json_decref(root);
    return DERAS_OK;
fail:
    free(tmp);
    if (root)
        json_decref(root);
    return rc;
}

static void free_contents(struct st_file *f)
{
    free(f->tensors);
    free(f->by_name);
    free(f->names);
    if (f->map)
        mapped_file_close(f->map, f->size);
    free(f->name);
}

static int open_common(const void *data, size_t size, const char *name, void *map,
                       st_file_t **out)
{
    struct st_file *f = calloc(1, sizeof *f);
    int rc = DERAS_ENOMEM;
    if (!f) {
        if (map)
            mapped_file_close(map, size);
        return deras_fail(rc, "%s: out of memory", name);
    }
    f->map = map;
    f->base = data;
    f->size = size;
    f->name = strdup(name);
    if (!f->name) {
        deras_fail(rc, "%s: out of memory", name);
        goto fail;
    }
    if ((rc = parse(f)))
        goto fail;
    *out = f;
    return DERAS_OK;
fail:
    free_contents(f);
    free(f);
    return rc;
}

int st_open_memory(const void *data, size_t size, const char *name, st_file_t **out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "st_open_memory: out is NULL");
    *out = NULL;
    if (!name)
        name = "(memory)";
    if (!data && size)
        return deras_fail(DERAS_EINVAL, "%s: data is NULL", name);
    return open_common(data ? data : "", size, name, NULL, out);
}

int st_open(const char *path, st_file_t **out)
{
    if (!out || !path)
        return deras_fail(DERAS_EINVAL, "st_open: NULL argument");
    *out = NULL;
    void *map;
    size_t size;
    int rc = mapped_file_open(path, 8, "a safetensors file", &map, &size);
    return rc ? rc : open_common(map, size, path, map, out);
}

void st_destroy(st_file_t **fp)
{
    if (!fp || !*fp)
        return;
    free_contents(*fp);
    free(*fp);
    *fp = NULL;
}

const char *st_name(const st_file_t *f)
{
    return f ? f->name : "";
}

int64_t st_n_tensors(const st_file_t *f)
{
    return f ? f->n_tensors : 0;
}

int st_tensor_at(const st_file_t *f, int64_t i, tensor_view *out)
{
    if (!f || !out)
        return deras_fail(DERAS_EINVAL, "st_tensor_at: NULL argument");
    if (i < 0 || i >= f->n_tensors)
        return deras_fail(DERAS_ERANGE, "%s: tensor index %lld outside 0..%lld", f->name,
                          (long long)i, (long long)f->n_tensors - 1);
    *out = f->tensors[i];
    return DERAS_OK;
}

int st_find_tensor(const st_file_t *f, const char *name, tensor_view *out)
{
    if (!f || !name)
        return deras_fail(DERAS_EINVAL, "st_find_tensor: NULL argument");
    int64_t lo = 0, hi = f->n_tensors;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, f->by_name[mid]->name);
        if (c == 0) {
            if (out)
                *out = *f->by_name[mid];
            return DERAS_OK;
        }
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return deras_fail(DERAS_ENOTFOUND, "%s: tensor '%s' not found", f->name, name);
}
