"""Does torch.compile work on the GPU machine, and what does it cost?

Issue #45 asks for torch.compile baselines (default and max-autotune) in
fusion, softmax_norm and the transformer block. This probe compiles a
bias+GELU+residual chain, a softmax over rows, and a GPT-2-sized block in
both modes, prints the compile time of each and the kernels each ran, and
reads NVML once, before the listings depend on it.
"""
import time

import torch
import torch.nn.functional as F

print(torch.__version__, torch.cuda.get_device_name(), flush=True)
try:
    import pynvml
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    print("NVML:", pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM), "MHz", flush=True)
except Exception as e:  # noqa: BLE001
    print("NVML failed:", e)


def chain(x, b, r):
    return F.gelu(x + b, approximate="tanh") + r


def softmax(x):
    return torch.softmax(x, dim=-1)


x = torch.randn(8192, 4096, device="cuda", dtype=torch.float32)
b = torch.randn(4096, device="cuda")
r = torch.randn_like(x)
blk = torch.nn.TransformerEncoderLayer(768, 12, 3072, dropout=0.0, activation="gelu", batch_first=True,
                                       norm_first=True).cuda().to(torch.bfloat16).eval()
xb = torch.randn(8, 1024, 768, device="cuda", dtype=torch.bfloat16)


def time_it(fn, *a):
    for _ in range(3):
        fn(*a)
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(20):
        fn(*a)
    e.record()
    e.synchronize()
    return s.elapsed_time(e) / 20


for mode in ("default", "max-autotune"):
    for name, fn, a in (("chain", chain, (x, b, r)), ("softmax", softmax, (x,)), ("block", blk, (xb,))):
        torch._dynamo.reset()
        t0 = time.perf_counter()
        c = torch.compile(fn, mode=mode)
        with torch.no_grad():
            c(*a)
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            ms = time_it(c, *a)
            eager = time_it(fn, *a)
        print(f"{mode:13s} {name:8s} compile {t1 - t0:6.1f} s  compiled {ms:.4f} ms  eager {eager:.4f} ms",
              flush=True)
