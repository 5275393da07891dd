# Measures the time of a prefill of T new tokens after C tokens whose KV is already cached (a prefix-cache
# hit, or a later chunk of a chunked prefill), for the Llama-style decoder shapes the simulated engine models.
# Same model as the fitting data (random bf16 weights, fused QKV, RoPE, GQA, SwiGLU): the T new tokens run
# through every linear layer; attention of each new token reads all C cached tokens and the new ones before
# it (a causal mask aligned to the bottom right, as FlashAttention's varlen kernel applies it in serving
# engines). Each point is captured in a CUDA graph, so short prefills are not launch-bound.
#
#   python3 calib_prefix.py smoke llama3-8b qwen2.5-7b llama3-70b     # writes $OUT/calib-prefix.jsonl
#
# Records: {"kind": "prefill_cached", "model", "T", "C", "ms", "ms_min", "ms_max", "attn", "holdout"}.
# "holdout": true marks off-grid points meant to be kept out of any fit.
import json, os, sys, time
import torch
import torch.nn.functional as F

OUT = os.environ.get("OUT") or __import__("tempfile").gettempdir()
dev = torch.device("cuda")
torch.manual_seed(0)

SHAPES = {
    # name: hidden, layers_measured, layers_full, heads, kv_heads, head_dim, inter, vocab
    "llama3-8b": (4096, 32, 32, 32, 8, 128, 14336, 128256),
    "qwen2.5-7b": (3584, 28, 28, 28, 4, 128, 18944, 152064),
    "llama3-70b": (8192, 10, 80, 64, 8, 128, 28672, 128256),
}


def rnd(*shape):
    return torch.randn(*shape, device=dev, dtype=torch.bfloat16) * 0.02


