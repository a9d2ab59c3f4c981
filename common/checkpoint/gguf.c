/* SPDX-License-Identifier: Apache-2.0 */
/* gguf.c - read-only GGUF (v2, v3) files: metadata and tensor views over an mmap.
 *
 * Design: open does all the distrust. One forward pass over the header reads the
 * metadata key/value pairs and the tensor infos through a bounds-checked cursor; every
 * count is checked against the bytes that remain before anything is allocated for it
 * (an entry needs at least a few bytes, so a count of 2^60 is refused, not malloc'ed),
 * every length before it is followed. Strings are copied into a chunked arena and
 * NUL-terminated; string arrays get a table of (pointer, length) so element i is O(1).
 * Numeric arrays stay in the mapping and are converted on access. Keys and tensor names
 * are then sorted (duplicates are refused, so lookups are unambiguous) and found by
 * binary search. Tensor data is only bounds-checked, never touched, so opening a
 * multi-gigabyte model faults in just its header pages.
 *
 * Memory: the arena holds at most the header's string bytes plus one NUL each, the
 * tables one entry per key, tensor and string-array element; all bounded by the header
 * size. Error messages name the file, then the key or tensor, then the reason; names
 * taken from the file are escaped and shortened so a hostile file cannot fill the log.
 *
 * This file reads and validates; the accessors are in gguf_get.c, the object's layout in
 * gguf_impl.h, and the shell shared with safetensors.c (mapping, open/destroy, the tensor
 * name index) in tensor_file.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf_impl.h"
#include "common/base/status.h"

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32
#define ARENA_CHUNK (64 * 1024)

struct arena_chunk {
    struct arena_chunk *next;
    size_t used, cap;
    char data[];
};

/* ggml's type table: block elements and bytes for every type id a GGUF file may carry,
 * so views of types deras cannot compute with are still bounded. */
struct ggml_type_info {
    uint32_t id;
    const char *name;
    uint32_t block_elems;
    uint32_t block_bytes;
};

static const struct ggml_type_info ggml_types[] = {
    {0, "F32", 1, 4},          {1, "F16", 1, 2},          {2, "Q4_0", 32, 18},
    {3, "Q4_1", 32, 20},       {6, "Q5_0", 32, 22},       {7, "Q5_1", 32, 24},
    {8, "Q8_0", 32, 34},       {9, "Q8_1", 32, 36},       {10, "Q2_K", 256, 84},
    {11, "Q3_K", 256, 110},    {12, "Q4_K", 256, 144},    {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210},    {15, "Q8_K", 256, 292},    {16, "IQ2_XXS", 256, 66},
    {17, "IQ2_XS", 256, 74},   {18, "IQ3_XXS", 256, 98},  {19, "IQ1_S", 256, 50},
    {20, "IQ4_NL", 32, 18},    {21, "IQ3_S", 256, 110},   {22, "IQ2_S", 256, 82},
    {23, "IQ4_XS", 256, 136},  {24, "I8", 1, 1},          {25, "I16", 1, 2},
    {26, "I32", 1, 4},         {27, "I64", 1, 8},         {28, "F64", 1, 8},
    {29, "IQ1_M", 256, 56},    {30, "BF16", 1, 2},        {34, "TQ1_0", 256, 54},
    {35, "TQ2_0", 256, 66},    {39, "MXFP4", 32, 17},     {40, "NVFP4", 64, 36},
    {41, "Q1_0", 128, 18},
};

static const struct ggml_type_info *ggml_type_lookup(uint32_t id)
{
    for (size_t i = 0; i < sizeof ggml_types / sizeof ggml_types[0]; i++)
        if (ggml_types[i].id == id)
            return &ggml_types[i];
    return NULL;
}

/* ---- arena ---- */

static char *arena_copy(struct gguf *g, const uint8_t *src, size_t len)
{
    struct arena_chunk *c = g->arena;
    if (!c || c->cap - c->used < len + 1) {
        size_t cap = len + 1 > ARENA_CHUNK ? len + 1 : ARENA_CHUNK;
        c = malloc(sizeof *c + cap);
        if (!c)
            return NULL;
        c->cap = cap;
        c->used = 0;
        c->next = g->arena;
        g->arena = c;
    }
    char *dst = c->data + c->used;
    if (len)
        memcpy(dst, src, len);
    dst[len] = '\0';
    c->used += len + 1;
    return dst;
}

/* ---- bounds-checked cursor ---- */

struct cursor {
    const uint8_t *p;
    size_t size, pos;
    const char *file;
};

