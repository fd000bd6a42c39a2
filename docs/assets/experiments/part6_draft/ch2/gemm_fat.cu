// One source, every path of chapter 2's operator: the file nvcc builds into a
// fat binary (fatbin.py). DRAFT, Part VI chapter 2 (issue #42).
//
// It holds no kernel of its own: it includes the book's files, so the image
// carries exactly the kernels the listings run.
//   portable  chapter 11's sgemm.cu (fp32 CUDA cores) and convert.cu:
//             compiled into every architecture of the image;
//   mma       chapter 12's tc_gemm.cu (mma.sync m16n8k16, ldmatrix,
//             cp.async): sm_80 and later only, so it is left out of the
//             sm_75 code (a 7.5 GPU that loads the image finds no such
//             kernel: the dispatch must ask the image, not only the GPU);
//   wgmma     chapter 12's wgmma_gemm.cu: only where the compiler targets
//             sm_90a (__CUDA_ARCH_FEAT_SM90_ALL is defined), in a namespace
//             of its own as gpt2_block.cu does (its BM, BN, BK and STAGES
//             would clash with tc_gemm.cu's). compute_90 PTX has no wgmma:
//             wgmma is an sm_90a feature, and PTX that uses it can be
//             compiled for no GPU but compute capability 9.0.
// sgemm.cu names its tile sizes with macros, which no namespace holds, so
// they are undefined after it.
// cudabook: arch sm_75 sm_80 sm_90a

#include "convert.cu"
#include "matmul_fp32/sgemm.cu"
#undef TILE
#undef BM1
#undef BN1
#undef BK1
#undef TM1
#undef BM
#undef BN
#undef BK
#undef TM
#undef TN
#undef NT
#undef WM
#undef WN
#undef PAD

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#include "matmul_tc/tc_gemm.cu"
#endif

#ifdef __CUDA_ARCH_FEAT_SM90_ALL
namespace hopper {
#include "matmul_tc/wgmma_gemm.cu"
}
#endif
