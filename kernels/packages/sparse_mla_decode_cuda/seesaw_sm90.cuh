// Sparse MLA decode attention on the Hopper tensor cores with a "seesaw" schedule of two consumer
// warp groups and a gathering producer warp group (num_warps = 12, 384 threads; BLOCK_N 64, two
// tile buffers: STAGES 2), for the tiled implementations (head_tiled, split_k). Same inputs,
// outputs and split-K contract as tiled_sm90.cuh, whose helpers and combine kernel it uses.
//
// The schedule is the one DeepSeek describe for FlashMLA's dense decode kernel ("A Deep-Dive Into
// the New Flash MLA Kernel", FlashMLA docs, 2025-04-22): the 64 x 512 fp32 output of a 64-head tile
// takes 128 registers a thread in each of two warp groups (O_L: columns 0..255 in warp group 0,
// O_R: 256..511 in warp group 1), and the selected rows are taken two 64-row tiles at a time, K0
// (even tile) and K1 (odd tile). Per pair, with m the running row maximum (base 2):
//
//    [0] S0 = q K0^T                    [1] S1 = q K1^T
//    [0] m0 = max(m, rowmax S0), c0 = 2^(m - m0), P0 = 2^(S0 - m0), O_L = c0 O_L + P0 V0L
//    [1] m1 = max(m0, rowmax S1), c1 = 2^(m0 - m1), P1 = 2^(S1 - m1), O_R = c0 c1 O_R + P1 V1R
//    [0] P0 *= c1 (to shared memory), O_L = c1 O_L + P1 V1L     [1] O_R += P0 V0R
//
// so while one warp group runs its softmax the other's wgmma keeps the tensor cores busy. Each
// warp group scores its own tile (q.k^T is split between them, not repeated), multiplies its own P
// from registers (wgmma with A from registers) and the other group's P from shared memory.
//
// The gather is the third warp group's only work (setmaxnreg: 56 registers a thread, the two
// consumer groups 224): 16-byte cp.async copies of each selected row into the two 64-row buffers,
// 128-byte swizzled, one mbarrier per 64-column block of a buffer (cp.async.mbarrier.arrive.noinc),
// so a consumer's wgmma chain starts on the first block that has landed; the tile's row ids travel
// with its first block (4-byte cp.async into shared memory, for the consumers' -1 masks), and the
// next pair's rows are prefetched into L2 (cp.async.bulk.prefetch.L2) a pair ahead. A buffer is
// refilled in two halves as soon as the wgmmas reading each half have completed (an "empty"
// mbarrier per half): K0's columns 0..255 after O_L += P0 V0L, K1's columns 256..511 after
// O_R += P1 V1R, the other halves after the cross products. Warp group 1 scores K1 in the order its
// blocks are refilled. For d_qk = 576 the rope block of each buffer (columns 512..575, only q.k^T
// reads it) holds that tile's P once its q.k^T is done, which keeps q (72 KiB) and both buffers
// within 227 KiB.
//
// What bounds it (tuning/ablate.py --seesaw, H200): the consumers' own chain of maxima,
// exponentials, rescaling and hand-offs. With no copies, no q.k^T and no p.v at all, V3.2 batch 64
// still takes 56 of its 79 us; with the copies alone or the products alone it takes all 79. A
// buffer's second half can only be refilled after the other warp group's cross product at the end
// of the pair, so the next pair's q.k^T of K1 also waits for that product, the hand-off through
// the producer and the copy. Four 32-row buffers (two pairs in flight) remove that wait but make
// q.k^T an m64n32k16 chain and were slower (V3.2 batch 64: 95 us).
//
// Measurement builds (tuning/ablate.py --seesaw; their outputs are wrong): SS_NO_LOAD (the rows of
// the first pair only), ABL_NO_QK / ABL_NO_PV (one wgmma instead of each chain), SS_NO_PREFETCH,
// SS_TIMING (block (0, 0)'s SM clocks per phase of each consumer group and of the producer, written
// over its output).
//
// Layout and grid as tiled_sm90.cuh; block 384 threads; dynamic shared memory
// SEESAW_SMEM_BYTES(d_qk) (harness.seesaw_smem_bytes); tokens_per_split a multiple of 128.
#pragma once
#include "tiled_sm90.cuh"