static size_t left(const struct cursor *r)
{
    return r->size - r->pos;
}

static int truncated(const struct cursor *r, const char *ctx, const char *what, size_t need)
{
    return deras_fail(DERAS_EFORMAT,
                      "%s: %s: file ends inside the %s (need %zu bytes at offset %zu, %zu left)",
                      r->file, ctx, what, need, r->pos, left(r));
}

static int rd_u32(struct cursor *r, uint32_t *v, const char *ctx, const char *what)
{
    if (left(r) < 4)
        return truncated(r, ctx, what, 4);
    *v = (uint32_t)load_le(r->p + r->pos, 4);
    r->pos += 4;
    return DERAS_OK;
}

static int rd_u64(struct cursor *r, uint64_t *v, const char *ctx, const char *what)
{
    if (left(r) < 8)
        return truncated(r, ctx, what, 8);
    *v = load_le(r->p + r->pos, 8);
    r->pos += 8;
    return DERAS_OK;
}

/* A GGUF string (u64 length + bytes), copied into the arena. */
static int rd_str(struct gguf *g, struct cursor *r, struct gguf_str *out, const char *ctx,
                  const char *what)
{
    uint64_t len;
    int rc = rd_u64(r, &len, ctx, what);
    if (rc)
        return rc;
    if (len > left(r))
        return deras_fail(DERAS_EFORMAT,
                          "%s: %s: %s length %llu exceeds the %zu bytes left in the file",
                          r->file, ctx, what, (unsigned long long)len, left(r));
    char *s = arena_copy(g, r->p + r->pos, (size_t)len);
    if (!s)
        return deras_fail(DERAS_ENOMEM, "%s: out of memory copying a string", r->file);
    out->s = s;
    out->len = (size_t)len;
    r->pos += (size_t)len;
    return DERAS_OK;
}

/* ---- metadata ---- */

static int read_scalar(struct cursor *r, struct gguf_kv *kv, const char *ctx)
{
    size_t n = value_size((uint32_t)kv->type);
    if (left(r) < n)
        return truncated(r, ctx, "value", n);
    const uint8_t *p = r->p + r->pos;
    if (kv->type == GGUF_TYPE_FLOAT32 || kv->type == GGUF_TYPE_FLOAT64) {
        kv->num.f = load_float(p, kv->type);
    } else if (kv->type == GGUF_TYPE_BOOL) {
        if (p[0] > 1)
            return deras_fail(DERAS_EFORMAT, "%s: %s: bool value is %u, not 0 or 1", r->file,
                              ctx, p[0]);
        kv->num.u = p[0];
    } else if (is_signed_type(kv->type)) {
        kv->num.i = load_le_signed(p, n);
    } else {
        kv->num.u = load_le(p, n);
    }
    r->pos += n;
    return DERAS_OK;
}

static int read_array(struct gguf *g, struct cursor *r, struct gguf_kv *kv, const char *ctx)
{
    uint32_t et;
    uint64_t n;
    int rc = rd_u32(r, &et, ctx, "array element type");
    if (!rc)
        rc = rd_u64(r, &n, ctx, "array length");
    if (rc)
        return rc;
    if (et == GGUF_TYPE_ARRAY)
        return deras_fail(DERAS_EUNSUPPORTED, "%s: %s: nested arrays are not supported",
                          r->file, ctx);
    if (et > GGUF_TYPE_FLOAT64)
        return deras_fail(DERAS_EFORMAT, "%s: %s: invalid array element type %u", r->file, ctx,
                          et);
    kv->arr_type = (int)et;
    kv->n = n;
    if (et != GGUF_TYPE_STRING) {
        size_t es = value_size(et);
        if (n > left(r) / es)
            return deras_fail(DERAS_EFORMAT,
                              "%s: %s: array of %llu %s needs more than the %zu bytes left",
                              r->file, ctx, (unsigned long long)n, type_name((int)et), left(r));
        kv->arr = r->p + r->pos;
        if (et == GGUF_TYPE_BOOL)
            for (uint64_t i = 0; i < n; i++)
                if (kv->arr[i] > 1)
                    return deras_fail(DERAS_EFORMAT,
                                      "%s: %s: bool element %llu is %u, not 0 or 1", r->file,
                                      ctx, (unsigned long long)i, kv->arr[i]);
        r->pos += (size_t)n * es;
        return DERAS_OK;
    }
    /* every string needs at least its 8-byte length */
    if (n > left(r) / 8)
        return deras_fail(DERAS_EFORMAT,
                          "%s: %s: array of %llu strings needs more than the %zu bytes left",
                          r->file, ctx, (unsigned long long)n, left(r));
    kv->strs = malloc(n ? (size_t)n * sizeof *kv->strs : 1);
    if (!kv->strs)
        return deras_fail(DERAS_ENOMEM, "%s: %s: out of memory for %llu strings", r->file, ctx,
                          (unsigned long long)n);
    for (uint64_t i = 0; i < n; i++) {
        char what[48];
        snprintf(what, sizeof what, "string element %llu", (unsigned long long)i);
        if ((rc = rd_str(g, r, &kv->strs[i], ctx, what)))
            return rc;
    }
    return DERAS_OK;
}

