/* SPDX-License-Identifier: Apache-2.0 */
/* json_schema.h - JSON Schema to a GBNF grammar (common/grammar compiles it), and the
 * grammar of JSON mode (any JSON object). The router runs this and refuses a bad schema
 * before the request is admitted; the worker only ever sees GBNF.
 *
 * Supported (docs/structured_output.md has the table, with what is not enforced):
 *   type (one or a list), properties, required, additionalProperties (false, true or a
 *   schema; absent means false, as in OpenAI's strict mode and XGrammar: set
 *   allow_additional to follow the standard's default), enum, const, anyOf, oneOf (as
 *   anyOf: exclusivity is not enforced), allOf with one member, $ref to "#", "#/$defs/.."
 *   and "#/definitions/.." (recursion allowed), items, prefixItems, minItems, maxItems,
 *   string minLength, maxLength, pattern (regex.h), format date, time, date-time, uuid,
 *   email, ipv4, hostname (the syntax, not the calendar), integer minimum, maximum,
 *   exclusiveMinimum, exclusiveMaximum (exact, within int64), number minimum /
 *   exclusiveMinimum >= 0 (the sign only), boolean, null. Annotations are ignored: title,
 *   description, default, examples, $comment, $schema, $id, deprecated, readOnly,
 *   writeOnly, and $defs / definitions themselves.
 * Anything else (uniqueItems, multipleOf, not, if/then/else, patternProperties,
 * propertyNames, dependentRequired, contains, minProperties, other formats, number bounds
 * beyond the above, ...) is refused: DERAS_EUNSUPPORTED with the keyword and its JSON
 * pointer in the message. A schema that is not valid JSON or whose keywords have the wrong
 * type: DERAS_EFORMAT. Past the limits (nesting, $ref expansions, output size):
 * DERAS_ERANGE.
 *
 * Output form: properties in the schema's order, each optional one may be left out; no
 * duplicate keys; strings are JSON strings (escapes included, control characters not);
 * numbers in JSON's syntax with at most max_digits digits per part. Whitespace between
 * tokens is bounded so a model cannot loop on it: at most one space, or a newline and up
 * to max_indent spaces/tabs (0 with compact). The generated GBNF is deterministic for a
 * given schema and options (an engine can cache compiled grammars by its text).
 *
 * Costs: O(schema size + output size); the output is bounded by max_output bytes.
 */
#ifndef DERAS_JSON_SCHEMA_H
#define DERAS_JSON_SCHEMA_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

typedef struct jschema_opts {
    bool compact;            /* no whitespace at all between tokens */
    int max_indent;          /* spaces/tabs after a newline; default 20 */
    bool allow_additional;   /* absent additionalProperties means true; default false */
    int max_digits;          /* digits of an integer part or fraction; default 18 (an int64) */
    int max_depth;           /* schema nesting; default 64 */
    size_t max_output;       /* bytes of GBNF; default 1 MiB */
} jschema_opts;

void jschema_opts_default(jschema_opts *o);

/* Compile the schema (JSON text, len bytes) to GBNF: malloc'd, NUL-terminated in *out (the
 * caller frees), its length in *out_len. o NULL: the defaults. Errors in the header
 * comment; DERAS_ENOMEM. */
int jschema_to_gbnf(const char *schema, size_t len, const jschema_opts *o, char **out,
                    size_t *out_len);

/* The same from a parsed schema (borrowed; the OpenAI codec already holds one). A boolean
 * schema `true` is any JSON value, `false` is refused (nothing matches it). */
int jschema_to_gbnf_json(const json_t *schema, const jschema_opts *o, char **out,
                         size_t *out_len);

/* JSON mode: the GBNF of any JSON object (whitespace as o says; o NULL: the defaults),
 * malloc'd like jschema_to_gbnf's. DERAS_ENOMEM. */
int jschema_json_object_gbnf(const jschema_opts *o, char **out, size_t *out_len);

#endif
