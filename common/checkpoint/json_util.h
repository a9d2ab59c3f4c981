/* SPDX-License-Identifier: Apache-2.0 */
/* json_util.h - small helpers over jansson shared by the JSON readers (config.json,
 * safetensors headers, tokenizer.json). */
#ifndef DERAS_JSON_UTIL_H
#define DERAS_JSON_UTIL_H

#include <jansson.h>

/* "an object", "a string", ... for error messages about unexpected JSON types. */
const char *json_kind(const json_t *j);

#endif
