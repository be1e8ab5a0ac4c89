// Sparse MLA decode attention, head-tiled on the Hopper tensor cores (wgmma), with an optional
// split of the selected tokens over blocks (split-K) and a log-sum-exp combine kernel.
//
// One block of 256 threads (two warp groups) serves 64 heads of one request (the wgmma M) over one
// split of its selected tokens. Per tile of BLOCK_N selected rows:
//   * warp group 1 gathers the rows STAGES - 1 tiles ahead: 16-byte cp.async copies into a
//     STAGES-deep ring, each row stored 128-byte swizzled (the layout wgmma reads without bank
//     conflicts); a -1 index zero-fills its row and is masked. The row ids are read one tile ahead.
//   * meanwhile warp group 0 scores the whole tile, S[64 x BLOCK_N] = q . k^T over all d_qk columns
//     (wgmma m64nBLOCK_Nk16, q and the rows read from shared memory), runs the fp32 online softmax
//     in base 2 and writes P = exp2(S - m) as bf16 into a shared P tile and each row's rescale
//     factor into shared memory;
//   * then warp group w accumulates O_w[64 x 256] += P . V[:, 256w : 256w + 256], V being the
//     first d_v columns of the same gathered rows (read transposed by wgmma m64n256k16).
// q.k^T is computed once per block, the fp32 output accumulator (64 x 512) is split in two halves
// of 128 registers a thread, and every selected row is gathered once per 64-head tile (V3.2's 128
// heads: the two head tiles of a request are neighbouring blocks; the second reads the rows from L2).
//
// Layout: q [batch, heads, D_QK] bf16, kv [rows, D_QK] bf16, indices [batch, topk] int32 (-1 =
// padding), out [batch, heads, 512] bf16; split-K: o_part [batch, splits, heads, 512] bf16 (each
// split's normalised output) and lse [batch, splits, heads] fp32 (base-2 log-sum-exp of the scaled
// scores, -inf for a split with no valid row). heads must be a multiple of 64; d_v is 512.
// Grid: x = head_tiles * num_splits (head tile fastest), y = batch. Dynamic shared memory:
// TILED_SMEM_BYTES(D_QK) (harness.tiled_smem_bytes). Needs sm_90a (wgmma).
//
// Compile-time switches for measuring the loop (tuning/ablate.py; results are wrong with them):
// ABL_NO_LOAD (no gather after the prologue), ABL_NO_QK / ABL_NO_PV (one wgmma instead of the
// product's chain), ABL_TIMING (block (0, 0)'s SM clocks per phase written over its output).
// Candidate combines, measured and not kept (package README): FUSED_COMBINE (the last split block
// combines) and SIBLING_COMBINE (every split block combines a share of the rows); either build
// holds no sparse_mla_combine_splits.
#pragma once
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "the tiled kernels use wgmma, which only sm_90a has: build them for cc 9.0 (-gencode arch=compute_90a,code=sm_90a)"
#endif
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "wgmma_sm90.cuh"

#ifndef STAGES
#define STAGES 2
#endif

#define HEAD_TILE 64
#define TILED_THREADS 256
#define TILED_DV 512

static_assert(BLOCK_N == 32 || BLOCK_N == 64, "the tiled kernel takes BLOCK_N 32 or 64");
static_assert(STAGES >= 2 && STAGES <= 4, "the tiled kernel takes STAGES 2..4");

// Bytes of dynamic shared memory for d_qk: q tile, the row ring, the P tile, two small reductions
// and 1 KiB to align the base to the 1024-byte swizzle atom.
#define TILED_SMEM_BYTES(d_qk) (HEAD_TILE * (d_qk) * 2 + STAGES * BLOCK_N * (d_qk) * 2 + HEAD_TILE * 128 + \
                                4 * HEAD_TILE * 4 + BLOCK_N * STAGES * 4 + 1024)

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global -> shared copy; src_bytes 0 writes zeros (a padded row).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }
// Programmatic dependent launch (PTX ISA "griddepcontrol"; no-ops when the launch did not allow
// it): wait until the grids this one depends on have completed and their writes are visible, and
// let the next grid on the stream be scheduled.
__device__ __forceinline__ void grid_dependency_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void launch_dependents() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }
// Make this thread's generic-proxy shared-memory writes (cp.async, st.shared) visible to wgmma.
__device__ __forceinline__ void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// wgmma shared-memory matrix descriptor (PTX ISA "Matrix Descriptor Format") for a 128-byte
// swizzled operand: start address, leading and stride byte offsets (all >> 4), swizzle mode 1.
__device__ __forceinline__ uint64_t sw128_desc(uint32_t addr, uint32_t leading_bytes, uint32_t stride_bytes) {
    return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>((leading_bytes >> 4) & 0x3FFF) << 16) |
           (static_cast<uint64_t>((stride_bytes >> 4) & 0x3FFF) << 32) | (1ull << 62);
}