#define SEESAW_THREADS 384
#define SEESAW_CONSUMER_REGS 224
#define SEESAW_PRODUCER_REGS 56
// q, two 64-row buffers, two P tiles when d_qk has no rope block to hold them, then mbarriers (256
// bytes), the buffers' row ids (512), the exchange arrays (1.5 KiB) and 1 KiB to align the base to
// the swizzle atom
#define SEESAW_SMEM_BYTES(d_qk) (3 * 64 * (d_qk) * 2 + ((d_qk) == 512 ? 2 * 64 * 128 : 0) + 2560 + 1024)

static_assert(BLOCK_N == 64, "the seesaw schedule takes 64-row tiles");

// named barriers (0 is __syncthreads): each is arrived at by one consumer warp group and waited on
// by the other, once a pair, in an order that keeps either group from lapping the other
#define SEESAW_BAR_M0 1   // warp group 0 -> 1: m0 and c0 of the pair
#define SEESAW_BAR_S1 2   // warp group 1 -> 0: m1, c1 and P1 in shared memory
#define SEESAW_BAR_P0 3   // warp group 0 -> 1: c1 * P0 in shared memory
#define SEESAW_BAR_END 4  // both consumer groups: the row sums of the epilogue

__device__ __forceinline__ void mbar_init(uint32_t addr, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(addr), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t addr) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(addr) : "memory");
}
// Wait until the phase of parity `parity` of the mbarrier has completed.
__device__ __forceinline__ void mbar_wait(uint32_t addr, int parity) {
    asm volatile(
        "{\n.reg .pred done;\n"
        "WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT;\n"
        "}\n" ::"r"(addr),
        "r"(parity)
        : "memory");
}
// Arrive on the mbarrier when this thread's cp.async copies issued so far have landed (counts as
// one of its expected arrivals: .noinc).
__device__ __forceinline__ void cp_async_mbar_arrive(uint32_t addr) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(addr) : "memory");
}
__device__ __forceinline__ void named_bar_sync(int id, int count) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void named_bar_arrive(int id, int count) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
// Keep the compiler from moving register reads or writes of an accumulator across an asynchronous
// wgmma's issue or wait (the wgmma writes the registers behind the compiler's back).
__device__ __forceinline__ void fence_acc(float& r) { asm volatile("" : "+f"(r)::"memory"); }
template <int N>
__device__ __forceinline__ void fence_acc(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) fence_acc(r[i]);
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
}

