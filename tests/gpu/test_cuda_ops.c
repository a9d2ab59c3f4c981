/* SPDX-License-Identifier: Apache-2.0 */
/* test_cuda_ops.c - the CUDA backend's memory and layer ops against the CPU backend.
 *
 * Each op runs on both backends on the same bf16/fp16-rounded random inputs (fresh seed
 * per shape, never zeros), with the GPU's output poisoned first, for both element types
 * and for shapes that take the 16-byte vector paths and shapes that do not (row lengths
 * not a multiple of 8). Tolerances, in the element type's relative step u (gpu_test.h):
 *   copies (embed, gather, KV writes, block copies, transfers)  exact
 *   rmsnorm, silu_mul       1 u of the reference: one output rounding (half a step) plus
 *                           f32 differences (reduction order, expf) far below the other half
 *   add_rmsnorm             2 u: the residual is rounded before the norm reads it (the
 *                           layer after reads the same rounded residual), adding half a step
 *   rope                    1 u of |x1| + |x2|: the result may cancel, so the bound is on the
 *                           inputs' scale
 *   rope_table (f32)        2e-6 absolute: both sides take cos/sin of the same f32 angle
 *   matmul                  2 u of the largest output, and 1 u relative L2: f32 accumulation
 *                           in another order, then one rounding
 * Every bound also allows tol_u steps of the type's smallest subnormal (fp16: 2^-24, about
 * 6e-8): below fp16's smallest normal (6.1e-5) the spacing is absolute, so a reference of
 * 4.4655e-6 is stored as 75 x 2^-24 = 4.4703e-6, a relative error of 1e-3 (seen on the
 * first H100 run). bf16 shares f32's exponent range: its term is 2^-133, nil in practice.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/base/dtype.h"
#include "common/checkpoint/model_config.h"
#include "gpu_test.h"

static backend_t *cpu;

static void expect_within(const char *what, int dt, const float *got, const float *want,
                          const float *scale, size_t n, double tol_u)
{
    const double u = gpu_ulp_rel(dt);
    for (size_t i = 0; i < n; i++) {
        double s = scale ? scale[i] : fabs(want[i]);
        double tol = tol_u * (u * s + gpu_subnormal_step(dt)) + 1e-30;
        if (!(fabs((double)got[i] - want[i]) <= tol))
            fail_msg("%s (%s): element %zu: got %.8g, expected %.8g (tolerance %.3g)", what,
                     gpu_dtype_name(dt), i, got[i], want[i], tol);
    }
}

static void expect_equal(const char *what, int dt, const float *got, const float *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!(got[i] == want[i]))
            fail_msg("%s (%s): element %zu: got %.8g, expected exactly %.8g", what,
                     gpu_dtype_name(dt), i, got[i], want[i]);
}

static backend_t *open_gpu(int dt)
{
    backend_t *g = NULL;
    GPU_OK(backend_new(gpu_spec(dt), 0, &g));
    assert_int_equal(backend_elem_size(g), 2);
    assert_true(backend_is_cuda(g));
    return g;
}

static void transfers_round_trip_and_new_buffers_are_zero(void **state)
{
    for (int dt = 0; dt < 2; dt++) {
        backend_t *g = open_gpu(dt);
        uint64_t seed = 100 + dt;
        /* 9 M elements: three chunks of the 8 MiB staging buffer, the last one partial */
        const size_t n = 9u << 20;
        float *x = gpu_random(dt, n, &seed, 50.0f), *y = malloc(n * sizeof(float));
        void *buf;
        GPU_OK(backend_alloc(g, n * 2, &buf));
        GPU_OK(backend_download_f32(g, y, buf, n));
        for (size_t i = 0; i < n; i++)
            if (y[i] != 0.0f)
                fail_msg("new buffer (%s): element %zu is %g, expected 0", gpu_dtype_name(dt), i,
                         y[i]);
        GPU_OK(backend_upload_f32(g, buf, x, n));
        GPU_OK(backend_download_f32(g, y, buf, n));
        expect_equal("upload_f32/download_f32 round trip", dt, y, x, n);
        backend_free(g, buf);
        free(x);
        free(y);
        backend_destroy(&g);
    }
}