def attn_reference(q, k, v, C):
    # q [1, nh, T, hd], k/v [1, kv, C+T, hd]; float32, explicit bottom-right causal mask.
    nh, kvh, T = q.shape[1], k.shape[1], q.shape[2]
    k = k.repeat_interleave(nh // kvh, 1).float()
    v = v.repeat_interleave(nh // kvh, 1).float()
    s = (q.float() @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
    i = torch.arange(T, device=dev)[:, None]
    j = torch.arange(C + T, device=dev)[None, :]
    s = s.masked_fill(j > i + C, float("-inf"))
    return (s.softmax(-1) @ v).to(q.dtype)


def attn_flash(q, k, v, C):
    # FlashAttention through ATen, batched layout [B, T, H, D]; causal is bottom-right aligned there.
    out = torch.ops.aten._flash_attention_forward(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), None, None,
        q.shape[2], k.shape[2], 0.0, True, False)[0]
    return out.transpose(1, 2)


def attn_lower_right(q, k, v, C):
    from torch.nn.attention.bias import causal_lower_right
    return F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(q.shape[2], k.shape[2]),
                                          enable_gqa=True)


def attn_repeat(q, k, v, C):
    from torch.nn.attention.bias import causal_lower_right
    nh, kvh = q.shape[1], k.shape[1]
    k = k.repeat_interleave(nh // kvh, 1)
    v = v.repeat_interleave(nh // kvh, 1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(q.shape[2], k.shape[2]))


def pick_attention():
    # The first implementation that matches the reference on a small GQA case wins.
    q = torch.randn(1, 8, 40, 64, device=dev, dtype=torch.bfloat16)
    k = torch.randn(1, 2, 100, 64, device=dev, dtype=torch.bfloat16)
    v = torch.randn(1, 2, 100, 64, device=dev, dtype=torch.bfloat16)
    want = attn_reference(q, k, v, 60)
    for name, fn in (("flash", attn_flash), ("sdpa_lower_right", attn_lower_right), ("repeat_kv", attn_repeat)):
        try:
            got = fn(q, k, v, 60)
            err = (got.float() - want.float()).abs().max().item()
            print("attention", name, "max abs error", round(err, 4), flush=True)
            if err < 0.05:
                return name, fn
        except Exception as e:  # noqa: BLE001 - try the next implementation
            print("attention", name, "unavailable:", type(e).__name__, str(e)[:200], flush=True)
    raise SystemExit("no attention implementation matched the reference")


class Model:
    def __init__(self, hidden, layers, heads, kv, hd, inter, vocab, attn):
        self.h, self.nl, self.nh, self.kv, self.hd, self.inter, self.vocab = hidden, layers, heads, kv, hd, inter, vocab
        self.attn = attn
        self.emb = rnd(vocab, hidden)
        self.head = rnd(vocab, hidden)
        self.fnorm = torch.ones(hidden, device=dev, dtype=torch.bfloat16)
        self.layers = [dict(
            n1=torch.ones(hidden, device=dev, dtype=torch.bfloat16),
            wqkv=rnd((heads + 2 * kv) * hd, hidden),
            wo=rnd(hidden, heads * hd),
            n2=torch.ones(hidden, device=dev, dtype=torch.bfloat16),
            wgu=rnd(2 * inter, hidden),
            wd=rnd(hidden, inter),
        ) for _ in range(layers)]
        self.inv_freq = 1.0 / (500000 ** (torch.arange(0, hd, 2, device=dev, dtype=torch.float32) / hd))

    def alloc_cache(self, n):
        return [(torch.empty(1, self.kv, n, self.hd, device=dev, dtype=torch.bfloat16).normal_(0, 1),
                 torch.empty(1, self.kv, n, self.hd, device=dev, dtype=torch.bfloat16).normal_(0, 1))
                for _ in range(self.nl)]

    def rope(self, x, pos):
        f = torch.outer(pos, self.inv_freq)
        cos, sin = f.cos().to(x.dtype), f.sin().to(x.dtype)
        cos, sin = torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)
        x1, x2 = x[..., : self.hd // 2], x[..., self.hd // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    @staticmethod
    def norm(x, w):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype) * w

    def forward(self, ids, cache, C):
        # ids [1, T]: the new tokens at positions C..C+T-1; cache positions 0..C-1 hold the cached prefix.
        T = ids.shape[1]
        x = F.embedding(ids, self.emb)
        pos = torch.arange(C, C + T, device=dev, dtype=torch.float32)
        for i, L in enumerate(self.layers):
            h = self.norm(x, L["n1"])
            q, k, v = F.linear(h, L["wqkv"]).split([self.nh * self.hd, self.kv * self.hd, self.kv * self.hd], -1)
            q = self.rope(q.view(1, T, self.nh, self.hd).transpose(1, 2), pos)
            k = self.rope(k.view(1, T, self.kv, self.hd).transpose(1, 2), pos)
            v = v.view(1, T, self.kv, self.hd).transpose(1, 2)
            kc, vc = cache[i]
            kc[:, :, C:C + T] = k
            vc[:, :, C:C + T] = v
            a = self.attn(q, kc[:, :, :C + T], vc[:, :, :C + T], C)
            x = x + F.linear(a.transpose(1, 2).reshape(1, T, self.nh * self.hd), L["wo"])
            h = self.norm(x, L["n2"])
            g, u = F.linear(h, L["wgu"]).chunk(2, -1)
            x = x + F.linear(F.silu(g) * u, L["wd"])
        return F.linear(self.norm(x[:, -1], self.fnorm), self.head).argmax(-1)


def time_fn(fn, warm, iters):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2], ts[0], ts[-1]


def graph_time(step, iters):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step()
    r = time_fn(g.replay, 2, iters)
    del g
    return r


def emit(rec):
    line = json.dumps(rec)
    print(line, flush=True)
    with open(os.path.join(OUT, "calib-prefix.jsonl"), "a") as f:
        f.write(line + "\n")


GRID = [(T, C) for C in (0, 1024, 2048, 4096, 8192, 16384, 32768) for T in (64, 256, 1024, 2048, 4096, 8192)]
HOLDOUT = [(128, 3000), (512, 6000), (1536, 3000), (3072, 12000), (6144, 20000), (1024, 24000),
           (2560, 1500), (5000, 8000), (1280, 30000), (7000, 500)]


def run(name, attn_name, attn, points):
    hidden, nl, nl_full, nh, kv, hd, inter, vocab = SHAPES[name]
    m = Model(hidden, nl, nh, kv, hd, inter, vocab, attn)
    base = dict(model=name, layers_measured=nl, layers_full=nl_full, attn=attn_name)
    cache = m.alloc_cache(max(t + c for t, c, _ in points))
    with torch.inference_mode():
        for T, C, hold in points:
            try:
                ids = torch.randint(0, vocab, (1, T), device=dev)
                iters = 10 if T + C <= 8192 else 5
                med, lo, hi = graph_time(lambda: m.forward(ids, cache, C), iters)
                emit(dict(kind="prefill_cached", T=T, C=C, ms=med, ms_min=lo, ms_max=hi, holdout=hold, **base))
            except torch.OutOfMemoryError:
                emit(dict(kind="prefill_cached", T=T, C=C, error="oom", holdout=hold, **base))
            torch.cuda.empty_cache()
    del m, cache
    torch.cuda.empty_cache()


if __name__ == "__main__":
    which = sys.argv[1:] or ["smoke"]
    t0 = time.time()
    print("torch", torch.__version__, torch.cuda.get_device_name(0), flush=True)
    attn_name, attn = pick_attention()
    points = [(t, c, False) for t, c in GRID] + [(t, c, True) for t, c in HOLDOUT]
    if "smoke" in which:
        SHAPES["tiny"] = (256, 2, 2, 4, 2, 64, 512, 1000)
        run("tiny", attn_name, attn, [(16, 0, False), (16, 48, False)])
    for name in SHAPES:
        if name in which and name != "tiny":
            run(name, attn_name, attn, points)
            print("done", name, "elapsed_s", round(time.time() - t0, 1), flush=True)
    print("elapsed_s", round(time.time() - t0, 1), flush=True)
