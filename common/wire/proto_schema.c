/* SPDX-License-Identifier: Apache-2.0 */
/* proto_schema.c - typed field checks over unpacked msgpack objects (see proto_schema.h).
 *
 * msgpack-c normalises integers: a non-negative value is always POSITIVE_INTEGER (via.u64)
 * whatever its encoding, a negative one NEGATIVE_INTEGER (via.i64), so the range checks
 * below see one representation per sign. Float32 and float64 both arrive as via.f64.
 */
#include "proto_schema.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "common/base/utf8.h"

int ps_fail(proto_error *err, enum proto_error_code code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    err->code = code;
    return deras_fail(DERAS_EFORMAT, "%s: %s", proto_error_name(code), err->message);
}

const char *ps_type_name(const msgpack_object *o)
{
    switch (o->type) {
    case MSGPACK_OBJECT_NIL: return "nil";
    case MSGPACK_OBJECT_BOOLEAN: return "bool";
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: return "int";
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64: return "float";
    case MSGPACK_OBJECT_STR: return "str";
    case MSGPACK_OBJECT_BIN: return "bin";
    case MSGPACK_OBJECT_ARRAY: return "array";
    case MSGPACK_OBJECT_MAP: return "map";
    case MSGPACK_OBJECT_EXT: return "ext";
    }
    return "unknown";
}

bool ps_str_is(const msgpack_object *o, const char *s)
{
    size_t n = strlen(s);
    return o->type == MSGPACK_OBJECT_STR && o->via.str.size == n &&
           (n == 0 || memcmp(o->via.str.ptr, s, n) == 0);
}

int ps_lookup(const msgpack_object *o, const char *const *names, int n)
{
    if (o->type != MSGPACK_OBJECT_STR)
        return -1;
    for (int i = 0; i < n; i++)
        if (ps_str_is(o, names[i]))
            return i;
    return -1;
}

void ps_key_text(const msgpack_object *o, char *out, size_t cap)
{
    static const char hex[] = "0123456789abcdef";
    size_t w = 0;
    if (o->type != MSGPACK_OBJECT_STR) {
        snprintf(out, cap, "(%s)", ps_type_name(o));
        return;
    }
    for (uint32_t i = 0; i < o->via.str.size; i++) {
        unsigned char c = (unsigned char)o->via.str.ptr[i];
        if (w + 8 >= cap || w >= 40) {
            if (w + 4 < cap) {
                memcpy(out + w, "...", 3);
                w += 3;
            }
            break;
        }
        if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
            out[w++] = (char)c;
        } else {
            out[w++] = '\\';
            out[w++] = 'x';
            out[w++] = hex[c >> 4];
            out[w++] = hex[c & 15];
        }
    }
    out[w] = '\0';
}

/* Format the field name of the enclosing variadic check into a local buffer `name`. */
#define FIELD_NAME(name)                                                                     \
    char name[64];                                                                           \
    do {                                                                                     \
        va_list ap_;                                                                         \
        va_start(ap_, field);                                                                \
        vsnprintf(name, sizeof name, field, ap_);                                            \
        va_end(ap_);                                                                         \
    } while (0)

int ps_map(const msgpack_object *o, const msgpack_object_kv **kv, uint32_t *n,
           proto_error *err, const char *field, ...)
{
    if (o->type != MSGPACK_OBJECT_MAP) {
        FIELD_NAME(name);
        return ps_fail(err, PE_INVALID_FIELD, "%s must be a map, got %s", name,
                       ps_type_name(o));
    }
    for (uint32_t i = 0; i < o->via.map.size; i++)
        if (o->via.map.ptr[i].key.type != MSGPACK_OBJECT_STR) {
            FIELD_NAME(name);
            return ps_fail(err, PE_INVALID_FIELD, "keys of %s must be strings, got %s", name,
                           ps_type_name(&o->via.map.ptr[i].key));
        }
    *kv = o->via.map.ptr;
    *n = o->via.map.size;
    return DERAS_OK;
}

int ps_array(const msgpack_object *o, uint32_t max, const msgpack_object **items, uint32_t *n,
             proto_error *err, const char *field, ...)
{
    if (o->type != MSGPACK_OBJECT_ARRAY) {
        FIELD_NAME(name);
        return ps_fail(err, PE_INVALID_FIELD, "%s must be an array, got %s", name,
                       ps_type_name(o));
    }
    if (o->via.array.size > max) {
        FIELD_NAME(name);
        return ps_fail(err, PE_LIMIT_EXCEEDED, "%s may have at most %u elements, got %u", name,
                       max, o->via.array.size);
    }
    *items = o->via.array.ptr;
    *n = o->via.array.size;
    return DERAS_OK;
}

