"""Issue #45's measurement machinery tried on the GPU before the book is
re-recorded with it (not a listing; no record). Run from the checkout on
the GPU machine:

    bash .gpu/gpu-env.sh python3 docs/assets/experiments/evidence_probe.py

with nvidia-ml-py (and, optionally, liger-kernel) on PYTHONPATH. It asks:

A. Do the clocks move during a long tensor-core run, and does NVML see
   why? cuBLAS bf16 8192^3 products in eight blocks of about a second,
   each bracketed by gpu_state.around: TFLOP/s, SM clock at each end,
   time held by the power or thermal limit, mean power.
B. Why did the book's SDPA baseline read slower than an independent
   timing (issue #45, item 5)? At B=8, H=16, S=4096, D=128, bf16, causal
   and not: SDPA timed as the listing times it (cudabook.bench, after our
   kernels), with torch's events around 40 calls after warm-up (as the
   independent timing did), and in alternation with our best kernel
   (comparison.alternate: ratio median and p20-p80); and which kernels
   each backend ran (comparison.kernels), with torch._fused_sdp_choice.
C. Does CUPTI see our PyCUDA kernel (so kernel sums can time both sides)?
D. Does liger-kernel run here, as an extra baseline (RMSNorm)?
E. What does SDPA run in float32 (the attention chapter's "fp32" SDPA
   bar), and how does it compare with its math backend in true FP32?
   Also the default of torch.backends.cudnn.benchmark_limit.

F. The transformer block (issue #45, item 4): the book's eight launches
   and PyTorch's eager block at B = 8 and B = 1, T = 1024, timed with
   events around each call (as the listing does), as the sum of their
   kernels' GPU time (profiler), and, for PyTorch's, replayed as a CUDA
   graph; then ours against the graphed eager block in alternation.

`python3 evidence_probe.py E F` runs parts E and F alone.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "code"), str(ROOT / "code" / "attention")]

import numpy as np  # noqa: E402

import cudabook as cb  # noqa: E402
from cudabook import comparison, gpu_state  # noqa: E402

OUT = Path(os.environ.get("OUT", "/tmp"))
found: dict = {}


def say(*a):
    print(*a, flush=True)


def part_a(torch):
    say("\n== A. cuBLAS bf16 8192^3, eight blocks of about 1 s, state around each")
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(5):
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize()
    say("idle-ish:", gpu_state.read().__dict__)
    rows = []
    for k in range(8):
        def block():
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(600):
                torch.matmul(a, b, out=c)
            e.record()
            e.synchronize()
            return s.elapsed_time(e) / 600
        ms, span = gpu_state.around(block)
        tf = 2 * n ** 3 / (ms * 1e-3) / 1e12
        rows.append({"block": k, "ms": ms, "tflops": tf, **({"state": span.as_dict()} if span else {})})
        say(f"block {k}: {ms:.4f} ms {tf:6.1f} TFLOP/s | {span.summary() if span else 'no NVML'}")
    found["A_gemm_blocks"] = rows
    profile = comparison.kernels(lambda: torch.matmul(a, b, out=c))
    say("cuBLAS ran:", profile.kernels)
    found["A_gemm_kernels"] = profile.as_dict()


def part_b(torch):
    import flash_bf16 as fb
    import torch.nn.functional as F
    from pycuda import gpuarray
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import _ref

    kernels = fb.load_kernels()
    b, h, s, d = 8, 16, 4096, 128
    q16, k16, v16 = _ref.random_qkv(b, h, s, d, 1, np.random.default_rng(1), bf16=True)
    qg, kg, vg = (gpuarray.to_gpu(x) for x in (q16, k16, v16))
    og = gpuarray.empty(q16.shape, np.uint16)
    tq, tk, tv = (torch.from_numpy(x.view(np.int16)).cuda().view(torch.bfloat16) for x in (q16, k16, v16))
    ws = 4 * q16.nbytes
    backends = {"default": None, "flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
    for causal in (False, True):
        tag = "causal" if causal else "full"
        work = _ref.flops(b, h, s, d, causal)
        tf = lambda ms: work / (ms * 1e-3) / 1e12  # noqa: E731
        res: dict = {"choice": None}
        try:
            res["choice"] = SDPBackend(torch._fused_sdp_choice(tq, tk, tv, None, 0.0, causal)).name
        except Exception as e:  # the private API moved
            res["choice"] = f"not available: {e}"
        say(f"\n== B. S={s} D={d} {tag}: torch._fused_sdp_choice -> {res['choice']}")

        ours_name = "flash_d128_m2_n64"
        ours = lambda: fb.attention(kernels, ours_name, qg, kg, vg, og, causal)  # noqa: E731

        def sdpa(backend):
            def call():
                if backend is None:
                    return F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
            return call

        # 1. As the listing times it: ours first, then each SDPA backend.
        t_ours = cb.bench(ours, working_set_bytes=ws).median_ms
        res["listing_way"] = {"ours_ms": t_ours, "ours_tflops": tf(t_ours)}
        say(f"listing's way: ours {t_ours:.4f} ms {tf(t_ours):.1f} TFLOP/s")
        for name, be in backends.items():
            try:
                ms = cb.bench(sdpa(be), working_set_bytes=ws).median_ms
            except RuntimeError as e:
                say(f"  SDPA {name}: not available ({str(e)[:80]})")
                continue
            res["listing_way"][name] = {"ms": ms, "tflops": tf(ms)}
            say(f"  SDPA {name}: {ms:.4f} ms {tf(ms):.1f} TFLOP/s (cudabook.bench, PyCUDA events a call)")

        # 2. The independent way: torch events around 40 calls, after 10 warm-ups.
        res["torch_events_40"] = {}
        for name, be in backends.items():
            call = sdpa(be)
            try:
                for _ in range(10):
                    call()
            except RuntimeError:
                continue
            st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            st.record()
            for _ in range(40):
                call()
            en.record()
            en.synchronize()
            ms = st.elapsed_time(en) / 40
            res["torch_events_40"][name] = {"ms": ms, "tflops": tf(ms)}
            say(f"  SDPA {name}: {ms:.4f} ms {tf(ms):.1f} TFLOP/s (torch events around 40 calls)")

        # 3. The host: what one call costs the CPU, against the GPU's time.
        for name, be in backends.items():
            call = sdpa(be)
            try:
                call()
            except RuntimeError:
                continue
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(40):
                call()
            host = (time.perf_counter() - t0) / 40 * 1e3
            torch.cuda.synchronize()
            res.setdefault("host_ms_per_call", {})[name] = host
            say(f"  SDPA {name}: the host issues a call in {host:.4f} ms")

        # 4. In alternation with ours, the ratio with its spread.
        res["alternate"] = {}
        for name, be in backends.items():
            try:
                sdpa(be)()
            except RuntimeError:
                continue
            c = comparison.alternate(ours, sdpa(be), working_set_bytes=ws, rounds=7, budget_ms=700.0)
            res["alternate"][name] = c.as_dict()
            say("  " + c.line(ours_name, f"SDPA {name}") +
                f"; ours {tf(c.ours.median_ms):.1f}, SDPA {tf(c.baseline.median_ms):.1f} TFLOP/s")
            if c.state:
                say("    state over the rounds: held", c.state["held_ns"], "mean W",
                    round(c.state["mean_power_w"] or 0), "SM MHz",
                    c.state["before"]["sm_clock_mhz"], "->", c.state["after"]["sm_clock_mhz"])

        # 5. What ran.
        res["kernels"] = {}
        for name, be in backends.items():
            try:
                p = comparison.kernels(sdpa(be))
            except RuntimeError:
                continue
            res["kernels"][name] = p.as_dict()
            say(f"  SDPA {name} ran {p.launches:.0f} GPU ops a call, {p.gpu_ms:.4f} ms: {p.kernels}")
        p = comparison.kernels(ours)
        res["kernels"]["ours"] = p.as_dict()
        say(f"  ours ran {p.launches:.0f} GPU ops a call, {p.gpu_ms:.4f} ms: {p.kernels}  (part C)")
        found[f"B_{tag}"] = res


def part_d(torch):
    say("\n== D. liger-kernel")
    try:
        from liger_kernel.transformers.rms_norm import LigerRMSNorm
    except Exception as e:
        found["D_liger"] = f"import failed: {type(e).__name__}: {e}"
        say(found["D_liger"])
        return
    rows, cols = 32768, 4096
    x = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)
    m = LigerRMSNorm(cols).cuda().to(torch.bfloat16)
    ref = torch.nn.functional.rms_norm(x.float(), (cols,), m.weight.float(), m.variance_epsilon)
    err = (m(x).float() - ref).abs().max().item()
    ms = cb.bench(lambda: m(x), working_set_bytes=2 * x.numel() * 2).median_ms
    tms = cb.bench(lambda: torch.nn.functional.rms_norm(x, (cols,), m.weight, m.variance_epsilon),
                   working_set_bytes=2 * x.numel() * 2).median_ms
    gbs = lambda t: 2 * x.numel() * 2 / (t * 1e-3) / 1e9  # noqa: E731
    found["D_liger"] = {"ms": ms, "gb_s": gbs(ms), "torch_ms": tms, "torch_gb_s": gbs(tms), "max_err": err,
                        "kernels": comparison.kernels(lambda: m(x)).kernels}
    say(f"LigerRMSNorm {rows}x{cols} bf16: {ms:.4f} ms {gbs(ms):.0f} GB/s (max err {err:.3g}); "
        f"F.rms_norm {tms:.4f} ms {gbs(tms):.0f} GB/s")


def part_e(torch):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    say(f"\n== E. SDPA in float32; cudnn.benchmark_limit = {torch.backends.cudnn.benchmark_limit}")
    found["E_cudnn_benchmark_limit"] = torch.backends.cudnn.benchmark_limit
    b, h, s, d = 8, 16, 4096, 128
    g = torch.Generator(device="cuda").manual_seed(1)
    q, k, v = (torch.randn(b, h, s, d, device="cuda", generator=g) for _ in range(3))
    work = 4 * b * h * s * s * d
    choice = SDPBackend(torch._fused_sdp_choice(q, k, v, None, 0.0, False)).name
    say("torch._fused_sdp_choice ->", choice)
    res = {"choice": choice}
    ref = F.scaled_dot_product_attention(q[:1, :2].double(), k[:1, :2].double(), v[:1, :2].double())
    for name, be in (("default", None), ("efficient", SDPBackend.EFFICIENT_ATTENTION),
                     ("math, TF32 off", SDPBackend.MATH)):
        def call():
            if be is None:
                return F.scaled_dot_product_attention(q, k, v)
            with sdpa_kernel(be):
                return F.scaled_dot_product_attention(q, k, v)
        before = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            out = call()
            err = ((out[:1, :2].double() - ref).norm() / ref.norm()).item()
            ms = cb.bench(call, working_set_bytes=4 * q.numel() * 4, budget_ms=300).median_ms
            prof = comparison.kernels(call, calls=2)
        except RuntimeError as e:
            say(f"  {name}: not available ({str(e)[:80]})")
            continue
        finally:
            torch.backends.cuda.matmul.allow_tf32 = before
        res[name] = {"ms": ms, "tflops": work / (ms * 1e-3) / 1e12, "norm_rel_err": err, **prof.as_dict()}
        say(f"  {name}: {ms:.3f} ms {work / (ms * 1e-3) / 1e12:.1f} TFLOP/s, error vs float64 {err:.2e}; "
            f"ran {prof.kernels[:4]}")
    found["E_sdpa_fp32"] = res


def part_f(torch):
    sys.path.insert(0, str(ROOT / "code" / "transformer"))
    import gpt2_block as g

    k = g.load_kernels()
    for b in (8, 1):
        t, c, h = 1024, 768, 12
        say(f"\n== F. GPT-2 block, B={b} T={t}")
        blk, params64, _ = g.run_shape(k, b, t, c, h, np.random.default_rng(1), torch)
        plan = blk.plan(k)
        ws = sum(a.nbytes for a in blk.p.values()) + 2 * 14 * b * t * c
        m = g.torch_block(torch, c, h, params64, torch.bfloat16)
        xt = g.to_torch(torch, blk.x.get()).reshape(b, t, c)

        def ours():
            for launch in plan.values():
                launch()

        def eager():
            with torch.no_grad():
                return m(xt)

        with torch.no_grad():
            replay = comparison.graphed(lambda: m(xt))
        res = {}
        for name, fn in (("ours", ours), ("eager", eager), ("eager as a CUDA graph", replay)):
            events = cb.bench(fn, working_set_bytes=ws).median_ms
            prof = comparison.kernels(fn, calls=10)
            t0 = time.perf_counter()
            for _ in range(20):
                fn()
            host = (time.perf_counter() - t0) / 20 * 1e3
            torch.cuda.synchronize()
            res[name] = {"events_ms": events, "kernel_sum_ms": prof.gpu_ms, "launches": prof.launches,
                         "host_issue_ms": host, "kernels": prof.kernels}
            say(f"  {name:22s} events {events:.4f} ms | kernels' sum {prof.gpu_ms:.4f} ms over "
                f"{prof.launches:.0f} launches | host issues a call in {host:.4f} ms")
        c1 = comparison.alternate(ours, eager, working_set_bytes=ws, rounds=7, budget_ms=700.0)
        c2 = comparison.alternate(ours, replay, working_set_bytes=ws, rounds=7, budget_ms=700.0)
        res["alternate_eager"], res["alternate_graph"] = c1.as_dict(), c2.as_dict()
        say("  " + c1.line("ours", "eager"))
        say("  " + c2.line("ours", "eager as a graph"))
        found[f"F_b{b}"] = res


def main() -> int:
    gpu = cb.init()
    torch = cb.torch_cuda()
    say(f"GPU: {gpu.name}; torch {torch.__version__}; NVML: {gpu_state.why_not() or 'ok'}")
    found["gpu"] = gpu.name
    found["torch"] = torch.__version__
    parts = {"A": part_a, "B": part_b, "D": part_d, "E": part_e, "F": part_f}
    chosen = sys.argv[1:] or ["A", "B", "D", "E"]
    for part in (parts[c] for c in chosen):
        t0 = time.time()
        try:
            part(torch)
        except Exception as e:
            import traceback
            traceback.print_exc()
            found[part.__name__ + "_error"] = f"{type(e).__name__}: {e}"
        say(f"[{part.__name__}: {time.time() - t0:.1f} s]")
    (OUT / "evidence_probe.json").write_text(json.dumps(found, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
