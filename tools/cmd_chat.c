/* SPDX-License-Identifier: Apache-2.0 */
/* cmd_chat.c - `deras chat`: an interactive chat with the model behind a deras-router.
 *
 * Each line typed is the user's next message; the whole conversation so far (a system
 * message when one is set, then the turns) goes to the router as a chat request
 * (docs/protocol.md, "Chat": the model's own template renders it), and the answer streams
 * to stdout as it comes. An answer that ends normally joins the conversation; one that
 * fails or is cancelled does not, and neither does the message that asked it, so the
 * conversation stays what the user saw answered.
 *
 *   /reset         forget the conversation (the system message stays)
 *   /system TEXT   set the system message (no TEXT: none); the conversation stays
 *   /quit          leave (also /exit, or the end of input: Ctrl-D)
 *   /help          the commands
 *
 * Ctrl-C while an answer streams cancels it (the router aborts the request and frees its
 * KV) and returns to the prompt; at the prompt it abandons the line. Input comes through
 * line_edit.h: a small line editor with history on a terminal, plain lines from a pipe
 * (then no prompt is drawn). --usage prints each answer's token counts to stderr.
 *
 * Costs: a turn sends the whole conversation (the router renders and tokenizes it again,
 * O(conversation)); the client keeps the conversation as JSON, O(its text).
 *
 * Exit status: 0 at /quit or the end of input, 1 when no router answers at start or the
 * client fails, 2 usage.
 */
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "common/cli/cli_util.h"
#include "tools/client/deras_client.h"
#include "tools/client_flags.h"
#include "tools/commands.h"
#include "tools/line_edit.h"

#define POLL_MS 100           /* receive in slices so Ctrl-C and the timeout are noticed */
#define PING_MS 5000          /* the router must answer a ping at start within this */

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

typedef struct chat {
    client_flags f;
    bool usage;
    char *system;             /* the system message, or NULL */
    json_t *turns;            /* [{"role", "content"}, ...] without the system message */
    deras_client_t *cl;
    char *answer;             /* the answer streaming now */
    size_t len, cap;
} chat;

enum { O_SYSTEM = 256, O_USAGE, O_HELP };
static const struct option own_opts[] = {
    {"system", required_argument, 0, O_SYSTEM},
    {"usage", no_argument, 0, O_USAGE},
    {"help", no_argument, 0, O_HELP},
    {0, 0, 0, 0},
};
/* one answer per turn; the model's template decides its special tokens */
static const char *const excluded[] = {"n", "no-special-tokens", NULL};

static const char commands_help[] =
    "/reset forgets the conversation, /system TEXT sets the system message, /quit leaves;\n"
    "Ctrl-C stops an answer, Ctrl-D quits\n";

static void usage(FILE *f)
{
    fputs("usage: deras chat [options]\n"
          "\n"
          "Chat with the model behind deras-router: each line is your next message, the\n"
          "answer streams as it comes, the conversation is kept.\n"
          "\n"
          "  --system TEXT           the system message to start with\n"
          "  --usage                 print each answer's tokens to stderr\n",
          f);
    client_flags_usage(f, own_opts, excluded);
    fputs("\n", f);
    fputs(commands_help, f);
}

static int parse_args(int argc, char **argv, chat *c)
{
    struct option opts[CLIENT_FLAGS_MAX_OPTIONS];
    client_flags_options(own_opts, excluded, opts);
    client_flags_init(&c->f);
    int o;
    optind = 1;
    while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int r = client_flags_apply(&c->f, o, optarg);
        if (r < 0)
            return 2;
        if (r > 0)
            continue;
        switch (o) {
        case O_SYSTEM:
            free(c->system);
            if (!(c->system = strdup(optarg)))
                return 1;
            break;
        case O_USAGE: c->usage = true; break;
        case 'h':
        case O_HELP: usage(stdout); return -1;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "chat: unexpected argument '%s' (type your messages after it starts)\n",
                argv[optind]);
        return 2;
    }
    return 0;
}