int ps_int(const msgpack_object *o, int64_t lo, int64_t hi, enum proto_error_code over,
           int64_t *out, proto_error *err, const char *field, ...)
{
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        if (o->via.u64 <= (uint64_t)INT64_MAX && (int64_t)o->via.u64 >= lo &&
            (int64_t)o->via.u64 <= hi) {
            *out = (int64_t)o->via.u64;
            return DERAS_OK;
        }
        FIELD_NAME(name);
        bool high = o->via.u64 > (uint64_t)INT64_MAX || (int64_t)o->via.u64 > hi;
        return ps_fail(err, high ? over : PE_VALUE_OUT_OF_RANGE,
                       "%s must be in [%lld, %lld], got %llu", name, (long long)lo,
                       (long long)hi, (unsigned long long)o->via.u64);
    }
    if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
        if (o->via.i64 >= lo && o->via.i64 <= hi) {
            *out = o->via.i64;
            return DERAS_OK;
        }
        FIELD_NAME(name);
        return ps_fail(err, o->via.i64 < lo ? PE_VALUE_OUT_OF_RANGE : over,
                       "%s must be in [%lld, %lld], got %lld", name, (long long)lo,
                       (long long)hi, (long long)o->via.i64);
    }
    FIELD_NAME(name);
    return ps_fail(err, PE_INVALID_FIELD, "%s must be an integer, got %s", name,
                   ps_type_name(o));
}

int ps_u64(const msgpack_object *o, uint64_t *out, proto_error *err, const char *field, ...)
{
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        *out = o->via.u64;
        return DERAS_OK;
    }
    FIELD_NAME(name);
    if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        return ps_fail(err, PE_VALUE_OUT_OF_RANGE,
                       "%s must be in [0, 18446744073709551615], got %lld", name,
                       (long long)o->via.i64);
    return ps_fail(err, PE_INVALID_FIELD, "%s must be an integer, got %s", name,
                   ps_type_name(o));
}

/* The value of a number object as a double; false if o is not a number. */
static bool number(const msgpack_object *o, double *v)
{
    switch (o->type) {
    case MSGPACK_OBJECT_POSITIVE_INTEGER: *v = (double)o->via.u64; return true;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: *v = (double)o->via.i64; return true;
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64: *v = o->via.f64; return true;
    default: return false;
    }
}

int ps_float(const msgpack_object *o, double lo, bool lo_open, double hi, bool hi_open,
             float *out, proto_error *err, const char *field, ...)
{
    double d;
    if (!number(o, &d)) {
        FIELD_NAME(name);
        return ps_fail(err, PE_INVALID_FIELD, "%s must be a number, got %s", name,
                       ps_type_name(o));
    }
    float f = (float)d; /* beyond float range becomes inf and fails below */
    if (!isfinite(d) || !isfinite(f) || (lo_open ? f <= lo : f < lo) ||
        (hi_open ? f >= hi : f > hi)) {
        FIELD_NAME(name);
        return ps_fail(err, PE_VALUE_OUT_OF_RANGE, "%s must be in %c%g, %g%c, got %g", name,
                       lo_open ? '(' : '[', lo, hi, hi_open ? ')' : ']', d);
    }
    *out = f;
    return DERAS_OK;
}

int ps_double(const msgpack_object *o, double lo, double hi, double *out, proto_error *err,
              const char *field, ...)
{
    double d;
    if (!number(o, &d)) {
        FIELD_NAME(name);
        return ps_fail(err, PE_INVALID_FIELD, "%s must be a number, got %s", name,
                       ps_type_name(o));
    }
    if (!isfinite(d) || d < lo || d > hi) {
        FIELD_NAME(name);
        return ps_fail(err, PE_VALUE_OUT_OF_RANGE, "%s must be in [%g, %g], got %g", name, lo,
                       hi, d);
    }
    *out = d;
    return DERAS_OK;
}

int ps_bool(const msgpack_object *o, bool *out, proto_error *err, const char *field, ...)
{
    if (o->type != MSGPACK_OBJECT_BOOLEAN) {
        FIELD_NAME(name);
        return ps_fail(err, PE_INVALID_FIELD, "%s must be a bool, got %s", name,
                       ps_type_name(o));
    }
    *out = o->via.boolean;
    return DERAS_OK;
}

