"""Which Nsight Compute metrics can fill issue #45's per-chapter table on
the GPU machine, and what they read for two of the book's kernels.

The table wants, per kernel: DRAM bytes, shared-memory bank conflicts,
achieved occupancy, the top stall reason and, where tensor cores run,
their pipe's utilisation. Metric names differ between GPUs and ncu
versions, so this first asks ncu which exist (run it with
`ncu --query-metrics`), then profiles one launch each of
sgemm_double_buffer (FP32, CUDA cores) and tc_mma_pipelined (bf16,
mma.sync) at 2048^3 with the candidates.

Run:  ncu --query-metrics > metrics.txt      (which of the names below exist)
      ncu --clock-control none --csv --metrics <list> -k regex:'sgemm_double_buffer|tc_mma_pipelined' \
          python docs/assets/experiments/ncu_table_probe.py
with <list> the candidates: dram__bytes_read.sum, dram__bytes_write.sum,
l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum, the same for _st,
sm__warps_active.avg.pct_of_peak_sustained_active (achieved occupancy),
sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active, and
regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio (the
stall reasons, the largest being the top one).

Not yet run: the session that wrote it had no device time left.
"""
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "code"))
import cudabook as cb  # noqa: E402

cb.init()
from pycuda import gpuarray  # noqa: E402

from matmul_fp32 import sgemm  # noqa: E402
from matmul_tc import tc_gemm  # noqa: E402
from cudabook.bf16 import to_bf16  # noqa: E402

n = 2048
rng = np.random.default_rng(0)
a, b = sgemm.random_pair(n, n, n, rng)
ag, bg, cg = gpuarray.to_gpu(a), gpuarray.to_gpu(b), gpuarray.empty((n, n), np.float32)
sgemm.sgemm(sgemm.load_kernels(), "sgemm_double_buffer", ag, bg, cg)
a16, b16 = to_bf16(a), to_bf16(b)
a16g, b16g = gpuarray.to_gpu(a16), gpuarray.to_gpu(b16)
tc_gemm.tc_gemm(tc_gemm.load_kernels(), "tc_mma_pipelined", a16g, b16g, cg)
import pycuda.driver as cuda  # noqa: E402
cuda.Context.synchronize()
print("launched sgemm_double_buffer and tc_mma_pipelined at", n, flush=True)
