/* SPDX-License-Identifier: Apache-2.0 */
/* spec_counters.h - what speculative decoding did, as one struct from the engine to the
 * client.
 *
 * The engine counts per sample and per engine; the worker sends a sample's counters in
 * its finish and the engine's in every load report; the router passes a sample's on in
 * the final's usage, a worker's to the admin socket and to Prometheus. Every hop handles
 * the struct whole and every encoder and decoder walks SPEC_COUNTERS, so a new counter is
 * one row here (field, wire key, metric, help) plus the code that counts it.
 *
 * On the wire the counters are optional (added after version 1): absent means 0, and the
 * encoders leave them out when the sample or worker never verified a draft. Costs: O(1)
 * per counter; nothing allocates.
 */
#ifndef DERAS_SPEC_COUNTERS_H
#define DERAS_SPEC_COUNTERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* X(field, wire key, Prometheus series (per worker, labelled by proposer), its help) */
#define SPEC_COUNTERS(X)                                                                         \
    X(proposed, "spec_proposed", "deras_spec_draft_tokens_total",                                \
      "Speculative draft tokens the worker verified, by proposer, since it started.")            \
    X(accepted, "spec_accepted", "deras_spec_accepted_tokens_total",                             \
      "Speculative draft tokens that stood (acceptance rate: accepted / draft), since it "       \
      "started.")                                                                                \
    X(verifications, "spec_verifications", "deras_spec_verifications_total",                     \
      "Sequence-steps that verified drafts (mean accepted length: accepted / "                   \
      "verifications), since it started.")

typedef struct spec_counters {
#define SPEC_COUNTER_FIELD(field, key, metric, help) uint64_t field;
    SPEC_COUNTERS(SPEC_COUNTER_FIELD)
#undef SPEC_COUNTER_FIELD
} spec_counters;

/* For name tables: SPEC_COUNTERS(SPEC_COUNTER_KEY) expands to the keys, comma-separated. */
#define SPEC_COUNTER_KEY(field, key, metric, help) key,

enum {
#define SPEC_COUNTER_ONE(field, key, metric, help) +1
    SPEC_N_COUNTERS = 0 SPEC_COUNTERS(SPEC_COUNTER_ONE)
#undef SPEC_COUNTER_ONE
};

typedef struct spec_counter_info {
    const char *key, *metric, *help;
    size_t offset; /* of the uint64_t in spec_counters */
} spec_counter_info;

/* One row per counter, in SPEC_COUNTERS order. */
extern const spec_counter_info spec_counter_table[SPEC_N_COUNTERS];

/* Counter i of c. */
static inline uint64_t *spec_counter_at(spec_counters *c, int i)
{
    return (uint64_t *)((char *)c + spec_counter_table[i].offset);
}

static inline uint64_t spec_counter_get(const spec_counters *c, int i)
{
    return *(const uint64_t *)((const char *)c + spec_counter_table[i].offset);
}

/* sum += c, counter by counter. */
void spec_counters_add(spec_counters *sum, const spec_counters *c);

/* Whether any draft was verified (the encoders' test for sending the counters). */
bool spec_counters_any(const spec_counters *c);

/* The invariant every producer keeps and every decoder checks (SPEC_COUNTERS_RULE says it
 * in words). */
bool spec_counters_valid(const spec_counters *c);
#define SPEC_COUNTERS_RULE "spec_accepted and spec_verifications must not exceed spec_proposed"

#endif
