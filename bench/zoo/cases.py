"""The regression zoo: realistic slowdowns from public PyTorch/Triton code, each a good and a bad variant.

Every case is written here from the pattern in the public code it cites (no code is
copied). ``make(device, bad)`` returns the callable that ``gpu_bench`` measures, with its
inputs already on ``device``. Cases marked ``synthetic`` scale the work by a known
amount; they measure the gate's power at small slowdowns and are reported apart from
the realistic cases. ``benign`` cases change the code but keep the same kernels, and
``unchanged`` ones (tiny kernels) are the same code in both variants: neither may ever
fail.

Sizes span about 5 µs to 50 ms per call on an H200. On the CPU every case that can run
there runs at a small size (for a smoke test of the scripts); GPU-only cases say so.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Fn = Callable[[], Any]


@dataclass(frozen=True)
class Case:
    name: str
    #: what goes wrong in the bad variant, in a user's words
    story: str
    #: where the pattern comes from
    source: str
    make: Callable[[str, bool], Fn]
    #: "realistic", "benign" (the same kernels, other host code), "unchanged" (A/A: both
    #: variants the same code) or "synthetic"
    kind: str = "realistic"
    gpu_only: bool = False
    #: options passed to gpu_bench (e.g. cuda_graph)
    options: dict[str, Any] = field(default_factory=dict)
    #: the cause (a code of pytest_gpuperf.artifacts.analysis.diagnose.CAUSES) the first
    #: sentence of the bad variant's diagnosis must name on a GPU, and on the CPU ("": the
    #: CPU's profile shows no slowdown to diagnose); tests/unit/test_diagnosis_replay.py
    #: checks them on recorded evidence
    cause: str = ""
    cpu_cause: str = ""


def _on_gpu(device: str) -> bool:
    return device == "cuda"


# --- 1. Triton matmul: autotune configs cut -------------------------------------------------


def _triton_matmul(device: str, bad: bool) -> Fn:
    # triton-lang/triton python/tutorials/03-matrix-multiplication.py: a blocked matmul with
    # grouped program ordering, autotuned over tile sizes. The bad variant is the same kernel
    # after a refactor that kept only one small "safe" config.
    import torch
    import triton
    import triton.language as tl

    good_configs = [
        triton.Config({"BM": 128, "BN": 256, "BK": 64, "G": 8}, num_stages=3, num_warps=8),
        triton.Config({"BM": 128, "BN": 128, "BK": 64, "G": 8}, num_stages=4, num_warps=4),
        triton.Config({"BM": 256, "BN": 128, "BK": 64, "G": 8}, num_stages=3, num_warps=8),
        triton.Config({"BM": 64, "BN": 256, "BK": 32, "G": 8}, num_stages=4, num_warps=4),
    ]
    bad_configs = [triton.Config({"BM": 32, "BN": 32, "BK": 32, "G": 8}, num_stages=2, num_warps=2)]

    @triton.autotune(configs=bad_configs if bad else good_configs, key=["M", "N", "K"])
    @triton.jit
    def kernel(a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn,
               BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, G: tl.constexpr):  # fmt: skip
        pid = tl.program_id(0)
        n_m = tl.cdiv(M, BM)
        n_n = tl.cdiv(N, BN)
        per_group = G * n_n
        group = pid // per_group
        first_m = group * G
        size_m = min(n_m - first_m, G)
        pm = first_m + ((pid % per_group) % size_m)
        pn = (pid % per_group) // size_m
        rm = (pm * BM + tl.arange(0, BM)) % M
        rn = (pn * BN + tl.arange(0, BN)) % N
        rk = tl.arange(0, BK)
        pa = a + rm[:, None] * sam + rk[None, :] * sak
        pb = b + rk[:, None] * sbk + rn[None, :] * sbn
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BK)):
            x = tl.load(pa, mask=rk[None, :] < K - k * BK, other=0.0)
            y = tl.load(pb, mask=rk[:, None] < K - k * BK, other=0.0)
            acc = tl.dot(x, y, acc)
            pa += BK * sak
            pb += BK * sbk
        cm = pm * BM + tl.arange(0, BM)
        cn = pn * BN + tl.arange(0, BN)
        out = c + cm[:, None] * scm + cn[None, :] * scn
        tl.store(out, acc.to(tl.float16), mask=(cm[:, None] < M) & (cn[None, :] < N))

    n = 4096
    a = torch.randn(n, n, device=device, dtype=torch.float16)
    b = torch.randn(n, n, device=device, dtype=torch.float16)
    c = torch.empty(n, n, device=device, dtype=torch.float16)

    def run() -> Any:
        grid = lambda meta: (triton.cdiv(n, meta["BM"]) * triton.cdiv(n, meta["BN"]),)  # noqa: E731
        kernel[grid](a, b, c, n, n, n, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                     c.stride(0), c.stride(1))  # fmt: skip
        return c

    return run


# --- 2. dtype: autocast dropped from an MLP block ---------------------------------------------


def _autocast_dropped(device: str, bad: bool) -> Fn:
    # PyTorch AMP recipe (pytorch/tutorials recipes_source/recipes/amp_recipe.py): the forward
    # runs under torch.autocast(dtype=bfloat16). The bad variant lost the autocast context in
    # a refactor, so the fp32 weights run fp32 GEMMs (TF32 is off by default for matmul).
    import torch

    tokens, width = (2048, 4096) if _on_gpu(device) else (64, 256)
    mlp = torch.nn.Sequential(
        torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width)
    ).to(device)
    x = torch.randn(tokens, width, device=device)
    dtype = torch.bfloat16

    def run() -> Any:
        with torch.no_grad():
            if bad:
                return mlp(x)
            with torch.autocast(device_type=device, dtype=dtype):
                return mlp(x)

    return run


def _tf32_off(device: str, bad: bool) -> Fn:
    # PyTorch docs, "TensorFloat-32 (TF32) on Ampere (and later) devices" (notes/cuda.rst):
    # torch.backends.cuda.matmul.allow_tf32 speeds up fp32 matmuls; a config change that
    # turns it off (or a library resetting precision to "highest") slows every fp32 GEMM.
    import torch

    n = 4096 if _on_gpu(device) else 256
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    precision = "highest" if bad else "high"

    def run() -> Any:
        old = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision(precision)
        try:
            return a @ b
        finally:
            torch.set_float32_matmul_precision(old)

    return run


# --- 3. layout: channels_last lost; .contiguous() copies ----------------------------------------


def _channels_last_lost(device: str, bad: bool) -> Fn:
    # torchvision/models/resnet.py BasicBlock (conv3x3-bn-relu-conv3x3-bn + identity) run in
    # channels_last, as in the PyTorch "channels last memory format" tutorial
    # (intermediate_source/memory_format_tutorial.py). The bad variant lost the input's
    # .to(memory_format=torch.channels_last): cuDNN converts layouts around every conv.
    import torch

    ch, hw, batch = (64, 56, 32) if _on_gpu(device) else (16, 16, 2)
    dtype = torch.bfloat16 if _on_gpu(device) else torch.float32

    class BasicBlock(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = torch.nn.Conv2d(ch, ch, 3, padding=1, bias=False)
            self.bn1 = torch.nn.BatchNorm2d(ch)
            self.conv2 = torch.nn.Conv2d(ch, ch, 3, padding=1, bias=False)
            self.bn2 = torch.nn.BatchNorm2d(ch)

        def forward(self, x: Any) -> Any:
            out = torch.relu(self.bn1(self.conv1(x)))
            return torch.relu(self.bn2(self.conv2(out)) + x)

    block = BasicBlock().to(device, dtype).eval().to(memory_format=torch.channels_last)
    x = torch.randn(batch, ch, hw, hw, device=device, dtype=dtype)
    if not bad:
        x = x.to(memory_format=torch.channels_last)

    return _inference(block, x)


def _contiguous_heads(device: str, bad: bool) -> Fn:
    # karpathy/nanoGPT model.py CausalSelfAttention: q, k, v are split into heads with
    # .view(B, T, nh, hs).transpose(1, 2) and handed to scaled_dot_product_attention as views.
    # The bad variant adds .contiguous() after each transpose (a common "fix" for a view
    # error elsewhere), copying q, k and v on every call.
    import torch
    import torch.nn.functional as F

    b, t, nh, hs = (8, 1024, 16, 64) if _on_gpu(device) else (1, 64, 2, 16)
    dtype = torch.bfloat16 if _on_gpu(device) else torch.float32
    qkv = torch.randn(b, t, 3 * nh * hs, device=device, dtype=dtype)

    def heads(x: Any) -> Any:
        h = x.view(b, t, nh, hs).transpose(1, 2)
        return h.contiguous() if bad else h

    def run() -> Any:
        q, k, v = qkv.split(nh * hs, dim=2)
        return F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)

    return run


# --- 4. SDPA backend fallback -------------------------------------------------------------------


def _sdpa_mask_fallback(device: str, bad: bool) -> Fn:
    # huggingface/transformers modeling code builds an explicit 4D causal mask and passes it
    # as attn_mask; with a mask the flash backend cannot be used and SDPA falls back to the
    # memory-efficient (or math) kernel. The good variant passes is_causal=True (flash).
    import torch
    import torch.nn.functional as F

    b, nh, t, hs = 8, 16, 2048, 64
    q, k, v = (torch.randn(b, nh, t, hs, device=device, dtype=torch.bfloat16) for _ in range(3))
    mask = torch.full((t, t), float("-inf"), device=device, dtype=torch.bfloat16).triu(1)
    mask = mask.expand(b, 1, t, t)

    def run() -> Any:
        if bad:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    return run


# --- 5. host syncs in a loop --------------------------------------------------------------------


def _decode_item_sync(device: str, bad: bool) -> Fn:
    # karpathy/nanoGPT model.py generate(): a token-by-token decode loop that keeps the
    # sampled ids on the GPU. The bad variant checks for an end-of-sequence token with
    # .item() after every step (as many hand-written generate loops do), a host sync per token.
    import torch

    vocab, width, steps = (8192, 1024, 32) if _on_gpu(device) else (512, 64, 8)
    emb = torch.nn.Embedding(vocab, width).to(device)
    body = torch.nn.Sequential(
        torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width)
    ).to(device)
    head = torch.nn.Linear(width, vocab).to(device)
    start = torch.zeros(1, dtype=torch.long, device=device)
    eos = vocab - 1

    def run() -> Any:
        with torch.no_grad():
            tok = start
            out = []
            for _ in range(steps):
                h = body(emb(tok))
                tok = head(h).argmax(dim=-1)
                out.append(tok)
                if bad and tok.item() == eos:
                    break
            return torch.cat(out)

    return run


def _item_per_layer(device: str, bad: bool) -> Fn:
    # A 4-layer bf16 MLP (pytorch/examples-style forward) where the bad variant logs a scalar
    # after each layer with float(h[0, 0]) - a debugging line left in: a sync per layer.
    import torch

    rows, width = (256, 2048) if _on_gpu(device) else (16, 128)
    dtype = torch.bfloat16 if _on_gpu(device) else torch.float32
    ws = [
        torch.randn(width, width, device=device, dtype=dtype) / math.sqrt(width) for _ in range(4)
    ]
    x = torch.randn(rows, width, device=device, dtype=dtype)
    seen: list[float] = []

    def run() -> Any:
        h = x
        for w in ws:
            h = torch.relu(h @ w)
            if bad:
                seen.append(float(h[0, 0]))
                del seen[:-4]
        return h

    return run


# --- 6. graph break inside a loop; 7. recompiles up to the cache limit ------------------------


_log = logging.getLogger("zoo.model")


def _blocks(device: str, width: int, n: int) -> Any:
    import torch

    return torch.nn.ModuleList(
        torch.nn.Sequential(
            torch.nn.LayerNorm(width), torch.nn.Linear(width, width), torch.nn.GELU()
        )
        for _ in range(n)
    ).to(device)


def _inference(fn: Callable[[Any], Any], x: Any) -> Fn:
    """``fn(x)`` without autograd (a module's forward at inference)."""
    import torch

    def run() -> Any:
        with torch.no_grad():
            return fn(x)

    return run


def _compiled_on(fn: Callable[[Any], Any], x: Any) -> Fn:
    """``fn`` compiled with torch.compile, called on ``x`` without autograd."""
    import torch

    return _inference(torch.compile(fn), x)


def _graph_break_in_loop(device: str, bad: bool) -> Fn:
    # A compiled stack of residual blocks (the loop over self.layers in nanoGPT's GPT.forward).
    # The bad variant logs each layer's output shape with logging.Logger.debug inside the loop:
    # Dynamo cannot trace the call, and a graph break inside a loop makes it skip the whole
    # frame, so the function runs eagerly (pytorch docs: torch.compile "graph breaks" guide).
    import torch

    width, rows = (512, 64) if _on_gpu(device) else (64, 8)
    layers = _blocks(device, width, 6)

    # Two functions, not one with a flag: Dynamo keeps its cache (and its decision to skip
    # a frame) per code object, and both variants may run in one process (zoo_truth.py).
    def forward(x: Any) -> Any:
        for layer in layers:
            x = x + layer(x)
        return x

    def forward_logged(x: Any) -> Any:
        for i, layer in enumerate(layers):
            x = x + layer(x)
            _log.debug("layer %d: %s", i, tuple(x.shape))
        return x

    return _compiled_on(forward_logged if bad else forward, torch.randn(rows, width, device=device))


def _recompile_on_float(device: str, bad: bool) -> Fn:
    # A compiled activation block (a chain of elementwise ops that Inductor fuses into one
    # kernel) whose temperature comes from a schedule that changes every call. The good
    # variant passes the temperature as a float computed outside; the bad one computes
    # math.exp(log_temp) inside the compiled function, which specializes the float: one
    # recompile per value until torch._dynamo's recompile_limit (8), then the frame runs
    # eagerly, one kernel per op (pytorch docs, "Recompilation": guards on Python floats).
    import torch
    import torch.nn.functional as F

    rows, cols = (256, 1024) if _on_gpu(device) else (16, 256)
    x = torch.randn(rows, cols, device=device)

    def block(x: Any, temp: float) -> Any:
        y = x * temp
        y = F.gelu(y) * torch.sigmoid(y) + y.tanh() * 0.5
        return torch.softmax(y, dim=-1) + x

    def good_fn(x: Any, temp: float) -> Any:
        return block(x, temp)

    def bad_fn(x: Any, log_temp: float) -> Any:
        return block(x, math.exp(log_temp))

    compiled = torch.compile(bad_fn if bad else good_fn)
    step = [0]

    def run() -> Any:
        step[0] += 1
        log_temp = 0.01 * (step[0] % 97)
        with torch.no_grad():
            return compiled(x, log_temp if bad else math.exp(log_temp))

    return run


# --- 8. an H2D copy per call; 11. host-side table rebuild -------------------------------------


def _h2d_pageable(device: str, bad: bool) -> Fn:
    # A lookup table built on the host and moved with .to(device) inside the step instead of
    # once at start-up (the pattern pytorch/tutorials "pinned memory" recipe warns about):
    # 8 MB of pageable memory copied on every call.
    import torch

    n = 2 * 2**20 if _on_gpu(device) else 2**14
    table_cpu = torch.rand(n)
    table = table_cpu.to(device)
    x = torch.randn(n, device=device)

    def run() -> Any:
        t = table_cpu.to(device) if bad else table
        return x * t

    return run


def _rotary_host_rebuild(device: str, bad: bool) -> Fn:
    # meta-llama/llama model.py precompute_freqs_cis / HF LlamaRotaryEmbedding: the cos/sin
    # tables are computed once and cached on the device. The bad variant rebuilds them on the
    # host for every forward (arange, outer product, cos, sin on the CPU) and copies them over.
    import torch

    seq, dim, heads, batch = (4096, 128, 32, 4) if _on_gpu(device) else (128, 32, 2, 1)
    inv = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))

    def tables(dev: str) -> tuple[Any, Any]:
        freqs = torch.outer(torch.arange(seq).float(), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dev), emb.sin().to(dev)

    cos, sin = tables(device)
    q = torch.randn(batch, heads, seq, dim, device=device, dtype=torch.bfloat16)

    def rotate_half(x: Any) -> Any:
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)

    def run() -> Any:
        c, s = tables(device) if bad else (cos, sin)
        return q * c.to(q.dtype) + rotate_half(q) * s.to(q.dtype)

    return run