static int read_kv(struct gguf *g, struct cursor *r, int64_t i, struct gguf_kv *kv)
{
    char ctx[NAME_BUF + 48], nb[NAME_BUF];
    snprintf(ctx, sizeof ctx, "metadata entry %lld of %lld", (long long)i, (long long)g->n_kv);
    int rc = rd_str(g, r, &kv->key, ctx, "key");
    if (rc)
        return rc;
    snprintf(ctx, sizeof ctx, "key '%s'",
             printable_name(kv->key.s, kv->key.len, false, nb, sizeof nb));
    if (memchr(kv->key.s, '\0', kv->key.len))
        return deras_fail(DERAS_EFORMAT, "%s: %s: key contains a NUL byte", r->file, ctx);
    uint32_t t;
    if ((rc = rd_u32(r, &t, ctx, "value type")))
        return rc;
    if (t > GGUF_TYPE_FLOAT64)
        return deras_fail(DERAS_EFORMAT, "%s: %s: invalid value type %u", r->file, ctx, t);
    kv->type = (int)t;
    if (t == GGUF_TYPE_STRING)
        return rd_str(g, r, &kv->str, ctx, "string value");
    if (t == GGUF_TYPE_ARRAY)
        return read_array(g, r, kv, ctx);
    return read_scalar(r, kv, ctx);
}

static int kv_cmp(const void *a, const void *b)
{
    return strcmp(((const struct gguf_kv *)a)->key.s, ((const struct gguf_kv *)b)->key.s);
}

/* ---- tensors ---- */

static int read_tensor_info(struct gguf *g, struct cursor *r, int64_t i, tensor_view *v,
                            uint64_t *offset)
{
    char ctx[NAME_BUF + 48], nb[NAME_BUF];
    struct gguf_str name;
    snprintf(ctx, sizeof ctx, "tensor info %lld of %lld", (long long)i,
             (long long)g->tf.n_tensors);
    int rc = rd_str(g, r, &name, ctx, "tensor name");
    if (rc)
        return rc;
    snprintf(ctx, sizeof ctx, "tensor '%s'",
             printable_name(name.s, name.len, false, nb, sizeof nb));
    if (memchr(name.s, '\0', name.len))
        return deras_fail(DERAS_EFORMAT, "%s: %s: name contains a NUL byte", r->file, ctx);
    v->name = name.s;
    uint32_t n_dims;
    if ((rc = rd_u32(r, &n_dims, ctx, "dimension count")))
        return rc;
    if (n_dims < 1 || n_dims > TENSOR_MAX_DIMS)
        return deras_fail(DERAS_EFORMAT, "%s: %s: %u dimensions (must be 1 to %d)", r->file,
                          ctx, n_dims, TENSOR_MAX_DIMS);
    v->n_dims = (int)n_dims;
    uint64_t ne[TENSOR_MAX_DIMS];
    int64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if ((rc = rd_u64(r, &ne[d], ctx, "dimensions")))
            return rc;
        if (ne[d] == 0 || ne[d] > INT64_MAX)
            return deras_fail(DERAS_EFORMAT, "%s: %s: dimension %u is %llu (must be 1 to 2^63-1)",
                              r->file, ctx, d, (unsigned long long)ne[d]);
        if ((uint64_t)numel > (uint64_t)INT64_MAX / ne[d])
            return deras_fail(DERAS_EFORMAT, "%s: %s: the element count overflows 64 bits",
                              r->file, ctx);
        numel *= (int64_t)ne[d];
    }
    for (uint32_t d = 0; d < n_dims; d++) /* GGUF's ne[0] is the innermost dimension */
        v->shape[d] = (int64_t)ne[n_dims - 1 - d];
    uint32_t type;
    if ((rc = rd_u32(r, &type, ctx, "type")))
        return rc;
    const struct ggml_type_info *ti = ggml_type_lookup(type);
    if (!ti)
        return deras_fail(DERAS_EUNSUPPORTED, "%s: %s: unknown tensor type id %u", r->file, ctx,
                          type);
    if (ne[0] % ti->block_elems)
        return deras_fail(DERAS_EFORMAT,
                          "%s: %s: row length %llu is not a multiple of the %s block size %u",
                          r->file, ctx, (unsigned long long)ne[0], ti->name, ti->block_elems);
    uint64_t n_blocks = (uint64_t)numel / ti->block_elems;
    if (n_blocks > SIZE_MAX / ti->block_bytes)
        return deras_fail(DERAS_EFORMAT, "%s: %s: the byte size overflows", r->file, ctx);
    v->n_bytes = (size_t)n_blocks * ti->block_bytes;
    v->dtype = dtype_supported((int)type) ? (int)type : DT_UNSUPPORTED;
    v->type_name = ti->name;
    /* checked by place_tensor once the data section's start is known */
    return rd_u64(r, offset, ctx, "data offset");
}

