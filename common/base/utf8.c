/* SPDX-License-Identifier: Apache-2.0 */
/* utf8.c - see utf8.h.
 *
 * Decoding follows the well-formed byte sequences table of the Unicode standard (3.9,
 * table 3-7): the second byte's allowed range depends on the lead byte (E0: A0..BF,
 * ED: 80..9F, F0: 90..BF, F4: 80..8F), which rules out overlong forms and surrogates
 * without decoding first. The same table gives the "maximal subpart" of an invalid
 * sequence: the longest prefix that could still have started a valid character.
 *
 * The byte-level map is GPT-2's bytes_to_unicode(): printable Latin-1 bytes ('!'..'~',
 * U+00A1..U+00AC, U+00AE..U+00FF) stand for themselves, the other 68 bytes take
 * U+0100.. in byte order. Both directions are tables built once on first use.
 */
#include "utf8.h"

#include <pthread.h>
#include <string.h>

/* Allowed range of the second byte for lead byte b; lo > hi when b cannot lead. */
static void second_range(uint8_t b, uint8_t *lo, uint8_t *hi, size_t *len)
{
    *lo = 0x80;
    *hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) {
        *len = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
        *len = 3;
        if (b == 0xE0)
            *lo = 0xA0;
        else if (b == 0xED)
            *hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
        *len = 4;
        if (b == 0xF0)
            *lo = 0x90;
        else if (b == 0xF4)
            *hi = 0x8F;
    } else {
        *len = 0;
        *lo = 1;
        *hi = 0;
    }
}

/* Number of leading bytes of s[0..n) that fit a valid character's pattern (at most the
 * character's length) and that length in *need; *need is 0 for an ASCII byte or a byte
 * that cannot lead. */
static size_t prefix_fit(const uint8_t *s, size_t n, size_t *need)
{
    uint8_t lo, hi;
    size_t len;
    if (n == 0) {
        *need = 0;
        return 0;
    }
    if (s[0] < 0x80) {
        *need = 1;
        return 1;
    }
    second_range(s[0], &lo, &hi, &len);
    *need = len;
    if (len == 0)
        return 0;
    size_t k = 1;
    if (k < n && s[k] >= lo && s[k] <= hi) {
        k++;
        while (k < len && k < n && (s[k] & 0xC0) == 0x80)
            k++;
    }
    return k;
}

size_t utf8_decode(const char *str, size_t n, uint32_t *cp)
{
    const uint8_t *s = (const uint8_t *)str;
    size_t need;
    size_t k = prefix_fit(s, n, &need);
    if (need == 0 || k < need)
        return 0;
    uint32_t c;
    switch (need) {
    case 1: c = s[0]; break;
    case 2: c = ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F); break;
    case 3: c = ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F); break;
    default:
        c = ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
            ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
        break;
    }
    *cp = c;
    return need;
}

size_t utf8_encode(uint32_t cp, char out[4])
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp >= 0xD800 && cp <= 0xDFFF)
        return 0;
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    if (cp > 0x10FFFF)
        return 0;
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t utf8_valid_prefix(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        if ((uint8_t)s[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        size_t k = utf8_decode(s + i, n - i, &cp);
        if (k == 0)
            return i;
        i += k;
    }
    return n;
}

size_t utf8_invalid_len(const char *s, size_t n)
{
    size_t need;
    size_t k = prefix_fit((const uint8_t *)s, n, &need);
    return k == 0 ? 1 : k;
}

size_t utf8_incomplete_len(const char *s, size_t n)
{
    size_t need;
    size_t k = prefix_fit((const uint8_t *)s, n, &need);
    if (need > 1 && k == n && k < need)
        return need - k;
    return 0;
}

size_t utf8_lossy_copy(const char *s, size_t n, char *out, size_t cap, size_t pos)
{
    static const char repl[3] = {(char)0xEF, (char)0xBF, (char)0xBD};
    size_t i = 0;
    while (i < n) {
        size_t v = utf8_valid_prefix(s + i, n - i);
        if (pos + v <= cap)
            memcpy(out + pos, s + i, v);
        pos += v;
        i += v;
        if (i >= n)
            break;
        i += utf8_invalid_len(s + i, n - i);
        if (pos + 3 <= cap)
            memcpy(out + pos, repl, 3);
        pos += 3;
    }
    return pos;
}

static uint32_t byte_cp[256];
static int16_t cp_byte[324]; /* every cp in the alphabet is < 0x144 */
static pthread_once_t byte_map_once = PTHREAD_ONCE_INIT;

static void byte_map_init(void)
{
    uint32_t next = 256;
    for (int i = 0; i < 324; i++)
        cp_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        byte_cp[b] = printable ? (uint32_t)b : next++;
        cp_byte[byte_cp[b]] = (int16_t)b;
    }
}

uint32_t utf8_byte_to_cp(uint8_t b)
{
    pthread_once(&byte_map_once, byte_map_init);
    return byte_cp[b];
}

int utf8_cp_to_byte(uint32_t cp)
{
    pthread_once(&byte_map_once, byte_map_init);
    return cp < 324 ? cp_byte[cp] : -1;
}
