/* wire_vocab.h - the request vocabulary's tables (common/request/) on the wire; internal
 * to protocol.c and worker_proto.c, like proto_schema.h.
 *
 * Both protocols carry the same speculation counters, so their encoders and decoders walk
 * the one table here instead of naming each counter: in a map (usage, load) the counters
 * are key/value pairs under their wire keys, in a positional array (a STEP finish) they
 * are values in table order. Decoding checks like proto_schema.h (same codes, messages
 * naming the field, formatted only on failure). Nothing allocates; O(counters).
 */
#ifndef DERAS_WIRE_VOCAB_H
#define DERAS_WIRE_VOCAB_H

#include <msgpack.h>

#include "common/request/spec_counters.h"
#include "protocol.h"

/* SPEC_N_COUNTERS key/value pairs (the caller counted them in its map's size). msgpack-c's
 * 0 / -1, so calls can be or-ed. */
int wv_pack_spec_pairs(msgpack_packer *pk, const spec_counters *c);

/* SPEC_N_COUNTERS values, in table order (the caller counted them in its array's size). */
int wv_pack_spec_values(msgpack_packer *pk, const spec_counters *c);

/* Counter i from v: any integer in [0, 2^64 - 1]. In messages the field is "WHERE.KEY", or
 * "WHERE[index].KEY" when index >= 0. */
int wv_decode_spec(int i, const msgpack_object *v, spec_counters *c, proto_error *err,
                   const char *where, long index);

/* spec_counters_valid, else value_out_of_range "WHERE: <the rule>" (or "WHERE[index]: "). */
int wv_check_spec(const spec_counters *c, proto_error *err, const char *where, long index);

#endif
