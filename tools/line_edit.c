/* SPDX-License-Identifier: Apache-2.0 */
/* line_edit.c - line input with a small editor on terminals (see line_edit.h). The line
 * is a byte buffer edited at a byte cursor that moves over whole UTF-8 sequences; every
 * key redraws the line (carriage return, prompt, text, erase to the end, cursor back). */
#include "tools/line_edit.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#include "common/base/status.h"

#define KEY_CTRL(c) ((c) & 0x1f) /* the byte a Ctrl-letter sends */

struct line_edit {
    int in_fd;
    FILE *out;
    bool tty;
    char *buf;                   /* the line, NUL-terminated */
    size_t len, cap, pos;        /* bytes, capacity, cursor (bytes) */
    char *hist[LINE_EDIT_HISTORY + 1]; /* oldest first; the last slot is the line being
                                          edited while walking the history */
    int n_hist, at;              /* entries; the one shown (n_hist: the new line) */
    char rbuf[4096];             /* not a terminal: bytes read ahead */
    size_t r_start, r_end;
};

int line_edit_new(FILE *in, FILE *out, line_edit_t **out_e)
{
    *out_e = NULL;
    line_edit_t *e = calloc(1, sizeof *e);
    if (!e || !(e->buf = malloc(256))) {
        free(e);
        return deras_fail(DERAS_ENOMEM, "out of memory");
    }
    e->cap = 256;
    e->buf[0] = '\0';
    e->in_fd = fileno(in);
    e->out = out;
    e->tty = isatty(e->in_fd) && isatty(fileno(out));
    *out_e = e;
    return DERAS_OK;
}

void line_edit_destroy(line_edit_t **pe)
{
    if (!pe || !*pe)
        return;
    line_edit_t *e = *pe;
    for (int i = 0; i <= LINE_EDIT_HISTORY; i++)
        free(e->hist[i]);
    free(e->buf);
    free(e);
    *pe = NULL;
}

bool line_edit_is_tty(const line_edit_t *e)
{
    return e->tty;
}

void line_edit_remember(line_edit_t *e, const char *line)
{
    if (!*line || (e->n_hist && !strcmp(e->hist[e->n_hist - 1], line)))
        return;
    char *copy = strdup(line);
    if (!copy)
        return; /* a history entry is a convenience: out of memory, it is not kept */
    if (e->n_hist == LINE_EDIT_HISTORY) {
        free(e->hist[0]);
        memmove(e->hist, e->hist + 1, (LINE_EDIT_HISTORY - 1) * sizeof *e->hist);
        e->n_hist--;
    }
    e->hist[e->n_hist++] = copy;
}

static int reserve(line_edit_t *e, size_t more)
{
    if (e->len + more + 1 <= e->cap)
        return DERAS_OK;
    if (e->len + more + 1 > LINE_EDIT_MAX)
        return deras_fail(DERAS_ERANGE, "a line longer than %d bytes", LINE_EDIT_MAX);
    size_t cap = e->cap * 2;
    while (cap < e->len + more + 1)
        cap *= 2;
    char *p = realloc(e->buf, cap);
    if (!p)
        return deras_fail(DERAS_ENOMEM, "out of memory");
    e->buf = p;
    e->cap = cap;
    return DERAS_OK;
}

static int set_line(line_edit_t *e, const char *s)
{
    size_t n = strlen(s);
    e->len = 0;
    int rc = reserve(e, n);
    if (rc)
        return rc;
    memcpy(e->buf, s, n + 1);
    e->len = e->pos = n;
    return DERAS_OK;
}

/* ---- not a terminal: lines split from what read() returns ---- */

