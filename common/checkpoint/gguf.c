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
 */
#include "gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mapped_file.h"
#include "common/base/status.h"

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32
#define ARENA_CHUNK (64 * 1024)

struct gguf_str {
    const char *s; /* NUL-terminated, in the arena */
    size_t len;
};

struct gguf_kv {
    struct gguf_str key;
    int type;     /* enum gguf_type */
    int arr_type; /* element type, for arrays */
    uint64_t n;   /* element count, for arrays */
    union {
        int64_t i;  /* signed integers */
        uint64_t u; /* unsigned integers and bool */
        double f;   /* float32, float64 */
    } num;
    struct gguf_str str;    /* string value */
    const uint8_t *arr;     /* numeric array: raw little-endian elements in the mapping */
    struct gguf_str *strs;  /* string array: n elements */
};

struct arena_chunk {
    struct arena_chunk *next;
    size_t used, cap;
    char data[];
};

struct gguf {
    char *name;
    const uint8_t *base;
    size_t size;
    void *map; /* non-NULL when gguf_open mapped the file */
    size_t map_size;
    uint32_t version;
    uint32_t alignment;
    size_t data_offset;
    int64_t n_kv;
    struct gguf_kv *kv; /* sorted by key */
    int64_t n_tensors;
    tensor_view *tensors;   /* file order */
    uint64_t *offsets;      /* per tensor, relative to the data section; used while opening */
    const tensor_view **tensor_sorted; /* into tensors, sorted by name */
    struct arena_chunk *arena;
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

/* Bytes of one scalar of a fixed-size value type; 0 for string, array and invalid. */
static size_t value_size(uint32_t type)
{
    switch (type) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: return 4;
    case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: case GGUF_TYPE_FLOAT64: return 8;
    default: return 0;
    }
}

static const char *type_name(int type)
{
    static const char *names[] = {"uint8",  "int8",   "uint16", "int16",  "uint32",
                                  "int32",  "float32", "bool",  "string", "array",
                                  "uint64", "int64",  "float64"};
    return type >= 0 && type <= GGUF_TYPE_FLOAT64 ? names[type] : "invalid";
}

static bool is_int_type(int type)
{
    switch (type) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16:
    case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64:
        return true;
    default:
        return false;
    }
}

static bool is_signed_type(int type)
{
    return type == GGUF_TYPE_INT8 || type == GGUF_TYPE_INT16 || type == GGUF_TYPE_INT32 ||
           type == GGUF_TYPE_INT64;
}

