/* SPDX-License-Identifier: Apache-2.0 */
/* grammar.h - context-free grammars over bytes: compiled from GBNF (llama.cpp's notation)
 * or from a regular expression, immutable once built, shared by every matcher that uses
 * them (docs/structured_output.md has the whole design).
 *
 * GBNF as llama.cpp reads it: `name ::= alternatives` rules (names [a-zA-Z0-9_-]+; a rule
 * continues over newlines inside parentheses and after `|` or `::=`), sequences,
 * alternation `|`, groups `( )`, literals "..." with the escapes \n \r \t \\ \" \[ \] \xHH
 * \uHHHH \UHHHHHHHH, character classes [...] with ranges a-z and negation [^...], `.` (any
 * character), repetition * + ? {m} {m,} {m,n}, comments from `#` to the end of the line.
 * The start rule is `root`. Characters are Unicode code points (\xHH is U+00HH, as in
 * llama.cpp), matched as their UTF-8 bytes: a negated class or `.` covers every valid
 * UTF-8 character outside it, never an invalid byte sequence. llama.cpp's token
 * references (<[id]>, <|name|>) are refused as unsupported.
 *
 * Compiling (grammar_from_gbnf) parses, desugars groups and repetitions into helper rules
 * (x* becomes R ::= x R | empty, x{m,n} m copies and nested options), lowers code-point
 * classes to byte sequences (a class with non-ASCII characters becomes a helper rule of
 * at most 11 byte-range sequences per range), checks the grammar and specializes it:
 *   - every referenced rule is defined, `root` exists;
 *   - no rule is non-productive (derives no finite string) : DERAS_EUNSUPPORTED;
 *   - no left recursion that would grow the parse stack (A ::= A "x" | ..., directly or
 *     through rules that can be empty): DERAS_EUNSUPPORTED naming the rule. A left cycle
 *     made only of tail calls, as in the regex (a*)*, cannot grow the stack and is kept;
 *   - small rules called from several places are copied per call site (within the
 *     element budget), so that the mask cache (token_grammar.h) knows a position's
 *     context statically: this is what makes masks cheap, it never changes the language.
 *
 * Bounds: grammar_limits caps the source, the nesting of groups, the repetition counts,
 * the rules and the byte-level elements (repetition expands: [a-z]{1,5000} is 5000
 * elements); exceeding one is DERAS_ERANGE naming it, before the memory is spent.
 * Errors: DERAS_EFORMAT for syntax (the message says line:column), DERAS_ENOTFOUND for a
 * rule used but never defined (or no root), DERAS_EUNSUPPORTED for a refused construct,
 * DERAS_ERANGE for a limit, DERAS_ENOMEM, DERAS_EINVAL for NULL arguments. Costs:
 * O(source + elements) time and memory, plus O(rules^2) in the worst case for the
 * left-recursion and specialization passes (bounded by max_rules).
 *
 * Thread safety: a grammar_t is immutable after construction; share it freely.
 */
#ifndef DERAS_GRAMMAR_H
#define DERAS_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct grammar_limits {
    size_t max_source;   /* bytes of GBNF or regex text; default 256 KiB */
    int max_nesting;     /* nested groups / parentheses while parsing; default 100 */
    int max_repeat;      /* the largest m or n in x{m,n}; default 4096 */
    int max_rules;       /* rules after desugaring and specialization; default 65536 */
    int max_elements;    /* byte-level elements (bytes, references, rule ends); default 1 << 20 */
} grammar_limits;

void grammar_limits_default(grammar_limits *l);

typedef struct grammar grammar_t;

/* Compile GBNF text (len bytes, need not be NUL-terminated). lim NULL: the defaults. See the
 * header comment for errors and costs. */
int grammar_from_gbnf(const char *text, size_t len, const grammar_limits *lim, grammar_t **out);

/* Compile a regular expression, matched in full (anchors implicit), through regex.h's
 * translation to GBNF. Errors as grammar_from_gbnf's and regex_to_gbnf's. */
int grammar_from_regex(const char *re, size_t len, const grammar_limits *lim, grammar_t **out);

void grammar_destroy(grammar_t **g);

typedef struct grammar_info {
    int n_rules;         /* after desugaring and specialization */
    int n_elements;      /* byte-level elements, rule ends included */
    int n_terminals;     /* elements that match a byte: the positions masks are cached for */
    int n_bytesets;      /* distinct byte sets */
    size_t bytes;        /* memory held */
} grammar_info;

/* O(1). */
void grammar_get_info(const grammar_t *g, grammar_info *out);

/* Whether bytes[0..len) is a prefix of some sentence of the grammar (*prefix) and a whole
 * sentence (*complete). For tests and output checks; the parse runs under the matcher's
 * default budgets (matcher.h), whose overflow is DERAS_ERANGE. Allocates its scratch per
 * call; O(len * stacks). */
int grammar_match_bytes(const grammar_t *g, const char *bytes, size_t len, bool *prefix,
                        bool *complete);

#endif