// Byte offset of 16-byte chunk `chunk` (of 8 per 128-byte row) of row `row` in a 128B-swizzled
// block whose rows are 128 bytes apart (Swizzle<3,4,3>: chunk ^= row % 8).
__device__ __forceinline__ uint32_t sw128_offset(int row, int chunk) {
    return static_cast<uint32_t>(row * 128 + ((chunk ^ (row & 7)) << 4));
}

template <int N>
struct QkMma;
template <>
struct QkMma<32> {
    static __device__ __forceinline__ void run(float (&d)[16], uint64_t a, uint64_t b, int s) { wgmma_m64n32k16_ss(d, a, b, s); }
};
template <>
struct QkMma<64> {
    static __device__ __forceinline__ void run(float (&d)[32], uint64_t a, uint64_t b, int s) { wgmma_m64n64k16_ss(d, a, b, s); }
};

// Bytes of shared memory store_output_tile stages the block's output in: 64 rows of 1024 bytes, each
// padded by 16 so that the 8 rows one warp-wide store touches fall in different banks.
#define OUT_STAGE_ROW (TILED_DV * 2 + 16)
#define OUT_STAGE_BYTES (HEAD_TILE * OUT_STAGE_ROW)

// The block's 64 x 512 output, from the two warp groups' m64n256 accumulators: each thread's rows
// row0 and row0 + 8, columns dv0 + 8i (+1), i = 0..31, divided by the row sums l, go as bf16 into a
// padded tile at `stage` (OUT_STAGE_BYTES; the caller's q tile and ring, free by then), with the
// split's base-2 log-sum-exp m + log2(l) (-inf for an empty split) into lse where `write_lse`; after
// named barrier `bar` over the 256 threads, whole 16-byte chunks go to out[b, h0 .. h0 + 63] (one
// split) or to the split's bf16 partial o_part[b, split, h0 .. h0 + 63]. The 64 rows are contiguous
// there, so every warp writes whole 128-byte lines. (Stored straight from the accumulator layout, a
// warp's bf16 store fills half of each of eight 32-byte sectors; with fp32 partials the stores are
// whole sectors but twice the bytes, read back again by the combine: see the package README.)
__device__ __forceinline__ void store_output_tile(const float (&o)[128], int row0, int dv0, const float (&l)[2],
                                                  const float (&m)[2], bool write_lse, unsigned char* stage, int tid,
                                                  int bar, __nv_bfloat16* __restrict__ out,
                                                  __nv_bfloat16* __restrict__ o_part, float* __restrict__ lse, int b,
                                                  int heads, int h0, int split, int num_splits,
                                                  int* __restrict__ split_done) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int row = row0 + 8 * r;
        const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
        __nv_bfloat162* srow = reinterpret_cast<__nv_bfloat162*>(stage + row * OUT_STAGE_ROW + dv0 * 2);
#pragma unroll
        for (int i = 0; i < 32; ++i) srow[4 * i] = __floats2bfloat162_rn(o[4 * i + 2 * r] * inv, o[4 * i + 2 * r + 1] * inv);
        if (num_splits > 1 && write_lse)
            lse[(static_cast<size_t>(b) * num_splits + split) * heads + h0 + row] =
                l[r] > 0.0f ? m[r] + log2f(l[r]) : -INFINITY;
    }
    asm volatile("bar.sync %0, 256;\n" ::"r"(bar) : "memory");
    __nv_bfloat16* dst = num_splits == 1
        ? out + (static_cast<size_t>(b) * heads + h0) * TILED_DV
        : o_part + ((static_cast<size_t>(b) * num_splits + split) * heads + h0) * TILED_DV;
