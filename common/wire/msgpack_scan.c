/* SPDX-License-Identifier: Apache-2.0 */
/* msgpack_scan.c - the structural pre-pass and the sized unpack (see msgpack_scan.h).
 *
 * The scan is iterative: a stack of "items still to read" per open container, at most
 * MP_SCAN_MAX_DEPTH + 1 deep, so hostile nesting costs no recursion. Every length is read
 * only after checking that its own bytes are there, and compared with what remains before
 * anything is skipped, so the scan never reads outside the buffer and fails at the first
 * impossible claim (a 5-byte frame declaring 2^32 elements fails at byte 0, not after
 * looking for them).
 *
 * The zone: msgpack-c gives each array sizeof(msgpack_object) per element and each map
 * sizeof(msgpack_object_kv) (two objects) per pair, 8-byte aligned, so a scanned frame
 * needs at most n_items * sizeof(msgpack_object) plus alignment. mp_frame_t keeps one zone
 * whose first chunk is at least that large before unpacking, and msgpack_zone_clear()
 * keeps that first chunk, so a warm frame parses without calling malloc.
 */
#include "msgpack_scan.h"

#include <stdint.h>
#include <stdlib.h>

#include "common/base/status.h"

#define MP_ZONE_MIN (64u << 10)

struct mp_frame {
    msgpack_zone zone;
    bool zone_ok;            /* zone initialised (false after a failed re-init) */
    size_t retain_bytes;
};

/* Big-endian unsigned of n (1, 2, 4 or 8) bytes. */
static uint64_t read_be(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

/* Lengths of the fixed parts after a type byte: how many bytes hold the length/count
 * (len_bytes), how many fixed payload bytes follow (fixed), whether the payload length is
 * the count read (is_var: str/bin/ext), whether it is a container (n_per: 1 array, 2 map). */
typedef struct fmt_info {
    int len_bytes;
    size_t fixed;
    bool is_var;
    int n_per;
    bool invalid;
} fmt_info;

static fmt_info classify(uint8_t b, size_t *count)
{
    fmt_info f = {0};
    *count = 0;
    if (b <= 0x7f || b >= 0xe0) /* positive / negative fixint */
        return f;
    if (b <= 0x8f) {
        f.n_per = 2;
        *count = b & 0x0f;
        return f;
    }
    if (b <= 0x9f) {
        f.n_per = 1;
        *count = b & 0x0f;
        return f;
    }
    if (b <= 0xbf) {
        f.fixed = b & 0x1f;
        return f;
    }
    switch (b) {
    case 0xc0: case 0xc2: case 0xc3: break;                     /* nil, false, true */
    case 0xc4: f.len_bytes = 1; f.is_var = true; break;        /* bin 8 */
    case 0xc5: f.len_bytes = 2; f.is_var = true; break;        /* bin 16 */
    case 0xc6: f.len_bytes = 4; f.is_var = true; break;        /* bin 32 */
    case 0xc7: f.len_bytes = 1; f.is_var = true; f.fixed = 1; break; /* ext 8 + type */
    case 0xc8: f.len_bytes = 2; f.is_var = true; f.fixed = 1; break;
    case 0xc9: f.len_bytes = 4; f.is_var = true; f.fixed = 1; break;
    case 0xca: f.fixed = 4; break;                              /* float 32 */
    case 0xcb: f.fixed = 8; break;                              /* float 64 */
    case 0xcc: f.fixed = 1; break;                              /* uint 8..64 */
    case 0xcd: f.fixed = 2; break;
    case 0xce: f.fixed = 4; break;
    case 0xcf: f.fixed = 8; break;
    case 0xd0: f.fixed = 1; break;                              /* int 8..64 */
    case 0xd1: f.fixed = 2; break;
    case 0xd2: f.fixed = 4; break;
    case 0xd3: f.fixed = 8; break;
    case 0xd4: f.fixed = 2; break;                              /* fixext 1..16 + type */
    case 0xd5: f.fixed = 3; break;
    case 0xd6: f.fixed = 5; break;
    case 0xd7: f.fixed = 9; break;
    case 0xd8: f.fixed = 17; break;
    case 0xd9: f.len_bytes = 1; f.is_var = true; break;        /* str 8/16/32 */
    case 0xda: f.len_bytes = 2; f.is_var = true; break;
    case 0xdb: f.len_bytes = 4; f.is_var = true; break;
    case 0xdc: f.len_bytes = 2; f.n_per = 1; break;            /* array 16/32 */
    case 0xdd: f.len_bytes = 4; f.n_per = 1; break;
    case 0xde: f.len_bytes = 2; f.n_per = 2; break;            /* map 16/32 */
    case 0xdf: f.len_bytes = 4; f.n_per = 2; break;
    default: f.invalid = true; break;                          /* 0xc1: never used */
    }
    return f;
}

int mp_scan(const void *buf, size_t len, const mp_scan_limits *lim, mp_scan_info *info)
{
    if ((!buf && len) || !lim || lim->max_depth < 1 || lim->max_depth > MP_SCAN_MAX_DEPTH)
        return deras_fail(DERAS_EINVAL, "mp_scan: bad arguments");
    const uint8_t *base = buf, *p = base, *end = base + len;
    uint64_t pending[MP_SCAN_MAX_DEPTH + 1]; /* items still to read at each open level */
    int depth = 0;
    size_t n_items = 0, n_containers = 0;
    pending[0] = 1;
    while (depth >= 0) {
        if (pending[depth] == 0) {
            depth--;
            continue;
        }
        pending[depth]--;
        size_t at = (size_t)(p - base);
        if (p == end)
            return deras_fail(DERAS_EFORMAT, "byte %zu: the message ends inside an object", at);
        if (++n_items > lim->max_items)
            return deras_fail(DERAS_EFORMAT, "byte %zu: more than %zu objects in one message",
                              at, lim->max_items);
        uint8_t b = *p++;
        size_t count;
        fmt_info f = classify(b, &count);
        if (f.invalid)
            return deras_fail(DERAS_EFORMAT, "byte %zu: 0x%02x is not a msgpack type", at, b);
        size_t left = (size_t)(end - p);
        if ((size_t)f.len_bytes > left)
            return deras_fail(DERAS_EFORMAT, "byte %zu: the message ends inside a length", at);
        if (f.len_bytes) {
            count = (size_t)read_be(p, f.len_bytes);
            p += f.len_bytes;
            left -= (size_t)f.len_bytes;
        }
        if (f.n_per) {
            /* Each element takes at least one byte: a count beyond what remains is a lie. */
            uint64_t n_elems = (uint64_t)count * (uint64_t)f.n_per;
            if (n_elems > left)
                return deras_fail(DERAS_EFORMAT,
                                  "byte %zu: %s of %zu %s, only %zu bytes remain", at,
                                  f.n_per == 2 ? "map" : "array", count,
                                  f.n_per == 2 ? "pairs" : "elements", left);
            n_containers++;
            if (depth + 1 > lim->max_depth)
                return deras_fail(DERAS_EFORMAT, "byte %zu: nested deeper than %d", at,
                                  lim->max_depth);
            if (n_elems > 0)
                pending[++depth] = n_elems;
            continue;
        }
        uint64_t body = (uint64_t)f.fixed + (f.is_var ? (uint64_t)count : 0);
        if (body > left)
            return deras_fail(DERAS_EFORMAT,
                              "byte %zu: object of %llu bytes, only %zu bytes remain", at,
                              (unsigned long long)body, left);
        p += body;
    }
    if (p != end)
        return deras_fail(DERAS_EFORMAT, "%zu trailing bytes after the message",
                          (size_t)(end - p));
    if (info) {
        info->n_items = n_items;
        info->n_containers = n_containers;
    }
    return DERAS_OK;
}

size_t mp_zone_bound(const mp_scan_info *info)
{
    return info->n_items * sizeof(msgpack_object) + info->n_containers * MSGPACK_ZONE_ALIGN +
           256;
}

int mp_frame_new(size_t retain_bytes, mp_frame_t **out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "mp_frame_new: NULL out");
    *out = NULL;
    mp_frame_t *f = calloc(1, sizeof *f);
    if (!f)
        return deras_fail(DERAS_ENOMEM, "mp_frame_new: out of memory");
    f->retain_bytes = retain_bytes < MP_ZONE_MIN ? MP_ZONE_MIN : retain_bytes;
    if (!msgpack_zone_init(&f->zone, MP_ZONE_MIN)) {
        free(f);
        return deras_fail(DERAS_ENOMEM, "mp_frame_new: out of memory for a zone");
    }
    f->zone_ok = true;
    *out = f;
    return DERAS_OK;
}

