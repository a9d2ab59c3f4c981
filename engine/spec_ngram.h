/* SPDX-License-Identifier: Apache-2.0 */
/* spec_ngram.h - n-gram prompt lookup: drafts copied from earlier in the sequence.
 *
 * Text that quotes, summarises or edits its input repeats it: the tokens that followed
 * the latest earlier occurrence of the sequence's last n tokens are a good guess for what
 * follows now. No model runs; the drafts are deterministic (a point-mass proposal for
 * speculative sampling).
 */
#ifndef DERAS_SPEC_NGRAM_H
#define DERAS_SPEC_NGRAM_H

#include <stdint.h>

/* Find the latest i < n_tokens - n with tokens[i .. i + n) == the last n tokens, trying n
 * from n_max down to n_min (the longest match wins), and copy up to k tokens that follow
 * it (never past n_tokens) into drafts. Returns the number copied, 0 when nothing
 * matches or the arguments are out of range. O(n_tokens * n_max). */
int spec_ngram_propose(const int32_t *tokens, int n_tokens, int n_min, int n_max, int k,
                       int32_t *drafts);

#endif