static int read_plain(line_edit_t *e, const char **line)
{
    e->len = 0;
    for (;;) {
        char *nl = memchr(e->rbuf + e->r_start, '\n', e->r_end - e->r_start);
        size_t take = nl ? (size_t)(nl - (e->rbuf + e->r_start)) : e->r_end - e->r_start;
        int rc = reserve(e, take);
        if (rc)
            return rc;
        memcpy(e->buf + e->len, e->rbuf + e->r_start, take);
        e->len += take;
        e->buf[e->len] = '\0';
        e->r_start += take + (nl ? 1 : 0);
        if (nl) {
            if (e->len && e->buf[e->len - 1] == '\r')
                e->buf[--e->len] = '\0';
            *line = e->buf;
            return LINE_OK;
        }
        ssize_t n = read(e->in_fd, e->rbuf, sizeof e->rbuf);
        e->r_start = 0;
        e->r_end = n > 0 ? (size_t)n : 0;
        if (n < 0 && errno == EINTR) {
            e->len = 0; /* SIGINT: the partial line is abandoned */
            return LINE_INTERRUPT;
        }
        if (n < 0)
            return deras_fail(DERAS_EIO, "reading input failed");
        if (n == 0) { /* the end: a last line without its newline still counts */
            *line = e->buf;
            return e->len ? LINE_OK : LINE_EOF;
        }
    }
}

/* ---- a terminal ---- */

static size_t cps(const char *s, size_t n) /* code points in s[0..n) */
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += ((unsigned char)s[i] & 0xc0) != 0x80;
    return k;
}

static void redraw(line_edit_t *e, const char *prompt)
{
    fprintf(e->out, "\r%s%s\x1b[K", prompt, e->buf);
    size_t back = cps(e->buf + e->pos, e->len - e->pos);
    if (back)
        fprintf(e->out, "\x1b[%zuD", back);
    fflush(e->out);
}

static size_t prev_cp(const line_edit_t *e, size_t i)
{
    while (i > 0 && ((unsigned char)e->buf[--i] & 0xc0) == 0x80)
        ;
    return i;
}

static size_t next_cp(const line_edit_t *e, size_t i)
{
    if (i < e->len)
        for (i++; i < e->len && ((unsigned char)e->buf[i] & 0xc0) == 0x80; i++)
            ;
    return i;
}

static void erase(line_edit_t *e, size_t from, size_t to) /* bytes [from, to) */
{
    memmove(e->buf + from, e->buf + to, e->len - to + 1);
    e->len -= to - from;
    e->pos = from;
}

/* Walk the history by dir (-1 older, +1 newer), keeping the line being edited. */
static int walk(line_edit_t *e, int dir)
{
    int to = e->at + dir;
    if (to < 0 || to > e->n_hist)
        return DERAS_OK;
    if (e->at == e->n_hist) { /* leaving the new line: keep it in the spare slot */
        free(e->hist[LINE_EDIT_HISTORY]);
        if (!(e->hist[LINE_EDIT_HISTORY] = strdup(e->buf)))
            return deras_fail(DERAS_ENOMEM, "out of memory");
    }
    e->at = to;
    return set_line(e, to == e->n_hist ? e->hist[LINE_EDIT_HISTORY] : e->hist[to]);
}

static int next_byte(line_edit_t *e, unsigned char *c)
{
    for (;;) {
        ssize_t n = read(e->in_fd, c, 1);
        if (n == 1)
            return DERAS_OK;
        if (n == 0)
            return LINE_EOF;
        if (errno != EINTR)
            return deras_fail(DERAS_EIO, "reading the terminal failed");
    }
}

/* An escape sequence after ESC: the key it names ('A'..'D' arrows, 'H' home, 'F' end,
 * '3' delete), or 0. */
static int escape(line_edit_t *e)
{
    unsigned char a, b;
    if (next_byte(e, &a) || (a != '[' && a != 'O') || next_byte(e, &b))
        return 0;
    if (b >= '0' && b <= '9') {
        unsigned char t;
        if (next_byte(e, &t))
            return 0;
        while (t != '~' && t >= '0' && t <= '9' && !next_byte(e, &t)) /* longer numbers */
            ;
        return b == '1' || b == '7' ? 'H' : b == '4' || b == '8' ? 'F' : b == '3' ? '3' : 0;
    }
    return b;
}

