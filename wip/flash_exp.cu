// Experiment (not a listing): variants of the chapter's kernel to time
// side by side before choosing what the listing keeps.
#include "../code/attention/flash_bf16.cu"

#define XFLASH(NAME, D, MT, BK, WARPS, LAZY, MINB)                                                  \
    extern "C" __global__ __launch_bounds__(32 * WARPS, MINB) void                                  \
    NAME(const bf16* __restrict__ Q, const bf16* __restrict__ K, const bf16* __restrict__ V,  \
         bf16* __restrict__ O, int S, float scale_log2, int causal)                           \
    {                                                                                         \
        flash_body<D, MT, BK, true, WARPS, LAZY>(Q, K, V, O, S, scale_log2, causal != 0);     \
    }

XFLASH(lazy_d64_m1_n64, 64, 1, 64, 4, true, 1)
XFLASH(lazy_d64_m2_n64, 64, 2, 64, 4, true, 1)
XFLASH(lazy_d128_m1_n64, 128, 1, 64, 4, true, 1)
XFLASH(lazy_d128_m2_n32, 128, 2, 32, 4, true, 1)
XFLASH(lazy_d128_m2_n64, 128, 2, 64, 4, true, 1)
XFLASH(w8_d64_m1_n64, 64, 1, 64, 8, false, 1)
XFLASH(w8_d128_m1_n64, 128, 1, 64, 8, false, 1)
XFLASH(w8lazy_d64_m1_n64, 64, 1, 64, 8, true, 1)
XFLASH(w8lazy_d128_m1_n64, 128, 1, 64, 8, true, 1)
XFLASH(w8lazy_d128_m1_n32, 128, 1, 32, 8, true, 1)
XFLASH(w8lazy_d64_m2_n64, 64, 2, 64, 8, true, 1)
XFLASH(lazy3_d64_m2_n64, 64, 2, 64, 4, true, 3)
XFLASH(w8lazy2_d128_m1_n64, 128, 1, 64, 8, true, 2)
XFLASH(w8lazy2_d128_m1_n32, 128, 1, 32, 8, true, 2)
