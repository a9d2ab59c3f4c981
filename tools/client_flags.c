/* client_flags.c - flags shared by the router clients (see client_flags.h). */
#include "tools/client_flags.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "common/cli/cli_util.h"

enum {
    F_ADDRESS = 1000, F_CURVE, F_CURVE_KEY, F_TIMEOUT, F_MAXTOK, F_N, F_TEMP, F_TOPK, F_TOPP, F_MINP, F_REP,
    F_PRES, F_FREQ, F_SEED, F_STOP, F_STOPID, F_IGNEOS, F_NOSPECIAL, F_DEADLINE, F_SPEC
};

static const struct option shared[] = {
    {"address", required_argument, 0, F_ADDRESS},
    {"curve-server-key", required_argument, 0, F_CURVE},
    {"curve-client-key", required_argument, 0, F_CURVE_KEY},
    {"timeout", required_argument, 0, F_TIMEOUT},
    {"max-tokens", required_argument, 0, F_MAXTOK},
    {"n", required_argument, 0, F_N},
    {"temperature", required_argument, 0, F_TEMP},
    {"top-k", required_argument, 0, F_TOPK},
    {"top-p", required_argument, 0, F_TOPP},
    {"min-p", required_argument, 0, F_MINP},
    {"repetition-penalty", required_argument, 0, F_REP},
    {"presence-penalty", required_argument, 0, F_PRES},
    {"frequency-penalty", required_argument, 0, F_FREQ},
    {"seed", required_argument, 0, F_SEED},
    {"stop", required_argument, 0, F_STOP},
    {"stop-token-id", required_argument, 0, F_STOPID},
    {"ignore-eos", no_argument, 0, F_IGNEOS},
    {"no-special-tokens", no_argument, 0, F_NOSPECIAL},
    {"deadline-ms", required_argument, 0, F_DEADLINE},
    {"num-speculative-tokens", required_argument, 0, F_SPEC},
    {0, 0, 0, 0},
};

/* Help of shared[i], same order; continuation lines start with the padding. */
static const char *const help[] = {
    "router endpoint (default $DERAS_ADDRESS or\n"
    "                          " DERAS_CLIENT_DEFAULT_ADDRESS ")",
    "router's CURVE public key, 40 Z85 characters\n"
    "                          (default $DERAS_CURVE_SERVER_KEY; unset: no encryption)",
    "file with this client's CURVE secret key, the one the\n"
    "                          router allows (default $DERAS_CURVE_CLIENT_KEY)",
    "longest wait for the router, seconds (default 120)",
    "tokens to generate (default: the router's, 256)",
    "samples per request (default 1)",
    "0 = greedy (default: the router's, 1)",
    "top-k sampling, 0 = off",
    "nucleus sampling (default 1)",
    "min-p sampling (default 0)",
    "repetition penalty (default 1)",
    "presence penalty (default 0)",
    "frequency penalty (default 0)",
    "sampling seed (same seed and inputs: same output)",
    "stop string, repeatable (at most 16)",
    "stop token, repeatable (at most 16)",
    "do not stop at the model's end-of-generation tokens",
    "tokenize the prompt without BOS/special tokens",
    "the router ends the request after MS milliseconds",
    "speculative drafts per step at most, 0 = no\n"
    "                          speculation (default: the worker's)",
};
static const char *const arg_names[] = {
    "A", "K", "FILE", "S", "N", "N", "T", "K", "P", "P", "R", "P", "F", "N", "TEXT", "ID", "", "", "MS", "K",
};

static bool listed(const char *name, const struct option *own, const char *const *exclude)
{
    for (int j = 0; own && own[j].name; j++)
        if (!strcmp(own[j].name, name))
            return true;
    for (int j = 0; exclude && exclude[j]; j++)
        if (!strcmp(exclude[j], name))
            return true;
    return false;
}

void client_flags_usage(FILE *f, const struct option *own, const char *const *exclude)
{
    for (int i = 0; shared[i].name; i++) {
        if (listed(shared[i].name, own, exclude))
            continue;
        char opt[64];
        snprintf(opt, sizeof opt, "--%s%s%s", shared[i].name, *arg_names[i] ? " " : "",
                 arg_names[i]);
        fprintf(f, "  %-23s %s\n", opt, help[i]);
    }
}

void client_flags_init(client_flags *f)
{
    memset(f, 0, sizeof *f);
    const char *a = getenv("DERAS_ADDRESS"), *k = getenv("DERAS_CURVE_SERVER_KEY"),
               *kf = getenv("DERAS_CURVE_CLIENT_KEY");
    f->address = a && *a ? a : DERAS_CLIENT_DEFAULT_ADDRESS;
    f->curve_server_key = k && *k ? k : NULL;
    f->curve_key_file = kf && *kf ? kf : NULL;
    f->timeout_s = 120;
    deras_client_request_init(&f->req);
}