static int edit(line_edit_t *e, const char *prompt, const char **line)
{
    e->len = e->pos = 0;
    e->buf[0] = '\0';
    e->at = e->n_hist;
    redraw(e, prompt);
    for (;;) {
        unsigned char c;
        int rc = next_byte(e, &c);
        if (rc == LINE_EOF)
            return e->len ? (*line = e->buf, LINE_OK) : LINE_EOF;
        if (rc)
            return rc;
        switch (c) {
        case '\r':
        case '\n':
            fputs("\r\n", e->out);
            *line = e->buf;
            return LINE_OK;
        case KEY_CTRL('C'):
            fputs("^C\r\n", e->out);
            return LINE_INTERRUPT;
        case KEY_CTRL('D'):
            if (!e->len) {
                fputs("\r\n", e->out);
                return LINE_EOF;
            }
            if (e->pos < e->len)
                erase(e, e->pos, next_cp(e, e->pos));
            break;
        case 0x7f:
        case KEY_CTRL('H'):
            if (e->pos)
                erase(e, prev_cp(e, e->pos), e->pos);
            break;
        case KEY_CTRL('A'): e->pos = 0; break;
        case KEY_CTRL('E'): e->pos = e->len; break;
        case KEY_CTRL('B'): e->pos = prev_cp(e, e->pos); break;
        case KEY_CTRL('F'): e->pos = next_cp(e, e->pos); break;
        case KEY_CTRL('U'): erase(e, 0, e->pos); break;
        case KEY_CTRL('K'): erase(e, e->pos, e->len); break;
        case KEY_CTRL('W'): {
            size_t p = e->pos;
            while (p && e->buf[p - 1] == ' ')
                p--;
            while (p && e->buf[p - 1] != ' ')
                p--;
            erase(e, p, e->pos);
            break;
        }
        case KEY_CTRL('P'):
        case KEY_CTRL('N'):
            if ((rc = walk(e, c == KEY_CTRL('P') ? -1 : 1)))
                return rc;
            break;
        case 0x1b:
            switch (escape(e)) {
            case 'A': rc = walk(e, -1); break;
            case 'B': rc = walk(e, 1); break;
            case 'C': e->pos = next_cp(e, e->pos); break;
            case 'D': e->pos = prev_cp(e, e->pos); break;
            case 'H': e->pos = 0; break;
            case 'F': e->pos = e->len; break;
            case '3':
                if (e->pos < e->len)
                    erase(e, e->pos, next_cp(e, e->pos));
                break;
            default: break;
            }
            if (rc)
                return rc;
            break;
        default:
            if (c < 0x20)
                break; /* other control keys do nothing */
            if ((rc = reserve(e, 1)))
                return rc;
            memmove(e->buf + e->pos + 1, e->buf + e->pos, e->len - e->pos + 1);
            e->buf[e->pos++] = (char)c;
            e->len++;
            break;
        }
        redraw(e, prompt);
    }
}

int line_edit_read(line_edit_t *e, const char *prompt, const char **line)
{
    if (!e->tty)
        return read_plain(e, line);
    struct termios old, raw;
    if (tcgetattr(e->in_fd, &old))
        return deras_fail(DERAS_EIO, "cannot read the terminal's mode");
    raw = old;
    raw.c_iflag &= ~(tcflag_t)(BRKINT | ICRNL | INPCK | ISTRIP | IXON);
    raw.c_lflag &= ~(tcflag_t)(ECHO | ICANON | IEXTEN | ISIG);
    raw.c_cc[VMIN] = 1;
    raw.c_cc[VTIME] = 0;
    if (tcsetattr(e->in_fd, TCSADRAIN, &raw))
        return deras_fail(DERAS_EIO, "cannot set the terminal's mode");
    int rc = edit(e, prompt, line);
    tcsetattr(e->in_fd, TCSADRAIN, &old);
    fflush(e->out);
    return rc;
}