#pragma unroll
    for (int k = 0; k < HEAD_TILE * 64 / 256; ++k) {
        const int chunk = tid + 256 * k, row = chunk >> 6, c = chunk & 63;   // 64 chunks of 16 bytes a row
        *reinterpret_cast<uint4*>(dst + row * TILED_DV + c * 8) =
            *reinterpret_cast<const uint4*>(stage + row * OUT_STAGE_ROW + c * 16);
    }
#if defined(SIBLING_COMBINE) || defined(FUSED_COMBINE)
    // The split blocks of (b, head tile) combine their partials themselves (no second kernel);
    // split_done[b * head_tiles + tile] is zero before the launch and zero again after it.
    // SIBLING_COMBINE: every split block combines a share of the 64 rows once all of them have
    // stored their partials. They wait for each other, which is safe only when the whole grid is
    // resident at once: one block an SM (the shared memory allows no second), so the grid must not
    // exceed %nsmid; otherwise the last split block to finish combines all rows. The counter holds
    // arrivals in its low 16 bits and departures in its high 16; the last to leave zeroes it.
    // FUSED_COMBINE: the last split block to finish combines all rows.
    if (num_splits == 1) return;
    int* mode = reinterpret_cast<int*>(stage + OUT_STAGE_BYTES);         // 0 leave, 1 a share, 2 all rows
    float* w = reinterpret_cast<float*>(stage + OUT_STAGE_BYTES + 16);   // [num_splits][64] weights
    __threadfence();   // this block's partial and lse, device-wide, before it counts itself done
    asm volatile("bar.sync %0, 256;\n" ::"r"(bar) : "memory");
    int* counter = split_done + static_cast<size_t>(b) * (heads / HEAD_TILE) + h0 / HEAD_TILE;
    if (tid == 0) {
        const bool last = (atomicAdd(counter, 1) & 0xFFFF) == num_splits - 1;
        bool resident = false;
#if defined(SIBLING_COMBINE)
        unsigned nsm;
        asm volatile("mov.u32 %0, %%nsmid;\n" : "=r"(nsm));
        resident = gridDim.x * gridDim.y * gridDim.z <= nsm;
#endif
        if (resident) {
            int seen;
            do {
                asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(seen) : "l"(counter) : "memory");
            } while ((seen & 0xFFFF) < num_splits);
            if ((atomicAdd(counter, 1 << 16) >> 16) == num_splits - 1) atomicExch(counter, 0);
            *mode = 1;
        } else {
            *mode = last ? 2 : 0;
            if (last) *counter = 0;   // every split has arrived
        }
    }
    asm volatile("bar.sync %0, 256;\n" ::"r"(bar) : "memory");
    if (*mode == 0) return;
    __threadfence();
    const int r_lo = *mode == 1 ? HEAD_TILE * split / num_splits : 0;
    const int r_hi = *mode == 1 ? HEAD_TILE * (split + 1) / num_splits : HEAD_TILE;
    const float* lse_b = lse + static_cast<size_t>(b) * num_splits * heads + h0;
    if (tid >= r_lo && tid < r_hi) {   // per head: the largest lse, then each split's weight 2^(lse_s - M) / sum
        float mx = -INFINITY;
        for (int s = 0; s < num_splits; ++s) mx = fmaxf(mx, __ldcg(lse_b + static_cast<size_t>(s) * heads + tid));
        float sum = 0.0f;
        for (int s = 0; s < num_splits; ++s) {
            const float e = mx == -INFINITY ? 0.0f : exp2f(__ldcg(lse_b + static_cast<size_t>(s) * heads + tid) - mx);
            w[s * HEAD_TILE + tid] = e;
            sum += e;
        }
        const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
        for (int s = 0; s < num_splits; ++s) w[s * HEAD_TILE + tid] *= inv;
    }
    asm volatile("bar.sync %0, 256;\n" ::"r"(bar) : "memory");
    const __nv_bfloat16* part_b = o_part + (static_cast<size_t>(b) * num_splits * heads + h0) * TILED_DV;
    __nv_bfloat16* out_b = out + (static_cast<size_t>(b) * heads + h0) * TILED_DV;
