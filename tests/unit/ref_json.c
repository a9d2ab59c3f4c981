/* SPDX-License-Identifier: Apache-2.0 */
/* ref_json.c - the reference-vector readers of ref_json.h. */
#include "ref_json.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

json_t *ref_json_load(const char *path)
{
    json_error_t err;
    json_t *j = json_load_file(path, 0, &err);
    if (!j)
        fail_msg("%s: %s (line %d)", path, err.text, err.line);
    return j;
}

json_t *ref_json_in(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/reference.json", dir);
    return ref_json_load(path);
}

int32_t *ref_json_ids(const json_t *arr, int *n)
{
    *n = (int)json_array_size(arr);
    int32_t *ids = malloc((size_t)(*n ? *n : 1) * sizeof(int32_t));
    if (!ids)
        fail_msg("out of memory for %d token ids", *n);
    for (int i = 0; i < *n; i++)
        ids[i] = (int32_t)json_integer_value(json_array_get(arr, (size_t)i));
    return ids;
}