static void matmul_matches_cpu_with_and_without_bias(void **state)
{
    const int shapes[][3] = {{1, 576, 576}, {1, 1000, 96}, {7, 130, 64},   {64, 1536, 576},
                             {256, 512, 1024}, {33, 77, 200}, {5, 49152, 64}};
    for (int dt = 0; dt < 2; dt++) {
        backend_t *g = open_gpu(dt);
        uint64_t seed = 200 + dt;
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const int n = shapes[si][0], no = shapes[si][1], ni = shapes[si][2];
            for (int with_bias = 0; with_bias < 2; with_bias++) {
                float *xh = gpu_random(dt, (size_t)n * ni, &seed, 1.0f);
                float *wh = gpu_random(dt, (size_t)no * ni, &seed, 1.0f / sqrtf((float)ni));
                float *bh = gpu_random(dt, (size_t)no, &seed, 1.0f);
                dual x = dual_new(cpu, g, xh, (size_t)n * ni), w = dual_new(cpu, g, wh, (size_t)no * ni);
                dual bias = dual_new(cpu, g, bh, (size_t)no), y = dual_new(cpu, g, NULL, (size_t)n * no);
                gpu_poison(g, y.g, y.n * 2);
                const backend_weight wc = {.dtype = DT_F32, .rows = no, .cols = ni, .data = w.c};
                const backend_weight wg = {.dtype = backend_weight_dtype(g, DT_F32), .rows = no,
                                           .cols = ni, .data = w.g};
                GPU_OK(backend_matmul(cpu, y.c, x.c, &wc, with_bias ? bias.c : NULL, n));
                GPU_OK(backend_matmul(g, y.g, x.g, &wg, with_bias ? bias.g : NULL, n));
                float *want, *got;
                dual_read(cpu, g, &y, &want, &got);
                float mx = 0;
                for (size_t i = 0; i < y.n; i++)
                    mx = fmaxf(mx, fabsf(want[i]));
                float *scale = malloc(y.n * sizeof(float));
                for (size_t i = 0; i < y.n; i++)
                    scale[i] = mx;
                char what[96];
                snprintf(what, sizeof what, "matmul %dx%dx%d bias %d", n, no, ni, with_bias);
                expect_within(what, dt, got, want, scale, y.n, 2.0);
                double rel = test_rel_l2(got, want, y.n);
                if (!(rel <= gpu_ulp_rel(dt)))
                    fail_msg("%s (%s): relative L2 error %.3g, expected <= %.3g", what,
                             gpu_dtype_name(dt), rel, gpu_ulp_rel(dt));
                free(scale);
                free(want);
                free(got);
                free(xh);
                free(wh);
                free(bh);
                dual_free(cpu, g, &x);
                dual_free(cpu, g, &w);
                dual_free(cpu, g, &bias);
                dual_free(cpu, g, &y);
            }
        }
        backend_destroy(&g);
    }
}

