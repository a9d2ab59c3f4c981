/* SPDX-License-Identifier: Apache-2.0 */
/* wire_vocab.c - the request vocabulary's tables on the wire (see wire_vocab.h). */
#include "wire_vocab.h"

#include <string.h>

#include "common/base/status.h"
#include "proto_schema.h"

/* A logit-bias map: {token id: bias, ...}. */
static int decode_bias(const sampling_param_info *pi, const msgpack_object *v, logit_bias *b,
                       proto_error *err)
{
    if (v->type != MSGPACK_OBJECT_MAP)
        return ps_fail(err, PE_INVALID_FIELD, "%s must be a map of token ids to biases, got %s",
                       pi->key, ps_type_name(v));
    uint32_t n = v->via.map.size;
    if (n > SAMPLING_MAX_LOGIT_BIAS)
        return ps_fail(err, PE_LIMIT_EXCEEDED, "%s may have at most %d entries, got %u", pi->key,
                       SAMPLING_MAX_LOGIT_BIAS, n);
    const msgpack_object_kv *kv = v->via.map.ptr;
    b->n = 0;
    for (uint32_t k = 0; k < n; k++) {
        int32_t id;
        float bias;
        int rc = ps_token(&kv[k].key, &id, err, "%s keys", pi->key);
        if (rc == DERAS_OK)
            rc = ps_float(&kv[k].val, pi->lo, pi->lo_open, pi->hi, pi->hi_open, &bias, err,
                          "%s[%d]", pi->key, (int)id);
        if (rc != DERAS_OK)
            return rc;
        for (int j = 0; j < b->n; j++)
            if (b->ids[j] == id)
                return ps_fail(err, PE_INVALID_FIELD, "%s has token %d twice", pi->key,
                               (int)id);
        b->ids[b->n] = id;
        b->bias[b->n++] = bias;
    }
    return DERAS_OK;
}

size_t wv_sampling_max_items(void)
{
    size_t n = 0;
    for (int i = 0; i < SAMPLING_N_PARAMS; i++)
        n += sampling_param_table[i].kind == SAMPLING_BIAS ? 2 + 2 * SAMPLING_MAX_LOGIT_BIAS : 2;
    return n;
}

int wv_decode_sampling(int i, const msgpack_object *v, sampling_params *p, proto_error *err)
{
    const sampling_param_info *pi = &sampling_param_table[i];
    if (pi->kind == SAMPLING_BIAS)
        return decode_bias(pi, v, (logit_bias *)((char *)p + pi->offset), err);
    if (pi->kind == SAMPLING_FLOAT) {
        float f;
        int rc = ps_float(v, pi->lo, pi->lo_open, pi->hi, pi->hi_open, &f, err, "%s", pi->key);
        if (rc == DERAS_OK)
            sampling_param_set(p, i, f);
        return rc;
    }
    int64_t i64;
    int rc = ps_int(v, (int64_t)pi->lo + pi->lo_open, (int64_t)pi->hi - pi->hi_open,
                    pi->cap ? PE_LIMIT_EXCEEDED : PE_VALUE_OUT_OF_RANGE, &i64, err, "%s", pi->key);
    if (rc == DERAS_OK)
        sampling_param_set(p, i, (double)i64);
    return rc;
}

/* Whether parameter i goes into a message. */
static bool sent(const sampling_params *p, int i, bool worker)
{
    return !sampling_param_is_default(p, i) || (worker && !sampling_param_table[i].worker_optional);
}

unsigned wv_sampling_count(const sampling_params *p, bool worker)
{
    unsigned n = 0;
    for (int i = 0; i < SAMPLING_N_PARAMS; i++)
        n += sent(p, i, worker);
    return n;
}

int wv_pack_sampling(msgpack_packer *pk, const sampling_params *p, bool worker)
{
    int rc = 0;
    for (int i = 0; i < SAMPLING_N_PARAMS; i++) {
        const sampling_param_info *pi = &sampling_param_table[i];
        if (!sent(p, i, worker))
            continue;
        rc |= msgpack_pack_str_with_body(pk, pi->key, strlen(pi->key));
        if (pi->kind == SAMPLING_BIAS) {
            const logit_bias *b = (const logit_bias *)((const char *)p + pi->offset);
            rc |= msgpack_pack_map(pk, (size_t)b->n);
            for (int k = 0; k < b->n; k++)
                rc |= msgpack_pack_int32(pk, b->ids[k]) | msgpack_pack_float(pk, b->bias[k]);
        } else if (pi->kind == SAMPLING_FLOAT) {
            rc |= msgpack_pack_float(pk, (float)sampling_param_get(p, i));
        } else {
            rc |= msgpack_pack_int(pk, (int)sampling_param_get(p, i));
        }
    }
    return rc;
}

int wv_pack_spec_pairs(msgpack_packer *pk, const spec_counters *c)
{
    int rc = 0;
    for (int i = 0; i < SPEC_N_COUNTERS; i++) {
        const char *key = spec_counter_table[i].key;
        rc |= msgpack_pack_str_with_body(pk, key, strlen(key)) |
              msgpack_pack_uint64(pk, spec_counter_get(c, i));
    }
    return rc;
}

int wv_pack_spec_values(msgpack_packer *pk, const spec_counters *c)
{
    int rc = 0;
    for (int i = 0; i < SPEC_N_COUNTERS; i++)
        rc |= msgpack_pack_uint64(pk, spec_counter_get(c, i));
    return rc;
}

int wv_decode_spec(int i, const msgpack_object *v, spec_counters *c, proto_error *err,
                   const char *where, long index)
{
    const char *key = spec_counter_table[i].key;
    if (index >= 0)
        return ps_u64(v, spec_counter_at(c, i), err, "%s[%ld].%s", where, index, key);
    return ps_u64(v, spec_counter_at(c, i), err, "%s.%s", where, key);
}

int wv_check_spec(const spec_counters *c, proto_error *err, const char *where, long index)
{
    if (spec_counters_valid(c))
        return DERAS_OK;
    if (index >= 0)
        return ps_fail(err, PE_VALUE_OUT_OF_RANGE, "%s[%ld]: " SPEC_COUNTERS_RULE, where, index);
    return ps_fail(err, PE_VALUE_OUT_OF_RANGE, "%s: " SPEC_COUNTERS_RULE, where);
}
