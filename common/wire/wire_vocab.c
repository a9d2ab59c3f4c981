/* wire_vocab.c - the request vocabulary's tables on the wire (see wire_vocab.h). */
#include "wire_vocab.h"

#include <string.h>

#include "common/base/status.h"
#include "proto_schema.h"

int wv_decode_sampling(int i, const msgpack_object *v, sampling_params *p, proto_error *err)
{
    const sampling_param_info *pi = &sampling_param_table[i];
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
        if (pi->kind == SAMPLING_FLOAT)
            rc |= msgpack_pack_float(pk, (float)sampling_param_get(p, i));
        else
            rc |= msgpack_pack_int(pk, (int)sampling_param_get(p, i));
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
