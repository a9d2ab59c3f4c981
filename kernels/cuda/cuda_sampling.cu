/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_sampling.cu - temperature, top-k, top-p, min-p and the draw, on the device.
 *
 * One block of 1,024 threads per row. The row is never sorted: each cut is a threshold on
 * the scaled logit w = logit / temperature, found by radix selection over the 32-bit
 * order-preserving key of w (four passes of 8-bit digits, a 256-bin histogram in shared
 * memory per pass):
 *
 *   top-k   the k-th largest w among the min-p candidates (counting histogram)
 *   top-p   the largest w such that the candidates at or above it hold top_p of the
 *           candidates' mass (a histogram of probability mass instead of counts)
 *
 * The draw then splits the row into one contiguous segment per thread, sums each kept
 * segment's mass, scans the sums across the block, and lets the one thread whose segment
 * holds u x total walk it in token order. So a row costs about ten reads of the logits
 * (which stay in L2) and no sort, and the result depends only on the row and u: u comes
 * from the request's own random stream on the host.
 *
 * Semantics against engine/sampler.c (the CPU sampler): the same cuts in the same order
 * (min-p, then top-k, then top-p over the top-k mass); ties at a cut keep every tied
 * token, where the CPU keeps the lowest ids; the draw walks the kept tokens in id order
 * rather than rank order, which is the same distribution. Greedy rows (temperature 0)
 * take the argmax, ties to the lowest id, as the CPU does.
 */
#include <math.h>

#include "kernels/cuda/cuda_internal.cuh"

#define SMP_THREADS 1024
#define SMP_WARPS (SMP_THREADS / 32)

__device__ __forceinline__ uint32_t fkey(float f)
{
    const uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float funkey(uint32_t k)
{
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

struct smp_shared {
    float red[SMP_WARPS];
    int ired[SMP_WARPS];
    unsigned int hist_n[256];
    float hist_m[256];
    uint32_t sel;
    float sel_rem;
    int token;
};

__device__ float block_max(float v, smp_shared &sh)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (threadIdx.x % 32 == 0)
        sh.red[threadIdx.x / 32] = v;
    __syncthreads();
    v = threadIdx.x % 32 < SMP_WARPS ? sh.red[threadIdx.x % 32] : -INFINITY;
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    return v;
}

__device__ float block_sum(float v, smp_shared &sh)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    if (threadIdx.x % 32 == 0)
        sh.red[threadIdx.x / 32] = v;
    __syncthreads();
    v = threadIdx.x % 32 < SMP_WARPS ? sh.red[threadIdx.x % 32] : 0.0f;
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    return v;
}

/* Block-wide argmax, ties to the lowest index. */
__device__ int block_argmax(float v, int i, smp_shared &sh)
{
    for (int o = 16; o > 0; o >>= 1) {
        const float v2 = __shfl_xor_sync(0xffffffffu, v, o);
        const int i2 = __shfl_xor_sync(0xffffffffu, i, o);
        if (v2 > v || (v2 == v && i2 < i)) {
            v = v2;
            i = i2;
        }
    }
    if (threadIdx.x % 32 == 0) {
        sh.red[threadIdx.x / 32] = v;
        sh.ired[threadIdx.x / 32] = i;
    }
    __syncthreads();
    if (threadIdx.x < 32) {
        v = threadIdx.x < SMP_WARPS ? sh.red[threadIdx.x] : -INFINITY;
        i = threadIdx.x < SMP_WARPS ? sh.ired[threadIdx.x] : 0x7fffffff;
        for (int o = 16; o > 0; o >>= 1) {
            const float v2 = __shfl_xor_sync(0xffffffffu, v, o);
            const int i2 = __shfl_xor_sync(0xffffffffu, i, o);
            if (v2 > v || (v2 == v && i2 < i)) {
                v = v2;
                i = i2;
            }
        }
        if (threadIdx.x == 0)
            sh.token = i;
    }
    __syncthreads();
    return sh.token;
}

/* Warp 0 scans the 256 bins from the top for the bin holding the `need`-th unit (count
 * or mass); records the bin in sh.sel and what is left of `need` inside it in sh.sel_rem.
 * If rounding leaves `need` above the total, the lowest non-empty bin is chosen. */