template <int D_QK>
__device__ __forceinline__ void seesaw_body(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ kv,
                                            const int* __restrict__ indices, __nv_bfloat16* __restrict__ out,
                                            __nv_bfloat16* __restrict__ o_part, float* __restrict__ lse, int heads, int topk,
                                            int tokens_per_split, int num_splits, float sm_scale_log2,
                                            int* __restrict__ split_done) {
    static_assert(D_QK == 512 || D_QK == 576, "d_qk must be 512 or 576");
    constexpr int CB = D_QK / 64;                 // 64-column blocks of a row (8 KiB at 64 rows)
    constexpr int BLK = 64 * 128;                 // bytes of one 64-row x 64-column block
    constexpr int TILE_BYTES = CB * BLK;
    constexpr bool ROPE = D_QK == 576;
    static_assert(3 * TILE_BYTES >= OUT_STAGE_BYTES, "the output is staged in q and the buffers");

    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const uint32_t raw = smem_addr(smem_raw);
    const uint32_t base = (raw + 1023u) & ~1023u;
    unsigned char* gbase = smem_raw + (base - raw);
    const uint32_t q_s = base;
    const uint32_t kv_s[2] = {base + TILE_BYTES, base + 2 * TILE_BYTES};
    const uint32_t tail = base + 3 * TILE_BYTES;
    // P tiles: the rope block of each buffer, or two tiles of their own
    const uint32_t p_s[2] = {ROPE ? kv_s[0] + 8 * BLK : tail, ROPE ? kv_s[1] + 8 * BLK : tail + BLK};
    const uint32_t bars = tail + (ROPE ? 0 : 2 * BLK);
    // mbarriers: full[2][CB] (a buffer's column block has landed), empty[4] (halves free again:
    // 0 = K0 columns 0..255, 1 = K0 columns 256.. (and its rope block), 2 = K1 columns 256..511,
    // 3 = K1 columns 0..255 and its rope block)
    auto full_bar = [&](int buf, int c) { return bars + 8u * (buf * CB + c); };
    auto empty_bar = [&](int half) { return bars + 8u * (2 * CB + half); };
    const uint32_t ids_s = bars + 256;                                      // [2][64] int: each buffer's row ids
    const int* ids_g = reinterpret_cast<const int*>(gbase + (ids_s - base));
    float* xchg = reinterpret_cast<float*>(gbase + (ids_s - base) + 512);
    float* x_m0 = xchg;            // [64] m0 of the pair
    float* x_c0 = xchg + 64;       // [64] c0
    float* x_m1 = xchg + 128;      // [64] m1
    float* x_c1 = xchg + 192;      // [64] c1
    float* x_l = xchg + 256;       // [2][64] row sums at the end

    const int tid = threadIdx.x;
    // the warp group, read from lane 0 so the compiler sees a warp-uniform value (a branch on it
    // is then not divergent, and ptxas need not serialise the wgmma in it)
    const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);
    const int lane = tid % 32;
    const int head_tiles = heads / HEAD_TILE;
    const int h0 = (blockIdx.x % head_tiles) * HEAD_TILE;
    const int split = blockIdx.x / head_tiles;
    const int b = blockIdx.y;
    const int t_begin = split * tokens_per_split;
    const int t_end = min(topk, t_begin + tokens_per_split);
    const int n_tiles = t_end > t_begin ? (t_end - t_begin + 63) / 64 : 0;
    const int n_pairs = (n_tiles + 1) / 2;
    const int* idx = indices + static_cast<size_t>(b) * topk;

    if (tid == 0) {
        for (int i = 0; i < 2 * CB; ++i) mbar_init(bars + 8u * i, 128);
        for (int i = 0; i < 4; ++i) mbar_init(empty_bar(i), 128);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    grid_dependency_wait();   // inputs may come from the kernel before this one (PDL)

    if (wg == 2) {
        // ---------------------------------------------------------------- producer: the gather
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(SEESAW_PRODUCER_REGS));
        const int p = tid - 256;
        const int prow = p >> 3, pc = p & 7;   // rows prow + 16k (k = 0..3), 16-byte chunk pc of a block
        int ids[8];                            // the pair's row ids: K0's four rows, then K1's
        auto load_ids = [&](int pair) {
#pragma unroll
            for (int k = 0; k < 8; ++k) {
                const int tile = 2 * pair + (k >> 2);
                const int tok = t_begin + tile * 64 + prow + 16 * (k & 3);
                ids[k] = (tile < n_tiles && tok < t_end) ? __ldg(idx + tok) : -1;
            }
        };
        bool copy_rows = true;                 // false only in the SS_NO_LOAD measurement build
        auto issue = [&](int buf, int c) {
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                if (!copy_rows) break;
                const int row = ids[4 * buf + k];
                const __nv_bfloat16* src = kv + static_cast<size_t>(row < 0 ? 0 : row) * D_QK + c * 64 + pc * 8;
                cp_async_16(kv_s[buf] + c * BLK + sw128_offset(prow + 16 * k, pc), src, row >= 0 ? 16 : 0);
            }
            cp_async_mbar_arrive(full_bar(buf, c));
        };
        // the tile's 64 row ids into the buffer's id slot (4-byte cp.async; zeros past the split),
        // issued before the tile's first block so that block's mbarrier covers them
        auto issue_ids = [&](int buf, int tile) {
            if (p < 64) {
                const int t = t_begin + tile * 64 + p;
                const bool in = tile < n_tiles && t < t_end;
                asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(ids_s + buf * 256 + p * 4),
                             "l"(idx + (in ? t : 0)), "r"(in ? 4 : 0) : "memory");
            }
        };
        auto issue_q = [&](int c) {
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const int r = prow + 16 * k;
                const __nv_bfloat16* src = q + (static_cast<size_t>(b) * heads + h0 + r) * D_QK + c * 64 + pc * 8;
                cp_async_16(q_s + c * BLK + sw128_offset(r, pc), src, 16);
            }
        };
        // L2 prefetch of a pair's rows, one bulk prefetch a row (thread pc takes ids[pc]), issued
        // about a pair ahead of the copies so they find the rows in L2
        auto prefetch_rows = [&]() {
#ifndef SS_NO_PREFETCH
            int row = -1;
#pragma unroll
            for (int k = 0; k < 8; ++k) row = k == pc ? ids[k] : row;   // ids[pc], kept in registers
            if (row >= 0)
                asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(kv + static_cast<size_t>(row) * D_QK),
                             "n"(D_QK * 2) : "memory");
