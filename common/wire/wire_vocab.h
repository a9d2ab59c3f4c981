/* SPDX-License-Identifier: Apache-2.0 */
/* wire_vocab.h - the request vocabulary's tables (common/request/) on the wire; internal
 * to protocol.c and worker_proto.c, like proto_schema.h.
 *
 * Both protocols carry the same sampling parameters and the same speculation counters, so
 * their encoders and decoders walk the tables here instead of naming each field:
 *   sampling parameters  key/value pairs of the request / SUBMIT map, under their wire
 *                        keys, checked against their row (kind, bounds, cap); a client
 *                        request leaves out those at their default, a SUBMIT leaves out
 *                        only the ones the worker link has as optional; a BIAS map is a
 *                        msgpack map of int token ids to numbers
 *   speculation counters key/value pairs in a map (usage, load), or values in table
 *                        order in a positional array (a STEP finish)
 * Decoding checks like proto_schema.h (same codes, messages naming the field and the
 * bound, formatted only on failure). Nothing allocates; O(parameters), O(counters).
 */
#ifndef DERAS_WIRE_VOCAB_H
#define DERAS_WIRE_VOCAB_H

#include <msgpack.h>

#include "common/request/sampling.h"
#include "common/request/spec_counters.h"
#include "protocol.h"

/* Sampling parameter i from v, checked against its row: a FLOAT takes any finite number in
 * its bounds, an INT an integer; below the lower bound, and above the upper one unless the
 * row is a cap, is value_out_of_range; above a cap limit_exceeded. A BIAS takes a map of at
 * most SAMPLING_MAX_LOGIT_BIAS entries (more: limit_exceeded) whose keys are distinct
 * token ids (not an integer, or twice: invalid_field; negative: token_out_of_range) and
 * whose values are biases in the row's bounds (value_out_of_range). */
int wv_decode_sampling(int i, const msgpack_object *v, sampling_params *p, proto_error *err);

/* msgpack objects the sampling parameters can take at most in one message (keys, values,
 * map entries): for a decoder's scan bound. */
size_t wv_sampling_max_items(void);

/* The pairs wv_pack_sampling writes: the parameters not at their default, and for the
 * worker link (worker) also every one it requires. */
unsigned wv_sampling_count(const sampling_params *p, bool worker);

/* Those wv_sampling_count pairs, in table order. msgpack-c's 0 / -1. */
int wv_pack_sampling(msgpack_packer *pk, const sampling_params *p, bool worker);

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