static void embed_and_gather_copy_rows_exactly(void **state)
{
    const int shapes[][3] = {{1, 576, 49152}, {300, 4096, 1000}, {17, 100, 50}}; /* n, d, vocab */
    for (int dt = 0; dt < 2; dt++) {
        backend_t *g = open_gpu(dt);
        uint64_t seed = 300 + dt;
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const int n = shapes[si][0], d = shapes[si][1], vocab = shapes[si][2];
            float *th = gpu_random(dt, (size_t)vocab * d, &seed, 1.0f);
            int32_t *ids = malloc((size_t)n * 4);
            for (int i = 0; i < n; i++)
                ids[i] = (int32_t)(test_rng_next(&seed) % (uint64_t)vocab);
            ids[0] = vocab - 1;
            dual t = dual_new(cpu, g, th, (size_t)vocab * d), id = dual_i32(cpu, g, ids, (size_t)n);
            dual out = dual_new(cpu, g, NULL, (size_t)n * d);
            gpu_poison(g, out.g, out.n * 2);
            const backend_weight tc = {.dtype = DT_F32, .rows = vocab, .cols = d, .data = t.c};
            const backend_weight tg = {.dtype = backend_weight_dtype(g, DT_F32), .rows = vocab,
                                       .cols = d, .data = t.g};
            GPU_OK(backend_embed(cpu, out.c, &tc, id.c, n));
            GPU_OK(backend_embed(g, out.g, &tg, id.g, n));
            float *want, *got;
            dual_read(cpu, g, &out, &want, &got);
            expect_equal("embed", dt, got, want, out.n);
            free(want);
            free(got);
            /* gather rows of the embedded output back, ids taken mod n */
            for (int i = 0; i < n; i++)
                ids[i] = (int32_t)(test_rng_next(&seed) % (uint64_t)n);
            dual rows = dual_i32(cpu, g, ids, (size_t)n), gath = dual_new(cpu, g, NULL, (size_t)n * d);
            gpu_poison(g, gath.g, gath.n * 2);
            GPU_OK(backend_gather_rows(cpu, gath.c, out.c, rows.c, n, d));
            GPU_OK(backend_gather_rows(g, gath.g, out.g, rows.g, n, d));
            dual_read(cpu, g, &gath, &want, &got);
            expect_equal("gather_rows", dt, got, want, gath.n);
            free(want);
            free(got);
            free(th);
            free(ids);
            dual_free(cpu, g, &t);
            dual_free(cpu, g, &id);
            dual_free(cpu, g, &out);
            dual_free(cpu, g, &rows);
            dual_free(cpu, g, &gath);
        }
        backend_destroy(&g);
    }
}

static void embed_token_outside_vocab_fails_at_sync_with_erange(void **state)
{
    backend_t *g = open_gpu(CUDA_DTYPE_BF16);
    const int n = 4, d = 64, vocab = 10;
    const int32_t ids[4] = {1, 2, 10, 3};
    void *table, *out, *id;
    GPU_OK(backend_alloc(g, (size_t)vocab * d * 2, &table));
    GPU_OK(backend_alloc(g, (size_t)n * d * 2, &out));
    GPU_OK(backend_alloc(g, sizeof ids, &id));
    GPU_OK(backend_upload(g, id, ids, sizeof ids));
    const backend_weight t = {.dtype = backend_weight_dtype(g, DT_F32), .rows = vocab, .cols = d,
                              .data = table};
    GPU_OK(backend_embed(g, out, &t, id, n));
    int rc = backend_sync(g);
    if (rc != DERAS_ERANGE)
        fail_msg("sync after embedding id 10 of a 10-token vocabulary: expected %d "
                 "(DERAS_ERANGE), got %d (%s)",
                 DERAS_ERANGE, rc, deras_errmsg());
    if (!strstr(deras_errmsg(), "token id 10 at row 2"))
        fail_msg("expected the message to name token id 10 at row 2, got '%s'", deras_errmsg());
    /* the record is cleared: the backend stays usable */
    GPU_OK(backend_sync(g));
    backend_free(g, table);
    backend_free(g, out);
    backend_free(g, id);
    backend_destroy(&g);
}

