/* SPDX-License-Identifier: Apache-2.0 */
/* sampling_table_dump.c - the sampling table (common/request/sampling.h) as text, one row
 * per line, tab-separated: key, kind, default, range, flag, arg, cap, worker_optional, doc.
 * test_sampling_docs.py reads it to check the documents against the table. */
#include <stdio.h>

#include "common/request/sampling.h"

int main(void)
{
    static const char *const kinds[] = {"float", "int", "map of int to float"};
    for (int i = 0; i < SAMPLING_N_PARAMS; i++) {
        const sampling_param_info *pi = &sampling_param_table[i];
        char range[64];
        char def[32];
        snprintf(def, sizeof def, pi->kind == SAMPLING_BIAS ? "{}" : "%g", pi->def);
        printf("%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", pi->key, kinds[pi->kind], def,
               sampling_param_range(pi, range, sizeof range), pi->flag, pi->arg, pi->cap,
               pi->worker_optional, pi->doc);
    }
    return 0;
}