# --- 9. a Python loop of small kernels ----------------------------------------------------------


def _python_loop_adds(device: str, bad: bool) -> Fn:
    # Per-parameter updates written as a Python loop (the "for p in params: p.add_(...)"
    # pattern that torch._foreach_* and fused kernels replace): 32 small adds instead of one
    # add over the stacked buffer.
    import torch

    n = 64 * 1024 if _on_gpu(device) else 1024
    flat = torch.zeros(32 * n, device=device)
    chunks = flat.view(32, n).unbind(0)

    def run() -> Any:
        if bad:
            for c in chunks:
                c.add_(1.0)
        else:
            flat.add_(1.0)
        return flat

    return run


# --- 10. a fused optimizer switched off ----------------------------------------------------------


def _optimizer_foreach_off(device: str, bad: bool) -> Fn:
    # torch.optim.AdamW with fused=True (one multi-tensor kernel per step) versus
    # foreach=False, the per-parameter loop (pytorch docs, torch.optim "Algorithms" notes on
    # foreach and fused implementations): ~150 small kernels per step for 48 tensors.
    import torch

    width, depth = (512, 24) if _on_gpu(device) else (32, 4)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(depth)]).to(device)
    for p in model.parameters():
        p.grad = torch.randn_like(p) * 1e-3
    if bad:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)
    elif _on_gpu(device):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)

    def run() -> Any:
        opt.step()

    return run