void mp_frame_destroy(mp_frame_t **fp)
{
    if (!fp || !*fp)
        return;
    if ((*fp)->zone_ok)
        msgpack_zone_destroy(&(*fp)->zone);
    free(*fp);
    *fp = NULL;
}

/* Replace the zone by one whose first chunk holds `size` bytes. */
static int zone_reinit(mp_frame_t *f, size_t size)
{
    if (f->zone_ok)
        msgpack_zone_destroy(&f->zone);
    f->zone_ok = msgpack_zone_init(&f->zone, size);
    if (!f->zone_ok)
        return deras_fail(DERAS_ENOMEM, "msgpack zone of %zu bytes: out of memory", size);
    return DERAS_OK;
}

int mp_frame_parse(mp_frame_t *f, const void *buf, size_t len, const mp_scan_limits *lim,
                   msgpack_object *root)
{
    if (!f || !root)
        return deras_fail(DERAS_EINVAL, "mp_frame_parse: bad arguments");
    mp_scan_info info;
    int rc = mp_scan(buf, len, lim, &info);
    if (rc != DERAS_OK)
        return rc;
    size_t need = mp_zone_bound(&info);
    if (!f->zone_ok || f->zone.chunk_size < need) {
        /* Double while under the retain size (few re-inits on the way to the working
         * size), exactly what is needed above it (no overshoot on an outsized frame). */
        size_t size = f->zone_ok ? f->zone.chunk_size * 2 : MP_ZONE_MIN;
        if (size > f->retain_bytes || size < need)
            size = need;
        if ((rc = zone_reinit(f, size)) != DERAS_OK)
            return rc;
    } else {
        msgpack_zone_clear(&f->zone);
    }
    size_t off = 0;
    msgpack_unpack_return ur = msgpack_unpack(buf, len, &off, &f->zone, root);
    if (ur == MSGPACK_UNPACK_NOMEM_ERROR)
        return deras_fail(DERAS_ENOMEM, "unpacking a %zu-byte message: out of memory", len);
    if (ur != MSGPACK_UNPACK_SUCCESS)
        return deras_fail(DERAS_EFORMAT, "msgpack-c refused a scanned message (%d)", (int)ur);
    return DERAS_OK;
}

void mp_frame_trim(mp_frame_t *f)
{
    if (f && (!f->zone_ok || f->zone.chunk_size > f->retain_bytes))
        (void)zone_reinit(f, MP_ZONE_MIN);
}