/* The body of ps_str, with the name already formatted lazily by the caller's macro. */
static int check_str(const msgpack_object *o, size_t min, size_t max, const char **p,
                     size_t *n, proto_error *err, const char *name)
{
    if (o->type != MSGPACK_OBJECT_STR)
        return ps_fail(err, PE_INVALID_FIELD, "%s must be a string, got %s", name,
                       ps_type_name(o));
    size_t len = o->via.str.size;
    if (len < min)
        return ps_fail(err, PE_INVALID_FIELD, "%s must be %zu..%zu bytes, got %zu", name, min,
                       max, len);
    if (len > max)
        return ps_fail(err, PE_LIMIT_EXCEEDED, "%s must be %zu..%zu bytes, got %zu", name, min,
                       max, len);
    size_t ok = utf8_valid_prefix(o->via.str.ptr, len);
    if (ok != len)
        return ps_fail(err, PE_INVALID_UTF8, "%s is not valid UTF-8 (byte %zu)", name, ok);
    *p = o->via.str.ptr;
    *n = len;
    return DERAS_OK;
}

/* Whether check_str would pass, without formatting anything. */
static bool str_ok(const msgpack_object *o, size_t min, size_t max)
{
    return o->type == MSGPACK_OBJECT_STR && o->via.str.size >= min && o->via.str.size <= max &&
           utf8_valid_prefix(o->via.str.ptr, o->via.str.size) == o->via.str.size;
}

int ps_str(const msgpack_object *o, size_t min, size_t max, const char **p, size_t *n,
           proto_error *err, const char *field, ...)
{
    if (str_ok(o, min, max)) {
        *p = o->via.str.ptr;
        *n = o->via.str.size;
        return DERAS_OK;
    }
    FIELD_NAME(name);
    return check_str(o, min, max, p, n, err, name);
}

int ps_cstr(const msgpack_object *o, size_t min, size_t max, char *dst, proto_error *err,
            const char *field, ...)
{
    const char *p = NULL;
    size_t n = 0;
    if (!str_ok(o, min, max)) {
        FIELD_NAME(name);
        return check_str(o, min, max, &p, &n, err, name);
    }
    p = o->via.str.ptr;
    n = o->via.str.size;
    if (n && memchr(p, '\0', n)) {
        FIELD_NAME(name);
        return ps_fail(err, PE_INVALID_FIELD, "%s must not contain NUL", name);
    }
    if (n)
        memcpy(dst, p, n);
    dst[n] = '\0';
    return DERAS_OK;
}

int ps_token(const msgpack_object *o, int32_t *out, proto_error *err, const char *field, ...)
{
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT32_MAX) {
        *out = (int32_t)o->via.u64;
        return DERAS_OK;
    }
    FIELD_NAME(name);
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        return ps_fail(err, PE_TOKEN_OUT_OF_RANGE, "%s must be in [0, 2147483647], got %llu",
                       name, (unsigned long long)o->via.u64);
    if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        return ps_fail(err, PE_TOKEN_OUT_OF_RANGE, "%s must be in [0, 2147483647], got %lld",
                       name, (long long)o->via.i64);
    return ps_fail(err, PE_INVALID_FIELD, "%s must be an integer, got %s", name,
                   ps_type_name(o));
}

int ps_logprob(const msgpack_object *o, float *out, proto_error *err, const char *field, ...)
{
    double d;
    if (!number(o, &d)) {
        FIELD_NAME(name);
        return ps_fail(err, PE_INVALID_FIELD, "%s must be a number, got %s", name,
                       ps_type_name(o));
    }
    float f = (float)d;
    if (isnan(f) || f == INFINITY) {
        FIELD_NAME(name);
        return ps_fail(err, PE_VALUE_OUT_OF_RANGE, "%s must be a log-probability, got %g", name,
                       d);
    }
    *out = f;
    return DERAS_OK;
}

enum proto_error_code ps_error_code(const msgpack_object *o)
{
    for (int c = 1; c < PE_N_CODES; c++)
        if (ps_str_is(o, proto_error_name((enum proto_error_code)c)))
            return (enum proto_error_code)c;
    return PE_INTERNAL;
}

int ps_seen(uint64_t *seen, int i, const char *name, proto_error *err)
{
    uint64_t bit = 1ull << i;
    if (*seen & bit)
        return ps_fail(err, PE_INVALID_FIELD, "duplicate key '%s'", name);
    *seen |= bit;
    return DERAS_OK;
}

int ps_unknown_key(const msgpack_object *key, const char *where, proto_error *err)
{
    if (key->type != MSGPACK_OBJECT_STR)
        return ps_fail(err, PE_INVALID_FIELD, "keys must be strings, got %s in %s",
                       ps_type_name(key), where);
    char name[48];
    ps_key_text(key, name, sizeof name);
    return ps_fail(err, PE_INVALID_FIELD, "unknown key '%s' in %s", name, where);
}

int ps_required(uint64_t required, uint64_t seen, const char *const *names, int n,
                const char *where, proto_error *err)
{
    uint64_t missing = required & ~seen;
    for (int f = 0; missing && f < n; f++)
        if (missing & (1ull << f))
            return ps_fail(err, PE_MISSING_FIELD, "%s is required in %s", names[f], where);
    return DERAS_OK;
}