static void rmsnorm_and_add_rmsnorm_match_cpu(void **state)
{
    const int shapes[][2] = {{1, 576}, {64, 4096}, {3, 8192}, {5, 100}, {128, 2048}, {2, 16384}};
    for (int dt = 0; dt < 2; dt++) {
        backend_t *g = open_gpu(dt);
        uint64_t seed = 400 + dt;
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const int n = shapes[si][0], d = shapes[si][1];
            const size_t nd = (size_t)n * d;
            float *xh = gpu_random(dt, nd, &seed, 2.0f), *rh = gpu_random(dt, nd, &seed, 3.0f);
            float *wh = gpu_random(dt, (size_t)d, &seed, 1.5f);
            dual x = dual_new(cpu, g, xh, nd), r = dual_new(cpu, g, rh, nd);
            dual w = dual_new(cpu, g, wh, (size_t)d), out = dual_new(cpu, g, NULL, nd);
            char what[64];
            float *want, *got;

            gpu_poison(g, out.g, nd * 2);
            GPU_OK(backend_rmsnorm(cpu, out.c, x.c, w.c, n, d, 1e-5f));
            GPU_OK(backend_rmsnorm(g, out.g, x.g, w.g, n, d, 1e-5f));
            dual_read(cpu, g, &out, &want, &got);
            snprintf(what, sizeof what, "rmsnorm %dx%d", n, d);
            expect_within(what, dt, got, want, NULL, nd, 1.0);
            free(want);
            free(got);

            gpu_poison(g, out.g, nd * 2);
            GPU_OK(backend_add_rmsnorm(cpu, out.c, r.c, x.c, w.c, n, d, 1e-6f));
            GPU_OK(backend_add_rmsnorm(g, out.g, r.g, x.g, w.g, n, d, 1e-6f));
            dual_read(cpu, g, &out, &want, &got);
            snprintf(what, sizeof what, "add_rmsnorm output %dx%d", n, d);
            expect_within(what, dt, got, want, NULL, nd, 2.0);
            free(want);
            free(got);
            dual_read(cpu, g, &r, &want, &got);
            snprintf(what, sizeof what, "add_rmsnorm residual %dx%d", n, d);
            expect_within(what, dt, got, want, NULL, nd, 1.0);
            free(want);
            free(got);

            /* in place: out == residual, as the model's final norm calls it; from the
             * same residual on both sides again, so only this call's rounding counts */
            GPU_OK(backend_upload_f32(cpu, r.c, rh, nd));
            GPU_OK(backend_upload_f32(g, r.g, rh, nd));
            GPU_OK(backend_add_rmsnorm(cpu, r.c, r.c, x.c, w.c, n, d, 1e-6f));
            GPU_OK(backend_add_rmsnorm(g, r.g, r.g, x.g, w.g, n, d, 1e-6f));
            dual_read(cpu, g, &r, &want, &got);
            snprintf(what, sizeof what, "add_rmsnorm in place %dx%d", n, d);
            expect_within(what, dt, got, want, NULL, nd, 2.0);
            free(want);
            free(got);
            free(xh);
            free(rh);
            free(wh);
            dual_free(cpu, g, &x);
            dual_free(cpu, g, &r);
            dual_free(cpu, g, &w);
            dual_free(cpu, g, &out);
        }
        backend_destroy(&g);
    }
}

