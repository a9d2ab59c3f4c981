/* wire_vocab.c - the request vocabulary's tables on the wire (see wire_vocab.h). */
#include "wire_vocab.h"

#include <string.h>

#include "common/base/status.h"
#include "proto_schema.h"

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
