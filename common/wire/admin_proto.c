/* SPDX-License-Identifier: Apache-2.0 */
/* admin_proto.c - decoding and encoding of admin requests (see admin_proto.h).
 *
 * The pipeline of protocol.c and worker_proto.c: ps_open (size cap, bounded scan, sized
 * unpack), ps_header ("v", "type"), then one walk over the map with a mask per type of
 * the keys it may carry. A drain or undrain names exactly one target: "worker" or
 * "all": true (neither is missing_field, both is invalid_field).
 *
 * Memory: one mp_frame_t (its zone kept between requests, they are small) and one msgpack
 * buffer for encoding; nothing per request once warm.
 */
#include "admin_proto.h"

#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "msgpack_scan.h"
#include "proto_schema.h"
#include "common/base/status.h"

#define ADMIN_ZONE_RETAIN (64u << 10)

enum admin_field { AF_TYPE, AF_V, AF_WORKER, AF_ALL, AF_TIMEOUT_MS, AF_WAIT, AF_N };

static const char *const af_names[AF_N] = {"type", "v", "worker", "all", "timeout_ms", "wait"};

/* Indexed by enum admin_type - 1. */
static const char *const admin_types[] = {"status", "health", "metrics", "drain", "undrain"};
#define N_TYPES 5

#define BIT(f) (1u << (f))
/* Keys each type may carry (besides "type" and "v"). */
static const unsigned allowed_keys[N_TYPES] = {
    0, 0, 0,                                                    /* status, health, metrics */
    BIT(AF_WORKER) | BIT(AF_ALL) | BIT(AF_TIMEOUT_MS) | BIT(AF_WAIT), /* drain */
    BIT(AF_WORKER) | BIT(AF_ALL),                               /* undrain */
};

struct admin_codec {
    mp_frame_t *frame;
    ps_out out;
};

int admin_codec_new(admin_codec_t **out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "admin_codec_new: NULL out");
    *out = NULL;
    admin_codec_t *c = calloc(1, sizeof *c);
    if (!c || mp_frame_new(ADMIN_ZONE_RETAIN, &c->frame)) {
        free(c);
        return deras_fail(DERAS_ENOMEM, "admin_codec_new: out of memory");
    }
    ps_out_init(&c->out);
    *out = c;
    return DERAS_OK;
}

void admin_codec_destroy(admin_codec_t **cp)
{
    if (!cp || !*cp)
        return;
    mp_frame_destroy(&(*cp)->frame);
    ps_out_free(&(*cp)->out);
    free(*cp);
    *cp = NULL;
}

const char *admin_type_name(enum admin_type t)
{
    return t >= ADMIN_STATUS && t <= ADMIN_UNDRAIN ? admin_types[t - 1] : "?";
}

static int field(int f, const msgpack_object *v, admin_request *r, proto_error *err)
{
    int64_t i64;
    int rc;
    switch ((enum admin_field)f) {
    case AF_TYPE:
    case AF_V: return DERAS_OK; /* checked by ps_header */
    case AF_WORKER: return ps_cstr(v, 1, WPROTO_MAX_NAME, r->worker, err, "worker");
    case AF_ALL: return ps_bool(v, &r->all, err, "all");
    case AF_TIMEOUT_MS:
        rc = ps_int(v, 0, ADMIN_MAX_TIMEOUT_MS, PE_LIMIT_EXCEEDED, &i64, err, "timeout_ms");
        r->timeout_ms = i64;
        return rc;
    case AF_WAIT: return ps_bool(v, &r->wait, err, "wait");
    case AF_N: break;
    }
    return ps_fail(err, PE_INTERNAL, "admin field %d has no checker", f);
}