void client_flags_options(const struct option *own, const char *const *exclude,
                          struct option *out)
{
    int n = 0;
    for (; own[n].name && n < CLIENT_FLAGS_MAX_OPTIONS - 1; n++)
        out[n] = own[n];
    for (int i = 0; shared[i].name && n < CLIENT_FLAGS_MAX_OPTIONS - 1; i++)
        if (!listed(shared[i].name, own, exclude))
            out[n++] = shared[i];
    out[n] = (struct option){0, 0, 0, 0};
}

static int set_float(const char *opt, const char *arg, double lo, double hi, float *out)
{
    double d;
    if (cli_float(opt, arg, lo, hi, &d))
        return -1;
    *out = (float)d;
    return 1;
}

static int set_int(const char *opt, const char *arg, long lo, long hi, int *out)
{
    long l;
    if (cli_int(opt, arg, lo, hi, &l))
        return -1;
    *out = (int)l;
    return 1;
}

int client_flags_apply(client_flags *f, int c, const char *arg)
{
    proto_request *r = &f->req;
    long l;
    switch (c) {
    case F_ADDRESS: f->address = arg; return 1;
    case F_CURVE:
        if (strlen(arg) != 40) {
            fprintf(stderr, "--curve-server-key: expected 40 Z85 characters, got %zu\n",
                    strlen(arg));
            return -1;
        }
        f->curve_server_key = arg;
        return 1;
    case F_CURVE_KEY: f->curve_key_file = arg; return 1;
    case F_TIMEOUT:
        if (cli_float("--timeout", arg, 0.001, 1e6, &f->timeout_s))
            return -1;
        return 1;
    case F_MAXTOK: return set_int("--max-tokens", arg, 1, 1 << 20, &r->max_tokens);
    case F_N: return set_int("--n", arg, 1, PROTO_MAX_N, &r->n);
    case F_TEMP: return set_float("--temperature", arg, 0, 100, &r->temperature);
    case F_TOPK: return set_int("--top-k", arg, 0, 1 << 24, &r->top_k);
    case F_TOPP: return set_float("--top-p", arg, 1e-9, 1, &r->top_p);
    case F_MINP: return set_float("--min-p", arg, 0, 1, &r->min_p);
    case F_REP: return set_float("--repetition-penalty", arg, 1e-9, 10, &r->repetition_penalty);
    case F_PRES: return set_float("--presence-penalty", arg, -2, 2, &r->presence_penalty);
    case F_FREQ: return set_float("--frequency-penalty", arg, -2, 2, &r->frequency_penalty);
    case F_SEED:
        if (cli_u64("--seed", arg, &r->seed))
            return -1;
        r->has_seed = true;
        return 1;
    case F_STOP:
        if (r->n_stops == PROTO_MAX_STOPS || !*arg || strlen(arg) > PROTO_MAX_STOP_BYTES) {
            fprintf(stderr, "--stop: at most %d non-empty stop strings of at most %d bytes\n",
                    PROTO_MAX_STOPS, PROTO_MAX_STOP_BYTES);
            return -1;
        }
        r->stops[r->n_stops] = arg;
        r->stop_lens[r->n_stops++] = strlen(arg);
        return 1;
    case F_STOPID:
        if (r->n_stop_ids == PROTO_MAX_STOP_IDS) {
            fprintf(stderr, "--stop-token-id: at most %d\n", PROTO_MAX_STOP_IDS);
            return -1;
        }
        if (cli_int("--stop-token-id", arg, 0, INT32_MAX, &l))
            return -1;
        r->stop_ids[r->n_stop_ids++] = (int32_t)l;
        return 1;
    case F_IGNEOS: r->ignore_eos = true; return 1;
    case F_NOSPECIAL: r->add_special_tokens = false; return 1;
    case F_DEADLINE:
        if (cli_int("--deadline-ms", arg, 1, 24L * 3600 * 1000, &l))
            return -1;
        r->deadline_ms = l;
        return 1;
    case F_SPEC: /* the wire's 0 (no speculation) is the request's -1 */
        if (cli_int("--num-speculative-tokens", arg, 0, PROTO_MAX_SPEC_TOKENS, &l))
            return -1;
        r->num_speculative_tokens = l == 0 ? -1 : (int)l;
        return 1;
    default: return 0;
    }
}

int client_flags_connect(const client_flags *f, int max_in_flight, deras_client **out)
{
    char secret[41];
    int rc;
    *out = NULL;
    if (f->curve_key_file) {
        if (!f->curve_server_key)
            return deras_fail(DERAS_EINVAL, "--curve-client-key needs --curve-server-key");
        if ((rc = cli_read_secret_key(f->curve_key_file, secret)))
            return rc;
    }
    *out = deras_client_new(&(deras_client_opts){
        .address = f->address, .curve_server_key = f->curve_server_key,
        .curve_secret_key = f->curve_key_file ? secret : NULL, .max_in_flight = max_in_flight});
    return *out ? DERAS_OK : DERAS_EINVAL;
}