static void rope_with_llama3_scaling_matches_cpu(void **state)
{
    const int shapes[][4] = {{5, 32, 128, 0}, {64, 8, 64, 40}, {1, 4, 128, 8}, {300, 2, 80, 0}};
    for (int dt = 0; dt < 2; dt++) {
        backend_t *g = open_gpu(dt);
        uint64_t seed = 500 + dt;
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const int n = shapes[si][0], nh = shapes[si][1], hd = shapes[si][2];
            const int stride = nh * hd + shapes[si][3];
            model_config c = {0};
            c.head_dim = hd;
            c.rope_theta = 500000.0f;
            c.rope_scaling = si % 2 ? ROPE_SCALING_NONE : ROPE_SCALING_LLAMA3;
            c.rope_factor = 8.0f;
            c.rope_low_freq_factor = 1.0f;
            c.rope_high_freq_factor = 4.0f;
            c.rope_orig_max_pos = 8192;
            float inv[256];
            model_config_rope_inv_freq(&c, inv);
            int32_t *pos = malloc((size_t)n * 4);
            for (int i = 0; i < n; i++)
                pos[i] = i == 0 ? 131071 : (int32_t)(test_rng_next(&seed) % 40000);
            void *inv_c, *inv_g, *cs_c, *cs_g;
            GPU_OK(backend_alloc(cpu, (size_t)hd / 2 * 4, &inv_c));
            GPU_OK(backend_alloc(g, (size_t)hd / 2 * 4, &inv_g));
            GPU_OK(backend_upload(cpu, inv_c, inv, (size_t)hd / 2 * 4));
            GPU_OK(backend_upload(g, inv_g, inv, (size_t)hd / 2 * 4));
            GPU_OK(backend_alloc(cpu, (size_t)n * hd * 4, &cs_c));
            GPU_OK(backend_alloc(g, (size_t)n * hd * 4, &cs_g));
            gpu_poison(g, cs_g, (size_t)n * hd * 4);
            dual p = dual_i32(cpu, g, pos, (size_t)n);
            GPU_OK(backend_rope_table(cpu, cs_c, p.c, inv_c, n, hd));
            GPU_OK(backend_rope_table(g, cs_g, p.g, inv_g, n, hd));
            float *tc = malloc((size_t)n * hd * 4), *tg = malloc((size_t)n * hd * 4);
            memcpy(tc, cs_c, (size_t)n * hd * 4);
            /* cos_sin is f32 on every backend: a raw copy back */
            GPU_OK(backend_cuda_download(g, tg, cs_g, (size_t)n * hd * 4));
            for (size_t i = 0; i < (size_t)n * hd; i++)
                if (!(fabsf(tg[i] - tc[i]) <= 2e-6f))
                    fail_msg("rope_table (%s, hd %d): element %zu: got %.9g, expected %.9g "
                             "(tolerance 2e-6)",
                             gpu_dtype_name(dt), hd, i, tg[i], tc[i]);
            /* rotate q rows in place; the CPU rotates with the GPU's table bit for bit */
            GPU_OK(backend_upload(cpu, cs_c, tg, (size_t)n * hd * 4));
            const size_t nx = (size_t)n * stride;
            float *xh = gpu_random(dt, nx, &seed, 4.0f);
            dual x = dual_new(cpu, g, xh, nx);
            GPU_OK(backend_rope(cpu, x.c, cs_c, n, nh, hd, stride));
            GPU_OK(backend_rope(g, x.g, cs_g, n, nh, hd, stride));
            float *want, *got;
            dual_read(cpu, g, &x, &want, &got);
            float *scale = malloc(nx * sizeof(float));
            for (size_t i = 0; i < nx; i++) {
                size_t col = i % (size_t)stride, row = i / (size_t)stride;
                if (col >= (size_t)nh * hd) { /* padding columns: untouched */
                    scale[i] = 0.0f;
                    continue;
                }
                size_t j = col % (size_t)hd, half = (size_t)hd / 2;
                size_t a = row * stride + col - j + j % half;
                scale[i] = fabsf(xh[a]) + fabsf(xh[a + half]);
            }
            char what[64];
            snprintf(what, sizeof what, "rope n %d heads %d hd %d stride %d", n, nh, hd, stride);
            expect_within(what, dt, got, want, scale, nx, 1.0);
            free(scale);
            free(want);
            free(got);
            free(xh);
            free(tc);
            free(tg);
            free(pos);
            dual_free(cpu, g, &x);
            dual_free(cpu, g, &p);
            backend_free(cpu, inv_c);
            backend_free(g, inv_g);
            backend_free(cpu, cs_c);
            backend_free(g, cs_g);
        }
        backend_destroy(&g);
    }
}