# --- benign refactors: the same kernels -----------------------------------------------------------


def _benign_matmul_operator(device: str, bad: bool) -> Fn:
    # torch.matmul(a, b) rewritten as a @ b (both dispatch to aten::matmul -> one GEMM).
    import torch

    n = 4096 if _on_gpu(device) else 256
    dtype = torch.bfloat16 if _on_gpu(device) else torch.float32
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    return (lambda: a @ b) if bad else (lambda: torch.matmul(a, b))


def _benign_softmax_method(device: str, bad: bool) -> Fn:
    # torch.softmax(x, dim=-1) rewritten as the method x.softmax(dim=-1): the same kernel.
    import torch

    rows, cols = (4096, 4096) if _on_gpu(device) else (64, 256)
    x = torch.randn(rows, cols, device=device)
    return (lambda: x.softmax(dim=-1)) if bad else (lambda: torch.softmax(x, dim=-1))


def _benign_compiled_refactor(device: str, bad: bool) -> Fn:
    # A compiled block refactored into helper functions: Dynamo inlines them, so the traced
    # graph, its Triton kernels and the guards are the same (host-bound at this size).
    import torch
    import torch.nn.functional as F

    width, rows = (512, 64) if _on_gpu(device) else (64, 8)
    w1 = torch.randn(width, 4 * width, device=device) / math.sqrt(width)
    w2 = torch.randn(4 * width, width, device=device) / math.sqrt(4 * width)

    def up(x: Any) -> Any:
        return F.gelu(x @ w1)

    def down(h: Any) -> Any:
        return h @ w2

    def inline(x: Any) -> Any:
        return F.layer_norm(x + F.gelu(x @ w1) @ w2, (width,))

    def split(x: Any) -> Any:
        return F.layer_norm(x + down(up(x)), (width,))

    return _compiled_on(split if bad else inline, torch.randn(rows, width, device=device))


# --- tiny kernels, unchanged (A/A): 5-50 us per call, a few launches ---------------------------
#
# Calls this short are paid at the host's speed end to end (a Python call, a dispatch and a
# launch per op take about as long as the kernel), and each one's device time is a few
# microseconds timed by its own event pair. Both variants are the same code: they must never
# fail. The layer norm is the one pytest-gpuperf demo measures.


def _tiny_layer_norm(device: str, bad: bool) -> Fn:
    # pytest_gpuperf/demo/benchmarks.py test_layer_norm: nn.LayerNorm(1024) on 4096 x 1024 fp32
    # (about 20 us on an H200 with the L2 flushed).
    import torch

    rows, width = (4096, 1024) if _on_gpu(device) else (256, 256)
    x = torch.randn(rows, width, device=device)
    norm = torch.nn.LayerNorm(width).to(device)

    return _inference(norm, x)


def _tiny_softmax(device: str, bad: bool) -> Fn:
    # The attention-probability softmax of a small eager attention (8 x 16 heads x 128 x 128
    # bf16 scores; the HF eager_attention_forward softmax over the last dim).
    import torch

    shape = (8, 16, 128, 128) if _on_gpu(device) else (1, 2, 32, 32)
    dtype = torch.bfloat16 if _on_gpu(device) else torch.float32
    scores = torch.randn(*shape, device=device, dtype=dtype)
    return lambda: torch.softmax(scores, dim=-1)


def _tiny_elementwise_chain(device: str, bad: bool) -> Fn:
    # A scale-shift-activation chain left unfused in eager code (x * gamma + beta, then SiLU):
    # three elementwise kernels on 1M fp32 values.
    import torch
    import torch.nn.functional as F

    n = 2**20 if _on_gpu(device) else 2**12
    x = torch.randn(n, device=device)
    gamma = torch.randn(n, device=device)
    beta = torch.randn(n, device=device)
    return lambda: F.silu(x * gamma + beta)


def _tiny_rmsnorm(device: str, bad: bool) -> Fn:
    # HF LlamaRMSNorm.forward in eager mode (modeling_llama.py): to fp32, pow, mean, rsqrt,
    # multiply, back to bf16, times the weight: six small kernels on 2048 x 1024 bf16.
    import torch

    rows, width = (2048, 1024) if _on_gpu(device) else (64, 128)
    dtype = torch.bfloat16 if _on_gpu(device) else torch.float32
    x = torch.randn(rows, width, device=device, dtype=dtype)
    weight = torch.ones(width, device=device, dtype=dtype)

    def run() -> Any:
        h = x.to(torch.float32)
        variance = h.pow(2).mean(-1, keepdim=True)
        h = h * torch.rsqrt(variance + 1e-6)
        return weight * h.to(dtype)

    return run


# --- benign refactors of the host-side code: more Python, another op sequence, a view --------


