/* SPDX-License-Identifier: Apache-2.0 */
/* json_util.c - small helpers over jansson (see json_util.h). */
#include "json_util.h"

const char *json_kind(const json_t *j)
{
    switch (json_typeof(j)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}
