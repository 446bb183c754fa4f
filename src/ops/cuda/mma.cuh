// Tensor-core building blocks shared by the attention kernels (and smem_u32 by the streaming
// matvec): cp.async into shared memory,
// ldmatrix, mma.sync m16n8k16 with bf16 inputs and f32 accumulators, and m16n8k32 with FP8 E4M3
// inputs (the FP8 matvec).
//
// Fragment layouts of m16n8k16 (lane = 4 * gid + tig): A (16 x 16, row-major) a0 = (gid, 2 tig
// .. +1), a1 = (gid + 8, 2 tig ..), a2 = (gid, 2 tig + 8 ..), a3 = (gid + 8, 2 tig + 8 ..);
// B (16 x 8, "col": k x n with k contiguous) b0 = (k 2 tig .. +1, n gid), b1 = (k 2 tig + 8 ..,
// n gid); C/D (16 x 8) c0, c1 = (gid, 2 tig .. +1), c2, c3 = (gid + 8, 2 tig ..). Two bf16 a
// register, the lower k (or column) in the low half.
#pragma once

#include <cstdint>

namespace rinfer::cuda::kern {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, asynchronously; !valid writes 16 zero bytes instead.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// d += a * b for one 16x8x16 tile.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// d = a * b for one 16x8x32 tile of FP8 E4M3 inputs (sm_89+), f32 out, from a zero accumulator:
// callers add d into their own f32 sums, so that no more than 32 products share the tensor
// core's reduced-precision accumulation. The 8-bit fragments hold four elements a register in the
// m16n8k16 positions above with every k index doubled: a0 = (gid, 4 tig .. +3), a1 = (gid + 8,
// 4 tig ..), a2 = (gid, 4 tig + 16 ..), a3 = (gid + 8, 4 tig + 16 ..); b0 = (k 4 tig .. +3, n
// gid), b1 = (k 4 tig + 16 .., n gid); the lowest k in the lowest byte.
__device__ __forceinline__ void mma_e4m3(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
  const float z = 0.0f;
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%10, %10, %10, %10};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(z));
}

}  // namespace rinfer::cuda::kern