int ps_close(mp_frame_t *f, int rc)
{
    mp_frame_trim(f);
    return rc == DERAS_ENOMEM ? rc : rc != DERAS_OK ? DERAS_EFORMAT : DERAS_OK;
}

int ps_grow(void **p, size_t *cap, size_t need, size_t elem, size_t retain)
{
    if (*cap >= need && (*cap <= retain || need > retain))
        return DERAS_OK;
    size_t want;
    if (*cap >= need) {
        want = retain;
    } else {
        want = *cap * 2 < retain ? *cap * 2 : retain;
        want = want < 64 ? 64 : want;
        want = want < need ? need : want;
    }
    free(*p);
    *cap = 0;
    if (!(*p = malloc(want * elem)))
        return DERAS_ENOMEM;
    *cap = want;
    return DERAS_OK;
}

size_t ps_utf8_clip(const char *s, size_t n, size_t cap)
{
    size_t ok = utf8_valid_prefix(s, n);
    if (ok <= cap)
        return ok;
    /* Cut at cap, then back off to a character boundary. */
    size_t k = cap;
    while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80)
        k--;
    return k;
}

int ps_open(mp_frame_t *f, const void *buf, size_t len, size_t max_bytes,
            const mp_scan_limits *lim, const msgpack_object_kv **kv, uint32_t *n,
            proto_error *err)
{
    if (len > max_bytes)
        return ps_fail(err, PE_MESSAGE_TOO_LARGE, "message is %zu bytes, the limit is %zu", len,
                       max_bytes);
    msgpack_object root;
    int rc = mp_frame_parse(f, buf, len, lim, &root);
    if (rc == DERAS_ENOMEM) {
        ps_fail(err, PE_INTERNAL, "out of memory decoding a %zu-byte message", len);
        return DERAS_ENOMEM;
    }
    if (rc != DERAS_OK) {
        char why[200];
        snprintf(why, sizeof why, "%s", deras_errmsg());
        return ps_fail(err, PE_MALFORMED, "not a msgpack message: %s", why);
    }
    if (root.type != MSGPACK_OBJECT_MAP)
        return ps_fail(err, PE_MALFORMED, "a message must be a map, got %s",
                       ps_type_name(&root));
    *kv = root.via.map.ptr;
    *n = root.via.map.size;
    return DERAS_OK;
}

const msgpack_object *ps_find(const msgpack_object_kv *kv, uint32_t n, const char *key)
{
    for (uint32_t i = 0; i < n; i++)
        if (ps_str_is(&kv[i].key, key))
            return &kv[i].val;
    return NULL;
}

int ps_header(const msgpack_object_kv *kv, uint32_t n, int version, const char *const *types,
              int n_types, int *type, proto_error *err)
{
    const msgpack_object *v = ps_find(kv, n, "v"), *t = ps_find(kv, n, "type");
    if (v) {
        if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER &&
            v->type != MSGPACK_OBJECT_NEGATIVE_INTEGER)
            return ps_fail(err, PE_INVALID_FIELD, "v must be an integer, got %s",
                           ps_type_name(v));
        if (v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER || v->via.u64 != (uint64_t)version)
            return ps_fail(err, PE_UNSUPPORTED_VERSION, "v must be %d, got %lld", version,
                           v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER
                               ? (long long)v->via.i64
                               : (long long)(v->via.u64 > INT64_MAX ? INT64_MAX : v->via.u64));
    }
    if (!t)
        return ps_fail(err, PE_MISSING_FIELD, "type is required");
    if (t->type != MSGPACK_OBJECT_STR)
        return ps_fail(err, PE_INVALID_FIELD, "type must be a string, got %s", ps_type_name(t));
    int i = ps_lookup(t, types, n_types);
    if (i < 0) {
        char name[48];
        ps_key_text(t, name, sizeof name);
        return ps_fail(err, PE_UNKNOWN_TYPE, "unknown message type '%s'", name);
    }
    *type = i;
    return DERAS_OK;
}

void ps_out_init(ps_out *o)
{
    msgpack_sbuffer_init(&o->sb);
    msgpack_packer_init(&o->pk, &o->sb, msgpack_sbuffer_write);
}

void ps_out_free(ps_out *o)
{
    msgpack_sbuffer_destroy(&o->sb);
}

int ps_out_done(ps_out *o, int rc, const char *what, const void **buf, size_t *len)
{
    if (rc != 0)
        return deras_fail(DERAS_ENOMEM, "encoding %s: out of memory", what);
    *buf = o->sb.data;
    *len = o->sb.size;
    return DERAS_OK;
}
