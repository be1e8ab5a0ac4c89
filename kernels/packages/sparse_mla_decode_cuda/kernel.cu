// Sparse MLA decode attention in CUDA C++: three implementations behind the -Dimpl define.
//
//   impl=baseline    one thread block per (request, head), CUDA cores only (this file, below);
//   impl=head_tiled  64 heads per block on the Hopper tensor cores (tiled_sm90.cuh);
//   impl=split_k     head_tiled with the selected tokens split over blocks and a log-sum-exp
//                    combine kernel (same file; the split count is a launch argument).
//
// Baseline layout (see reference.py): q [batch, heads, d_qk] bf16, kv [rows, d_qk] bf16 (a row's
// first d_v columns are its key's latent part and its value), indices [batch, topk] int32 (-1 =
// padding), out [batch, heads, d_v] bf16. Launch: grid (batch, heads), block num_warps * 32 threads.
//
// Tuning parameters arrive as -D defines from the package grid: BLOCK_N (selected tokens per
// tile), num_warps (warps per block), VEC (columns a lane handles per step of the baseline's score
// loop), STAGES (depth of the tiled kernels' gather ring). The softmax is an fp32 online softmax
// over tiles (running max and sum, accumulator rescaled when the max grows), so any topk works
// with fixed shared memory.
#define IMPL_baseline 1   // non-zero: an unknown name (0 in #if) is refused below
#define IMPL_head_tiled 2
#define IMPL_split_k 3
#define IMPL_CAT_(a, b) a##b
#define IMPL_CAT(a, b) IMPL_CAT_(a, b)
#ifndef impl
#define impl baseline
#endif
#if IMPL_CAT(IMPL_, impl) == IMPL_head_tiled || IMPL_CAT(IMPL_, impl) == IMPL_split_k
#include "tiled_sm90.cuh"
#if defined(num_warps) && num_warps == 12
#include "seesaw_sm90.cuh"   // three warp groups: two seesaw consumers and a gathering producer
#endif
#elif IMPL_CAT(IMPL_, impl) != IMPL_baseline
#error "impl must be baseline, head_tiled or split_k"
#else
#include <cuda_bf16.h>
#include <math.h>

#ifndef BLOCK_N
#define BLOCK_N 32
#endif
#ifndef num_warps
#define num_warps 4
#endif
#ifndef VEC
#define VEC 4
#endif

#define THREADS (num_warps * 32)
// Largest head dimensions the block's arrays are sized for: d_qk up to 1024, d_v up to 512.
#define MAX_D_QK 1024
#define MAX_D_V 512
#define ACC_PER_THREAD ((MAX_D_V + THREADS - 1) / THREADS)

static_assert(BLOCK_N >= num_warps, "each warp needs at least one token per tile");
static_assert(VEC == 1 || VEC == 2 || VEC == 4 || VEC == 8, "VEC must be 1, 2, 4 or 8");

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

extern "C" __global__ void __launch_bounds__(THREADS)
sparse_mla_decode_baseline(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ kv,
                           const int* __restrict__ indices, __nv_bfloat16* __restrict__ out,
                           int heads, int d_qk, int d_v, int topk, float sm_scale) {
    const int b = blockIdx.x;
    const int h = blockIdx.y;
    const int tid = threadIdx.x;
    const int warp = tid / 32;
    const int lane = tid % 32;

    __shared__ float q_s[MAX_D_QK];
    __shared__ float p_s[BLOCK_N];
    __shared__ int row_s[BLOCK_N];

    const __nv_bfloat16* qp = q + ((size_t)b * heads + h) * d_qk;
    for (int i = tid; i < d_qk; i += THREADS) q_s[i] = __bfloat162float(qp[i]);

    float acc[ACC_PER_THREAD];
#pragma unroll
    for (int k = 0; k < ACC_PER_THREAD; ++k) acc[k] = 0.0f;
    float m_run = -INFINITY;
    float l_run = 0.0f;
    const int* idx = indices + (size_t)b * topk;
    __syncthreads();

    for (int start = 0; start < topk; start += BLOCK_N) {
        // Scores of this tile: warp w takes tokens w, w + num_warps, ...; lanes split the columns.
        for (int n = warp; n < BLOCK_N; n += num_warps) {
            const int t = start + n;
            const int row = t < topk ? idx[t] : -1;
            float s = 0.0f;
            if (row >= 0) {
                const __nv_bfloat16* kp = kv + (size_t)row * d_qk;
                for (int c = lane * VEC; c < d_qk; c += 32 * VEC) {
#pragma unroll
                    for (int v = 0; v < VEC; ++v) {
                        if (c + v < d_qk) s += q_s[c + v] * __bfloat162float(kp[c + v]);
                    }
                }
            }
            s = warp_sum(s);
            if (lane == 0) {
                p_s[n] = row >= 0 ? s * sm_scale : -INFINITY;
                row_s[n] = row;
            }
        }
        __syncthreads();

        // Online softmax update (every thread computes the same tile max and sum).
        float tile_max = -INFINITY;
        for (int n = 0; n < BLOCK_N; ++n) tile_max = fmaxf(tile_max, p_s[n]);
        const float m_new = fmaxf(m_run, tile_max);
        if (m_new != -INFINITY) {
            const float rescale = m_run == -INFINITY ? 0.0f : __expf(m_run - m_new);
            l_run *= rescale;
#pragma unroll
            for (int k = 0; k < ACC_PER_THREAD; ++k) acc[k] *= rescale;
            for (int n = 0; n < BLOCK_N; ++n) {
                const int row = row_s[n];
                if (row < 0) continue;
                const float p = __expf(p_s[n] - m_new);
                l_run += p;
                const __nv_bfloat16* vp = kv + (size_t)row * d_qk;
#pragma unroll
                for (int k = 0; k < ACC_PER_THREAD; ++k) {
                    const int d = tid + k * THREADS;
                    if (d < d_v) acc[k] += p * __bfloat162float(vp[d]);
                }
            }
            m_run = m_new;
        }
        __syncthreads();
    }

    __nv_bfloat16* op = out + ((size_t)b * heads + h) * d_v;
    const float inv = l_run > 0.0f ? 1.0f / l_run : 0.0f;
#pragma unroll
    for (int k = 0; k < ACC_PER_THREAD; ++k) {
        const int d = tid + k * THREADS;
        if (d < d_v) op[d] = __float2bfloat16(acc[k] * inv);
    }
}
#endif
