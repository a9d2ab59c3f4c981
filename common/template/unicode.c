/* SPDX-License-Identifier: Apache-2.0 */
/* unicode.c - see unicode.h.
 *
 * The whitespace, line-break and non-printable sets are Python 3's (Objects/unicodetype_db
 * for the characters with the WS/B/S bidirectional classes or the Zs category; the
 * categories Cc, Cf, Zl, Zp, Zs, Co for printability). Case mapping beyond ASCII goes
 * through a C.UTF-8 locale object made once (newlocale, never the process locale), so
 * rendering does not depend on, or change, the caller's locale.
 */
#include "unicode.h"

#include "common/base/utf8.h"

#include <locale.h>
#include <pthread.h>
#include <wctype.h>

size_t uni_decode(const char *s, size_t n, size_t i, uint32_t *cp)
{
    unsigned char c = (unsigned char)s[i];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t k = utf8_decode(s + i, n - i, cp);
    if (k == 0) { /* not reachable for valid input; one byte, one replacement char */
        *cp = 0xFFFD;
        return 1;
    }
    return k;
}

size_t uni_count(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

size_t uni_offset(const char *s, size_t n, size_t k, bool ascii)
{
    if (ascii)
        return k < n ? k : n;
    size_t i = 0;
    while (k > 0 && i < n) {
        i++;
        while (i < n && ((unsigned char)s[i] & 0xC0) == 0x80)
            i++;
        k--;
    }
    return i;
}

bool uni_isspace(uint32_t cp)
{
    if (cp < 0x80)
        return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20);
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
           cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool uni_islinebreak(uint32_t cp)
{
    return cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C || cp == 0x1D ||
           cp == 0x1E || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
}

/* Ranges of non-printable assigned characters above U+00FF: Cf, Zs, Zl, Zp, Co. */
static const uint32_t nonprint[][2] = {
    {0x0600, 0x0605}, {0x061C, 0x061C}, {0x06DD, 0x06DD}, {0x070F, 0x070F},
    {0x0890, 0x0891}, {0x08E2, 0x08E2}, {0x1680, 0x1680}, {0x180E, 0x180E},
    {0x2000, 0x200F}, {0x2028, 0x202F}, {0x205F, 0x2064}, {0x2066, 0x206F},
    {0x3000, 0x3000}, {0xD800, 0xF8FF}, {0xFEFF, 0xFEFF}, {0xFFF9, 0xFFFB},
    {0xFFFE, 0xFFFF}, {0x110BD, 0x110BD}, {0x110CD, 0x110CD}, {0x13430, 0x1343F},
    {0x1BCA0, 0x1BCA3}, {0x1D173, 0x1D17A}, {0xE0001, 0xE0001}, {0xE0020, 0xE007F},
    {0xF0000, 0x10FFFF},
};

bool uni_isprintable(uint32_t cp)
{
    if (cp < 0x100)
        return (cp >= 0x20 && cp < 0x7F) || (cp > 0xA0 && cp != 0xAD);
    for (size_t i = 0; i < sizeof nonprint / sizeof nonprint[0]; i++)
        if (cp >= nonprint[i][0] && cp <= nonprint[i][1])
            return false;
    return true;
}

static pthread_once_t loc_once = PTHREAD_ONCE_INIT;
static locale_t utf8_loc;

static void loc_init(void)
{
    utf8_loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
}

static locale_t loc(void)
{
    pthread_once(&loc_once, loc_init);
    return utf8_loc;
}

uint32_t uni_upper(uint32_t cp)
{
    if (cp < 0x80)
        return cp >= 'a' && cp <= 'z' ? cp - 32 : cp;
    locale_t l = loc();
    return l ? (uint32_t)towupper_l((wint_t)cp, l) : cp;
}

uint32_t uni_lower(uint32_t cp)
{
    if (cp < 0x80)
        return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
    locale_t l = loc();
    return l ? (uint32_t)towlower_l((wint_t)cp, l) : cp;
}

bool uni_isupper(uint32_t cp)
{
    if (cp < 0x80)
        return cp >= 'A' && cp <= 'Z';
    locale_t l = loc();
    return l && iswupper_l((wint_t)cp, l);
}

bool uni_islower(uint32_t cp)
{
    if (cp < 0x80)
        return cp >= 'a' && cp <= 'z';
    locale_t l = loc();
    return l && iswlower_l((wint_t)cp, l);
}

bool uni_isalpha(uint32_t cp)
{
    if (cp < 0x80)
        return (cp | 32) >= 'a' && (cp | 32) <= 'z';
    locale_t l = loc();
    return l && iswalpha_l((wint_t)cp, l);
}

bool uni_isdigit(uint32_t cp)
{
    if (cp < 0x80)
        return cp >= '0' && cp <= '9';
    locale_t l = loc();
    return l && iswdigit_l((wint_t)cp, l);
}

size_t uni_rspace(const char *s, size_t n)
{
    size_t end = n;
    while (end > 0) {
        size_t start = end - 1;
        while (start > 0 && ((unsigned char)s[start] & 0xC0) == 0x80)
            start--;
        uint32_t cp;
        uni_decode(s, end, start, &cp);
        if (!uni_isspace(cp))
            break;
        end = start;
    }
    return n - end;
}

size_t uni_lspace(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t k = uni_decode(s, n, i, &cp);
        if (!uni_isspace(cp))
            break;
        i += k;
    }
    return i;
}
