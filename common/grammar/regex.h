/* SPDX-License-Identifier: Apache-2.0 */
/* regex.h - regular expressions, the subset vLLM / Outlines users write, translated to a
 * GBNF expression (grammar.h compiles it like any grammar; the JSON Schema compiler embeds
 * it for "pattern").
 *
 * Supported: literals (UTF-8), `.` (any character but \n, Python's default), classes
 * [...] with ranges, negation and escapes inside, \d \w \s and \D \W \S (ASCII meanings:
 * [0-9], [A-Za-z0-9_], [ \t\n\r\f\v]), escapes \n \r \t \f \v \0 \xHH \uHHHH \\ and any
 * escaped punctuation, groups ( ), (?: ), (?P<name> ), (?<name> ), alternation |,
 * quantifiers * + ? {m} {m,} {m,n} and their lazy forms (*? ...: the same language when
 * the whole text must match). The match is always of the whole text: ^ at the very start
 * and $ at the very end are accepted and change nothing; elsewhere they are refused.
 *
 * Refused with DERAS_EUNSUPPORTED naming the construct: backreferences (\1, (?P=name)),
 * lookaround ((?=, (?!, (?<=, (?<!), possessive quantifiers and atomic groups, inline
 * flags ((?i) ...), \b \B \A \Z, Unicode properties \p{..}, POSIX classes [[:alpha:]].
 * DERAS_EFORMAT for malformed text (an unclosed group or class, a dangling quantifier, a
 * range out of order, invalid UTF-8), DERAS_ERANGE past grammar_limits (source bytes,
 * nesting, repetition counts).
 *
 * Catastrophic backtracking does not exist here: the translation is linear in the regex and
 * matching is by the grammar's parse (no backtracking); what a regex can cost is bounded
 * by the grammar's element budget at compile time and the matcher's budgets at run time.
 */
#ifndef DERAS_REGEX_H
#define DERAS_REGEX_H

#include <stdbool.h>
#include <stddef.h>

#include "common/grammar/grammar.h"

/* Translate re[0..len) into one parenthesized GBNF expression (no rule definitions), e.g.
 * "[0-9]{3}-x" -> `( [0-9]{3,3} "\x2D" "x" )`. Malloc'd, NUL-terminated in *out (caller
 * frees), its length in *out_len. lim NULL: the defaults. json_string: the text is the
 * inside of a JSON string (a JSON Schema "pattern"), so '"', '\' and control characters
 * are matched in their escaped JSON form (a literal " becomes \", a control character
 * \u00XX) and classes and `.` never produce them raw. O(len) time and output (at most
 * ~40 bytes of GBNF per regex byte). Errors as in the header comment; DERAS_ENOMEM. */
int regex_to_gbnf(const char *re, size_t len, const grammar_limits *lim, bool json_string,
                  char **out, size_t *out_len);

#endif