static int append(chat *c, const char *p, size_t n)
{
    if (c->len + n + 1 > c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 1024;
        while (cap < c->len + n + 1)
            cap *= 2;
        char *t = realloc(c->answer, cap);
        if (!t)
            return deras_fail(DERAS_ENOMEM, "out of memory");
        c->answer = t;
        c->cap = cap;
    }
    memcpy(c->answer + c->len, p, n);
    c->len += n;
    c->answer[c->len] = '\0';
    return DERAS_OK;
}

static json_t *message(const char *role, const char *text, size_t n)
{
    json_t *content = json_stringn(text, n); /* NULL when not UTF-8 */
    return content ? json_pack("{s:s, s:o}", "role", role, "content", content) : NULL;
}

/* The conversation as the request's messages: the system message, then the turns. */
static json_t *conversation(const chat *c)
{
    json_t *m = json_array();
    if (!m)
        return NULL;
    if (c->system && json_array_append_new(m, message("system", c->system, strlen(c->system)))) {
        json_decref(m);
        return NULL;
    }
    if (json_array_extend(m, c->turns)) {
        json_decref(m);
        return NULL;
    }
    return m;
}

/* Ask the conversation's next answer and stream it. DERAS_OK when it ended (stop or
 * length) and joined the conversation; 1 when it failed or was cancelled (said on
 * stderr; the turn is dropped); a client failure otherwise. */
static int turn(chat *c)
{
    proto_request r = c->f.req;
    json_t *messages = conversation(c);
    if (!messages)
        return deras_fail(DERAS_ENOMEM, "out of memory");
    r.messages = messages;
    r.stream = true;
    r.id[0] = '\0';
    c->len = 0;
    interrupted = 0;
    int rc = deras_client_send(c->cl, &r, NULL);
    json_decref(messages);
    if (rc)
        return rc;
    bool cancelled = false, error = false;
    finish_reason why = FINISH_ABORT;
    proto_usage u = {0};
    double heard = cli_now();
    for (bool live = true; live;) {
        if (interrupted && !cancelled) {
            cancelled = true;
            if ((rc = deras_client_cancel(c->cl, r.id)))
                return rc;
        }
        deras_event ev;
        rc = deras_client_recv(c->cl, POLL_MS, &ev);
        if (rc == DERAS_ETIMEOUT) {
            if (cli_now() - heard < c->f.timeout_s)
                continue;
            deras_client_forget(c->cl, r.id);
            fprintf(stderr, "\n[no answer from %s for %.3g s]\n", c->f.address, c->f.timeout_s);
            return 1;
        }
        if (rc)
            return rc;
        if (!ev.known)
            continue;
        heard = cli_now();
        const proto_server_msg *m = &ev.msg;
        if (m->type == PROTO_ERROR) {
            fprintf(stderr, "%s[error %s: %s]\n", c->len ? "\n" : "", proto_error_name(m->code),
                    m->message);
            if (m->code == PE_CONTEXT_LENGTH_EXCEEDED)
                fprintf(stderr, "[the conversation is too long for the model: /reset starts "
                                "a new one]\n");
            error = true;
        } else if (m->type == PROTO_CHUNK || (m->type == PROTO_FINAL && m->text)) {
            fwrite(m->text, 1, m->text_len, stdout);
            fflush(stdout);
            if ((rc = append(c, m->text, m->text_len)))
                return rc;
        }
        if (m->type == PROTO_FINAL) {
            why = m->finish;
            u = m->usage;
        }
        live = !ev.done;
    }
    if (c->len && c->answer[c->len - 1] != '\n')
        fputc('\n', stdout);
    fflush(stdout);
    if (error)
        return 1;
    if (cancelled || why == FINISH_ABORT || why == FINISH_ERROR) {
        fprintf(stderr, "[%s: this turn is not kept]\n",
                cancelled ? "cancelled" : finish_reason_name(why));
        return 1;
    }
    if (c->usage)
        fprintf(stderr, "[prompt %d tokens, answer %d tokens, %s]\n", u.prompt_tokens,
                u.completion_tokens, finish_reason_name(why));
    json_t *a = message("assistant", c->answer ? c->answer : "", c->len);
    if (!a || json_array_append_new(c->turns, a)) { /* a reply that is not UTF-8 */
        fprintf(stderr, "[the answer is not UTF-8: this turn is not kept]\n");
        return 1;
    }
    return DERAS_OK;
}

