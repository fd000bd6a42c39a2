"""Part VII, chapter 1 ("Triton", issue #43), what must run on a GPU: the
book's kernels in Triton, checked, then timed in one run beside the library
a user would call and the book's own CUDA kernel.

Draft: never run on a GPU yet. It runs like a listing (cudabook's command
line, checks and typed benchmark entries, `--json` for the report), from
the repository root, where PyCUDA, nvcc, torch and triton are installed:

    python docs/assets/experiments/part7_draft/gpu_bench.py --bench --dump $OUT/triton_dump --json $OUT/part7.json
    python docs/assets/experiments/part7_draft/gpu_bench.py --only gemm,attention --bench
    python docs/assets/experiments/part7_draft/gpu_bench.py --loc          # lines of code only, no GPU

Checks (always): each Triton kernel, every element, at awkward shapes and
at the book's benchmark shapes, against the book's own float64 references
and, where the arithmetic is the same, the book's bounds:
  fusion     residual + gelu(x + bias): u_bf16 |ref| + 16 u_fp32 (|x + b| +
             |r|) (the .cu's 12 roundings, and a few for the exp-based tanh);
  softmax    float32 and bf16, masked rows too (exact zeros): the .cu's
             bound with the sum's chain at its worst (one addition a
             column), and at the benchmark shape the norm-wise error at most
             PEER times torch.softmax's in the same dtype;
  GEMM       matmul (pointers, cp.async) and matmul_tma (TMA descriptors):
             wgmma_gemm's bound, C rounded once to bf16;
  attention  _ref.py's bound with O and P rounded to bf16, and at the
             benchmark shapes flash_bf16's peer check (at most PEER times
             SDPA bf16's norm-wise error).
Bench (--bench): typed entries (cudabook.evidence), each Triton kernel
timed in alternation (ABBA rounds) with
  fusion     the eager torch sequence (add, gelu, add), torch.compile
             (default, max-autotune), the book's fused kernel;
  softmax    torch.softmax, torch.compile (default, max-autotune), the
             book's softmax() (its pick for the row length);
  GEMM       cuBLAS (torch.matmul, bf16 out, reduced-precision reductions
             off), the book's wgmma_gemm (compute capability 9.0 only);
  attention  SDPA as called, SDPA with its flash backend forced, the
             book's fastest flash_bf16 variant for that D (a short timing
             of each picks it, as flash_bf16.py does);
at the book's benchmark shapes, against the ceilings the book uses (copy
bandwidth for the first two; cuBLAS bf16 at 8192^3 for the others).
Then what Triton compiled for the GEMMs and attention (compiler_report:
wgmma or mma.sync, cp.async or TMA, ldmatrix, shared layouts and stages,
registers and spills), the autotuner's picks, and the lines of code of
each Triton kernel against the book's .cu.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import io
import math
import re
import sys
import tokenize
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
CODE = HERE.parents[3] / "code"                 # docs/assets/experiments/part7_draft -> code/
sys.path.insert(0, str(CODE))
sys.path.insert(0, str(HERE))
import cudabook as cb  # noqa: E402
from cudabook import evidence  # noqa: E402
from cudabook.bf16 import from_bf16  # noqa: E402

import compiler_report  # noqa: E402

PARTS = ("fusion", "softmax", "gemm", "attention")
U_FP32, U_BF16 = 2.0**-24, 2.0**-8
PEER = 2.0
DEVICE = "cuda"                                  # the tests' smoke run sets "cpu" (Triton's interpreter)
COPY = "device-to-device copy"

FUSION_SHAPES = [(1, 1), (3, 5), (31, 33), (1031, 772), (4097, 1000)]
SOFTMAX_SHAPES = [(1, 1), (3, 7), (33, 1000), (64, 1025), (9, 4096), (3, 16384), (2, 20_000)]
SOFTMAX_MASKED = [(3, 7), (33, 1000), (2, 20_000)]
GEMM_SHAPES = [(1, 8, 8), (33, 40, 24), (130, 264, 104), (200, 520, 1000), (4097, 3000, 1032)]
GEMM_ODD_SHAPES = [(1, 1, 1), (65, 33, 47), (130, 257, 100)]          # matmul only: K or N not a multiple of 8
ATT_SHAPES = [(1, 1, 1, 64, 1), (2, 3, 77, 64, 1), (1, 2, 130, 128, 1), (2, 2, 257, 64, 16),
              (1, 1, 1000, 128, 1), (1, 1, 513, 128, 16)]             # B, H, S, D, scale of Q


# ---------------------------------------------------------------- lines of code

def code_lines_python(fn) -> int:
    """Non-blank lines of a function with no comment and no docstring."""
    src = inspect.getsource(getattr(fn, "fn", fn))
    doc = set()
    for node in ast.walk(ast.parse(src)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(getattr(body[0], "value", None), ast.Constant) and isinstance(body[0].value.value, str):
            doc.update(range(body[0].lineno, body[0].end_lineno + 1))
    lines = set()
    skip = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
            tokenize.ENDMARKER)
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type not in skip:
            lines.update(range(tok.start[0], tok.end[0] + 1))
    return len(lines - doc)


def code_lines_cu(path: Path, sections: tuple = ()) -> int:
    """Non-blank lines of a CUDA file (or of its named snippet sections) with
    the comments taken out."""
    text = path.read_text()
    if sections:
        parts = []
        for s in sections:
            m = re.search(rf"// --8<-- \[start:{s}\]\n(.*?)// --8<-- \[end:{s}\]", text, re.S)
            if m is None:
                raise ValueError(f"{path.name}: no section {s!r}")
            parts.append(m.group(1))
        text = "\n".join(parts)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return sum(1 for line in text.splitlines() if re.sub(r"//.*", "", line).strip())


def loc_table(tk) -> list[tuple]:
    """(kernel, Triton functions, their lines, book file and sections, its lines)."""
    rows = [
        ("fusion", (tk._tanh, tk.bias_gelu_residual_kernel), "fusion/bias_gelu_residual.cu", ("helpers", "fused")),
        ("softmax", (tk.softmax_rows_kernel, tk.softmax_online_kernel), "softmax_norm/softmax.cu",
         ("online_chunk", "registers")),
        ("softmax helpers", (), "softmax_norm/_rows.cuh", ()),
        ("GEMM (pointers)", (tk._tile_of, tk.matmul_kernel), "matmul_tc/wgmma_gemm.cu", ()),
        ("GEMM (TMA)", (tk._tile_of, tk.matmul_tma_kernel), None, ()),
        ("attention", (tk._attend, tk.attention_kernel), "attention/flash_bf16.cu", ()),
    ]
    out = []
    for name, fns, cu, sections in rows:
        ours = sum(code_lines_python(f) for f in fns)
        book = code_lines_cu(CODE / cu, sections) if cu else None
        where = f"{cu}{' [' + ', '.join(sections) + ']' if sections else ''}" if cu else "-"
        out.append((name, ", ".join(getattr(f, "__name__", None) or f.fn.__name__ for f in fns) or "-",
                    ours, where, book))
    return out


def print_loc(tk) -> dict:
    print("lines of code (non-blank, no comments or docstrings): Triton kernel vs the book's .cu")
    facts = {}
    for name, fns, ours, where, book in loc_table(tk):
        print(f"  {name:16s} Triton {ours:4d} ({fns}); book {book if book is not None else '-':>4} ({where})")
        facts[f"loc_{name}"] = {"triton": ours, "book": book, "book_source": where}
    return facts


# ---------------------------------------------------------------- small helpers

def dev(torch, a: np.ndarray):
    """A host array (float32, or bf16 bit patterns as uint16) as a CUDA tensor."""
    if a.dtype == np.uint16:
        return torch.from_numpy(a.view(np.int16)).to(DEVICE).view(torch.bfloat16)
    return torch.from_numpy(a).to(DEVICE)


def host(torch, t) -> np.ndarray:
    """A CUDA tensor on the host as float32 (bf16 widened exactly)."""
    if t.dtype == torch.bfloat16:
        return from_bf16(t.view(torch.int16).cpu().numpy().view(np.uint16))
    return t.float().cpu().numpy()


def poison(t) -> None:
    """NaN in every element, so that one the kernel never writes fails the check."""
    t.fill_(float("nan"))


def book_module(what: str, load):
    """load() (the book's kernels), or None with one line saying why not."""
    try:
        return load()
    except (cb.Unavailable, cb.KernelCompileError, ImportError, OSError, RuntimeError) as e:
        print(f"  book's {what}: not available here ({str(e).splitlines()[0][:120]})")
        return None


def ready(fn):
    """Run once (autotuning and compiling happen here) and wait, so that no
    timing includes them."""
    import torch

    fn()
    torch.cuda.synchronize()


# ---------------------------------------------------------------- (a) fusion

def fusion_part(torch, tk, args, ceilings) -> dict:
    from fusion import bias_gelu_residual as book

    print("\n== fusion: residual + gelu(x + bias), bf16")

    def check(tag, x16, b16, r16, tensors=None):
        ref, t_abs, r_abs = book.reference(x16, b16, r16)
        x, b, r = tensors or tuple(dev(torch, a) for a in (x16, b16, r16))
        y = torch.empty_like(x)
        poison(y)
        tk.bias_gelu_residual(x, b, r, out=y)
        scale = 16 * U_FP32 / U_BF16 * (t_abs + r_abs)
        cb.report_check(cb.compare(f"triton fusion {tag}", host(torch, y), ref, k=U_BF16 / U_FP32, scale=scale))
        return (x, b, r), y

    rng = np.random.default_rng(args.seed)
    for rows, cols in FUSION_SHAPES:
        check(f"{rows}x{cols}", *book.random_inputs(rows, cols, rng))
    facts = {}
    kernels = book_module("bias_gelu_residual", book.load_kernels)
    for model, (rows, cols) in book.BENCH_SHAPES.items():
        inputs = book.random_inputs(rows, cols, np.random.default_rng(args.seed))
        tag = f"{rows}x{cols}"
        (x, b, r), y = check(f"{tag} ({model})", *inputs)
        if not args.bench:
            continue
        n = rows * cols

        def ours():
            tk.bias_gelu_residual(x, b, r, out=y)

        ready(ours)
        name, eager, _ = book.torch_sequence(*inputs, tensors=(x, b, r))
        entries = {"eager": (name, eager)}
        ref, t_abs, r_abs = book.reference(*inputs)
        for mode in book.COMPILE_MODES:
            cname, cfn, y_c = book.torch_compiled(mode, (x, b, r))
            book.check(f"{cname} {tag}", y_c, ref, t_abs, r_abs, fused_bound=False)
            entries["compile_" + mode.replace("-", "_")] = (cname, cfn)
        del ref, t_abs, r_abs
        if kernels is not None:
            from pycuda import gpuarray

            xg, bg, rg = (gpuarray.to_gpu(a) for a in inputs)
            yg = gpuarray.empty_like(xg)
            entries["book"] = ("book bias_gelu_residual (CUDA)", lambda: book.fused(kernels, xg, bg, rg, yg))
        for key, base in entries.items():
            m = evidence.benchmark(f"triton fusion {tag} vs {base[0]}", ours, bytes_moved=book.FUSED_BYTES * n,
                                   ceiling=ceilings["copy"], baseline=base)
            facts[f"fusion_{tag}_vs_{key}"] = m.baseline.ratio
            facts[f"fusion_{tag}_triton_of_copy"] = m.fraction_of_ceiling
    return facts


# ---------------------------------------------------------------- (b) softmax

def softmax_check(torch, tk, name, x, x64, dt, plan=None) -> tuple:
    """The book's softmax bound, the sum's chain at its worst (one addition
    a column, 3 a chunk for the online kernel); masked logits exactly 0."""
    from softmax_norm import softmax as book

    rows, cols = x64.shape
    ref = book.reference(x64)
    tx = dev(torch, x)
    y = torch.empty_like(tx)
    poison(y)
    tk.softmax(tx, out=y, plan=plan)
    got = host(torch, y)
    p = plan or tk.softmax_plan(cols)
    chunks = math.ceil(cols / p["BLOCK"]) if p["kernel"] == "online" else 1
    finite = np.isfinite(x64)
    dist = np.where(finite, np.abs(x64 - x64.max(axis=1, keepdims=True)), 0.0)
    rel = dist + 3 * dist.max(axis=1, keepdims=True) + max(cols, p["BLOCK"]) + 3 * chunks + 4
    if dt == "f32":
        r = cb.compare(name, got, ref, k=1, scale=ref * rel)
    else:
        r = cb.compare(name, got, ref, k=U_BF16 / U_FP32, scale=ref * rel * U_FP32 / U_BF16)
    cb.report_check(r)
    if not finite.all():
        cb.report_check(cb.expect(f"{name}: masked logits give 0", bool((got[~finite] == 0).all()),
                                  f"{int((got[~finite] != 0).sum())} of {int((~finite).sum())} nonzero"))
    return tx, y, ref, r


def softmax_part(torch, tk, args, ceilings) -> dict:
    from softmax_norm import softmax as book

    print("\n== softmax over rows, float32 and bf16")
    rng = np.random.default_rng(args.seed)
    for dt in book.DTYPES:
        for rows, cols in SOFTMAX_SHAPES:
            x, x64 = book.inputs(rows, cols, dt, rng)
            softmax_check(torch, tk, f"triton softmax {dt} {rows}x{cols}", x, x64, dt)
            if cols > 64:                                   # the online kernel too, forced
                plan = {"kernel": "online", "BLOCK": 1024, "ROWS": 1, "num_warps": 4}
                softmax_check(torch, tk, f"triton softmax online {dt} {rows}x{cols}", x, x64, dt, plan)
        for rows, cols in SOFTMAX_MASKED:
            x, x64 = book.inputs(rows, cols, dt, rng, masked=True)
            softmax_check(torch, tk, f"triton softmax {dt} {rows}x{cols} masked", x, x64, dt)
    facts = {}
    kernels = book_module("softmax", book.load_kernels)
    rows, cols = book.BENCH_SHAPE
    for dt in book.DTYPES:
        x, x64 = book.inputs(rows, cols, dt, np.random.default_rng(args.seed))
        tx, y, ref, ours_r = softmax_check(torch, tk, f"triton softmax {dt} {rows}x{cols}", x, x64, dt)
        theirs = cb.compare(f"torch.softmax {dt}", host(torch, torch.softmax(tx, dim=-1)), ref)
        ratio = ours_r.norm_rel_err / theirs.norm_rel_err
        cb.report_check(cb.expect(f"softmax {dt} {rows}x{cols}: error within {PEER:g}x torch.softmax's",
                                  ratio <= PEER, f"norm-wise error against float64: triton "
                                  f"{ours_r.norm_rel_err:.2e}, torch {theirs.norm_rel_err:.2e}, {ratio:.2f} times"))
        del ref, x64
        if not args.bench:
            continue

        def ours():
            tk.softmax(tx, out=y)

        ready(ours)
        entries = {"torch": ("torch.softmax", lambda: torch.softmax(tx, dim=-1))}
        for mode in book.COMPILE_MODES:
            cname, cfn = book.torch_compiled(torch, mode, tx)
            entries["compile_" + mode.replace("-", "_")] = (cname, cfn)
        if kernels is not None:
            from pycuda import gpuarray

            xg = gpuarray.to_gpu(x)
            yg = gpuarray.empty_like(xg)
            entries["book"] = (f"book softmax_{book.pick(cols)} (CUDA)", lambda: book.softmax(kernels, xg, yg))
        for key, base in entries.items():
            m = evidence.benchmark(f"triton softmax {dt} {rows}x{cols} vs {base[0]}", ours,
                                   bytes_moved=2 * x.nbytes, ceiling=ceilings["copy"], baseline=base)
            facts[f"softmax_{dt}_vs_{key}"] = m.baseline.ratio
            facts[f"softmax_{dt}_triton_of_copy"] = m.fraction_of_ceiling
    return facts


# ---------------------------------------------------------------- (c) GEMM

def gemm_reference(a16, b16) -> tuple:
    """The float64 product and wgmma_gemm's bound for it: (ref, k, scale)
    for cb.compare, made once a shape (at 8192^3 it is the slow part)."""
    from matmul_tc import tc_gemm, wgmma_gemm

    ref, scale = tc_gemm.reference(a16, b16)
    kb, s = wgmma_gemm.bound(a16.shape[1], scale)
    return ref, kb, s


def gemm_check(torch, tk, launcher: str, a16, b16, bound: tuple):
    """One launch into a poisoned C, every element against `bound`'s reference."""
    (m, k), n = a16.shape, b16.shape[1]
    ref, kb, s = bound
    a, b = dev(torch, a16), dev(torch, b16)
    c = torch.empty((m, n), dtype=torch.bfloat16, device=DEVICE)
    poison(c)
    getattr(tk, launcher)(a, b, out=c)
    cb.report_check(cb.compare(f"triton {launcher} {m}x{n}x{k}", host(torch, c), ref, k=kb, scale=s))
    return a, b, c


def gemm_part(torch, tk, args, ceilings, gpu) -> dict:
    from cudabook.bf16 import to_bf16
    from matmul_tc import tc_gemm, wgmma_gemm

    print("\n== GEMM, bf16 in and out, float32 accumulation")
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    rng = np.random.default_rng(args.seed)
    for m, n, k in GEMM_SHAPES + GEMM_ODD_SHAPES:
        a, b = tc_gemm.random_pair(m, n, k, rng)
        a16, b16 = to_bf16(a), to_bf16(b)
        bound = gemm_reference(a16, b16)
        gemm_check(torch, tk, "matmul", a16, b16, bound)
        if k % 8 == 0 and n % 8 == 0:
            gemm_check(torch, tk, "matmul_tma", a16, b16, bound)
    facts = {}
    kernel = book_module("wgmma_gemm", lambda: wgmma_gemm.load_kernel(gpu))
    for m, n, k in wgmma_gemm.BENCH_SHAPES:
        a, b = tc_gemm.random_pair(m, n, k, np.random.default_rng(args.seed))
        a16, b16 = to_bf16(a), to_bf16(b)
        del a, b
        tag = tc_gemm.tag(m, n, k)
        bound = gemm_reference(a16, b16)
        ta, tb, tc = gemm_check(torch, tk, "matmul", a16, b16, bound)
        facts[f"gemm_{tag}_matmul_config"] = str(getattr(tk.matmul_tuned, "best_config", None))
        report(f"matmul {tag}", tk.COMPILED["matmul"], args, facts)
        _, _, tc2 = gemm_check(torch, tk, "matmul_tma", a16, b16, bound)
        facts[f"gemm_{tag}_matmul_tma_config"] = str(getattr(tk.matmul_tma_tuned, "best_config", None))
        report(f"matmul_tma {tag}", tk.COMPILED["matmul_tma"], args, facts)
        if kernel is not None:                             # the book's kernel, held to the same bound
            from pycuda import gpuarray

            ag, bg = gpuarray.to_gpu(a16), gpuarray.to_gpu(b16)
            cg = gpuarray.empty((m, n), np.uint16)
            cb.poison(cg)
            wgmma_gemm.wgmma_gemm(kernel, ag, bg, cg)
            ref, kb, s = bound
            cb.report_check(cb.compare(f"book wgmma_gemm {m}x{n}x{k}", from_bf16(cg.get()), ref, k=kb, scale=s))
        del bound
        if not args.bench:
            continue
        flops, ws = 2 * m * n * k, 2 * (m * k + k * n + m * n)
        tcu = torch.empty_like(tc)
        cublas = (wgmma_gemm.BASELINE, lambda: torch.matmul(ta, tb, out=tcu))
        runs = {"matmul": lambda: tk.matmul(ta, tb, out=tc), "matmul_tma": lambda: tk.matmul_tma(ta, tb, out=tc2)}
        for name, fn in runs.items():
            ready(fn)
            e = evidence.benchmark(f"triton {name} {tag} vs cuBLAS", fn, flops=flops, working_set_bytes=ws,
                                   ceiling=ceilings["tensor"], baseline=cublas)
            facts[f"gemm_{tag}_{name}_of_cublas"] = e.baseline.ratio
            facts[f"gemm_{tag}_{name}_tflops"] = e.flops_per_s / 1e12
        if kernel is not None:
            book_fn = ("book wgmma_gemm (CUDA)", lambda: wgmma_gemm.wgmma_gemm(kernel, ag, bg, cg))
            for name, fn in runs.items():
                e = evidence.benchmark(f"triton {name} {tag} vs the book's wgmma_gemm", fn, flops=flops,
                                       working_set_bytes=ws, ceiling=ceilings["tensor"], baseline=book_fn)
                facts[f"gemm_{tag}_{name}_vs_book"] = e.baseline.ratio
    return facts


# ---------------------------------------------------------------- (d) attention

def attention_check(torch, tk, q16, k16, v16, causal, peer=False):
    from attention import _ref, flash_bf16

    b, h, s, d = q16.shape
    ref, mag, smax = _ref.reference(q16, k16, v16, causal, torch)
    kb = _ref.bound_k(s, d, smax, u_out=U_BF16, u_p=U_BF16)
    q, k, v = (dev(torch, x) for x in (q16, k16, v16))
    o = torch.empty_like(q)
    poison(o)
    tk.attention(q, k, v, causal, out=o)
    shape = f"{b}x{h}x{s}x{d}{' causal' if causal else ''}"
    r = cb.compare(f"triton attention {shape}", host(torch, o), ref, k=kb * U_BF16 / U_FP32, scale=mag)
    cb.report_check(r)
    facts = {}
    if peer:
        facts = flash_bf16.peer_check(torch, q16, k16, v16, causal, ref, {"triton": r.norm_rel_err}, shape)
    return (q, k, v, o), facts


def attention_part(torch, tk, args, ceilings) -> dict:
    import functools

    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from attention import _ref, flash_bf16

    print("\n== attention forward, bf16, (B, H, S, D)")
    rng = np.random.default_rng(args.seed)
    for b, h, s, d, q_scale in ATT_SHAPES:
        q16, k16, v16 = _ref.random_qkv(b, h, s, d, q_scale, rng, bf16=True)
        for causal in (False, True):
            attention_check(torch, tk, q16, k16, v16, causal)
    facts = {}
    kernels = book_module("flash_bf16", flash_bf16.load_kernels)
    for b, h, s, d, causal in flash_bf16.BENCH_SHAPES:
        q16, k16, v16 = _ref.random_qkv(b, h, s, d, 1, np.random.default_rng(args.seed), bf16=True)
        (q, k, v, o), peer = attention_check(torch, tk, q16, k16, v16, causal, peer=True)
        tag = flash_bf16.tag_of(s, d, causal)
        facts.update({f"attention_{key}": val for key, val in peer.items()})
        facts[f"attention_{tag}_config"] = str(getattr(tk.attention_tuned, "best_config", None))
        report(f"attention {tag}", tk.COMPILED["attention"], args, facts)
        if not args.bench:
            continue
        work, ws = int(_ref.flops(b, h, s, d, causal)), 4 * q16.nbytes

        def ours():
            tk.attention(q, k, v, causal, out=o)

        ready(ours)
        sdpa = functools.partial(F.scaled_dot_product_attention, q, k, v, is_causal=causal)

        def flash():
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return sdpa()

        entries = {"sdpa": (flash_bf16.SDPA_AS_CALLED, sdpa), "sdpa_flash": ("SDPA flash backend (forced)", flash)}
        if kernels is not None:
            from pycuda import gpuarray

            qg, kg, vg = (gpuarray.to_gpu(x) for x in (q16, k16, v16))
            og = gpuarray.empty(q16.shape, np.uint16)

            def book_fn(name):
                return lambda: flash_bf16.attention(kernels, name, qg, kg, vg, og, causal)

            quick = {name: cb.bench(book_fn(name), working_set_bytes=ws, budget_ms=args.budget_ms / 4).median_ms
                     for name in flash_bf16.variants_for(d)}
            best = min(quick, key=quick.get)
            entries["book"] = (f"book {best} (CUDA)", book_fn(best))
            facts[f"attention_{tag}_book_variant"] = best
        facts[f"attention_{tag}_sdpa_choice"] = flash_bf16.sdpa_choice(torch, q, k, v, causal)
        for key, base in entries.items():
            try:
                e = evidence.benchmark(f"triton attention {tag} vs {base[0]}", ours, flops=work,
                                       working_set_bytes=ws, ceiling=ceilings["tensor"], baseline=base)
            except RuntimeError as err:                    # a forced SDPA backend that does not take these inputs
                print(f"  {base[0]}: not available ({str(err).splitlines()[0][:100]})")
                continue
            facts[f"attention_{tag}_vs_{key}"] = e.baseline.ratio
            facts[f"attention_{tag}_tflops"] = e.flops_per_s / 1e12
    return facts


# ---------------------------------------------------------------- what Triton compiled

def report(label: str, ck, args, facts: dict) -> None:
    """compiler_report's summary of a CompiledKernel that ran; its TTGIR and
    PTX written under --dump. (Nothing from the interpreter, which compiles nothing.)"""
    if ck is None or not hasattr(ck, "asm"):
        print(f"{label}: no compiled kernel (Triton's interpreter)")
        return
    s = compiler_report.summarize(ck.asm)
    s.update(registers=getattr(ck, "n_regs", None), spill_bytes=getattr(ck, "n_spills", None),
             shared_bytes=ck.metadata.shared, num_warps=ck.metadata.num_warps)
    s["num_stages"] = getattr(ck.metadata, "num_stages", None)
    print("\n".join(compiler_report.describe(label, s)))
    facts[f"compiled {label}"] = s
    if args.dump:
        args.dump.mkdir(parents=True, exist_ok=True)
        stem = label.replace(" ", "_")
        for ext in ("ttgir", "ptx"):
            (args.dump / f"{stem}.{ext}").write_text(ck.asm[ext])


def write_summary(facts: dict, path: Path) -> None:
    """The compiler's choices, one paragraph a kernel, for the chapter's draft."""
    lines = ["What Triton compiled (gpu_bench.py, this run):", ""]
    for key, s in facts.items():
        if key.startswith("compiled "):
            lines += compiler_report.describe(key.removeprefix("compiled "), s) + [
                f"  num_stages {s.get('num_stages')}", ""]
    path.write_text("\n".join(lines))


def main(argv=None) -> int:
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--only", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    pre.add_argument("--dump", type=Path, default=None, help="write TTGIR, PTX and a summary here")
    pre.add_argument("--loc", action="store_true", help="print lines of code and exit (no GPU)")
    own, rest = pre.parse_known_args(argv)
    parts = [p for p in own.only.split(",") if p]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        pre.error(f"--only: unknown {', '.join(unknown)}; choose from {', '.join(PARTS)}")
    if own.loc:
        import triton_kernels as tk

        print_loc(tk)
        return 0
    args = cb.parse_args(rest, __doc__, bench_n=0)
    args.dump = own.dump
    gpu = cb.init()                                        # the primary context, shared with torch and Triton
    torch = cb.torch_cuda()
    if torch is None:
        raise cb.Unavailable("torch with CUDA is needed (the Triton kernels take torch tensors)")
    try:
        import triton
    except ImportError as e:
        raise cb.Unavailable(f"triton is not installed ({e}); pip install triton") from e
    import triton_kernels as tk

    print(f"{gpu.name} (compute capability {gpu.compute_capability[0]}.{gpu.compute_capability[1]}, "
          f"{gpu.sm_count} SMs); torch {torch.__version__}, triton {triton.__version__}, "
          f"CUDA {torch.version.cuda}")
    facts = {"torch": torch.__version__, "triton": triton.__version__, **print_loc(tk)}
    ceilings = {}
    if args.bench:
        from matmul_tc.tc_gemm import tensor_core_ceiling

        ceilings["copy"] = (COPY, cb.ceiling())
        if {"gemm", "attention"} & set(parts):
            ceilings["tensor"] = tensor_core_ceiling(None, args.seed, args.budget_ms)
    if "fusion" in parts:
        facts.update(fusion_part(torch, tk, args, ceilings))
    if "softmax" in parts:
        facts.update(softmax_part(torch, tk, args, ceilings))
    if "gemm" in parts:
        facts.update(gemm_part(torch, tk, args, ceilings, gpu))
    if "attention" in parts:
        facts.update(attention_part(torch, tk, args, ceilings))
    if args.dump:
        write_summary(facts, args.dump / "SUMMARY.txt")
    cb.report_facts(**facts)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
