/* SPDX-License-Identifier: Apache-2.0 */
/* bench_model.c - single-stream prefill and decode speed of a model on this machine,
 * against the machine's own limits measured in the same run.
 *
 *   bench_model [--model PATH] [--threads N] [--prompt-lens 16,128,512]
 *               [--decode-tokens 128] [--repeat 3] [--matmul-mode exact|q8]
 *               [--device cuda:0 --bandwidth GBPS --flops TFLOPS] [--kv-dtype f16]
 *
 * Prefill: a prompt of L random (fixed-seed) token ids in one forward pass, logits for the
 * last position; tokens/s = L / time. Decode: after a 128-token prompt, one token per
 * forward pass with greedy argmax, tokens/s = tokens / time. Each figure is the median
 * over --repeat runs after one warm-up.
 *
 * Hardware floor, measured here too: read bandwidth (summing a 1 GiB array) gives the
 * fastest decode possible when every weight byte is read once per token
 * (weight_bytes / bandwidth); the OpenBLAS sgemm rate on a large square product gives the
 * fastest prefill (2 x matmul params FLOPs per token / rate). On another device (--device,
 * any backend_new spec) the caller gives that device's measured ceilings instead
 * (tools/gpu_check passes the copy bandwidth, read + write, and the cuBLAS bf16 rate that
 * bench_cuda_kernels measured in the same run); the weight bytes are then the device's
 * (bf16: 2 per parameter). Decode timing includes the logits' download and the host
 * argmax, as the engine's step does. --kv-dtype: the KV cache's element type, as
 * deras-worker's (default: the device's). Results are JSON lines on stdout, progress on
 * stderr.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/dtype.h"
#include "common/base/status.h"
#include "bench/bench_floor.h"
#include "common/cli/cli_util.h"
#include "engine/loader.h"
#include "kernels/backend.h"

#define MAX_LENS 8

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int parse_lens(const char *s, int *lens, int *n)
{
    *n = 0;
    char *copy = strdup(s), *save = NULL;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        long v;
        if (*n == MAX_LENS || cli_int("--prompt-lens", t, 1, 1 << 16, &v)) {
            free(copy);
            return -1;
        }
        lens[(*n)++] = (int)v;
    }
    free(copy);
    return *n ? 0 : -1;
}

int main(int argc, char **argv)
{
    char model_path[4096];
    cli_default_model(model_path, sizeof model_path);
    int threads = 0, lens[MAX_LENS] = {16, 128, 512}, n_lens = 3, decode_tokens = 128, repeat = 3;
    int mm_mode = BACKEND_MM_EXACT;
    const char *device = "cpu", *kv_dtype = NULL;
    double given_bw = 0, given_flops = 0;
    for (int i = 1; i < argc; i += 2) {
        long v;
        const char *arg = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!val) {
            fprintf(stderr, "usage: bench_model [--model PATH] [--threads N] "
                            "[--prompt-lens a,b,c] [--decode-tokens N] [--repeat N] "
                            "[--matmul-mode exact|q8] "
                            "[--device SPEC --bandwidth GBPS --flops TFLOPS] [--kv-dtype T]\n");
            return 2;
        }
        if (!strcmp(arg, "--model"))
            snprintf(model_path, sizeof model_path, "%s", val);
        else if (!strcmp(arg, "--threads") && !cli_int(arg, val, 0, 1024, &v))
            threads = (int)v;
        else if (!strcmp(arg, "--prompt-lens") && !parse_lens(val, lens, &n_lens))
            ;
        else if (!strcmp(arg, "--decode-tokens") && !cli_int(arg, val, 1, 1 << 16, &v))
            decode_tokens = (int)v;
        else if (!strcmp(arg, "--repeat") && !cli_int(arg, val, 1, 100, &v))
            repeat = (int)v;
        else if (!strcmp(arg, "--matmul-mode") && !backend_mm_mode_parse(val, &mm_mode))
            ;
        else if (!strcmp(arg, "--device"))
            device = val;
        else if (!strcmp(arg, "--kv-dtype"))
            kv_dtype = val;
        else if (!strcmp(arg, "--bandwidth") && (given_bw = atof(val)) > 0)
            given_bw *= 1e9;
        else if (!strcmp(arg, "--flops") && (given_flops = atof(val)) > 0)
            given_flops *= 1e12;
        else {
            fprintf(stderr, "bench_model: bad option %s %s\n", arg, val);
            return 2;
        }
    }

    const bool on_cpu = !strcmp(device, "cpu");
    if (!on_cpu && (given_bw <= 0 || given_flops <= 0)) {
        fprintf(stderr, "bench_model: --device %s needs the device's --bandwidth and --flops\n",
                device);
        return 2;
    }
    int max_len = 128;
    for (int i = 0; i < n_lens; i++)
        max_len = lens[i] > max_len ? lens[i] : max_len;
    int ctx_cap = max_len > 128 + decode_tokens ? max_len : 128 + decode_tokens;
    int progress_last = -100;
    loader_opts lo = {.model = model_path, .device = device, .threads = threads,
                      .kv_dtype = kv_dtype, .matmul_mode = mm_mode, .max_seqs = 1,
                      .max_batch_tokens = max_len, .model_only = true, .progress = cli_progress,
                      .progress_ctx = &progress_last};
    loader_t *l = NULL;
    int rc;
    if ((rc = loader_open(&lo, &l)) || (rc = loader_size_seqs(l, 1, ctx_cap)) ||
        (rc = loader_build_model(l))) {
        fprintf(stderr, "bench_model: %s\n", deras_errmsg());
        loader_destroy(&l);
        return 1;
    }
    model_t *m = loader_model(l);
    const model_config *c = loader_config(l);
    const int n_blocks = loader_model_opts(l)->max_blocks_per_seq;
    int32_t *ids = malloc((size_t)ctx_cap * sizeof(int32_t)), *table = malloc(n_blocks * sizeof(int32_t));
    float *logits = malloc((size_t)c->vocab_size * sizeof(float));
    double *times = malloc((size_t)(repeat + 1) * sizeof(double));
    uint64_t seed = 12345;
    for (int i = 0; i < ctx_cap; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int32_t)((seed >> 33) % (uint64_t)c->vocab_size);
    }
    for (int i = 0; i < n_blocks; i++)
        table[i] = i;

    if (on_cpu)
        fprintf(stderr, "measuring memory bandwidth and sgemm rate...\n");
    double bw = on_cpu ? bench_read_bandwidth(0) : given_bw, flops = on_cpu ? bench_sgemm_rate() : given_flops;
    uint64_t wbytes = model_weight_bytes(m);
    /* matrix parameters per token: every linear layer plus the LM head for one row */
    double mm_params = (double)c->n_layers *
                           ((double)c->d_model * (c->n_heads + 2 * c->n_kv_heads) * c->head_dim +
                            (double)c->n_heads * c->head_dim * c->d_model +
                            3.0 * c->d_model * c->d_ff);
    printf("{\"bench\":\"machine\",\"device\":\"%s\",\"threads\":%d,\"matmul_mode\":\"%s\","
           "\"read_bandwidth_GBps\":%.2f,\"sgemm_GFLOPs\":%.2f,\"weight_bytes\":%llu,"
           "\"matmul_params\":%.0f,\"kv_dtype\":\"%s\"}\n", device, threads,
           backend_mm_mode_name(mm_mode), bw / 1e9, flops / 1e9, (unsigned long long)wbytes,
           mm_params, dtype_name(loader_kv_dtype(l)));
    fflush(stdout);

    for (int li = 0; li < n_lens; li++) {
        int L = lens[li];
        for (int r = 0; r <= repeat; r++) {
            int32_t q_start[2] = {0, L}, ctx = L, last = L - 1;
            model_batch bt = {L, ids, 1, q_start, &ctx, table, 1, &last, 0, NULL};
            double t0 = cli_now();
            if ((rc = model_forward(m, &bt, logits)))
                goto fail;
            times[r] = cli_now() - t0; /* times[0] is the warm-up, dropped below */
        }
        double t = median(times + 1, repeat);
        double floor_s = 2.0 * mm_params * L / flops;
        printf("{\"bench\":\"prefill\",\"prompt_tokens\":%d,\"seconds\":%.4f,\"tokens_per_s\":%.1f,"
               "\"floor_tokens_per_s\":%.1f,\"fraction_of_floor\":%.3f}\n",
               L, t, L / t, L / floor_s, floor_s / t);
        fflush(stdout);
        fprintf(stderr, "prefill %d tokens: %.1f tok/s\n", L, L / t);
    }

    const int P = 128;
    for (int r = 0; r <= repeat; r++) {
        int32_t q_start[2] = {0, P}, ctx = P, last = P - 1;
        model_batch bt = {P, ids, 1, q_start, &ctx, table, 1, &last, 0, NULL};
        if ((rc = model_forward(m, &bt, logits)))
            goto fail;
        double t0 = cli_now();
        for (int i = 0; i < decode_tokens; i++) {
            int32_t best = 0;
            for (int v = 1; v < c->vocab_size; v++)
                best = logits[v] > logits[best] ? v : best;
            ids[P + i] = best;
            int32_t one[2] = {0, 1}, zero = 0;
            ctx = P + i + 1;
            model_batch d = {1, &ids[P + i], 1, one, &ctx, table, 1, &zero, 0, NULL};
            if ((rc = model_forward(m, &d, logits)))
                goto fail;
        }
        times[r] = cli_now() - t0;
    }
    double t = median(times + 1, repeat);
    double floor_tps = bw / (double)wbytes;
    printf("{\"bench\":\"decode\",\"context_start\":%d,\"tokens\":%d,\"seconds\":%.4f,"
           "\"tokens_per_s\":%.2f,\"floor_tokens_per_s\":%.2f,\"fraction_of_floor\":%.3f}\n",
           P, decode_tokens, t, decode_tokens / t, floor_tps, decode_tokens / t / floor_tps);
    fprintf(stderr, "decode: %.2f tok/s (floor %.2f)\n", decode_tokens / t, floor_tps);
    rc = 0;
fail:
    if (rc)
        fprintf(stderr, "bench_model: %s\n", deras_errmsg());
    free(ids), free(table), free(logits), free(times);
    loader_destroy(&l);
    return rc ? 1 : 0;
}