#endif
        };
#ifdef SS_TIMING
        unsigned pphase[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
        unsigned ptprev = static_cast<unsigned>(clock());
#define SS_PMARK(i) do { const unsigned tnow = static_cast<unsigned>(clock()); pphase[i] += tnow - ptprev; ptprev = tnow; } while (0)
#else
#define SS_PMARK(i) do { } while (0)
#endif
        load_ids(0);
        for (int pair = 0; pair < n_pairs; ++pair) {
#ifdef SS_NO_LOAD
            copy_rows = pair == 0;   // measurement only: later pairs reuse the first pair's rows
#endif
            const int par = (pair & 1) ^ 1;   // the previous use's phase (a fresh barrier passes)
            mbar_wait(empty_bar(0), par);
            SS_PMARK(0);
            issue_ids(0, 2 * pair);
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                if (pair == 0) issue_q(c);
                issue(0, c);
            }
            if (pair == 0) {
#pragma unroll
                for (int c = 4; c < CB; ++c) issue_q(c);
            }
            SS_PMARK(1);
            mbar_wait(empty_bar(2), par);
            SS_PMARK(2);
            issue_ids(1, 2 * pair + 1);
#pragma unroll
            for (int c = 4; c < 8; ++c) issue(1, c);
            SS_PMARK(3);
            mbar_wait(empty_bar(1), par);
            SS_PMARK(4);
#pragma unroll
            for (int c = 4; c < CB; ++c) issue(0, c);
            SS_PMARK(5);
            mbar_wait(empty_bar(3), par);
            SS_PMARK(6);
#pragma unroll
            for (int c = 0; c < 4; ++c) issue(1, c);
            if (ROPE) issue(1, 8);
            SS_PMARK(7);
            load_ids(pair + 1);
            prefetch_rows();
            SS_PMARK(8);
        }
        asm volatile("cp.async.wait_all;\n" ::: "memory");
        launch_dependents();
#ifdef SS_TIMING
        // the producer's phases, for consumer thread 0 to write out after the output (named barrier 5)
        if (p == 0) {
            unsigned* dst = reinterpret_cast<unsigned*>(xchg + 384);
            for (int i = 0; i < 9; ++i) dst[i] = pphase[i];
        }
        named_bar_sync(5, SEESAW_THREADS);
#endif
        return;
    }

    // -------------------------------------------------------------------- consumers
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(SEESAW_CONSUMER_REGS));
    const int q4 = lane & 3;
    const int row0 = ((tid % 128) / 32) * 16 + lane / 4;   // this thread's rows: row0, row0 + 8