static int place_tensor(struct gguf *g, tensor_view *v, uint64_t offset)
{
    char nb[NAME_BUF];
    const char *name = printable_name(v->name, strlen(v->name), false, nb, sizeof nb);
    if (offset % g->alignment)
        return deras_fail(DERAS_EFORMAT,
                          "%s: tensor '%s': data offset %llu is not a multiple of the alignment %u",
                          g->tf.name, name, (unsigned long long)offset, g->alignment);
    size_t avail = g->tf.size - g->data_offset;
    if (offset > avail || v->n_bytes > avail - offset)
        return deras_fail(DERAS_EFORMAT,
                          "%s: tensor '%s': data (offset %llu + %zu bytes) ends past the end of "
                          "the file (data section holds %zu bytes)",
                          g->tf.name, name, (unsigned long long)offset, v->n_bytes, avail);
    v->data = g->tf.base + g->data_offset + (size_t)offset;
    return DERAS_OK;
}

/* ---- open ---- */

static int read_alignment(struct gguf *g)
{
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const struct gguf_kv *kv = gguf_find_kv(g, "general.alignment");
    if (!kv)
        return DERAS_OK;
    if (kv->type != GGUF_TYPE_UINT32)
        return deras_fail(DERAS_EFORMAT, "%s: key 'general.alignment' has type %s, expected uint32",
                          g->tf.name, type_name(kv->type));
    uint64_t a = kv->num.u;
    if (a == 0 || (a & (a - 1)))
        return deras_fail(DERAS_EFORMAT,
                          "%s: key 'general.alignment' is %llu, not a power of two", g->tf.name,
                          (unsigned long long)a);
    g->alignment = (uint32_t)a;
    return DERAS_OK;
}