#pragma unroll 1
    for (int chunk = r_lo * 64 + tid; chunk < r_hi * 64; chunk += 256) {   // 64 chunks of 16 bytes a row
        const int row = chunk >> 6, c = chunk & 63;
        float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
        for (int s = 0; s < num_splits; ++s) {
            const float ws = w[s * HEAD_TILE + row];
            const uint4 v = s == split ? *reinterpret_cast<const uint4*>(stage + row * OUT_STAGE_ROW + c * 16)
                                       : __ldcg(reinterpret_cast<const uint4*>(
                                             part_b + (static_cast<size_t>(s) * heads + row) * TILED_DV + c * 8));
            const __nv_bfloat162* h2 = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const float2 f = __bfloat1622float2(h2[j]);
                acc[2 * j] += ws * f.x;
                acc[2 * j + 1] += ws * f.y;
            }
        }
        uint4 o4;
        __nv_bfloat162* o2 = reinterpret_cast<__nv_bfloat162*>(&o4);
#pragma unroll
        for (int j = 0; j < 4; ++j) o2[j] = __floats2bfloat162_rn(acc[2 * j], acc[2 * j + 1]);
        *reinterpret_cast<uint4*>(out_b + row * TILED_DV + c * 8) = o4;
    }
#endif
}

template <int D_QK>
__device__ __forceinline__ void tiled_body(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ kv,
                                           const int* __restrict__ indices, __nv_bfloat16* __restrict__ out,
                                           __nv_bfloat16* __restrict__ o_part, float* __restrict__ lse, int heads, int topk,
                                           int tokens_per_split, int num_splits, float sm_scale_log2,
                                           int* __restrict__ split_done) {
    static_assert(D_QK % 64 == 0, "d_qk must be a multiple of 64");
    constexpr int CHUNKS = D_QK / 8;             // 16-byte chunks of a row
    constexpr int Q_BYTES = HEAD_TILE * D_QK * 2;
    constexpr int STAGE_BYTES = BLOCK_N * D_QK * 2;
    static_assert(Q_BYTES + STAGES * STAGE_BYTES >= OUT_STAGE_BYTES, "the output is staged in the q tile and ring");
    constexpr int SREG = BLOCK_N / 2;            // fp32 score registers a thread of warp group 0 (m64nBLOCK_N)
    constexpr int ROWS_PER_WARP = BLOCK_N / 4;   // rows of a tile each warp of warp group 1 gathers

    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const uint32_t raw = smem_addr(smem_raw);
    const uint32_t base = (raw + 1023u) & ~1023u;
    unsigned char* gbase = smem_raw + (base - raw);
    const uint32_t q_s = base;
    const uint32_t kv_s = q_s + Q_BYTES;
    const uint32_t p_s = kv_s + STAGES * STAGE_BYTES;
    float* alpha_s = reinterpret_cast<float*>(gbase + (p_s - base) + HEAD_TILE * 128);   // [64] (+64 spare)
    float* red_sum = alpha_s + 2 * HEAD_TILE;                                            // [64] (+64 spare)
    int* tok_ok = reinterpret_cast<int*>(red_sum + 2 * HEAD_TILE);                       // [STAGES][BLOCK_N]

    const int tid = threadIdx.x;
    const int wg = tid / 128;
    const int lane = tid % 32;
    const int row0 = ((tid % 128) / 32) * 16 + lane / 4;   // this thread's rows: row0, row0 + 8
    const int head_tiles = heads / HEAD_TILE;
    const int h0 = (blockIdx.x % head_tiles) * HEAD_TILE;
    const int split = blockIdx.x / head_tiles;
    const int b = blockIdx.y;
    const int t_begin = split * tokens_per_split;
    const int t_end = min(topk, t_begin + tokens_per_split);
    const int n_tiles = t_end > t_begin ? (t_end - t_begin + BLOCK_N - 1) / BLOCK_N : 0;
    const int* idx = indices + static_cast<size_t>(b) * topk;

    // Warp group 1 gathers: its warp wq copies rows wq, wq + 4, ... of a tile, the lanes taking a
    // row's 16-byte chunks; the row ids are read one tile ahead so no copy waits on an index load.
    const int wq = (tid % 128) / 32;
    auto fetch_rows = [&](int tile, int (&rows)[ROWS_PER_WARP]) {
        const int t0 = t_begin + tile * BLOCK_N;
#pragma unroll
        for (int j = 0; j < ROWS_PER_WARP; ++j) {
            const int tok = t0 + wq + 4 * j;
            rows[j] = (tile < n_tiles && tok < t_end) ? __ldg(idx + tok) : -1;
        }
    };
    auto load_tile = [&](int stage, const int (&rows)[ROWS_PER_WARP]) {
        const uint32_t dst0 = kv_s + stage * STAGE_BYTES;
#pragma unroll
        for (int j = 0; j < ROWS_PER_WARP; ++j) {
            const int r = wq + 4 * j;
            const int row = rows[j];
            const __nv_bfloat16* src_row = kv + static_cast<size_t>(row < 0 ? 0 : row) * D_QK;
#pragma unroll
            for (int k = 0; k < (CHUNKS + 31) / 32; ++k) {
                const int c = lane + 32 * k;
                if (c < CHUNKS)
                    cp_async_16(dst0 + (c >> 3) * (BLOCK_N * 128) + sw128_offset(r, c & 7), src_row + c * 8,
                                row >= 0 ? 16 : 0);
            }
            if (lane == 0) tok_ok[stage * BLOCK_N + r] = row >= 0;
        }
    };

    grid_dependency_wait();   // inputs may come from the kernel before this one (PDL)

    // prologue: warp group 0 loads the q tile (64 heads x D_QK, swizzled column blocks of 64 rows
    // x 128 bytes), warp group 1 the first STAGES - 1 tiles
    int rows_next[ROWS_PER_WARP];
    if (wg == 0) {
        for (int id = tid; id < HEAD_TILE * CHUNKS; id += 128) {
            const int r = id / CHUNKS, c = id - r * CHUNKS;
            const __nv_bfloat16* src = q + (static_cast<size_t>(b) * heads + h0 + r) * D_QK + c * 8;
            cp_async_16(q_s + (c >> 3) * (HEAD_TILE * 128) + sw128_offset(r, c & 7), src, 16);
        }
        cp_async_commit();
    } else {
#pragma unroll
        for (int s = 0; s < STAGES - 1; ++s) {
            if (s < n_tiles) {
                fetch_rows(s, rows_next);
                load_tile(s, rows_next);
            }
            cp_async_commit();
        }
        fetch_rows(STAGES - 1, rows_next);
    }

    float o[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] = 0.0f;
    float m_run[2] = {-INFINITY, -INFINITY};
    float l_run[2] = {0.0f, 0.0f};

#ifdef ABL_TIMING
    long long phase[7] = {0, 0, 0, 0, 0, 0, 0};
    long long tprev = clock64();
#define ABL_MARK(i) do { const long long tnow = clock64(); phase[i] += tnow - tprev; tprev = tnow; } while (0)
#else
#define ABL_MARK(i) do { } while (0)
#endif
    for (int it = 0; it < n_tiles; ++it) {
        // warp group 0 waits for q (first pass only), warp group 1 for tile `it`
        if (wg == 0) cp_async_wait<0>(); else cp_async_wait<STAGES - 2>();
        fence_async_shared();
        ABL_MARK(0);
        __syncthreads();   // tile `it` is in; every thread is done with tile it - 1 (its stage and P)
        ABL_MARK(1);
        const int stage = it % STAGES;
        const uint32_t kv_t = kv_s + stage * STAGE_BYTES;

        if (wg == 0) {
            // S = q . k^T over the whole tile, then the online softmax (base 2) and P (bf16)
            float s[SREG];
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < D_QK / 16; ++kk) {
                const uint64_t da = sw128_desc(q_s + (kk >> 2) * (HEAD_TILE * 128) + (kk & 3) * 32, 16, 1024);
                const uint64_t db = sw128_desc(kv_t + (kk >> 2) * (BLOCK_N * 128) + (kk & 3) * 32, 16, 1024);
#ifndef ABL_NO_QK
                QkMma<BLOCK_N>::run(s, da, db, kk > 0 ? 1 : 0);
#else
                if (kk == 0) QkMma<BLOCK_N>::run(s, da, db, 0);
#endif
            }
            wgmma_commit();
            ABL_MARK(2);
            wgmma_wait<0>();
            ABL_MARK(3);
            const int* ok = tok_ok + stage * BLOCK_N;
            float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
            for (int i = 0; i < BLOCK_N / 8; ++i) {
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const bool valid = ok[8 * i + 2 * (lane & 3) + e] != 0;
                    s[4 * i + e] = valid ? s[4 * i + e] * sm_scale_log2 : -INFINITY;
                    s[4 * i + 2 + e] = valid ? s[4 * i + 2 + e] * sm_scale_log2 : -INFINITY;
                    mx[0] = fmaxf(mx[0], s[4 * i + e]);
                    mx[1] = fmaxf(mx[1], s[4 * i + 2 + e]);
                }
            }
            float m_use[2];
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
                const float m_new = fmaxf(m_run[r], mx[r]);
                m_use[r] = m_new == -INFINITY ? 0.0f : m_new;
                const float alpha = exp2f(m_run[r] - m_use[r]);
                m_run[r] = m_new;
                l_run[r] *= alpha;
                if ((lane & 3) == 0) alpha_s[row0 + 8 * r] = alpha;
            }
            ABL_MARK(4);
            unsigned char* p_g = gbase + (p_s - base);