#ifdef SS_TIMING
    unsigned phase[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    unsigned tprev = static_cast<unsigned>(clock());
#define SS_MARK(i) do { const unsigned tnow = static_cast<unsigned>(clock()); phase[i] += tnow - tprev; tprev = tnow; } while (0)
#else
#define SS_MARK(i) do { } while (0)
#endif
    float o[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] = 0.0f;
    float m_run[2] = {-INFINITY, -INFINITY};
    float l_run[2] = {0.0f, 0.0f};
    unsigned char* p_g[2] = {gbase + (p_s[0] - base), gbase + (p_s[1] - base)};

    // validity of this thread's 16 score columns of a tile (8i + 2 q4 + e), one bit each, from the
    // tile's ids the producer copied into shared memory with the tile (read after its first block
    // has landed)
    auto valid_mask = [&](int buf, int tile) {
        uint32_t mask = 0;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int col = 8 * i + 2 * q4;
            const int2 v = *reinterpret_cast<const int2*>(ids_g + buf * 64 + col);
            const int t = t_begin + tile * 64 + col;
            mask |= (t < t_end && v.x >= 0) ? 1u << (2 * i) : 0u;
            mask |= (t + 1 < t_end && v.y >= 0) ? 2u << (2 * i) : 0u;
        }
        return mask;
    };
    // S = q . K^T over the buffer's column blocks in the order given
    auto score = [&](float (&s)[32], int buf, int par, const int* order) {
        wgmma_fence();
#pragma unroll
        for (int j = 0; j < CB; ++j) {
            const int c = order[j];
            mbar_wait(full_bar(buf, c), par);
            fence_async_shared();
#pragma unroll
            for (int k4 = 0; k4 < 4; ++k4) {
                const uint64_t da = sw128_desc(q_s + c * BLK + k4 * 32, 16, 1024);
                const uint64_t db = sw128_desc(kv_s[buf] + c * BLK + k4 * 32, 16, 1024);
#ifdef ABL_NO_QK
                if (j == 0 && k4 == 0)
#endif
                wgmma_m64n64k16_ss(s, da, db, (j > 0 || k4 > 0) ? 1 : 0);
            }
        }
        wgmma_commit();
        wgmma_wait<0>();
        fence_acc(s);
    };
    // scale and mask the scores, return the two rows' maxima (over the quad)
    auto mask_max = [&](float (&s)[32], uint32_t mask, float (&mx)[2]) {
        mx[0] = mx[1] = -INFINITY;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const bool ok = (mask >> (2 * i + e)) & 1u;
                s[4 * i + e] = ok ? s[4 * i + e] * sm_scale_log2 : -INFINITY;
                s[4 * i + 2 + e] = ok ? s[4 * i + 2 + e] * sm_scale_log2 : -INFINITY;
                mx[0] = fmaxf(mx[0], s[4 * i + e]);
                mx[1] = fmaxf(mx[1], s[4 * i + 2 + e]);
            }
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        }
    };
    // P = 2^(S - m) in place (fp32), its row sums, and the bf16 A fragments of P . V
    auto exponentiate = [&](float (&s)[32], const float (&m_use)[2], float (&rowsum)[2], uint32_t (&pa)[16]) {
        rowsum[0] = rowsum[1] = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                s[4 * i + 2 * r] = exp2f(s[4 * i + 2 * r] - m_use[r]);
                s[4 * i + 2 * r + 1] = exp2f(s[4 * i + 2 * r + 1] - m_use[r]);
                rowsum[r] += s[4 * i + 2 * r] + s[4 * i + 2 * r + 1];
            }
        }
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
            pa[4 * kk + 0] = pack_bf16(s[8 * kk + 0], s[8 * kk + 1]);
            pa[4 * kk + 1] = pack_bf16(s[8 * kk + 2], s[8 * kk + 3]);
            pa[4 * kk + 2] = pack_bf16(s[8 * kk + 4], s[8 * kk + 5]);
            pa[4 * kk + 3] = pack_bf16(s[8 * kk + 6], s[8 * kk + 7]);
        }
    };
    // c * P as bf16 into the shared P tile (128-byte swizzled, 64 rows x 64 columns)
    auto store_p = [&](const float (&s)[32], const float (&c)[2], unsigned char* dst) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int col = 8 * i + 2 * q4;
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int row = row0 + 8 * r;
                *reinterpret_cast<__nv_bfloat162*>(dst + sw128_offset(row, col >> 3) + (col & 7) * 2) =
                    __floats2bfloat162_rn(s[4 * i + 2 * r] * c[r], s[4 * i + 2 * r + 1] * c[r]);
            }
        }
        fence_async_shared();
    };
    auto scale_o = [&](const float (&c)[2]) {
#pragma unroll
        for (int i = 0; i < 32; ++i) {
            o[4 * i + 0] *= c[0];
            o[4 * i + 1] *= c[0];
            o[4 * i + 2] *= c[1];
            o[4 * i + 3] *= c[1];
        }
    };
    // O += P . V[:, 256 half : 256 half + 256] of buffer `buf`, P from registers or shared memory
    auto pv_regs = [&](const uint32_t (&pa)[16], int buf, int half) {
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
            const uint32_t a[4] = {pa[4 * kk], pa[4 * kk + 1], pa[4 * kk + 2], pa[4 * kk + 3]};
#ifdef ABL_NO_PV
            if (kk == 0)
#endif
            wgmma_m64n256k16_rs_vt(o, a, sw128_desc(kv_s[buf] + (half * 4) * BLK + kk * 16 * 128, BLK, 1024));
        }
        wgmma_commit();
    };
    auto pv_smem = [&](uint32_t p_tile, int buf, int half) {
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
#ifdef ABL_NO_PV
            if (kk == 0)
#endif
            wgmma_m64n256k16_ss_vt(o, sw128_desc(p_tile + kk * 32, 16, 1024),
                                   sw128_desc(kv_s[buf] + (half * 4) * BLK + kk * 16 * 128, BLK, 1024), 1);
        wgmma_commit();
    };

    if (wg == 0) {
        constexpr int order0[9] = {0, 1, 2, 3, 4, 5, 6, 7, 8};
        for (int pair = 0; pair < n_pairs; ++pair) {
            const int par = pair & 1;
            float s[32];
            score(s, 0, par, order0);                       // S0 = q K0^T
            SS_MARK(0);
            const uint32_t mask = valid_mask(0, 2 * pair);
            float mx[2], m_use[2], c0[2], c1[2], rs[2];
            mask_max(s, mask, mx);
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const float m0 = fmaxf(m_run[r], mx[r]);
                m_use[r] = m0 == -INFINITY ? 0.0f : m0;
                c0[r] = exp2f(m_run[r] - m_use[r]);
                m_run[r] = m0;
                if (q4 == 0) {
                    x_m0[row0 + 8 * r] = m0;
                    x_c0[row0 + 8 * r] = c0[r];
                }
            }
            named_bar_arrive(SEESAW_BAR_M0, 256);
            SS_MARK(1);
            uint32_t pa[16];
            exponentiate(s, m_use, rs, pa);                 // P0
            l_run[0] = l_run[0] * c0[0] + rs[0];
            l_run[1] = l_run[1] * c0[1] + rs[1];
            fence_acc(o);
            scale_o(c0);
            pv_regs(pa, 0, 0);                               // O_L = c0 O_L + P0 V0L
            SS_MARK(2);
            named_bar_sync(SEESAW_BAR_S1, 256);             // m1, c1 and P1 are in
            SS_MARK(3);
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                c1[r] = x_c1[row0 + 8 * r];
                m_run[r] = x_m1[row0 + 8 * r];
                l_run[r] *= c1[r];
            }
            store_p(s, c1, p_g[0]);                          // c1 P0 for warp group 1
            named_bar_arrive(SEESAW_BAR_P0, 256);
            SS_MARK(4);
            wgmma_wait<0>();
            fence_acc(o);
            mbar_arrive(empty_bar(0));                       // K0 columns 0..255 are free
            SS_MARK(5);