def _attention_block(device: str) -> tuple[Any, Any, Any, int, int, int, int]:
    import torch

    b, t, c, nh = (4, 256, 512, 8) if _on_gpu(device) else (1, 32, 64, 2)
    dtype = torch.bfloat16 if _on_gpu(device) else torch.float32
    c_attn = torch.nn.Linear(c, 3 * c).to(device, dtype)
    c_proj = torch.nn.Linear(c, c).to(device, dtype)
    x = torch.randn(b, t, c, device=device, dtype=dtype)
    return x, c_attn, c_proj, b, t, c, nh


def _benign_attention_unbind(device: str, bad: bool) -> Fn:
    # karpathy/nanoGPT model.py CausalSelfAttention.forward: q, k, v from qkv.split(n_embd,
    # dim=2), each .view(B, T, nh, hs).transpose(1, 2). The refactor (as in many ports) views
    # qkv as (B, T, 3, nh, hs), permutes and unbinds: the same strided views, the same GEMMs
    # and the same SDPA kernel; only the Python that makes the views differs. Host-bound at
    # this size: the H200 case of a benign refactor failing on a slow host was this one.
    import torch.nn.functional as F

    x, c_attn, c_proj, b, t, c, nh = _attention_block(device)
    hs = c // nh

    def split(qkv: Any) -> tuple[Any, Any, Any]:
        q, k, v = qkv.split(c, dim=2)
        q = q.view(b, t, nh, hs).transpose(1, 2)
        k = k.view(b, t, nh, hs).transpose(1, 2)
        return q, k, v.view(b, t, nh, hs).transpose(1, 2)

    def unbind(qkv: Any) -> tuple[Any, Any, Any]:
        return qkv.view(b, t, 3, nh, hs).permute(2, 0, 3, 1, 4).unbind(0)

    heads = unbind if bad else split

    def run() -> Any:
        import torch

        with torch.no_grad():
            q, k, v = heads(c_attn(x))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return c_proj(y.transpose(1, 2).contiguous().view(b, t, c))

    return run


def _benign_more_python(device: str, bad: bool) -> Fn:
    # An MLP block whose forward gained the Python a library adds around the same ops (HF
    # transformers style): keyword arguments merged with a config, isinstance and shape
    # checks, a no-op context manager, attribute lookups by name. The same two GEMMs and GELU.
    import contextlib

    import torch
    import torch.nn.functional as F

    tokens, width = (512, 1024) if _on_gpu(device) else (16, 64)
    dtype = torch.bfloat16 if _on_gpu(device) else torch.float32
    fc = torch.nn.Linear(width, 4 * width).to(device, dtype)
    proj = torch.nn.Linear(4 * width, width).to(device, dtype)
    x = torch.randn(tokens, width, device=device, dtype=dtype)
    config = {"activation": "gelu", "approximate": "none", "checks": True}
    layers = {"up": fc, "down": proj}

    def plain() -> Any:
        with torch.no_grad():
            return proj(F.gelu(fc(x)))

    def wrapped(**kwargs: Any) -> Any:
        opts = {**config, **kwargs}
        shape_ok = isinstance(x, torch.Tensor) and x.dim() == 2 and x.shape[-1] == width
        if opts["checks"] and not shape_ok:
            raise ValueError(f"expected a (tokens, {width}) tensor")
        act = getattr(F, opts["activation"])
        with contextlib.nullcontext(), torch.no_grad():
            h = layers["up"](x)
            h = act(h, approximate=opts["approximate"])
            return layers["down"](h)

    return wrapped if bad else plain


def _benign_op_sequence(device: str, bad: bool) -> Fn:
    # The end of nanoGPT's attention, y.transpose(1, 2).contiguous().view(B, T, C) before
    # c_proj, rewritten as y.permute(0, 2, 1, 3).reshape(B, T, C): reshape of a non-contiguous
    # tensor copies it with the same copy kernel; the same GEMM follows.
    import torch

    b, t, c, nh = (4, 256, 512, 8) if _on_gpu(device) else (1, 32, 64, 2)
    dtype = torch.bfloat16 if _on_gpu(device) else torch.float32
    y = torch.randn(b, nh, t, c // nh, device=device, dtype=dtype)
    c_proj = torch.nn.Linear(c, c).to(device, dtype)

    def transpose_contiguous() -> Any:
        with torch.no_grad():
            return c_proj(y.transpose(1, 2).contiguous().view(b, t, c))

    def permute_reshape() -> Any:
        with torch.no_grad():
            return c_proj(y.permute(0, 2, 1, 3).reshape(b, t, c))

    return permute_reshape if bad else transpose_contiguous


def _benign_extra_view(device: str, bad: bool) -> Fn:
    # F.linear on a (B, T, C) activation, refactored to flatten it first and view the output
    # back (as code written for 2-D inputs does): F.linear folds a contiguous 3-D input into
    # the same 2-D addmm, so the GEMM kernel is the same; two views more on the host.
    import torch
    import torch.nn.functional as F

    b, t, c = (4, 128, 1024) if _on_gpu(device) else (1, 16, 64)
    dtype = torch.bfloat16 if _on_gpu(device) else torch.float32
    x = torch.randn(b, t, c, device=device, dtype=dtype)
    w = torch.randn(c, c, device=device, dtype=dtype) / math.sqrt(c)
    bias = torch.zeros(c, device=device, dtype=dtype)

    def direct() -> Any:
        return F.linear(x, w, bias)

    def flattened() -> Any:
        return F.linear(x.view(-1, c), w, bias).view(b, t, -1)

    return flattened if bad else direct


# --- realistic slowdowns of 1.2-1.5x -------------------------------------------------------------


def _linear_bias_unfused(device: str, bad: bool) -> Fn:
    # Megatron-LM megatron/core/transformer/mlp.py: the fc1 projection returns its bias apart
    # (skip_bias_add) to fuse it with the activation (bias_gelu_fusion). With the fusion off the
    # bias is added as a kernel of its own after the GEMM, where nn.Linear (addmm) adds it in the
    # GEMM's epilogue: one more pass over the 8192 x 4096 output.
    import torch
    import torch.nn.functional as F

    m, k, n = (8192, 1024, 4096) if _on_gpu(device) else (64, 64, 128)
    dtype = torch.bfloat16 if _on_gpu(device) else torch.float32
    x = torch.randn(m, k, device=device, dtype=dtype)
    w = torch.randn(n, k, device=device, dtype=dtype) / math.sqrt(k)
    bias = torch.randn(n, device=device, dtype=dtype)

    def fused() -> Any:
        return F.gelu(F.linear(x, w, bias))

    def separate() -> Any:
        return F.gelu(F.linear(x, w) + bias)

    return separate if bad else fused


def _autocast_fp32_weights(device: str, bad: bool) -> Fn:
    # Inference of a bf16 model: the weights stored in bf16 (HF from_pretrained(torch_dtype=
    # torch.bfloat16), model.to(torch.bfloat16)) against fp32 weights under torch.autocast,
    # which casts every weight to bf16 on every forward (pytorch docs, Automatic Mixed
    # Precision: autocast's weight cache lives for one autocast region). Same bf16 GEMMs,
    # plus a cast kernel per weight: 2 x 4096 x 16384 fp32 weights for 1536 tokens.
    import torch

    tokens, width = (1536, 4096) if _on_gpu(device) else (16, 64)
    mlp = torch.nn.Sequential(
        torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width)
    ).to(device)
    dtype = torch.bfloat16
    if not bad:
        mlp = mlp.to(dtype)
    x = torch.randn(tokens, width, device=device, dtype=dtype)

    def run() -> Any:
        with torch.no_grad():
            if bad:
                with torch.autocast(device_type=device, dtype=dtype):
                    return mlp(x)
            return mlp(x)

    return run