#pragma unroll
            for (int i = 0; i < BLOCK_N / 8; ++i) {
                const int col = 8 * i + 2 * (lane & 3);   // token within the tile (even)
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const float p0 = exp2f(s[4 * i + 2 * r] - m_use[r]);
                    const float p1 = exp2f(s[4 * i + 2 * r + 1] - m_use[r]);
                    l_run[r] += p0 + p1;
                    const int row = row0 + 8 * r;
                    *reinterpret_cast<__nv_bfloat162*>(p_g + sw128_offset(row, col >> 3) + (col & 7) * 2) =
                        __floats2bfloat162_rn(p0, p1);
                }
            }
            fence_async_shared();
        } else {
            // the next tile's gather, issued while warp group 0 scores this one
            const int next = it + STAGES - 1;
#ifndef ABL_NO_LOAD
            if (next < n_tiles) load_tile(next % STAGES, rows_next);
#endif
            cp_async_commit();
            fetch_rows(next + 1, rows_next);
            ABL_MARK(2);
        }
        __syncthreads();   // P and the rescale factors are complete
        ABL_MARK(5);
        {
            const float a0 = alpha_s[row0], a1 = alpha_s[row0 + 8];
#pragma unroll
            for (int i = 0; i < 32; ++i) {
                o[4 * i + 0] *= a0;
                o[4 * i + 1] *= a0;
                o[4 * i + 2] *= a1;
                o[4 * i + 3] *= a1;
            }
        }
        // O_w += P . V[:, 256 wg : 256 wg + 256]
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BLOCK_N / 16; ++kk) {
            const uint64_t da = sw128_desc(p_s + kk * 32, 16, 1024);
            const uint64_t db = sw128_desc(kv_t + (wg * 4) * (BLOCK_N * 128) + kk * 16 * 128, BLOCK_N * 128, 1024);
#ifndef ABL_NO_PV
            wgmma_m64n256k16_ss_vt(o, da, db, 1);
#else
            if (kk == 0) wgmma_m64n256k16_ss_vt(o, da, db, 1);
#endif
        }
        wgmma_commit();
        wgmma_wait<0>();
        ABL_MARK(6);
    }
    cp_async_wait<0>();
    launch_dependents();   // the combine (or the next step's kernel) may be scheduled; it waits for this grid

    // row sums: warp group 0's threads -> their quad -> shared memory for both groups
    if (wg == 0) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 1);
            l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 2);
        }
        if ((lane & 3) == 0) {
            red_sum[row0] = l_run[0];
            red_sum[row0 + 8] = l_run[1];
            alpha_s[HEAD_TILE + row0] = m_run[0];
            alpha_s[HEAD_TILE + row0 + 8] = m_run[1];
        }
    }
    __syncthreads();
    const float l_row[2] = {red_sum[row0], red_sum[row0 + 8]};
    const float m_row[2] = {alpha_s[HEAD_TILE + row0], alpha_s[HEAD_TILE + row0 + 8]};
    store_output_tile(o, row0, wg * 256 + 2 * (lane & 3), l_row, m_row, wg == 0 && (lane & 3) == 0, gbase, tid, 0, out,
                      o_part, lse, b, heads, h0, split, num_splits, split_done);