template <bool MASS> __device__ void pick_bin(float need, smp_shared &sh)
{
    if (threadIdx.x >= 32)
        return;
    const int lane = threadIdx.x;
    float mine = 0.0f;
    for (int b = lane * 8; b < lane * 8 + 8; b++)
        mine += MASS ? sh.hist_m[b] : (float)sh.hist_n[b];
    /* suffix sum: mass in this lane's bins and every higher lane's */
    float suf = mine;
    for (int o = 1; o < 32; o <<= 1) {
        const float v = __shfl_down_sync(0xffffffffu, suf, o);
        if (lane + o < 32)
            suf += v;
    }
    const float above = suf - mine;
    const bool here = above < need && need <= suf;
    const unsigned who = __ballot_sync(0xffffffffu, here && mine > 0.0f);
    /* lowest non-empty bin, for the fall-back */
    const unsigned nonempty = __ballot_sync(0xffffffffu, mine > 0.0f);
    const int owner = who ? 31 - __clz(who) : (nonempty ? __ffs(nonempty) - 1 : 0);
    if (lane == owner) {
        float acc = above;
        int pick = -1, lowest = lane * 8;
        for (int b = lane * 8 + 7; b >= lane * 8; b--) {
            const float v = MASS ? sh.hist_m[b] : (float)sh.hist_n[b];
            if (v > 0.0f)
                lowest = b;
            if (pick < 0 && who && need <= acc + v && v > 0.0f) {
                pick = b;
                break;
            }
            acc += v;
        }
        if (pick < 0) {
            pick = lowest;
            acc = 0.0f;
            for (int b = 255; b > pick; b--)
                acc += MASS ? sh.hist_m[b] : (float)sh.hist_n[b];
        }
        sh.sel = (uint32_t)pick;
        sh.sel_rem = need - acc;
    }
}

/* Radix selection over the keys of w >= floor_w: MASS false finds the key of the
 * `need`-th largest; MASS true the largest key whose suffix mass reaches `need`. */
template <typename T, bool MASS>
__device__ uint32_t radix_select(const T *x, int vocab, float inv_t, float floor_w, float mx,
                                 float need, smp_shared &sh)
{
    uint32_t prefix = 0, mask = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = threadIdx.x; b < 256; b += SMP_THREADS) {
            sh.hist_n[b] = 0;
            sh.hist_m[b] = 0.0f;
        }
        __syncthreads();
        for (int i = threadIdx.x; i < vocab; i += SMP_THREADS) {
            const float w = to_f32(x[i]) * inv_t;
            const uint32_t k = fkey(w);
            if (w < floor_w || (k & mask) != prefix)
                continue;
            const int bin = (k >> shift) & 0xff;
            if (MASS)
                atomicAdd(&sh.hist_m[bin], expf(w - mx));
            else
                atomicAdd(&sh.hist_n[bin], 1u);
        }
        __syncthreads();
        pick_bin<MASS>(need, sh);
        __syncthreads();
        prefix |= sh.sel << shift;
        mask |= 0xffu << shift;
        need = sh.sel_rem;
        __syncthreads();
    }
    return prefix;
}

