/* SPDX-License-Identifier: Apache-2.0 */
/* spec_counters.c - the speculation counters' table (see spec_counters.h). */
#include "spec_counters.h"

const spec_counter_info spec_counter_table[SPEC_N_COUNTERS] = {
#define SPEC_COUNTER_ROW(field, key, metric, help)                                           \
    {key, metric, help, offsetof(spec_counters, field)},
    SPEC_COUNTERS(SPEC_COUNTER_ROW)
#undef SPEC_COUNTER_ROW
};

void spec_counters_add(spec_counters *sum, const spec_counters *c)
{
    for (int i = 0; i < SPEC_N_COUNTERS; i++)
        *spec_counter_at(sum, i) += spec_counter_get(c, i);
}

bool spec_counters_any(const spec_counters *c)
{
    return c->verifications > 0;
}

bool spec_counters_valid(const spec_counters *c)
{
    return c->accepted <= c->proposed && c->verifications <= c->proposed;
}