def _dropout_left_on(device: str, bad: bool) -> Fn:
    # huggingface/transformers modeling_t5.py T5DenseActDense (wi, ReLU, dropout, wo) of
    # t5-small (d_model 512, d_ff 2048) serving 8192 tokens, with the model left in train mode
    # (model.eval() forgotten; pytorch docs nn.Module.eval: Dropout behaves differently in
    # training): dropout draws a mask over the 8192 x 2048 hidden on every call.
    import torch

    tokens, d_model, d_ff = (8192, 512, 2048) if _on_gpu(device) else (64, 32, 128)
    dtype = torch.bfloat16 if _on_gpu(device) else torch.float32

    class DenseActDense(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wi = torch.nn.Linear(d_model, d_ff, bias=False)
            self.wo = torch.nn.Linear(d_ff, d_model, bias=False)
            self.dropout = torch.nn.Dropout(0.1)

        def forward(self, h: Any) -> Any:
            return self.wo(self.dropout(torch.relu(self.wi(h))))

    ff = DenseActDense().to(device, dtype).train(bad)
    x = torch.randn(tokens, d_model, device=device, dtype=dtype)

    return _inference(ff, x)


def _key_transpose_contiguous(device: str, bad: bool) -> Fn:
    # The attention scores of an eager attention, q @ k.transpose(-2, -1) (HF GPT-2
    # GPT2Attention._attn; batched GEMMs read the transposed key by its strides). The bad
    # variant makes the transposed key contiguous first, as forks of such code do to silence a
    # stride warning: a copy of k (32 x 16 x 512 x 64 bf16) before every score GEMM, whose
    # 512 x 512 outputs dominate its time.
    import torch

    b, nh, t, hs = (32, 16, 512, 64) if _on_gpu(device) else (1, 2, 32, 16)
    dtype = torch.bfloat16 if _on_gpu(device) else torch.float32
    q = torch.randn(b, nh, t, hs, device=device, dtype=dtype)
    k = torch.randn(b, nh, t, hs, device=device, dtype=dtype)

    def run() -> Any:
        kt = k.transpose(-2, -1)
        return q @ (kt.contiguous() if bad else kt)

    return run


def _sdpa_efficient_backend(device: str, bad: bool) -> Fn:
    # Non-causal attention (an encoder, ViT or diffusion UNet block) with the flash backend
    # turned off, as scripts do for determinism (torch.backends.cuda.enable_flash_sdp(False);
    # diffusers and timm issues): SDPA falls back to the memory-efficient kernel.
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    b, nh, t, hs = 8, 16, 2048, 64
    q, k, v = (torch.randn(b, nh, t, hs, device=device, dtype=torch.bfloat16) for _ in range(3))
    backend = SDPBackend.EFFICIENT_ATTENTION if bad else SDPBackend.FLASH_ATTENTION

    def run() -> Any:
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v)

    return run


# --- synthetic: known small slowdowns of large kernels and of a launch-bound loop --------------


def _scaled(fraction: float, build: Callable[[str, float], Fn]) -> Callable[[str, bool], Fn]:
    return lambda device, bad: build(device, 1.0 + fraction if bad else 1.0)


def _mul_256m(device: str, scale: float) -> Fn:
    import torch

    n = round((256 * 2**20 if _on_gpu(device) else 2**20) * scale / 256) * 256
    x = torch.randn(n, device=device)
    return lambda: x.mul_(1.0)


def _gemm_4096(device: str, scale: float) -> Fn:
    import torch

    n = 4096 if _on_gpu(device) else 256
    k = round(n * scale / 64) * 64
    dtype = torch.bfloat16 if _on_gpu(device) else torch.float32
    a = torch.randn(n, k, device=device, dtype=dtype)
    b = torch.randn(k, n, device=device, dtype=dtype)
    return lambda: a @ b


def _layernorm(device: str, scale: float) -> Fn:
    import torch

    rows, cols = (16384, 8192) if _on_gpu(device) else (256, 256)
    dtype = torch.bfloat16 if _on_gpu(device) else torch.float32
    x = torch.randn(round(rows * scale), cols, device=device, dtype=dtype)
    ln = torch.nn.LayerNorm(cols, device=device, dtype=dtype)

    return _inference(ln, x)


def _launches(device: str, scale: float) -> Fn:
    import torch

    x = torch.zeros(4096, device=device)
    count = round(20 * scale)

    def run() -> Any:
        for _ in range(count):
            x.add_(1.0)
        return x

    return run