/* Little-endian loads from unaligned memory. */
static uint64_t load_le(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Sign-extend an n-byte little-endian value. */
static int64_t load_le_signed(const uint8_t *p, size_t n)
{
    uint64_t v = load_le(p, n);
    if (n < 8 && (v >> (8 * n - 1)) & 1)
        v |= ~(uint64_t)0 << (8 * n);
    return (int64_t)v;
}

static double load_float(const uint8_t *p, int type)
{
    if (type == GGUF_TYPE_FLOAT32) {
        uint32_t u = (uint32_t)load_le(p, 4);
        float f;
        memcpy(&f, &u, sizeof f);
        return f;
    }
    uint64_t u = load_le(p, 8);
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

/* A name from the file, escaped and shortened for an error message. */
static const char *printable(const char *s, size_t len, char *buf, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (o + 8 > cap) { /* room for one more escape, "..." and the NUL is gone */
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        unsigned char ch = (unsigned char)s[i];
        if (ch >= 0x20 && ch < 0x7f && ch != '\'' && ch != '\\')
            buf[o++] = (char)ch;
        else
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", ch);
    }
    buf[o] = '\0';
    return buf;
}

#define NAME_BUF 96

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
    snprintf(ctx, sizeof ctx, "key '%s'", printable(kv->key.s, kv->key.len, nb, sizeof nb));
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

static const struct gguf_kv *find_kv(const gguf_t *g, const char *key)
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

/* ---- tensors ---- */

static int read_tensor_info(struct gguf *g, struct cursor *r, int64_t i, tensor_view *v,
                            uint64_t *offset)
{
    char ctx[NAME_BUF + 48], nb[NAME_BUF];
    struct gguf_str name;
    snprintf(ctx, sizeof ctx, "tensor info %lld of %lld", (long long)i,
             (long long)g->n_tensors);
    int rc = rd_str(g, r, &name, ctx, "tensor name");
    if (rc)
        return rc;
    snprintf(ctx, sizeof ctx, "tensor '%s'", printable(name.s, name.len, nb, sizeof nb));
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
    const char *name = printable(v->name, strlen(v->name), nb, sizeof nb);
    if (offset % g->alignment)
        return deras_fail(DERAS_EFORMAT,
                          "%s: tensor '%s': data offset %llu is not a multiple of the alignment %u",
                          g->name, name, (unsigned long long)offset, g->alignment);
    size_t avail = g->size - g->data_offset;
    if (offset > avail || v->n_bytes > avail - offset)
        return deras_fail(DERAS_EFORMAT,
                          "%s: tensor '%s': data (offset %llu + %zu bytes) ends past the end of "
                          "the file (data section holds %zu bytes)",
                          g->name, name, (unsigned long long)offset, v->n_bytes, avail);
    v->data = g->base + g->data_offset + (size_t)offset;
    return DERAS_OK;
}

static int tensor_ptr_cmp(const void *a, const void *b)
{
    return strcmp((*(const tensor_view *const *)a)->name, (*(const tensor_view *const *)b)->name);
}

/* ---- open ---- */

static int read_alignment(struct gguf *g)
{
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const struct gguf_kv *kv = find_kv(g, "general.alignment");
    if (!kv)
        return DERAS_OK;
    if (kv->type != GGUF_TYPE_UINT32)
        return deras_fail(DERAS_EFORMAT, "%s: key 'general.alignment' has type %s, expected uint32",
                          g->name, type_name(kv->type));
    uint64_t a = kv->num.u;
    if (a == 0 || (a & (a - 1)))
        return deras_fail(DERAS_EFORMAT,
                          "%s: key 'general.alignment' is %llu, not a power of two", g->name,
                          (unsigned long long)a);
    g->alignment = (uint32_t)a;
    return DERAS_OK;
}

static int parse(struct gguf *g)
{
    struct cursor r = {.p = g->base, .size = g->size, .pos = 0, .file = g->name};
    const char *ctx = "header";
    int rc;
    if (g->size < 4)
        return deras_fail(DERAS_EFORMAT, "%s: %zu bytes is too short for a GGUF file", g->name,
                          g->size);
    if (memcmp(g->base, GGUF_MAGIC, 4) != 0)
        return deras_fail(DERAS_EFORMAT, "%s: not a GGUF file (bad magic)", g->name);
    r.pos = 4;
    if ((rc = rd_u32(&r, &g->version, ctx, "version")))
        return rc;
    if (g->version == 1)
        return deras_fail(DERAS_EUNSUPPORTED,
                          "%s: GGUF version 1 is not supported (convert the model again with a "
                          "current llama.cpp)", g->name);
    if (g->version != 2 && g->version != 3) {
        uint32_t sw = __builtin_bswap32(g->version);
        if (sw >= 1 && sw <= 3)
            return deras_fail(DERAS_EUNSUPPORTED,
                              "%s: big-endian GGUF (version %u) is not supported", g->name, sw);
        return deras_fail(DERAS_EUNSUPPORTED, "%s: GGUF version %u is not supported (2 and 3 are)",
                          g->name, g->version);
    }
    uint64_t n_tensors, n_kv;
    if ((rc = rd_u64(&r, &n_tensors, ctx, "tensor count")) ||
        (rc = rd_u64(&r, &n_kv, ctx, "metadata count")))
        return rc;
    /* smallest entries: a key/value is 8 (key length) + 4 (type) + 1 (u8) bytes; a tensor
     * info 8 (name length) + 4 (n_dims) + 8 (one dim) + 4 (type) + 8 (offset) */
    if (n_kv > left(&r) / 13)
        return deras_fail(DERAS_EFORMAT, "%s: metadata count %llu cannot fit in the %zu bytes left",
                          g->name, (unsigned long long)n_kv, left(&r));
    if (n_tensors > left(&r) / 32)
        return deras_fail(DERAS_EFORMAT, "%s: tensor count %llu cannot fit in the %zu bytes left",
                          g->name, (unsigned long long)n_tensors, left(&r));
    g->n_kv = (int64_t)n_kv;
    g->n_tensors = (int64_t)n_tensors;
    g->kv = calloc(n_kv ? n_kv : 1, sizeof *g->kv);
    g->tensors = calloc(n_tensors ? n_tensors : 1, sizeof *g->tensors);
    g->tensor_sorted = calloc(n_tensors ? n_tensors : 1, sizeof *g->tensor_sorted);
    g->offsets = calloc(n_tensors ? n_tensors : 1, sizeof *g->offsets);
    if (!g->kv || !g->tensors || !g->tensor_sorted || !g->offsets)
        return deras_fail(DERAS_ENOMEM, "%s: out of memory for %llu keys and %llu tensors",
                          g->name, (unsigned long long)n_kv, (unsigned long long)n_tensors);

    for (int64_t i = 0; i < g->n_kv; i++)
        if ((rc = read_kv(g, &r, i, &g->kv[i])))
            return rc;
    qsort(g->kv, (size_t)g->n_kv, sizeof *g->kv, kv_cmp);
    for (int64_t i = 1; i < g->n_kv; i++)
        if (!strcmp(g->kv[i - 1].key.s, g->kv[i].key.s)) {
            char nb[NAME_BUF];
            return deras_fail(DERAS_EFORMAT, "%s: key '%s' appears more than once", g->name,
                              printable(g->kv[i].key.s, g->kv[i].key.len, nb, sizeof nb));
        }
    if ((rc = read_alignment(g)))
        return rc;

    for (int64_t i = 0; i < g->n_tensors; i++)
        if ((rc = read_tensor_info(g, &r, i, &g->tensors[i], &g->offsets[i])))
            return rc;
    /* the data section starts at the next multiple of the alignment */
    size_t pad = (g->alignment - r.pos % g->alignment) % g->alignment;
    if (g->n_tensors > 0 && pad > left(&r))
        return deras_fail(DERAS_EFORMAT,
                          "%s: file ends before the tensor data section (at offset %zu + %zu "
                          "bytes of padding)", g->name, r.pos, pad);
    g->data_offset = pad > left(&r) ? g->size : r.pos + pad;
    for (int64_t i = 0; i < g->n_tensors; i++)
        if ((rc = place_tensor(g, &g->tensors[i], g->offsets[i])))
            return rc;

    for (int64_t i = 0; i < g->n_tensors; i++)
        g->tensor_sorted[i] = &g->tensors[i];
    qsort(g->tensor_sorted, (size_t)g->n_tensors, sizeof *g->tensor_sorted, tensor_ptr_cmp);
    for (int64_t i = 1; i < g->n_tensors; i++) {
        const char *a = g->tensor_sorted[i - 1]->name;
        const char *b = g->tensor_sorted[i]->name;
        if (!strcmp(a, b)) {
            char nb[NAME_BUF];
            return deras_fail(DERAS_EFORMAT, "%s: tensor '%s' appears more than once", g->name,
                              printable(b, strlen(b), nb, sizeof nb));
        }
    }
    return DERAS_OK;
}

static void free_contents(struct gguf *g)
{
    if (g->kv)
        for (int64_t i = 0; i < g->n_kv; i++)
            free(g->kv[i].strs);
    free(g->kv);
    free(g->tensors);
    free(g->tensor_sorted);
    free(g->offsets);
    while (g->arena) {
        struct arena_chunk *next = g->arena->next;
        free(g->arena);
        g->arena = next;
    }
    if (g->map)
        mapped_file_close(g->map, g->map_size);
    free(g->name);
}

static int open_common(const void *data, size_t size, const char *name, void *map,
                       gguf_t **out)
{
    struct gguf *g = calloc(1, sizeof *g);
    if (!g) {
        if (map)
            mapped_file_close(map, size);
        return deras_fail(DERAS_ENOMEM, "%s: out of memory", name);
    }
    g->map = map;
    g->map_size = size;
    g->base = data;
    g->size = size;
    g->name = strdup(name);
    int rc = DERAS_ENOMEM;
    if (!g->name) {
        deras_fail(rc, "out of memory");
        goto fail;
    }
    if ((rc = parse(g)))
        goto fail;
    free(g->offsets);
    g->offsets = NULL;
    *out = g;
    return DERAS_OK;
fail:
    free_contents(g);
    free(g);
    return rc;
}

int gguf_open_memory(const void *data, size_t size, const char *name, gguf_t **out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "gguf_open_memory: out is NULL");
    *out = NULL;
    if (!name)
        name = "(memory)";
    if (!data && size)
        return deras_fail(DERAS_EINVAL, "%s: data is NULL", name);
    return open_common(data ? data : "", size, name, NULL, out);
}

int gguf_open(const char *path, gguf_t **out)
{
    if (!out || !path)
        return deras_fail(DERAS_EINVAL, "gguf_open: NULL argument");
    *out = NULL;
    void *map;
    size_t size;
    int rc = mapped_file_open(path, 1, "a GGUF file", &map, &size);
    return rc ? rc : open_common(map, size, path, map, out);
}

void gguf_destroy(gguf_t **gp)
{
    if (!gp || !*gp)
        return;
    free_contents(*gp);
    free(*gp);
    *gp = NULL;
}

const char *gguf_name(const gguf_t *g)
{
    return g ? g->name : "";
}

uint32_t gguf_version(const gguf_t *g)
{
    return g ? g->version : 0;
}

/* ---- metadata accessors ---- */

static int lookup(const gguf_t *g, const char *key, const struct gguf_kv **kv)
{
    if (!g || !key)
        return deras_fail(DERAS_EINVAL, "gguf: NULL argument");
    *kv = find_kv(g, key);
    if (!*kv)
        return deras_fail(DERAS_ENOTFOUND, "%s: key '%s' not found", g->name, key);
    return DERAS_OK;
}

static int wrong_type(const gguf_t *g, const struct gguf_kv *kv, const char *expected)
{
    if (kv->type == GGUF_TYPE_ARRAY)
        return deras_fail(DERAS_EFORMAT, "%s: key '%s' has type array of %s, expected %s",
                          g->name, kv->key.s, type_name(kv->arr_type), expected);
    return deras_fail(DERAS_EFORMAT, "%s: key '%s' has type %s, expected %s", g->name,
                      kv->key.s, type_name(kv->type), expected);
}

bool gguf_has_key(const gguf_t *g, const char *key)
{
    return g && key && find_kv(g, key) != NULL;
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
        return deras_fail(DERAS_ERANGE, "%s: key '%s': %llu does not fit in int64", g->name,
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
                          g->name, key, (unsigned long long)i, (unsigned long long)kv->n);
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
                          g->name, key, (unsigned long long)n, (unsigned long long)kv->n);
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
                                  "in int32", g->name, key, (unsigned long long)i, (long long)v);
            dst[i] = (int32_t)v;
        } else {
            uint64_t v = load_le(p, es);
            if (v > INT32_MAX)
                return deras_fail(DERAS_ERANGE, "%s: key '%s': element %llu (%llu) does not fit "
                                  "in int32", g->name, key, (unsigned long long)i,
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
    return g ? g->n_tensors : 0;
}

int gguf_tensor_at(const gguf_t *g, int64_t i, tensor_view *out)
{
    if (!g || !out)
        return deras_fail(DERAS_EINVAL, "gguf_tensor_at: NULL argument");
    if (i < 0 || i >= g->n_tensors)
        return deras_fail(DERAS_ERANGE, "%s: tensor index %lld outside 0..%lld", g->name,
                          (long long)i, (long long)g->n_tensors - 1);
    *out = g->tensors[i];
    return DERAS_OK;
}

int gguf_find_tensor(const gguf_t *g, const char *name, tensor_view *out)
{
    if (!g || !name)
        return deras_fail(DERAS_EINVAL, "gguf_find_tensor: NULL argument");
    int64_t lo = 0, hi = g->n_tensors;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        const tensor_view *v = g->tensor_sorted[mid];
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
    return deras_fail(DERAS_ENOTFOUND, "%s: tensor '%s' not found", g->name, name);
}
