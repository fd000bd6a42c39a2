"""What Triton made of triton_kernels.py: grep its TTGIR and PTX.

summarize(asm) counts what the compiler chose, from a CompiledKernel's
.asm text: the tensor-core instruction (wgmma.mma_async on Hopper, or
mma.sync), how tiles reached shared memory (cp.async, or TMA's
cp.async.bulk.tensor), ldmatrix / stmatrix, mbarriers, 16-byte global
loads and stores, the shared-memory layouts (128-byte swizzle: NVMMA's
layout; or a swizzled_shared one) and the multi-buffered rings, whose
leading dimension is the number of pipeline stages. describe() turns
that into a few lines. gpu_bench.py applies both to the kernels it ran.

Without a GPU (--aot): each kernel compiled ahead of time for sm_90
(Triton's own ptxas), at the block sizes of its first autotuning config,
and with the specialisations a bench launch gets (16-byte aligned
pointers, sizes divisible by 16); registers and spills from `ptxas -v`.
What autotuning picks on the GPU, and the compiler's heuristics that look
at the device, can differ: gpu_bench.py reports the kernels it ran.

Run:  /tmp/trvenv/bin/python compiler_report.py --aot [--dump DIR] [--json]
      (TRITON_INTERPRET must not be set: the interpreter compiles nothing)
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

PTX_PATTERNS = {
    "wgmma": r"wgmma\.mma_async",                       # Hopper warpgroup MMA
    "mma_sync": r"\bmma\.sync\.aligned",                # Ampere-style warp MMA
    "tma_load": r"cp\.async\.bulk\.tensor",             # TMA copies
    "cp_async": r"cp\.async\.c[ag]\.shared",            # Ampere async copies
    "ldmatrix": r"\bldmatrix\.",
    "stmatrix": r"\bstmatrix\.",
    "mbarrier": r"\bmbarrier\.",
    "ld_global_v4": r"\bld\.global(?:\.[\w:]+)*\.v4\.",   # 16-byte loads
    "st_global_v4": r"\bst\.global(?:\.[\w:]+)*\.v4\.",
    "ld_global": r"\bld\.global\.",
    "st_global": r"\bst\.global\.",
    "ex2_approx": r"\bex2\.approx",
    "shfl": r"\bshfl\.sync",
    "bar_sync": r"\bbar\.sync",
    "setmaxnreg": r"\bsetmaxnreg",
}
TTGIR_PATTERNS = {
    "warp_group_dot": r"ttng\.warp_group_dot\b(?!_)",
    "mma_v2_dot": r"\btt\.dot\b",                          # left as tt.dot: mma.sync (MMAv2)
    "async_copy": r"ttg\.async_copy_global_to_local",
    "tma_copy": r"ttng\.async_tma_copy_global_to_local",
    "local_alloc": r"ttg\.local_alloc",
    "convert_layout": r"ttg\.convert_layout",
}


def summarize(asm) -> dict:
    """Counts of PTX_PATTERNS in asm['ptx'] and TTGIR_PATTERNS in
    asm['ttgir'], the MMA layouts, the shared layouts and the rings of
    buffers (memdesc<N x rows x cols>: N the buffers, i.e. the stages)."""
    ptx, ttgir = asm["ptx"], asm["ttgir"]
    mma = sorted(set(re.findall(r"#ttg\.nvidia_mma<\{versionMajor = (\d+)[^}]*instrShape = \[([\d, ]+)\]", ttgir)))
    shared = sorted(set(re.findall(r"#ttg\.(?:nvmma_shared|swizzled_shared)<\{[^}]*\}>", ttgir)))
    rings = sorted(set(re.findall(r"memdesc<(\d+)x(\d+)x(\d+)x(\w+)", ttgir)))
    target = re.search(r"^\.target\s+(\S+)", ptx, re.M)
    return {
        "target": target.group(1) if target else None,
        "ptx": {k: len(re.findall(p, ptx)) for k, p in PTX_PATTERNS.items()},
        "ttgir": {k: len(re.findall(p, ttgir)) for k, p in TTGIR_PATTERNS.items()},
        "mma": [{"version": int(v), "instr_shape": s} for v, s in mma],
        "shared_layouts": shared,
        "rings": [f"{n} x {r} x {c} {t}" for n, r, c, t in rings],
        "stages": max((int(n) for n, *_ in rings), default=0),
    }


def describe(name: str, s: dict) -> list[str]:
    """A few lines a reader can check against the PTX."""
    p = s["ptx"]
    if p["wgmma"]:
        mma = f"wgmma.mma_async ({p['wgmma']} in the PTX), MMA v3 {[m['instr_shape'] for m in s['mma']]}"
    elif p["mma_sync"]:
        mma = f"mma.sync ({p['mma_sync']}), MMA v2"
    else:
        mma = "no tensor-core instruction"
    if p["tma_load"] or p["cp_async"]:
        how = "TMA (cp.async.bulk.tensor)" if p["tma_load"] else "cp.async"
        loads = f"tiles to shared memory by {how} ({p['tma_load'] or p['cp_async']} in the PTX)"
    else:
        loads = "no tiles staged in shared memory (global loads straight to registers)"
    lines = [f"{name} ({s['target']}): {mma}; {loads}",
             f"  shared rings: {', '.join(s['rings']) or 'none'} -> {s['stages']} buffers",
             f"  shared layouts: {'; '.join(s['shared_layouts']) or 'none'}",
             f"  ldmatrix {p['ldmatrix']}, stmatrix {p['stmatrix']}, mbarrier {p['mbarrier']}, "
             f"16-byte global loads {p['ld_global_v4']} of {p['ld_global']}, stores {p['st_global_v4']} "
             f"of {p['st_global']}, ex2.approx {p['ex2_approx']}, shfl {p['shfl']}"]
    if "registers" in s:
        lines.append(f"  registers {s['registers']} a thread, spills {s['spill_bytes']} bytes, "
                     f"shared {s.get('shared_bytes', '?')} bytes, {s.get('num_warps', '?')} warps")
    return lines


def ptxas_usage(ptx: str, arch: str = "sm_90a") -> dict:
    """Registers and spilled bytes of the PTX's kernel, from the ptxas that
    Triton itself runs for this architecture (-v)."""
    from triton.backends.nvidia.compiler import get_ptxas

    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "k.ptx"
        src.write_text(ptx)
        out = subprocess.run([get_ptxas(int(arch[3:5])).path, f"-arch={arch}", "-v", str(src), "-o",
                              str(Path(d) / "k.cubin")], capture_output=True, text=True, check=True)
    text = out.stdout + out.stderr
    regs = re.search(r"Used (\d+) registers", text)
    spills = [int(x) for x in re.findall(r"(\d+) bytes spill (?:stores|loads)", text)]
    return {"registers": int(regs.group(1)) if regs else None, "spill_bytes": max(spills, default=0)}


def aot_cases() -> dict:
    """name -> (kernel, signature, constexprs, indices of arguments divisible
    by 16, num_warps, num_stages): what a bench launch compiles."""
    import triton_kernels as tk

    def mm_const(cfg):
        return dict(cfg.kwargs)

    mm_cfg, att = tk.MATMUL_CONFIGS[0], tk.ATTENTION_CONFIGS[0]
    att_sig = {"q_ptr": "*bf16", "k_ptr": "*bf16", "v_ptr": "*bf16", "o_ptr": "*bf16", "S": "i32",
               "qk_scale": "fp32", "D": "constexpr", "CAUSAL": "constexpr", "BLOCK_M": "constexpr",
               "BLOCK_N": "constexpr"}
    cases = {
        "bias_gelu_residual": (tk.bias_gelu_residual_kernel,
                               {"x_ptr": "*bf16", "bias_ptr": "*bf16", "r_ptr": "*bf16", "y_ptr": "*bf16",
                                "n": "i32", "cols": "i32", "BLOCK": "constexpr"},
                               {"BLOCK": tk.FUSION_BLOCK}, (0, 1, 2, 3, 4, 5), tk.FUSION_WARPS, 3),
        "softmax_rows": (tk.softmax_rows_kernel,
                         {"x_ptr": "*bf16", "y_ptr": "*bf16", "rows": "i32", "cols": "i32",
                          "ROWS": "constexpr", "BLOCK": "constexpr"},
                         {"ROWS": 1, "BLOCK": 4096}, (0, 1, 2, 3), tk.softmax_plan(4096)["num_warps"], 3),
        "softmax_online": (tk.softmax_online_kernel,
                           {"x_ptr": "*fp32", "y_ptr": "*fp32", "cols": "i32", "BLOCK": "constexpr"},
                           {"BLOCK": tk.SOFTMAX_ONLINE_BLOCK}, (0, 1, 2), 8, 3),
        "matmul": (tk.matmul_kernel,
                   {"a_ptr": "*bf16", "b_ptr": "*bf16", "c_ptr": "*bf16", "M": "i32", "N": "i32", "K": "i32",
                    "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "BLOCK_K": "constexpr",
                    "GROUP_M": "constexpr"},
                   mm_const(mm_cfg), (0, 1, 2, 3, 4, 5), mm_cfg.num_warps, mm_cfg.num_stages),
    }
    bm, bn, bk = (mm_cfg.kwargs[x] for x in ("BLOCK_M", "BLOCK_N", "BLOCK_K"))
    cases["matmul_tma"] = (
        tk.matmul_tma_kernel,
        {"a_desc": f"tensordesc<bf16[{bm}, {bk}]>", "b_desc": f"tensordesc<bf16[{bk}, {bn}]>",
         "c_desc": f"tensordesc<bf16[{bm}, {bn}]>", "M": "i32", "N": "i32", "K": "i32",
         "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "BLOCK_K": "constexpr", "GROUP_M": "constexpr"},
        mm_const(mm_cfg), (3, 4, 5), mm_cfg.num_warps, mm_cfg.num_stages)
    for d, causal in ((64, False), (128, False), (64, True), (128, True)):
        cases[f"attention_d{d}{'_causal' if causal else ''}"] = (
            tk.attention_kernel, att_sig, {"D": d, "CAUSAL": causal, **att.kwargs}, (0, 1, 2, 3, 4),
            att.num_warps, att.num_stages)
    return cases


def aot_compile(kernel, signature: dict, constexprs: dict, divisible: tuple, num_warps: int,
                num_stages: int, capability: int = 90):
    """triton.compile for a CUDA target of this compute capability, no GPU needed."""
    import triton
    from triton.backends.compiler import GPUTarget

    attrs = {(i,): [["tt.divisibility", 16]] for i in divisible}
    src = triton.compiler.ASTSource(fn=kernel, signature=signature, constexprs=constexprs, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", capability, 32),
                          options={"num_warps": num_warps, "num_stages": num_stages})


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--aot", action="store_true", help="compile each kernel for sm_90 here (no GPU)")
    p.add_argument("--dump", type=Path, help="write each kernel's .ttgir and .ptx into this folder")
    p.add_argument("--json", action="store_true", help="end with one line of JSON: the summaries")
    args = p.parse_args(argv)
    if not args.aot:
        p.error("only --aot runs here; gpu_bench.py reports the kernels it launched")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import triton

    print(f"triton {triton.__version__}, ahead of time for sm_90")
    report = {}
    for name, (kernel, sig, const, div, warps, stages) in aot_cases().items():
        ck = aot_compile(kernel, sig, const, div, warps, stages)
        s = summarize(ck.asm)
        s.update(ptxas_usage(ck.asm["ptx"]), shared_bytes=ck.metadata.shared, num_warps=warps,
                 config={**const, "num_warps": warps, "num_stages": stages})
        report[name] = s
        print("\n".join(describe(name, s)))
        if args.dump:
            args.dump.mkdir(parents=True, exist_ok=True)
            for ext in ("ttgir", "ptx"):
                (args.dump / f"{name}.{ext}").write_text(ck.asm[ext])
    if args.json:
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
