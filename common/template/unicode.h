/* SPDX-License-Identifier: Apache-2.0 */
/* unicode.h - the Python str semantics templates lean on, over UTF-8: code point counting
 * and indexing (len, s[i], slices), str.isspace (strip, split, trim, the lexer's \s),
 * str.splitlines' line breaks, upper/lower case mapping, and str.isprintable (repr).
 *
 * Strings handled here are valid UTF-8 (the template source is checked at compile time,
 * jansson checks the context), so decoding never fails. Case mapping beyond ASCII uses
 * the C library's C.UTF-8 tables (towupper_l), one character to one character: Python's
 * few one-to-many mappings (German sharp s to "SS") are not reproduced. Printability
 * follows Python's categories for the assigned characters that matter (controls, format
 * characters, separators, private use); unassigned code points count as printable.
 * All functions are pure; none allocates.
 */
#ifndef DERAS_TEMPLATE_UNICODE_H
#define DERAS_TEMPLATE_UNICODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Decode the code point at s[i] (i < n) into *cp; returns its byte length (>= 1). O(1). */
size_t uni_decode(const char *s, size_t n, size_t i, uint32_t *cp);

/* Number of code points in s[0..n). O(n). */
size_t uni_count(const char *s, size_t n);

/* Byte offset of code point index k (k <= count; k == count gives n). O(n), O(1) when
 * `ascii` says every byte is one code point. */
size_t uni_offset(const char *s, size_t n, size_t k, bool ascii);

/* Python's str.isspace() for one code point. */
bool uni_isspace(uint32_t cp);

/* A line boundary of str.splitlines() (\r\n is handled by the caller). */
bool uni_islinebreak(uint32_t cp);

/* str.isprintable() for one code point (see the file comment). */
bool uni_isprintable(uint32_t cp);

/* Simple case mappings. */
uint32_t uni_upper(uint32_t cp);
uint32_t uni_lower(uint32_t cp);
bool uni_isupper(uint32_t cp);
bool uni_islower(uint32_t cp);
bool uni_isalpha(uint32_t cp);
bool uni_isdigit(uint32_t cp);

/* Length of the run of whitespace ending at s[n] (scanning backwards) and starting at
 * s[0] (scanning forwards), per uni_isspace. O(run). */
size_t uni_rspace(const char *s, size_t n);
size_t uni_lspace(const char *s, size_t n);

#endif
