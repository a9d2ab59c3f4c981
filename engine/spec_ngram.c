/* SPDX-License-Identifier: Apache-2.0 */
/* spec_ngram.c - n-gram prompt lookup (see spec_ngram.h).
 *
 * A backwards scan per match length: the latest occurrence is the one nearest the end,
 * so the first hit ends the scan. Comparing from the pattern's last token first rejects
 * most positions after one comparison. No state, no allocation.
 */
#include "spec_ngram.h"

#include <string.h>

int spec_ngram_propose(const int32_t *tokens, int n_tokens, int n_min, int n_max, int k,
                       int32_t *drafts)
{
    if (!tokens || !drafts || n_min < 1 || n_max < n_min || k < 1)
        return 0;
    for (int n = n_max; n >= n_min; n--) {
        if (n >= n_tokens)
            continue;
        const int32_t *pat = tokens + n_tokens - n;
        for (int i = n_tokens - n - 1; i >= 0; i--) {
            int j = n - 1;
            while (j >= 0 && tokens[i + j] == pat[j])
                j--;
            if (j >= 0)
                continue;
            int avail = n_tokens - (i + n);
            int m = avail < k ? avail : k;
            memcpy(drafts, tokens + i + n, (size_t)m * sizeof(int32_t));
            return m;
        }
    }
    return 0;
}