CASES: tuple[Case, ...] = (
    Case("triton_autotune_cut", "Triton matmul autotune configs cut to one small tile",
         "triton-lang/triton python/tutorials/03-matrix-multiplication.py", _triton_matmul,
         gpu_only=True, cause="triton-config"),
    Case("autocast_dropped", "bf16 autocast lost around an MLP block: fp32 GEMMs",
         "pytorch/tutorials recipes_source/recipes/amp_recipe.py", _autocast_dropped, cause="gemm-precision"),
    Case("tf32_off", "fp32 matmul precision reset to 'highest' (TF32 off)",
         "pytorch docs notes/cuda.rst, TensorFloat-32", _tf32_off, cause="gemm-precision"),
    Case("channels_last_lost", "ResNet block input no longer channels_last",
         "pytorch/vision torchvision/models/resnet.py BasicBlock; memory_format_tutorial",
         _channels_last_lost, cause="layout"),
    Case("contiguous_heads", ".contiguous() copies of q, k, v before SDPA",
         "karpathy/nanoGPT model.py CausalSelfAttention", _contiguous_heads, cause="extra-copy"),
    Case("sdpa_mask_fallback", "explicit causal mask: SDPA leaves the flash backend",
         "huggingface/transformers causal-mask + sdpa attention", _sdpa_mask_fallback,
         gpu_only=True, cause="sdpa-backend"),
    Case("decode_item_sync", ".item() per token in a decode loop (host sync per step)",
         "karpathy/nanoGPT model.py generate()", _decode_item_sync, cause="host-sync"),
    Case("item_per_layer", "float(h[0, 0]) logged after each layer of a 4-layer bf16 MLP",
         "debug logging in a forward", _item_per_layer, cause="host-sync"),
    Case("graph_break_in_loop", "logger.debug inside the layer loop: the whole frame runs eager",
         "karpathy/nanoGPT GPT.forward layer loop; torch.compile graph-break docs",
         _graph_break_in_loop, cause="compiled-code-gone", cpu_cause="compiled-code-gone"),
    Case("recompile_on_float", "math.exp(float) inside torch.compile: recompiles to the limit",
         "pytorch docs, torch.compile recompilation and guards", _recompile_on_float, cause="recompile"),
    Case("h2d_pageable", "8 MB pageable host-to-device copy of a table on every call",
         "pytorch/tutorials pinned-memory recipe", _h2d_pageable, gpu_only=True, cause="h2d-copy"),
    Case("rotary_host_rebuild", "rotary cos/sin tables rebuilt on the host every forward",
         "meta-llama/llama model.py precompute_freqs_cis; HF LlamaRotaryEmbedding",
         _rotary_host_rebuild, cause="h2d-copy"),
    Case("python_loop_adds", "32 small adds in a Python loop instead of one",
         "torch._foreach_* rationale (pytorch/pytorch torch/optim)", _python_loop_adds, cause="per-tensor-kernels", cpu_cause="per-tensor-kernels"),
    Case("optimizer_foreach_off", "AdamW fused=True -> foreach=False (per-parameter kernels)",
         "pytorch docs torch.optim, foreach and fused implementations",
         _optimizer_foreach_off, cause="per-tensor-kernels", cpu_cause="per-tensor-kernels"),
    Case("benign_matmul_operator", "torch.matmul(a, b) -> a @ b", "-",
         _benign_matmul_operator, kind="benign"),
    Case("benign_softmax_method", "torch.softmax(x, -1) -> x.softmax(-1)", "-",
         _benign_softmax_method, kind="benign"),
    Case("benign_compiled_refactor", "compiled block split into helper functions", "-",
         _benign_compiled_refactor, kind="benign"),
    Case("mul_256M_plus5", "memory-bound mul on 5 % more elements", "synthetic",
         _scaled(0.05, _mul_256m), kind="synthetic", cause="kernel-slower"),
    Case("gemm_4096_plus5", "bf16 GEMM with K 5 % larger", "synthetic",
         _scaled(0.05, _gemm_4096), kind="synthetic", cause="kernel-slower"),
    Case("layernorm_plus5", "bf16 LayerNorm on 5 % more rows", "synthetic",
         _scaled(0.05, _layernorm), kind="synthetic", cause="kernel-slower"),
    Case("launches_plus10", "20 -> 22 small launches (host-bound, +10 %)", "synthetic",
         _scaled(0.10, _launches), kind="synthetic", cause="more-kernels"),
    # tiny kernels, unchanged: the same code in both variants
    Case("tiny_layer_norm", "unchanged: LayerNorm(1024) on 4096 x 1024 fp32 (~20 us)",
         "pytest_gpuperf/demo/benchmarks.py test_layer_norm", _tiny_layer_norm,
         kind="unchanged"),
    Case("tiny_softmax", "unchanged: softmax of 8 x 16 x 128 x 128 bf16 scores",
         "huggingface/transformers eager_attention_forward softmax", _tiny_softmax,
         kind="unchanged"),
    Case("tiny_elementwise_chain", "unchanged: x * gamma + beta, then SiLU, on 1M fp32",
         "eager scale-shift-activation", _tiny_elementwise_chain, kind="unchanged"),
    Case("tiny_rmsnorm", "unchanged: eager LlamaRMSNorm on 2048 x 1024 bf16 (6 kernels)",
         "huggingface/transformers modeling_llama.py LlamaRMSNorm", _tiny_rmsnorm,
         kind="unchanged"),
    # benign refactors of the host-side code
    Case("benign_attention_unbind", "q, k, v by view/permute/unbind instead of split",
         "karpathy/nanoGPT model.py CausalSelfAttention", _benign_attention_unbind,
         kind="benign"),
    Case("benign_more_python", "an MLP forward with config merging, checks, lookups by name",
         "HF-style forward wrappers", _benign_more_python, kind="benign"),
    Case("benign_op_sequence", "transpose().contiguous().view() -> permute().reshape()",
         "karpathy/nanoGPT model.py CausalSelfAttention", _benign_op_sequence, kind="benign"),
    Case("benign_extra_view", "F.linear on x.view(-1, C), output viewed back",
         "2-D-input code paths", _benign_extra_view, kind="benign"),
    # realistic slowdowns of 1.2-1.5x
    Case("linear_bias_unfused", "the fc1 bias added by its own kernel, not in the GEMM epilogue",
         "NVIDIA/Megatron-LM megatron/core/transformer/mlp.py skip_bias_add",
         _linear_bias_unfused, cause="unfused-ops", cpu_cause="unfused-ops"),
    Case("autocast_fp32_weights", "bf16 inference with fp32 weights under autocast",
         "pytorch docs amp; HF from_pretrained(torch_dtype=torch.bfloat16)",
         _autocast_fp32_weights, cause="extra-copy"),
    Case("dropout_left_on", "t5-small feed-forward served in train mode (dropout on)",
         "huggingface/transformers modeling_t5.py T5DenseActDense", _dropout_left_on, cause="more-kernels"),
    Case("key_transpose_contiguous", "k.transpose(-2, -1).contiguous() before q @ k^T",
         "huggingface/transformers GPT2Attention._attn", _key_transpose_contiguous, cause="extra-copy"),
    Case("sdpa_efficient_backend", "flash SDPA turned off: the memory-efficient kernel",
         "torch.backends.cuda.enable_flash_sdp(False) in training scripts",
         _sdpa_efficient_backend, gpu_only=True, cause="sdpa-backend"),
)  # fmt: skip

BY_NAME = {c.name: c for c in CASES}

#: Cases whose bad variant the code itself selects, whatever GPUPERF_ZOO says: empty here.
#: bench/gpu/part-gate-b.sh commits a copy of the zoo with some names in it, so that
#: --gpuperf-ab compares two commits that differ in code (an environment variable would reach
#: both sides of the A/B alike).
CODE_BAD: frozenset[str] = frozenset()


# --- activity: precision and memory behaviour told from the GPU's counters ---------------------


def _autocast_dropped_tf32(device: str, bad: bool) -> Fn:
    # karpathy/nanoGPT train.py: the step runs under torch.autocast(dtype=bfloat16) with
    # torch.backends.cuda.matmul.allow_tf32 = True set at start-up. The bad variant lost the
    # autocast context: the fp32 weights now run fp32 GEMMs, on TF32 tensor cores since TF32
    # is allowed, so the slowdown is smaller than without TF32 and the tensor cores stay busy.
    # The MLP block and its autocast are those of autocast_dropped above.
    import torch

    block = _autocast_dropped(device, bad)

    def run() -> Any:
        old = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = True
        try:
            return block()
        finally:
            torch.backends.cuda.matmul.allow_tf32 = old

    return run


def _kv_cache_cat(device: str, bad: bool) -> Fn:
    # huggingface/transformers cache_utils.py: a StaticCache is allocated once and written in
    # place each decode step (index_copy_ at the step's position); a DynamicCache builds a new
    # tensor every step with torch.cat. The bad variant keeps a sliding window by
    # concatenation: two buffers of the whole cache allocated (and copied into) per call,
    # where the good one reuses its buffers.
    import torch

    b, h, t, d = (4, 32, 2048, 128) if _on_gpu(device) else (1, 2, 64, 16)
    dtype = torch.bfloat16 if _on_gpu(device) else torch.float32
    cache = {k: torch.zeros(b, h, t, d, device=device, dtype=dtype) for k in ("k", "v")}
    new = {k: torch.randn(b, h, 1, d, device=device, dtype=dtype) for k in ("k", "v")}
    pos = torch.zeros(1, dtype=torch.long, device=device)  # the step's slot, kept on the GPU

    def run() -> Any:
        if bad:
            for k in ("k", "v"):
                cache[k] = torch.cat([cache[k][:, :, 1:], new[k]], dim=2)
        else:
            for k in ("k", "v"):
                cache[k].index_copy_(2, pos, new[k])
            pos.add_(1).remainder_(t)
        return cache["k"]

    return run


CASES = (
    *CASES,
    Case("autocast_dropped_tf32", "bf16 autocast lost, TF32 allowed: fp32 GEMMs on TF32",
         "karpathy/nanoGPT train.py (autocast + allow_tf32); pytorch docs notes/cuda.rst",
         _autocast_dropped_tf32, cause="gemm-precision"),
    Case("kv_cache_cat", "KV cache grown by torch.cat per step instead of written in place",
         "huggingface/transformers cache_utils.py DynamicCache vs StaticCache", _kv_cache_cat, cause="allocation-churn"),
)  # fmt: skip
BY_NAME = {c.name: c for c in CASES}


# --- more: unfused ops, recomputation, per-tensor kernels, copies, syncs, the allocator ----


