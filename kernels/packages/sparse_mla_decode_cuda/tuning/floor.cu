// Memory floors of sparse MLA decode: move the bytes a decode step must move, no arithmetic on them.
// Grid (splits, batch): block (s, b) reads rows tokens [s * per_block, (s + 1) * per_block) of
// request b's selection, a warp per row, 16 bytes a lane (ld.global.nc, U rows in flight per
// warp). `gather_floor*`: the rows only; the XOR of the data keeps the loads and out is written only
// if it equals a magic value. `step_floor*`: also every byte the manifest's [cost] counts besides
// the rows: block (s, b) reads its 1/splits share of request b's q (heads x d_qk bf16) and writes its
// share of request b's output (heads x d_v bf16, values derived from what it read, so the stores
// wait for the loads, as a kernel's output does). Launched like the tiled kernels (programmatic
// dependent launch allowed), timed by floor.py.
#include <stdint.h>

template <int U, bool STEP>
__device__ __forceinline__ void floor_body(const uint4* __restrict__ kv, const int* __restrict__ idx,
                                           const uint4* __restrict__ q, uint4* __restrict__ o,
                                           unsigned* __restrict__ out, int topk, int chunks, int per_block,
                                           int q_chunks, int o_chunks) {
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    const int b = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
    const int t0 = blockIdx.x * per_block, t1 = min(topk, t0 + per_block);
    const int* sel = idx + static_cast<size_t>(b) * topk;
    uint32_t acc = 0;
    if (STEP) {  // this block's share of q, read first (a kernel needs q before its first product)
        const int share = (q_chunks + gridDim.x - 1) / gridDim.x, c0 = blockIdx.x * share;
        const int c1 = min(q_chunks, c0 + share);
        const uint4* qb = q + static_cast<size_t>(b) * q_chunks;
        for (int c = c0 + threadIdx.x; c < c1; c += blockDim.x) {
            const uint4 v = __ldg(qb + c);
            acc ^= v.x ^ v.y ^ v.z ^ v.w;
        }
    }
    for (int t = t0 + warp; t < t1; t += U * warps) {
        int row[U];
#pragma unroll
        for (int u = 0; u < U; ++u) row[u] = t + u * warps < t1 ? __ldg(sel + t + u * warps) : -1;
        uint4 v[U][3];
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
            for (int k = 0; k < 3; ++k) {
                const int c = lane + 32 * k;
                v[u][k] = row[u] >= 0 && c < chunks ? __ldg(kv + static_cast<size_t>(row[u]) * chunks + c)
                                                    : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
            for (int k = 0; k < 3; ++k) acc ^= v[u][k].x ^ v[u][k].y ^ v[u][k].z ^ v[u][k].w;
    }
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
    if (STEP) {  // this block's share of the output, whole 16-byte chunks
        acc = __reduce_xor_sync(0xffffffffu, acc);
        const int share = (o_chunks + gridDim.x - 1) / gridDim.x, c0 = blockIdx.x * share;
        const int c1 = min(o_chunks, c0 + share);
        uint4* ob = o + static_cast<size_t>(b) * o_chunks;
        for (int c = c0 + threadIdx.x; c < c1; c += blockDim.x) ob[c] = make_uint4(acc, acc ^ c, acc, c);
    } else if (acc == 0x9E3779B9u) {
        out[0] = acc;
    }
}

extern "C" __global__ void __launch_bounds__(512) gather_floor(const uint4* __restrict__ kv, const int* __restrict__ idx,
                                                              unsigned* __restrict__ out, int topk, int chunks,
                                                              int per_block) {
    floor_body<4, false>(kv, idx, nullptr, nullptr, out, topk, chunks, per_block, 0, 0);
}

extern "C" __global__ void __launch_bounds__(512) gather_floor8(const uint4* __restrict__ kv, const int* __restrict__ idx,
                                                               unsigned* __restrict__ out, int topk, int chunks,
                                                               int per_block) {
    floor_body<8, false>(kv, idx, nullptr, nullptr, out, topk, chunks, per_block, 0, 0);
}

extern "C" __global__ void __launch_bounds__(512) step_floor(const uint4* __restrict__ kv, const int* __restrict__ idx,
                                                            const uint4* __restrict__ q, uint4* __restrict__ o,
                                                            int topk, int chunks, int per_block, int q_chunks,
                                                            int o_chunks) {
    floor_body<4, true>(kv, idx, q, o, nullptr, topk, chunks, per_block, q_chunks, o_chunks);
}

extern "C" __global__ void __launch_bounds__(512) step_floor8(const uint4* __restrict__ kv, const int* __restrict__ idx,
                                                             const uint4* __restrict__ q, uint4* __restrict__ o,
                                                             int topk, int chunks, int per_block, int q_chunks,
                                                             int o_chunks) {
    floor_body<8, true>(kv, idx, q, o, nullptr, topk, chunks, per_block, q_chunks, o_chunks);
}

// The same floors through the path the tiled kernels take: 16-byte cp.async copies into shared memory,
// S groups of `group_rows` rows in flight a block (no registers hold the data, so as many bytes are
// in flight as the ring holds: up to S * group_rows * 16 * chunks bytes). The block first copies its
// row ids into shared memory (one read of up to 8 KiB), then walks its rows a group at a time; with
// STEP its share of q comes in with the first group and its share of the output goes out at the end.
// Dynamic shared memory: per_block * 4 (ids, rounded up to 16 B) + S * group_rows * chunks * 16, and
// with STEP 16 B for each chunk of the block's q share.
template <int S, bool STEP>
__device__ __forceinline__ void async_body(const uint4* __restrict__ kv, const int* __restrict__ idx,
                                           const uint4* __restrict__ q, uint4* __restrict__ o, int topk,
                                           int chunks, int per_block, int group_rows, int q_chunks,
                                           int o_chunks) {
    extern __shared__ __align__(16) unsigned char smem[];
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    const int b = blockIdx.y, t0 = blockIdx.x * per_block, n = min(topk, t0 + per_block) - t0;
    int* ids = reinterpret_cast<int*>(smem);
    uint4* ring = reinterpret_cast<uint4*>(smem + ((per_block * 4 + 15) / 16) * 16);
    const int* sel = idx + static_cast<size_t>(b) * topk + t0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) ids[i] = __ldg(sel + i);
    __syncthreads();
    const int per_group = group_rows * chunks, groups = (n + group_rows - 1) / group_rows;
    int q_share = 0, q_c0 = 0;
    if (STEP) {
        q_share = (q_chunks + gridDim.x - 1) / gridDim.x;
        q_c0 = blockIdx.x * q_share;
        q_share = max(0, min(q_chunks, q_c0 + q_share) - q_c0);
    }
    for (int g = 0; g < groups; ++g) {
        uint4* slot = ring + static_cast<size_t>(g % S) * per_group;
        const int rows = min(group_rows, n - g * group_rows);
        for (int c = threadIdx.x; c < rows * chunks; c += blockDim.x) {
            const int r = ids[g * group_rows + c / chunks];
            const uint4* src = kv + static_cast<size_t>(r < 0 ? 0 : r) * chunks + c % chunks;
            const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(slot + c));
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
        }
        if (STEP && g == 0) {  // q's share, behind the ring, in the first group (a kernel needs q first)
            const uint4* qb = q + static_cast<size_t>(b) * q_chunks + q_c0;
            uint4* qslot = ring + static_cast<size_t>(S) * per_group;
            for (int c = threadIdx.x; c < q_share; c += blockDim.x) {
                const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(qslot + c));
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(qb + c) : "memory");
            }
        }
        asm volatile("cp.async.commit_group;\n" ::: "memory");
        asm volatile("cp.async.wait_group %0;\n" ::"n"(S - 1) : "memory");
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
    if (STEP) {
        __syncthreads();
        const int share = (o_chunks + gridDim.x - 1) / gridDim.x, c0 = blockIdx.x * share;
        const int c1 = min(o_chunks, c0 + share);
        uint4* ob = o + static_cast<size_t>(b) * o_chunks;
        for (int c = c0 + threadIdx.x; c < c1; c += blockDim.x) ob[c] = ring[(c - c0) % per_group];
    }
}

#define FLOOR_ASYNC(S)                                                                                              \
    extern "C" __global__ void __launch_bounds__(512) gather_floor_async##S(                                       \
        const uint4* __restrict__ kv, const int* __restrict__ idx, int topk, int chunks, int per_block,           \
        int group_rows) {                                                                                          \
        async_body<S, false>(kv, idx, nullptr, nullptr, topk, chunks, per_block, group_rows, 0, 0);               \
    }                                                                                                              \
    extern "C" __global__ void __launch_bounds__(512) step_floor_async##S(                                         \
        const uint4* __restrict__ kv, const int* __restrict__ idx, const uint4* __restrict__ q,                   \
        uint4* __restrict__ o, int topk, int chunks, int per_block, int group_rows, int q_chunks, int o_chunks) { \
        async_body<S, true>(kv, idx, q, o, topk, chunks, per_block, group_rows, q_chunks, o_chunks);              \
    }
FLOOR_ASYNC(4)
FLOOR_ASYNC(8)
FLOOR_ASYNC(12)