/* A /command: 1 to leave, 0 to go on. */
static int command(chat *c, const char *line)
{
    if (!strcmp(line, "/quit") || !strcmp(line, "/exit"))
        return 1;
    if (!strcmp(line, "/reset")) {
        json_array_clear(c->turns);
        fprintf(stderr, "[the conversation is forgotten%s]\n",
                c->system ? "; the system message stays" : "");
    } else if (!strcmp(line, "/system") || !strncmp(line, "/system ", 8)) {
        const char *text = line[7] ? line + 8 : "";
        free(c->system);
        c->system = *text ? strdup(text) : NULL;
        if (*text && !c->system)
            fprintf(stderr, "[out of memory: no system message]\n");
        else if (*text)
            fprintf(stderr, "[system message: %s]\n", text);
        else
            fprintf(stderr, "[no system message]\n");
    } else if (!strcmp(line, "/help")) {
        fputs(commands_help, stderr);
    } else {
        fprintf(stderr, "[unknown command %.40s]\n%s", line, commands_help);
    }
    return 0;
}

static int run(chat *c, line_edit_t *le)
{
    for (;;) {
        const char *line;
        interrupted = 0;
        int rc = line_edit_read(le, "> ", &line);
        if (rc == LINE_EOF)
            return DERAS_OK;
        if (rc == LINE_INTERRUPT)
            continue;
        if (rc)
            return rc;
        if (!*line)
            continue;
        line_edit_remember(le, line);
        if (line[0] == '/') {
            if (command(c, line))
                return DERAS_OK;
            continue;
        }
        json_t *m = message("user", line, strlen(line));
        if (!m) {
            fprintf(stderr, "[the message is not UTF-8]\n");
            continue;
        }
        json_array_append_new(c->turns, m);
        rc = turn(c);
        if (rc == 1) /* failed or cancelled: the question goes with it */
            json_array_remove(c->turns, json_array_size(c->turns) - 1);
        else if (rc)
            return rc;
    }
}

int cmd_chat(int argc, char **argv)
{
    chat c = {0};
    line_edit_t *le = NULL;
    int rc = parse_args(argc, argv, &c), status = 1;
    if (rc) {
        free(c.system);
        return rc < 0 ? 0 : rc;
    }
    /* SIGINT interrupts waits (no SA_RESTART): a line being read, an answer streaming */
    struct sigaction sa = {.sa_handler = on_sigint}, old;
    sigemptyset(&sa.sa_mask);
    if (!(c.turns = json_array()) || (rc = line_edit_new(stdin, stdout, &le)) ||
        (rc = client_flags_connect(&c.f, 4, &c.cl)))
        goto out;
    proto_server_msg pong;
    if ((rc = deras_client_ping(c.cl, PING_MS, &pong))) {
        fprintf(stderr, "deras chat: no deras-router answers at %s (%s)\n", c.f.address,
                deras_errmsg());
        rc = DERAS_OK;
        goto out;
    }
    if (line_edit_is_tty(le))
        fprintf(stderr, "deras chat with %s (%d worker%s). %s", c.f.address, pong.n_workers,
                pong.n_workers == 1 ? "" : "s", commands_help);
    sigaction(SIGINT, &sa, &old);
    rc = run(&c, le);
    sigaction(SIGINT, &old, NULL);
    if (!rc)
        status = 0;
out:
    if (rc)
        fprintf(stderr, "deras chat: %s (%s)\n", deras_errmsg(), deras_status_name(rc));
    deras_client_destroy(&c.cl);
    line_edit_destroy(&le);
    json_decref(c.turns);
    free(c.system);
    free(c.answer);
    return status;
}