#ifdef ABL_TIMING
    // per-phase SM clocks of block (0, 0), written over its output (the numbers are wrong then)
    __syncthreads();
    if (blockIdx.x == 0 && blockIdx.y == 0 && (tid == 0 || tid == 128)) {
        long long* dst = reinterpret_cast<long long*>(num_splits == 1 ? static_cast<void*>(out) : static_cast<void*>(o_part));
        for (int i = 0; i < 7; ++i) dst[(tid / 128) * 8 + i] = phase[i];
        dst[(tid / 128) * 8 + 7] = n_tiles;
    }
#endif
}

#define TILED_ARGS                                                                                              \
    const __nv_bfloat16 *__restrict__ q, const __nv_bfloat16 *__restrict__ kv, const int *__restrict__ indices, \
        __nv_bfloat16 *__restrict__ out, __nv_bfloat16 *__restrict__ o_part, float *__restrict__ lse, int heads, int topk, \
        int tokens_per_split, int num_splits, float sm_scale_log2, int *__restrict__ split_done

#if !defined(num_warps) || num_warps != 12   // a seesaw build (seesaw_sm90.cuh) holds only the kernels it launches
extern "C" __global__ void __launch_bounds__(TILED_THREADS, 1) sparse_mla_decode_tiled_d512(TILED_ARGS) {
    tiled_body<512>(q, kv, indices, out, o_part, lse, heads, topk, tokens_per_split, num_splits, sm_scale_log2, split_done);
}
extern "C" __global__ void __launch_bounds__(TILED_THREADS, 1) sparse_mla_decode_tiled_d576(TILED_ARGS) {
    tiled_body<576>(q, kv, indices, out, o_part, lse, heads, topk, tokens_per_split, num_splits, sm_scale_log2, split_done);
}
#endif