def _layernorm_handwritten(device: str, bad: bool) -> Fn:
    # ConvNeXt (facebookresearch) models/convnext.py LayerNorm: its channels_first branch
    # normalises with elementwise ops (u = x.mean(...); s = (x - u).pow(2).mean(...);
    # x = (x - u) / torch.sqrt(s + eps); weight * x + bias), where the channels_last branch
    # calls F.layer_norm, one fused kernel. Here both normalise the last dim of a
    # 4096 x 2048 bf16 activation; the bad variant is the hand-written one.
    import torch
    import torch.nn.functional as F

    rows, width = (4096, 2048) if _on_gpu(device) else (256, 256)
    dtype = torch.bfloat16 if _on_gpu(device) else torch.float32
    x = torch.randn(rows, width, device=device, dtype=dtype)
    weight = torch.ones(width, device=device, dtype=dtype)
    bias = torch.zeros(width, device=device, dtype=dtype)

    def handwritten() -> Any:
        u = x.mean(-1, keepdim=True)
        s = (x - u).pow(2).mean(-1, keepdim=True)
        return weight * ((x - u) / torch.sqrt(s + 1e-6)) + bias

    return handwritten if bad else (lambda: F.layer_norm(x, (width,), weight, bias, 1e-6))


def _gelu_tanh_handwritten(device: str, bad: bool) -> Fn:
    # huggingface/transformers activations.py NewGELUActivation (GPT-2's "gelu_new"):
    # 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))) in eager elementwise ops;
    # PytorchGELUTanh in the same file calls F.gelu(x, approximate="tanh"), one kernel.
    import torch
    import torch.nn.functional as F

    rows, width = (8192, 4096) if _on_gpu(device) else (256, 256)
    dtype = torch.bfloat16 if _on_gpu(device) else torch.float32
    x = torch.randn(rows, width, device=device, dtype=dtype)
    c = math.sqrt(2.0 / math.pi)

    def handwritten() -> Any:
        return 0.5 * x * (1.0 + torch.tanh(c * (x + 0.044715 * torch.pow(x, 3.0))))

    return handwritten if bad else (lambda: F.gelu(x, approximate="tanh"))


def _checkpoint_recompute(device: str, bad: bool) -> Fn:
    # huggingface/transformers gradient_checkpointing_enable() (modeling_utils.py: each layer
    # called through torch.utils.checkpoint.checkpoint): a training step's forward and backward
    # of a 4-layer MLP stack, the bad variant with every layer checkpointed, so the backward
    # runs each layer's forward again (its GEMMs and activations) to rebuild what was not kept.
    import torch
    from torch.utils.checkpoint import checkpoint

    tokens, width, depth = (4096, 2048, 4) if _on_gpu(device) else (64, 128, 4)
    dtype = torch.bfloat16 if _on_gpu(device) else torch.float32
    layers = [
        torch.nn.Sequential(
            torch.nn.Linear(width, 2 * width), torch.nn.GELU(), torch.nn.Linear(2 * width, width)
        ).to(device, dtype)
        for _ in range(depth)
    ]
    params = [p for layer in layers for p in layer.parameters()]
    x = torch.randn(tokens, width, device=device, dtype=dtype, requires_grad=True)

    def run() -> Any:
        h = x
        for layer in layers:
            h = checkpoint(layer, h, use_reentrant=False) if bad else layer(h)
        return torch.autograd.grad(h.float().pow(2).mean(), params)

    return run


def _clip_grad_foreach_off(device: str, bad: bool) -> Fn:
    # torch.nn.utils.clip_grad_norm_ (as HF Trainer and nanoGPT's train.py call it every step)
    # with foreach=False: one norm kernel and one scale kernel per parameter instead of the
    # multi-tensor kernels of the default foreach path (pytorch docs, clip_grad_norm_ foreach).
    import torch

    width, depth = (1024, 24) if _on_gpu(device) else (64, 8)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(depth)]).to(device)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    params = list(model.parameters())

    def run() -> Any:
        return torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=not bad)

    return run


def _h2d_pinned_lost(device: str, bad: bool) -> Fn:
    # pytorch/tutorials intermediate_source/pinmem_nonblock.py, and DataLoader(pin_memory=True):
    # a batch staged in page-locked (pinned) host memory is copied with non_blocking=True by
    # DMA; the bad variant's staging buffer lost its pin_memory() in a refactor, so the same
    # 64 MB copy goes through the driver's pageable path, and non_blocking no longer overlaps.
    import torch

    n = 16 * 2**20
    staged = torch.rand(n)
    if not bad:
        staged = staged.pin_memory()
    out = torch.empty(n, device=device)

    def run() -> Any:
        return out.copy_(staged, non_blocking=True)

    return run


def _rmsnorm_handwritten(device: str, bad: bool) -> Fn:
    # meta-llama/llama llama/model.py RMSNorm: _norm(x) = x * torch.rsqrt(x.pow(2).mean(-1,
    # keepdim=True) + eps), forward = _norm(x.float()).type_as(x) * weight: a cast, pow, mean,
    # add, rsqrt, mul, a cast back and the weight's mul, one kernel each. torch.nn.RMSNorm /
    # F.rms_norm (torch >= 2.4; on CUDA aten::_fused_rms_norm, one kernel) does it in one pass.
    # A LLaMA-7B width on 2 x 2048 tokens in bf16. On the CPU F.rms_norm is those same ops.
    import torch
    import torch.nn.functional as F

    rows, width = (2 * 2048, 4096) if _on_gpu(device) else (256, 256)
    dtype = torch.bfloat16 if _on_gpu(device) else torch.float32
    x = torch.randn(rows, width, device=device, dtype=dtype)
    weight = torch.ones(width, device=device, dtype=dtype)

    def handwritten() -> Any:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return h.type_as(x) * weight

    return handwritten if bad else (lambda: F.rms_norm(x, (width,), weight, 1e-6))


def _zero_grad_set_to_none_off(device: str, bad: bool) -> Fn:
    # pytorch/tutorials recipes_source/recipes/tuning_guide.py, "Use parameter.grad = None
    # instead of model.zero_grad() or optimizer.zero_grad()", and the torch.optim docs of
    # Optimizer.zero_grad(set_to_none=True), the default since PyTorch 2.0. The training step of
    # pytorch/examples imagenet/main.py (zero_grad, forward, backward, SGD with momentum 0.9 and
    # weight decay) on a residual MLP of 12 blocks (LayerNorm, Linear, GELU: 48 parameters). The
    # bad variant calls zero_grad(set_to_none=False), as loops written for older releases do: a
    # fill kernel per parameter (SGD's default foreach=None zeroes them one by one), and the
    # backward then adds into each gradient instead of handing its result over. On the CPU
    # those fills and adds cost next to nothing beside the step (within 10 %): no cpu_cause.
    import torch

    width, depth, tokens = (512, 12, 256) if _on_gpu(device) else (64, 6, 16)
    layers = _blocks(device, width, depth)
    opt = torch.optim.SGD(layers.parameters(), lr=1e-3, momentum=0.9, weight_decay=1e-4)
    x = torch.randn(tokens, width, device=device)

    def run() -> None:
        opt.zero_grad(set_to_none=not bad)
        h = x
        for layer in layers:
            h = h + layer(h)
        h.pow(2).mean().backward()
        opt.step()

    return run