int admin_decode_request(admin_codec_t *c, const void *buf, size_t len, admin_request *out,
                         proto_error *err)
{
    proto_error scratch;
    if (!err)
        err = &scratch;
    memset(err, 0, sizeof *err);
    if (!c || (!buf && len) || !out) {
        ps_fail(err, PE_INTERNAL, "admin_decode_request: bad arguments");
        return DERAS_EINVAL;
    }
    mp_scan_limits lim = {.max_depth = 2, .max_items = 64};
    const msgpack_object_kv *kv;
    uint32_t n;
    int type, rc;
    if ((rc = ps_open(c->frame, buf, len, ADMIN_MAX_MESSAGE_BYTES, &lim, &kv, &n, err)) !=
            DERAS_OK ||
        (rc = ps_header(kv, n, ADMIN_PROTO_VERSION, admin_types, N_TYPES, &type, err)) != DERAS_OK)
        goto done;
    memset(out, 0, sizeof *out);
    out->type = (enum admin_type)(type + 1);
    out->timeout_ms = -1;
    out->wait = true;
    uint64_t seen = 0;
    unsigned allowed = allowed_keys[type] | BIT(AF_TYPE) | BIT(AF_V);
    for (uint32_t i = 0; i < n; i++) {
        int f = ps_lookup(&kv[i].key, af_names, AF_N);
        if (f < 0 || !(allowed & BIT(f))) {
            rc = ps_unknown_key(&kv[i].key, admin_types[type], err);
            goto done;
        }
        if ((rc = ps_seen(&seen, f, af_names[f], err)) != DERAS_OK ||
            (rc = field(f, &kv[i].val, out, err)) != DERAS_OK)
            goto done;
    }
    if (out->type == ADMIN_DRAIN || out->type == ADMIN_UNDRAIN) {
        if (out->worker[0] && out->all)
            rc = ps_fail(err, PE_INVALID_FIELD, "%s names a worker or all, not both",
                         admin_types[type]);
        else if (!out->worker[0] && !out->all)
            rc = ps_fail(err, PE_MISSING_FIELD, "%s needs \"worker\": NAME or \"all\": true",
                         admin_types[type]);
    }
done:
    return ps_close(c->frame, rc);
}

#define KEY(pk, lit) msgpack_pack_str_with_body(pk, lit, sizeof(lit) - 1)

int admin_encode_request(admin_codec_t *c, const admin_request *r, const void **buf, size_t *len)
{
    if (!c || !r || !buf || !len || r->type < ADMIN_STATUS || r->type > ADMIN_UNDRAIN)
        return deras_fail(DERAS_EINVAL, "admin_encode_request: bad arguments");
    bool target = r->type == ADMIN_DRAIN || r->type == ADMIN_UNDRAIN;
    size_t name_len = strnlen(r->worker, sizeof r->worker);
    if (target && (!name_len == !r->all || name_len > WPROTO_MAX_NAME))
        return deras_fail(DERAS_EINVAL, "%s: name one worker (1..%d bytes) or all",
                          admin_type_name(r->type), WPROTO_MAX_NAME);
    if (r->type == ADMIN_DRAIN && r->timeout_ms > ADMIN_MAX_TIMEOUT_MS)
        return deras_fail(DERAS_EINVAL, "drain: timeout above %d ms", ADMIN_MAX_TIMEOUT_MS);
    bool timeout = r->type == ADMIN_DRAIN && r->timeout_ms >= 0;
    bool nowait = r->type == ADMIN_DRAIN && !r->wait;
    msgpack_sbuffer_clear(&c->out.sb);
    msgpack_packer *pk = &c->out.pk;
    const char *type = admin_type_name(r->type);
    int rc = msgpack_pack_map(pk, 2 + target + timeout + nowait);
    rc |= KEY(pk, "type") | msgpack_pack_str_with_body(pk, type, strlen(type));
    rc |= KEY(pk, "v") | msgpack_pack_int(pk, ADMIN_PROTO_VERSION);
    if (target && r->all)
        rc |= KEY(pk, "all") | msgpack_pack_true(pk);
    else if (target)
        rc |= KEY(pk, "worker") | msgpack_pack_str_with_body(pk, r->worker, name_len);
    if (timeout)
        rc |= KEY(pk, "timeout_ms") | msgpack_pack_int64(pk, r->timeout_ms);
    if (nowait)
        rc |= KEY(pk, "wait") | msgpack_pack_false(pk);
    if (rc)
        return deras_fail(DERAS_ENOMEM, "admin_encode_request: out of memory");
    *buf = c->out.sb.data;
    *len = c->out.sb.size;
    return DERAS_OK;
}