#if !defined(FUSED_COMBINE) && !defined(SIBLING_COMBINE)   // else the split blocks combine (store_output_tile)
// Split-K combine: out[b, h, :] = sum_s 2^(lse_s - M) o_part[b, s, h, :] / sum_s 2^(lse_s - M), M the
// largest lse (zeros when no split saw a valid row). Grid (heads, batch), 128 threads x 4 columns.
extern "C" __global__ void __launch_bounds__(128, 8) sparse_mla_combine_splits(const __nv_bfloat16* __restrict__ o_part,
                                                                            const float* __restrict__ lse,
                                                                            __nv_bfloat16* __restrict__ out, int heads,
                                                                            int num_splits) {
    grid_dependency_wait();   // the partials of the tiled kernel before it (PDL)
    launch_dependents();
    const int h = blockIdx.x, b = blockIdx.y;
    const float* l = lse + static_cast<size_t>(b) * num_splits * heads + h;
    float m = -INFINITY;
    for (int s = 0; s < num_splits; ++s) m = fmaxf(m, l[static_cast<size_t>(s) * heads]);
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    float wsum = 0.0f;
    if (m != -INFINITY) {
        for (int s = 0; s < num_splits; ++s) {
            const float w = exp2f(l[static_cast<size_t>(s) * heads] - m);
            wsum += w;
            const uint2 raw = reinterpret_cast<const uint2*>(o_part +
                                                             ((static_cast<size_t>(b) * num_splits + s) * heads + h) * TILED_DV)[threadIdx.x];
            const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
            const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
            const float4 v = make_float4(lo.x, lo.y, hi.x, hi.y);
            acc.x += w * v.x; acc.y += w * v.y; acc.z += w * v.z; acc.w += w * v.w;
        }
    }
    const float inv = wsum > 0.0f ? 1.0f / wsum : 0.0f;
    __nv_bfloat162* op = reinterpret_cast<__nv_bfloat162*>(out + (static_cast<size_t>(b) * heads + h) * TILED_DV) + 2 * threadIdx.x;
    op[0] = __floats2bfloat162_rn(acc.x * inv, acc.y * inv);
    op[1] = __floats2bfloat162_rn(acc.z * inv, acc.w * inv);
}
#endif