#pragma unroll
            for (int c = 0; c < 4; ++c) mbar_wait(full_bar(1, c), par);
            fence_async_shared();
            scale_o(c1);
            pv_smem(p_s[1], 1, 0);                           // O_L = c1 O_L + P1 V1L
            SS_MARK(6);
            wgmma_wait<0>();
            fence_acc(o);
            mbar_arrive(empty_bar(3));                       // K1 columns 0..255 (and P1) are free
            SS_MARK(7);
        }
    } else {
        constexpr int order1[9] = {4, 5, 6, 7, 0, 1, 2, 3, 8};
        for (int pair = 0; pair < n_pairs; ++pair) {
            const int par = pair & 1;
            float s[32];
            score(s, 1, par, order1);                       // S1 = q K1^T
            SS_MARK(0);
            const uint32_t mask = valid_mask(1, 2 * pair + 1);
            float mx[2], m_use[2], c0[2], c1[2], cc[2], rs[2];
            mask_max(s, mask, mx);
            SS_MARK(1);
            named_bar_sync(SEESAW_BAR_M0, 256);             // m0, c0 are in
            SS_MARK(2);
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const float m0 = x_m0[row0 + 8 * r];
                c0[r] = x_c0[row0 + 8 * r];
                const float m1 = fmaxf(m0, mx[r]);
                m_use[r] = m1 == -INFINITY ? 0.0f : m1;
                c1[r] = exp2f(m0 - m_use[r]);
                cc[r] = c0[r] * c1[r];
                m_run[r] = m1;
                if (q4 == 0) {
                    x_m1[row0 + 8 * r] = m1;
                    x_c1[row0 + 8 * r] = c1[r];
                }
            }
            uint32_t pa[16];
            exponentiate(s, m_use, rs, pa);                 // P1
            l_run[0] = l_run[0] * cc[0] + rs[0];
            l_run[1] = l_run[1] * cc[1] + rs[1];
            const float one[2] = {1.0f, 1.0f};
            store_p(s, one, p_g[1]);                         // P1 for warp group 0
            named_bar_arrive(SEESAW_BAR_S1, 256);
            fence_acc(o);
            scale_o(cc);
            pv_regs(pa, 1, 1);                               // O_R = c0 c1 O_R + P1 V1R
            SS_MARK(3);
            wgmma_wait<0>();
            mbar_arrive(empty_bar(2));                       // K1 columns 256..511 are free
            named_bar_sync(SEESAW_BAR_P0, 256);             // c1 P0 is in
            SS_MARK(4);
#pragma unroll
            for (int c = 4; c < 8; ++c) mbar_wait(full_bar(0, c), par);
            fence_async_shared();
            pv_smem(p_s[0], 0, 1);                           // O_R += c1 P0 V0R
            SS_MARK(5);
            SS_MARK(6);
            wgmma_wait<0>();
            fence_acc(o);
            mbar_arrive(empty_bar(1));                       // K0 columns 256.. (and P0) are free
            SS_MARK(7);
        }
    }
    launch_dependents();   // the combine (or the next step's kernel) may be scheduled; it waits for this grid

    // row sums: each group's quad sums -> shared memory; l = l_0 + l_1
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 1);
        l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 2);
        if (q4 == 0) x_l[wg * 64 + row0 + 8 * r] = l_run[r];
    }
    named_bar_sync(SEESAW_BAR_END, 256);
    const float l_row[2] = {x_l[row0] + x_l[64 + row0], x_l[row0 + 8] + x_l[64 + row0 + 8]};
    store_output_tile(o, row0, wg * 256 + 2 * q4, l_row, m_run, wg == 0 && q4 == 0, gbase, tid, SEESAW_BAR_END, out,
                      o_part, lse, b, heads, h0, split, num_splits, split_done);   // q and buffers are free