static int parse(tensor_file_t *tf)
{
    struct gguf *g = (struct gguf *)tf;
    struct cursor r = {.p = g->tf.base, .size = g->tf.size, .pos = 0, .file = g->tf.name};
    const char *ctx = "header";
    int rc;
    if (g->tf.size < 4)
        return deras_fail(DERAS_EFORMAT, "%s: %zu bytes is too short for a GGUF file", g->tf.name,
                          g->tf.size);
    if (memcmp(g->tf.base, GGUF_MAGIC, 4) != 0)
        return deras_fail(DERAS_EFORMAT, "%s: not a GGUF file (bad magic)", g->tf.name);
    r.pos = 4;
    if ((rc = rd_u32(&r, &g->version, ctx, "version")))
        return rc;
    if (g->version == 1)
        return deras_fail(DERAS_EUNSUPPORTED,
                          "%s: GGUF version 1 is not supported (convert the model again with a "
                          "current llama.cpp)", g->tf.name);
    if (g->version != 2 && g->version != 3) {
        uint32_t sw = __builtin_bswap32(g->version);
        if (sw >= 1 && sw <= 3)
            return deras_fail(DERAS_EUNSUPPORTED,
                              "%s: big-endian GGUF (version %u) is not supported", g->tf.name, sw);
        return deras_fail(DERAS_EUNSUPPORTED, "%s: GGUF version %u is not supported (2 and 3 are)",
                          g->tf.name, g->version);
    }
    uint64_t n_tensors, n_kv;
    if ((rc = rd_u64(&r, &n_tensors, ctx, "tensor count")) ||
        (rc = rd_u64(&r, &n_kv, ctx, "metadata count")))
        return rc;
    /* smallest entries: a key/value is 8 (key length) + 4 (type) + 1 (u8) bytes; a tensor
     * info 8 (name length) + 4 (n_dims) + 8 (one dim) + 4 (type) + 8 (offset) */
    if (n_kv > left(&r) / 13)
        return deras_fail(DERAS_EFORMAT, "%s: metadata count %llu cannot fit in the %zu bytes left",
                          g->tf.name, (unsigned long long)n_kv, left(&r));
    if (n_tensors > left(&r) / 32)
        return deras_fail(DERAS_EFORMAT, "%s: tensor count %llu cannot fit in the %zu bytes left",
                          g->tf.name, (unsigned long long)n_tensors, left(&r));
    g->n_kv = (int64_t)n_kv;
    g->tf.n_tensors = (int64_t)n_tensors;
    g->kv = calloc(n_kv ? n_kv : 1, sizeof *g->kv);
    g->tf.tensors = calloc(n_tensors ? n_tensors : 1, sizeof *g->tf.tensors);
    g->offsets = calloc(n_tensors ? n_tensors : 1, sizeof *g->offsets);
    if (!g->kv || !g->tf.tensors || !g->offsets)
        return deras_fail(DERAS_ENOMEM, "%s: out of memory for %llu keys and %llu tensors",
                          g->tf.name, (unsigned long long)n_kv, (unsigned long long)n_tensors);

    for (int64_t i = 0; i < g->n_kv; i++)
        if ((rc = read_kv(g, &r, i, &g->kv[i])))
            return rc;
    qsort(g->kv, (size_t)g->n_kv, sizeof *g->kv, kv_cmp);
    for (int64_t i = 1; i < g->n_kv; i++)
        if (!strcmp(g->kv[i - 1].key.s, g->kv[i].key.s)) {
            char nb[NAME_BUF];
            const struct gguf_str *k = &g->kv[i].key;
            return deras_fail(DERAS_EFORMAT, "%s: key '%s' appears more than once", g->tf.name,
                              printable_name(k->s, k->len, false, nb, sizeof nb));
        }
    if ((rc = read_alignment(g)))
        return rc;

    for (int64_t i = 0; i < g->tf.n_tensors; i++)
        if ((rc = read_tensor_info(g, &r, i, &g->tf.tensors[i], &g->offsets[i])))
            return rc;
    /* the data section starts at the next multiple of the alignment */
    size_t pad = (g->alignment - r.pos % g->alignment) % g->alignment;
    if (g->tf.n_tensors > 0 && pad > left(&r))
        return deras_fail(DERAS_EFORMAT,
                          "%s: file ends before the tensor data section (at offset %zu + %zu "
                          "bytes of padding)", g->tf.name, r.pos, pad);
    g->data_offset = pad > left(&r) ? g->tf.size : r.pos + pad;
    for (int64_t i = 0; i < g->tf.n_tensors; i++)
        if ((rc = place_tensor(g, &g->tf.tensors[i], g->offsets[i])))
            return rc;

    if ((rc = tensor_file_index(&g->tf)))
        return rc;
    free(g->offsets);
    g->offsets = NULL;
    return DERAS_OK;
}

/* What the shell does not free: the key table, its string tables and the arena. */
static void release(tensor_file_t *tf)
{
    struct gguf *g = (struct gguf *)tf;
    if (g->kv)
        for (int64_t i = 0; i < g->n_kv; i++)
            free(g->kv[i].strs);
    free(g->kv);
    free(g->offsets);
    while (g->arena) {
        struct arena_chunk *next = g->arena->next;
        free(g->arena);
        g->arena = next;
    }
}

static const tensor_file_reader reader = {
    .api = "gguf",
    .what = "a GGUF file",
    .min_size = 1,
    .obj_size = sizeof(struct gguf),
    .parse = parse,
    .release = release,
};

int gguf_open_memory(const void *data, size_t size, const char *name, gguf_t **out)
{
    tensor_file_t *tf = NULL;
    int rc = tensor_file_open_memory(&reader, data, size, name, out ? &tf : NULL);
    if (out)
        *out = (gguf_t *)tf;
    return rc;
}

int gguf_open(const char *path, gguf_t **out)
{
    tensor_file_t *tf = NULL;
    int rc = tensor_file_open(&reader, path, out ? &tf : NULL);
    if (out)
        *out = (gguf_t *)tf;
    return rc;
}

void gguf_destroy(gguf_t **gp)
{
    if (!gp || !*gp)
        return;
    tensor_file_t *tf = &(*gp)->tf;
    tensor_file_destroy(&reader, &tf);
    *gp = NULL;
}