template <typename T>
__global__ void __launch_bounds__(SMP_THREADS)
sample_kernel(int32_t *tokens, const T *logits, const cuda_sample_params *params, int vocab)
{
    __shared__ smp_shared sh;
    const int row = blockIdx.x;
    const T *x = logits + (size_t)row * vocab;
    const cuda_sample_params p = params[row];

    if (!(p.temperature > 0.0f)) {
        float best = -INFINITY;
        int bi = 0x7fffffff;
        for (int i = threadIdx.x; i < vocab; i += SMP_THREADS) {
            const float v = to_f32(x[i]);
            if (v > best || bi == 0x7fffffff) {
                best = v;
                bi = i;
            }
        }
        const int tok = block_argmax(best, bi, sh);
        if (threadIdx.x == 0)
            tokens[row] = tok;
        return;
    }

    const float inv_t = 1.0f / p.temperature;
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < vocab; i += SMP_THREADS)
        mx = fmaxf(mx, to_f32(x[i]) * inv_t);
    mx = block_max(mx, sh);
    float thr = p.min_p > 0.0f ? mx + logf(p.min_p) : -INFINITY;

    if (p.top_k > 0) {
        float n_cand = 0.0f;
        for (int i = threadIdx.x; i < vocab; i += SMP_THREADS)
            n_cand += to_f32(x[i]) * inv_t >= thr ? 1.0f : 0.0f;
        n_cand = block_sum(n_cand, sh);
        if ((float)p.top_k < n_cand)
            thr = fmaxf(thr, funkey(radix_select<T, false>(x, vocab, inv_t, thr, mx,
                                                           (float)p.top_k, sh)));
    }
    if (p.top_p < 1.0f) {
        float z = 0.0f;
        for (int i = threadIdx.x; i < vocab; i += SMP_THREADS) {
            const float w = to_f32(x[i]) * inv_t;
            z += w >= thr ? expf(w - mx) : 0.0f;
        }
        z = block_sum(z, sh);
        thr = fmaxf(thr, funkey(radix_select<T, true>(x, vocab, inv_t, thr, mx, p.top_p * z, sh)));
    }

    /* the draw: contiguous segments, block scan of their masses, one walker */
    const int seg = (vocab + SMP_THREADS - 1) / SMP_THREADS;
    const int b0 = min(vocab, (int)threadIdx.x * seg), b1 = min(vocab, b0 + seg);
    float mine = 0.0f;
    int last_kept = -1;
    for (int i = b0; i < b1; i++) {
        const float w = to_f32(x[i]) * inv_t;
        if (w >= thr) {
            mine += expf(w - mx);
            last_kept = i;
        }
    }
    /* Scan of `mine` over the block. Each thread's interval is [its start, the next
     * thread's start), both read from the same computed prefixes, so the intervals tile
     * [0, total) exactly whatever the f32 rounding: exactly one thread claims the target. */
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float inc = mine;
    for (int o = 1; o < 32; o <<= 1) {
        const float v = __shfl_up_sync(0xffffffffu, inc, o);
        if (lane >= o)
            inc += v;
    }
    float excl = __shfl_up_sync(0xffffffffu, inc, 1);
    if (lane == 0)
        excl = 0.0f;
    if (lane == 31)
        sh.red[warp] = inc;
    if (threadIdx.x == 0)
        sh.token = -1;
    __syncthreads();
    if (warp == 0) {
        float w = sh.red[lane];
        for (int o = 1; o < 32; o <<= 1) {
            const float v = __shfl_up_sync(0xffffffffu, w, o);
            if (lane >= o)
                w += v;
        }
        sh.red[lane] = w; /* inclusive totals per warp */
    }
    __syncthreads();
    const float start = (warp > 0 ? sh.red[warp - 1] : 0.0f) + excl;
    float end = __shfl_down_sync(0xffffffffu, start, 1);
    if (lane == 31)
        end = warp + 1 < SMP_WARPS ? sh.red[warp] : INFINITY;
    const float target = p.u * sh.red[SMP_WARPS - 1];
    if (start <= target && target < end) {
        float acc = start;
        int tok = last_kept;
        for (int i = b0; i < b1; i++) {
            const float w = to_f32(x[i]) * inv_t;
            if (w >= thr) {
                acc += expf(w - mx);
                if (target < acc) {
                    tok = i;
                    break;
                }
            }
        }
        atomicMax(&sh.token, tok);
    }
    __syncthreads();
    if (sh.token < 0) { /* the claimant held no kept token: the row's last kept token */
        atomicMax(&sh.token, last_kept);
        __syncthreads();
    }
    if (threadIdx.x == 0)
        tokens[row] = sh.token;
}

extern "C" int backend_cuda_sample(backend_t *b, int32_t *tokens, const void *logits,
                                   const cuda_sample_params *params, int n, int vocab)
{
    if (!backend_is_cuda(b) || !tokens || !logits || !params || n <= 0 || vocab <= 0)
        return deras_fail(DERAS_EINVAL, "backend_cuda_sample: invalid arguments");
    cuda_backend *cb = cuda_of(b);
    CUDA_DISPATCH_DTYPE(cb, {
        sample_kernel<T><<<n, SMP_THREADS, 0, cb->stream>>>(tokens, (const T *)logits, params,
                                                             vocab);
    });
    CUDA_LAUNCHED("sample");
    return DERAS_OK;
}
