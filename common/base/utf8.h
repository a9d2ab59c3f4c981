/* SPDX-License-Identifier: Apache-2.0 */
/* utf8.h - the UTF-8 primitives the tokenizer needs: strict decoding, validation, the
 * Unicode "maximal subpart" replacement of invalid bytes by U+FFFD, and the GPT-2
 * byte <-> printable-character map of byte-level BPE.
 *
 * Strict means what RFC 3629 allows: no overlong forms, no surrogates, nothing above
 * U+10FFFF. All functions are pure and allocate nothing.
 */
#ifndef DERAS_UTF8_H
#define DERAS_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Decode the character at s[0..n): its code point in *cp and its length as the return
 * value, or 0 if the bytes there do not start a valid character (n == 0 included). O(1). */
size_t utf8_decode(const char *s, size_t n, uint32_t *cp);

/* Encode cp (<= 0x10FFFF, not a surrogate) into out[4]; returns the length, 0 if invalid. */
size_t utf8_encode(uint32_t cp, char out[4]);

/* Offset of the first invalid byte of s[0..n), or n if all of it is valid UTF-8. O(n). */
size_t utf8_valid_prefix(const char *s, size_t n);

/* How many bytes the invalid sequence starting at s[0] covers under the Unicode
 * "maximal subpart" rule (the bytes one U+FFFD replaces; what Rust's from_utf8_lossy and
 * Python's errors="replace" do): 1..3. Needs s[0..n) to start with an invalid sequence
 * that is not merely truncated; see utf8_incomplete_len. */
size_t utf8_invalid_len(const char *s, size_t n);

/* If s[0..n) is a proper prefix of a valid character (a lead byte and continuation bytes
 * that are still allowed, but too few), the number of bytes still missing (1..3); else
 * 0. Used by the streaming detokenizer to hold bytes back. */
size_t utf8_incomplete_len(const char *s, size_t n);

/* Append s[0..n) to out (capacity cap, at offset *pos) replacing every invalid sequence
 * by U+FFFD; a truncated character at the very end is replaced too. Returns the bytes
 * the full result needs (written only while they fit). */
size_t utf8_lossy_copy(const char *s, size_t n, char *out, size_t cap, size_t pos);

/* The GPT-2 byte-level alphabet: the code point standing for byte b, and back (-1 when
 * cp is not in the alphabet). */
uint32_t utf8_byte_to_cp(uint8_t b);
int utf8_cp_to_byte(uint32_t cp);

#endif