def _masked_mean_sync(device: str, bad: bool) -> Fn:
    # pytorch/tutorials beginner_source/chatbot_tutorial.py maskNLLLoss (copied into many
    # seq2seq training loops): -log(gather(softmax output, target)) over a padded batch,
    # averaged over the real tokens with crossEntropy.masked_select(mask).mean(). Like
    # loss[mask], masked_select must count the kept elements before it can allocate its output:
    # a nonzero whose count is copied to the host and waited for on every call.
    # MAE (facebookresearch) models_mae.py forward_loss takes the same masked mean on the GPU,
    # (loss * mask).sum() / mask.sum(). 64 sequences of up to 32 tokens, a vocabulary of 8192.
    import torch

    batch, steps, vocab = (64, 32, 8192) if _on_gpu(device) else (8, 8, 256)
    logits = torch.randn(steps * batch, vocab, device=device)
    target = torch.randint(vocab, (steps * batch,), device=device)
    lengths = torch.randint(steps // 4, steps + 1, (batch,), device=device)
    mask = (torch.arange(steps, device=device)[:, None] < lengths[None, :]).view(-1)

    def run() -> Any:
        probs = torch.softmax(logits, dim=1)
        nll = -torch.log(torch.gather(probs, 1, target.view(-1, 1)).squeeze(1))
        if bad:
            return nll.masked_select(mask).mean()
        return (nll * mask).sum() / mask.sum()

    return run


def _empty_cache_per_step(device: str, bad: bool) -> Fn:
    # huggingface/diffusers src/diffusers/training_utils.py EMAModel.step() called
    # torch.cuda.empty_cache() on every training step until PR #2563 took it out;
    # open-mmlab/mmengine hooks/empty_cache_hook.py EmptyCacheHook(after_iter=True) does the
    # same. The caching allocator keeps freed blocks to reuse them (pytorch docs notes/cuda.rst,
    # "Memory management"); empty_cache() hands them back, so every step's activations and
    # gradients come from cudaMalloc again and each cudaFree waits for the GPU. A bf16 training
    # step of a 4-block MLP (1024 -> 4096 -> 1024) on 2048 tokens with fused AdamW.
    import torch

    tokens, width, depth = (2048, 1024, 4) if _on_gpu(device) else (16, 32, 2)
    dtype = torch.bfloat16 if _on_gpu(device) else torch.float32
    mlp = torch.nn.Sequential(
        *(
            torch.nn.Sequential(
                torch.nn.Linear(width, 4 * width),
                torch.nn.GELU(),
                torch.nn.Linear(4 * width, width),
            )
            for _ in range(depth)
        )
    ).to(device, dtype)
    opt = torch.optim.AdamW(mlp.parameters(), lr=1e-4, fused=_on_gpu(device))
    x = torch.randn(tokens, width, device=device, dtype=dtype)

    def run() -> None:
        opt.zero_grad()
        mlp(x).float().pow(2).mean().backward()
        opt.step()
        if bad:
            torch.cuda.empty_cache()

    return run


def _attention_handwritten(device: str, bad: bool) -> Fn:
    # karpathy/nanoGPT model.py CausalSelfAttention.forward: with self.flash (torch >= 2.0) it
    # calls F.scaled_dot_product_attention(q, k, v, is_causal=True); without it, the "manual
    # implementation of attention": (q @ k.transpose(-2, -1)) * (1 / sqrt(hs)), masked_fill
    # with the registered tril buffer, softmax, @ v: the (B, nh, T, T) scores are written and
    # read by each step. GPT-2 small's attention (12 heads of 64, T = 1024) on 8 sequences, bf16.
    import math

    import torch
    import torch.nn.functional as F

    b, nh, t, hs = (8, 12, 1024, 64) if _on_gpu(device) else (2, 4, 128, 32)
    dtype = torch.bfloat16 if _on_gpu(device) else torch.float32
    q, k, v = (torch.randn(b, nh, t, hs, device=device, dtype=dtype) for _ in range(3))
    tril = torch.tril(torch.ones(t, t, device=device)).view(1, 1, t, t)

    def manual() -> Any:
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(tril[:, :, :t, :t] == 0, float("-inf"))
        return F.softmax(att, dim=-1) @ v

    return manual if bad else (lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))


CASES = (
    *CASES,
    Case("layernorm_handwritten", "LayerNorm written as mean/sub/pow/div/mul/add ops",
         "ConvNeXt (facebookresearch) models/convnext.py LayerNorm (channels_first)",
         _layernorm_handwritten, cause="unfused-ops", cpu_cause="unfused-ops"),
    Case("gelu_tanh_handwritten", "tanh-GELU written as elementwise ops (gelu_new)",
         "huggingface/transformers activations.py NewGELUActivation", _gelu_tanh_handwritten,
         cause="unfused-ops", cpu_cause="unfused-ops"),
    Case("checkpoint_recompute", "every layer checkpointed: backward recomputes the forward",
         "huggingface/transformers gradient_checkpointing_enable; torch.utils.checkpoint",
         _checkpoint_recompute, cause="recompute"),
    Case("clip_grad_foreach_off", "clip_grad_norm_(foreach=False): per-parameter kernels",
         "pytorch docs torch.nn.utils.clip_grad_norm_; nanoGPT train.py", _clip_grad_foreach_off,
         cause="per-tensor-kernels"),
    Case("h2d_pinned_lost", "64 MB batch copied from pageable instead of pinned memory",
         "pytorch/tutorials intermediate_source/pinmem_nonblock.py", _h2d_pinned_lost,
         gpu_only=True, cause="h2d-copy"),
    Case("rmsnorm_handwritten", "LLaMA RMSNorm as cast/pow/mean/rsqrt/mul ops, not F.rms_norm",
         "meta-llama/llama llama/model.py RMSNorm; torch.nn.functional.rms_norm",
         _rmsnorm_handwritten, cause="unfused-ops"),
    Case("zero_grad_set_to_none_off", "optimizer.zero_grad(set_to_none=False) in a training step",
         "pytorch/tutorials recipes_source/recipes/tuning_guide.py; pytorch/examples imagenet/main.py",
         _zero_grad_set_to_none_off, cause="per-tensor-kernels"),
    Case("masked_mean_sync", "masked NLL by masked_select(mask).mean(): a nonzero sync per call",
         "pytorch/tutorials beginner_source/chatbot_tutorial.py maskNLLLoss; MAE (facebookresearch), "
         "models_mae.py forward_loss", _masked_mean_sync, cause="host-sync"),
    Case("empty_cache_per_step", "torch.cuda.empty_cache() after every training step",
         "huggingface/diffusers training_utils.py EMAModel.step (PR #2563); open-mmlab/mmengine "
         "EmptyCacheHook", _empty_cache_per_step, gpu_only=True, cause="allocation-churn"),
    Case("attention_handwritten", "causal attention written out (q @ k^T, masked_fill, softmax, @ v)",
         "karpathy/nanoGPT model.py CausalSelfAttention (the path without flash)",
         _attention_handwritten, cause="sdpa-backend"),
)  # fmt: skip
BY_NAME = {c.name: c for c in CASES}


def bad_cases(spec: str) -> set[str]:
    """``GPUPERF_ZOO``: empty (all good), ``bad`` (all bad) or ``bad:a,b`` (those bad)."""
    spec = spec.strip()
    if not spec:
        return set()
    if spec == "bad":
        return set(BY_NAME)
    if spec.startswith("bad:"):
        names = {n for n in spec[4:].replace(",", " ").split() if n}
        unknown = names - set(BY_NAME)
        if unknown:
            raise ValueError(f"GPUPERF_ZOO names unknown cases: {', '.join(sorted(unknown))}")
        return names
    raise ValueError(f"GPUPERF_ZOO must be empty, 'bad' or 'bad:name,...', got {spec!r}")
