/* SPDX-License-Identifier: Apache-2.0 */
/* ref_json.h - reading the JSON reference vectors that tests/ref scripts stored
 * (transformers outputs): the file, and an array of token ids. Failures end the test. */
#ifndef DERAS_TEST_REF_JSON_H
#define DERAS_TEST_REF_JSON_H

#include <stdint.h>

#include <jansson.h>

/* The parsed file; fail_msg naming the file and line when it cannot be read or parsed. */
json_t *ref_json_load(const char *path);

/* dir/reference.json, the file every reference directory (tests/data/tiny, smollm2) has. */
json_t *ref_json_in(const char *dir);

/* arr's integers as token ids, *n of them (malloc'ed, at least one element). */
int32_t *ref_json_ids(const json_t *arr, int *n);

#endif