static void kv_write_and_copy_blocks_move_values_exactly(void **state)
{
    /* n tokens, kv heads, head_dim, block_size, row padding */
    const int shapes[][5] = {{37, 8, 128, 16, 0}, {5, 2, 64, 1, 64}, {256, 4, 128, 32, 8},
                             {9, 3, 80, 16, 3}};
    for (int dt = 0; dt < 2; dt++) {
        backend_t *g = open_gpu(dt);
        uint64_t seed = 600 + dt;
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const int n = shapes[si][0], nkv = shapes[si][1], hd = shapes[si][2];
            const int bs = shapes[si][3], stride = 2 * nkv * hd + shapes[si][4];
            const int n_blocks = (n + bs - 1) / bs * 2 + 3;
            const size_t block_elems = (size_t)nkv * bs * hd, cache = n_blocks * block_elems;
            /* slots: a permutation of the cache's first n slots, spread over the blocks */
            int32_t *slots = malloc((size_t)n * 4);
            for (int i = 0; i < n; i++)
                slots[i] = i * 2 % (n_blocks * bs);
            for (int i = n - 1; i > 0; i--) {
                int j = (int)(test_rng_next(&seed) % (uint64_t)(i + 1));
                int32_t t = slots[i];
                slots[i] = slots[j];
                slots[j] = t;
            }
            float *kvh = gpu_random(dt, (size_t)n * stride, &seed, 3.0f);
            dual kv = dual_new(cpu, g, kvh, (size_t)n * stride), sl = dual_i32(cpu, g, slots, (size_t)n);
            dual kc = dual_new(cpu, g, NULL, cache), vc = dual_new(cpu, g, NULL, cache);
            const size_t es_c = 4, es_g = 2;
            GPU_OK(backend_kv_write(cpu, kc.c, vc.c, kv.c, (char *)kv.c + (size_t)nkv * hd * es_c,
                                    stride, sl.c, n, nkv, hd, bs, DT_F32));
            GPU_OK(backend_kv_write(g, kc.g, vc.g, kv.g, (char *)kv.g + (size_t)nkv * hd * es_g,
                                    stride, sl.g, n, nkv, hd, bs, gpu_kv_dtype(dt)));
            /* copy-on-write: two pairs, destinations never sources */
            int32_t pairs[4] = {0, n_blocks - 1, 1, n_blocks - 2};
            dual pr = dual_i32(cpu, g, pairs, 4);
            GPU_OK(backend_copy_blocks(cpu, kc.c, pr.c, 2, block_elems * es_c));
            GPU_OK(backend_copy_blocks(g, kc.g, pr.g, 2, block_elems * es_g));
            float *want, *got;
            char what[64];
            snprintf(what, sizeof what, "k cache, %d tokens, block %d", n, bs);
            dual_read(cpu, g, &kc, &want, &got);
            expect_equal(what, dt, got, want, cache);
            free(want);
            free(got);
            snprintf(what, sizeof what, "v cache, %d tokens, block %d", n, bs);
            dual_read(cpu, g, &vc, &want, &got);
            expect_equal(what, dt, got, want, cache);
            free(want);
            free(got);
            free(slots);
            free(kvh);
            dual_free(cpu, g, &kv);
            dual_free(cpu, g, &sl);
            dual_free(cpu, g, &kc);
            dual_free(cpu, g, &vc);
            dual_free(cpu, g, &pr);
        }
        backend_destroy(&g);
    }
}

static void silu_mul_matches_cpu(void **state)
{
    const int shapes[][2] = {{1, 1536}, {64, 14336}, {7, 100}, {256, 2048}};
    for (int dt = 0; dt < 2; dt++) {
        backend_t *g = open_gpu(dt);
        uint64_t seed = 700 + dt;
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const int n = shapes[si][0], dff = shapes[si][1];
            float *guh = gpu_random(dt, (size_t)n * 2 * dff, &seed, 6.0f);
            dual gu = dual_new(cpu, g, guh, (size_t)n * 2 * dff), out = dual_new(cpu, g, NULL, (size_t)n * dff);
            gpu_poison(g, out.g, out.n * 2);
            GPU_OK(backend_silu_mul(cpu, out.c, gu.c, n, dff));
            GPU_OK(backend_silu_mul(g, out.g, gu.g, n, dff));
            float *want, *got;
            dual_read(cpu, g, &out, &want, &got);
            char what[64];
            snprintf(what, sizeof what, "silu_mul %dx%d", n, dff);
            expect_within(what, dt, got, want, NULL, out.n, 1.0);
            free(want);
            free(got);
            free(guh);
            dual_free(cpu, g, &gu);
            dual_free(cpu, g, &out);
        }
        backend_destroy(&g);
    }
}

int main(void)
{
    gpu_require_device();
    if (backend_new("cpu", 0, &cpu)) {
        fprintf(stderr, "FAIL: cpu backend: %s\n", deras_errmsg());
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(transfers_round_trip_and_new_buffers_are_zero),
        cmocka_unit_test(matmul_matches_cpu_with_and_without_bias),
        cmocka_unit_test(embed_and_gather_copy_rows_exactly),
        cmocka_unit_test(embed_token_outside_vocab_fails_at_sync_with_erange),
        cmocka_unit_test(rmsnorm_and_add_rmsnorm_match_cpu),
        cmocka_unit_test(rope_with_llama3_scaling_matches_cpu),
        cmocka_unit_test(kv_write_and_copy_blocks_move_values_exactly),
        cmocka_unit_test(silu_mul_matches_cpu),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    backend_destroy(&cpu);
    return rc;
}