#ifdef SS_TIMING
    // per-phase SM clocks of block (0, 0), written over its output (the numbers are wrong then)
    named_bar_sync(SEESAW_BAR_END, 256);
    named_bar_sync(5, SEESAW_THREADS);   // the producer's phases are in shared memory
    if (blockIdx.x == 0 && blockIdx.y == 0 && (tid == 0 || tid == 128)) {
        long long* dst = reinterpret_cast<long long*>(num_splits == 1 ? static_cast<void*>(out) : static_cast<void*>(o_part));
        for (int i = 0; i < 8; ++i) dst[wg * 9 + i] = phase[i];
        dst[wg * 9 + 8] = n_pairs;
        if (tid == 0) {
            const unsigned* pp = reinterpret_cast<const unsigned*>(xchg + 384);
            for (int i = 0; i < 9; ++i) dst[18 + i] = pp[i];
        }
    }
#endif
}

extern "C" __global__ void __launch_bounds__(SEESAW_THREADS, 1) sparse_mla_decode_seesaw_d512(TILED_ARGS) {
    seesaw_body<512>(q, kv, indices, out, o_part, lse, heads, topk, tokens_per_split, num_splits, sm_scale_log2, split_done);
}
extern "C" __global__ void __launch_bounds__(SEESAW_THREADS, 1) sparse_mla_decode_seesaw_d576(TILED_ARGS) {
    seesaw_body<576>(q, kv, indices, out, o_part, lse, heads, topk, tokens_per_split, num_splits, sm_scale_log2, split_done);
}
