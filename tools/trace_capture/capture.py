"""Runs one model under the c10 allocation tracer and writes its trace.

Usage (Debian's python3-torch and python3-torchvision; see README.md):
  LD_PRELOAD=./libc10_alloc_tracer.so /usr/bin/python3 capture.py NAME OUTDIR

Writes OUTDIR/NAME.csv (RMM logging CSV), OUTDIR/meta/NAME.phases.csv
(construct, optimizer, iterN, teardown, end) and OUTDIR/meta/NAME.run.json.
Models are built with weights=None and fed random batches: nothing is
downloaded, and only the allocation pattern matters.
"""
import ctypes, gc, json, math, sys, time
import torch, torch.nn as nn, torch.nn.functional as F
import torchvision

lib = ctypes.CDLL(None)
lib.shim_mark_phase.argtypes = [ctypes.c_char_p]
lib.shim_dump.argtypes = [ctypes.c_char_p] * 3
lib.shim_dump.restype = ctypes.c_long
def mark(n): lib.shim_mark_phase(n.encode())

torch.set_num_threads(2)
torch.manual_seed(0)
name, outdir = sys.argv[1], sys.argv[2]


class Seq2SeqGRU(nn.Module):
    """GRU encoder + step-by-step GRUCell decoder with dot-product attention (teacher forcing)."""
    def __init__(self, vocab=8000, emb=256, hid=512, layers=2):
        super().__init__()
        self.src_emb = nn.Embedding(vocab, emb)
        self.tgt_emb = nn.Embedding(vocab, emb)
        self.enc = nn.GRU(emb, hid, num_layers=layers, batch_first=True)
        self.cell = nn.GRUCell(emb + hid, hid)
        self.attn_out = nn.Linear(2 * hid, hid)
        self.proj = nn.Linear(hid, vocab)

    def forward(self, src, tgt_in):
        enc_out, h = self.enc(self.src_emb(src))          # B,S,H
        h = h[-1]
        ctx = torch.zeros_like(h)
        temb = self.tgt_emb(tgt_in)                        # B,T,E
        outs = []
        for t in range(tgt_in.shape[1]):
            h = self.cell(torch.cat([temb[:, t], ctx], 1), h)
            scores = torch.bmm(enc_out, h.unsqueeze(2)).squeeze(2)
            a = torch.softmax(scores, 1)
            ctx = torch.bmm(a.unsqueeze(1), enc_out).squeeze(1)
            outs.append(torch.tanh(self.attn_out(torch.cat([h, ctx], 1))))
        return self.proj(torch.stack(outs, 1))


class GPT(nn.Module):
    def __init__(self, vocab=16000, d=384, heads=6, layers=4, ff=1536, seq=128):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        layer = nn.TransformerEncoderLayer(d, heads, ff, dropout=0.1, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, x):
        T = x.shape[1]
        mask = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)
        h = self.tok(x) + self.pos(torch.arange(T).unsqueeze(0))
        return self.head(self.ln(self.blocks(h, mask=mask)))


class BertEncoder(nn.Module):
    def __init__(self, vocab=30522, d=768, heads=12, layers=6, ff=3072, seq=128):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.ln = nn.LayerNorm(d)
        layer = nn.TransformerEncoderLayer(d, heads, ff, dropout=0.1, activation="gelu", batch_first=True)
        self.enc = nn.TransformerEncoder(layer, layers)
        self.pool = nn.Linear(d, d)

    def forward(self, x, pad):
        T = x.shape[1]
        h = self.ln(self.tok(x) + self.pos(torch.arange(T).unsqueeze(0)))
        h = self.enc(h, src_key_padding_mask=pad)
        return torch.tanh(self.pool(h[:, 0]))


class MLP(nn.Module):
    """A small MNIST-sized classifier: 784-512-256-10."""
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(),
                                 nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))

    def forward(self, x):
        return self.net(x)


class LSTMLM(nn.Module):
    """A word-level LSTM language model (PTB-sized): embedding 400, 2x650 LSTM, vocab 10000, tied weights off."""
    def __init__(self, vocab=10000, emb=400, hid=650, layers=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, emb)
        self.lstm = nn.LSTM(emb, hid, layers, batch_first=True, dropout=0.2)
        self.out = nn.Linear(hid, vocab)

    def forward(self, x):
        h, _ = self.lstm(self.emb(x))
        return self.out(h)


class Seq2SeqTransformer(nn.Module):
    """nn.Transformer encoder-decoder (d 256, 4 heads, 3+3 layers, ff 1024), shared vocab 8000."""
    def __init__(self, vocab=8000, d=256, heads=4, layers=3, ff=1024, seq=64):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.tf = nn.Transformer(d, heads, layers, layers, ff, dropout=0.1, batch_first=True)
        self.head = nn.Linear(d, vocab)

    def embed(self, x):
        return self.tok(x) + self.pos(torch.arange(x.shape[1]).unsqueeze(0))

    def forward(self, src, tgt_in):
        mask = self.tf.generate_square_subsequent_mask(tgt_in.shape[1])
        return self.head(self.tf(self.embed(src), self.embed(tgt_in), tgt_mask=mask))


GPT_SEQS = [64, 96, 48, 128, 80, 112, 56]
BERT_BATCHES = [1, 5, 2, 8, 3, 6, 2]
RESNET_BATCHES = [1, 4, 16, 2, 8, 12, 3]
# The largest shape last: the last iteration meets a shape never seen.
RESNET_GROW_BATCHES = [1, 4, 2, 8, 3, 6, 16]
GPT_GROW_SEQS = [64, 48, 96, 80, 112, 56, 144]
BERT_GROW_BATCHES = [1, 5, 2, 3, 8, 2, 12]
GRU_SEQS = [(24, 16), (16, 10), (32, 22), (12, 8), (20, 14), (28, 20), (18, 12)]

# Dynamic shapes: one configuration per schedule (batch(i) gets the iteration
# index); `note` follows the schedule in the description.
def gpt_dynamic(seqs, max_seq, note=""):
    return dict(build=lambda: GPT(seq=max_seq),
                batch=lambda i: (torch.randint(0, 16000, (4, seqs[i] + 1)),),
                fwd=lambda m, b: m(b[0][:, :-1]),
                loss=lambda o, b: F.cross_entropy(o.reshape(-1, o.shape[-1]), b[0][:, 1:].reshape(-1)),
                mode="train", iters=len(seqs), dynamic=True,
                opt=lambda p: torch.optim.AdamW(p, lr=3e-4, weight_decay=0.1),
                desc="the GPT decoder (4x384, causal mask, vocab 16000) with the sequence length changing every "
                     f"iteration {seqs}{note}, batch 4, AdamW, {len(seqs)} iterations")


def bert_dynamic(batches, note=""):
    return dict(build=lambda: BertEncoder(),
                batch=lambda i: (torch.randint(0, 30522, (batches[i], 128)),
                                 torch.arange(128).unsqueeze(0) >= torch.randint(32, 129, (batches[i], 1))),
                fwd=lambda m, b: m(b[0], b[1]),
                mode="infer", iters=len(batches), dynamic=True,
                desc="the BERT-like encoder (6x768), seq 128 with random padding (lengths 32-128), batch size "
                     f"changing every iteration {batches}{note}, eval + no_grad, {len(batches)} iterations")


def resnet18_dynamic(batches, note=""):
    return dict(build=lambda: torchvision.models.resnet18(weights=None),
                batch=lambda i: (torch.randn(batches[i], 3, 224, 224),),
                fwd=lambda m, b: m(b[0]),
                mode="infer", iters=len(batches), dynamic=True,
                desc=f"torchvision resnet18, batch size changing every iteration {batches}{note}, "
                     f"eval + no_grad, {len(batches)} iterations")


# name -> (description, builder, mode, iters, batch, make_opt, make_batch, loss)
def vision(arch, batch, res=224, **kw):
    return dict(build=lambda: getattr(torchvision.models, arch)(weights=None, **kw),
                batch=lambda: (torch.randn(batch, 3, res, res), torch.randint(0, 1000, (batch,))),
                fwd=lambda m, b: m(b[0]), loss=lambda o, b: F.cross_entropy(o, b[1]))

CFG = {
    "vgg11-train": dict(vision("vgg11", 8), mode="train", iters=3,
                        opt=lambda p: torch.optim.SGD(p, lr=0.01),
                        desc="torchvision vgg11, batch 8, 224x224, SGD (no momentum), 3 iterations"),
    "mobilenet_v2-train": dict(vision("mobilenet_v2", 24), mode="train", iters=3,
                               opt=lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=4e-5),
                               desc="torchvision mobilenet_v2, batch 24, 224x224, SGD momentum 0.9 wd 4e-5, 3 iterations"),
    "squeezenet1_1-train": dict(vision("squeezenet1_1", 32), mode="train", iters=3,
                                opt=lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9, nesterov=True),
                                desc="torchvision squeezenet1_1, batch 32, 224x224, SGD nesterov momentum 0.9, 3 iterations"),
    "efficientnet_b0-train": dict(vision("efficientnet_b0", 16), mode="train", iters=3,
                                  opt=lambda p: torch.optim.RMSprop(p, lr=0.01, momentum=0.9, eps=1e-3),
                                  desc="torchvision efficientnet_b0, batch 16, 224x224, RMSprop momentum 0.9, 3 iterations"),
    "densenet121-infer": dict(vision("densenet121", 16), mode="infer", iters=5,
                              desc="torchvision densenet121, batch 16, 224x224, eval + no_grad, 5 iterations"),
    "gru-seq2seq-train": dict(build=lambda: Seq2SeqGRU(),
                              batch=lambda: (torch.randint(0, 8000, (48, 32)), torch.randint(0, 8000, (48, 25))),
                              fwd=lambda m, b: m(b[0], b[1][:, :-1]),
                              loss=lambda o, b: F.cross_entropy(o.reshape(-1, o.shape[-1]), b[1][:, 1:].reshape(-1)),
                              mode="train", iters=3, clip=1.0,
                              opt=lambda p: torch.optim.Adam(p, lr=1e-3),
                              desc="GRU seq2seq: emb 256, 2-layer GRU encoder hid 512, GRUCell decoder with dot attention "
                                   "(24 steps, teacher forcing), vocab 8000, src 32, batch 48, Adam + grad clip, 3 iterations"),
    "gpt-decoder-train": dict(build=lambda: GPT(),
                              batch=lambda: (torch.randint(0, 16000, (16, 129)),),
                              fwd=lambda m, b: m(b[0][:, :-1]),
                              loss=lambda o, b: F.cross_entropy(o.reshape(-1, o.shape[-1]), b[0][:, 1:].reshape(-1)),
                              mode="train", iters=3,
                              opt=lambda p: torch.optim.AdamW(p, lr=3e-4, weight_decay=0.1),
                              desc="GPT-style decoder-only LM: nn.TransformerEncoder 4x384 (6 heads, ff 1536, pre-norm, GELU) "
                                   "with causal mask, vocab 16000, seq 128, batch 16, AdamW, 3 iterations"),
    "bert-infer": dict(build=lambda: BertEncoder(),
                       batch=lambda: (torch.randint(0, 30522, (8, 128)),
                                      torch.arange(128).unsqueeze(0) >= torch.tensor([128, 96, 128, 64, 112, 128, 80, 100]).unsqueeze(1)),
                       fwd=lambda m, b: m(b[0], b[1]),
                       mode="infer", iters=5,
                       desc="BERT-like encoder: nn.TransformerEncoder 6x768 (12 heads, ff 3072, GELU), vocab 30522, "
                            "seq 128 with padding mask, batch 8, eval + no_grad (1.13 fast path / nested tensors), 5 iterations"),
    # Small models (peak live 11-195 MiB): where a 2 MiB growth floor is a
    # large share of the pool.
    "mlp-train": dict(build=lambda: MLP(),
                      batch=lambda: (torch.randn(64, 1, 28, 28), torch.randint(0, 10, (64,))),
                      fwd=lambda m, b: m(b[0]), loss=lambda o, b: F.cross_entropy(o, b[1]),
                      mode="train", iters=5, opt=lambda p: torch.optim.Adam(p, lr=1e-3),
                      desc="MLP 784-512-256-10, batch 64, Adam, 5 iterations"),
    "gru-small-train": dict(build=lambda: Seq2SeqGRU(vocab=2000, emb=64, hid=128, layers=1),
                            batch=lambda: (torch.randint(0, 2000, (8, 16)), torch.randint(0, 2000, (8, 12))),
                            fwd=lambda m, b: m(b[0], b[1][:, :-1]),
                            loss=lambda o, b: F.cross_entropy(o.reshape(-1, o.shape[-1]), b[1][:, 1:].reshape(-1)),
                            mode="train", iters=3, opt=lambda p: torch.optim.Adam(p, lr=1e-3),
                            desc="the GRU seq2seq at emb 64, hid 128, 1 layer, vocab 2000, batch 8, Adam, 3 iterations"),
    "resnet18-train-b2": dict(vision("resnet18", 2), mode="train", iters=3,
                              opt=lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9),
                              desc="torchvision resnet18, batch 2, SGD momentum 0.9, 3 iterations"),
    "resnet18-infer-b1": dict(vision("resnet18", 1), mode="infer", iters=5,
                              desc="torchvision resnet18, batch 1, eval + no_grad, 5 iterations"),
    "mobilenet_v2-infer-b1": dict(vision("mobilenet_v2", 1), mode="infer", iters=5,
                                  desc="torchvision mobilenet_v2, batch 1, eval + no_grad, 5 iterations"),
    "squeezenet1_1-infer-b4": dict(vision("squeezenet1_1", 4), mode="infer", iters=5,
                                   desc="torchvision squeezenet1_1, batch 4, eval + no_grad, 5 iterations"),
    "densenet121-infer-b2": dict(vision("densenet121", 2), mode="infer", iters=5,
                                 desc="torchvision densenet121, batch 2, eval + no_grad, 5 iterations"),
    # Dynamic shapes: the sequence length or batch size changes every
    # iteration (batch(i) gets the iteration index; fixed seed, so reruns
    # reproduce the trace).
    "gpt-dynseq-train": gpt_dynamic(GPT_SEQS, max_seq=128),
    "bert-dynbatch-infer": bert_dynamic(BERT_BATCHES),
    "resnet18-dynbatch-infer": resnet18_dynamic(RESNET_BATCHES),
    "resnet18-dyngrow-infer": resnet18_dynamic(RESNET_GROW_BATCHES, " (the largest last)"),
    "gpt-dyngrow-train": gpt_dynamic(GPT_GROW_SEQS, max_seq=160, note=" (the longest last)"),
    "bert-dyngrow-infer": bert_dynamic(BERT_GROW_BATCHES, " (the largest last)"),
    "gru-dynseq-train": dict(build=lambda: Seq2SeqGRU(),
                             batch=lambda i: (torch.randint(0, 8000, (24, GRU_SEQS[i][0])),
                                              torch.randint(0, 8000, (24, GRU_SEQS[i][1] + 1))),
                             fwd=lambda m, b: m(b[0], b[1][:, :-1]),
                             loss=lambda o, b: F.cross_entropy(o.reshape(-1, o.shape[-1]), b[1][:, 1:].reshape(-1)),
                             mode="train", iters=len(GRU_SEQS), clip=1.0, dynamic=True,
                             opt=lambda p: torch.optim.Adam(p, lr=1e-3),
                             desc="the GRU seq2seq (emb 256, 2x512 encoder, attention decoder, vocab 8000), batch 24, "
                                  f"(source, target) lengths changing every iteration {GRU_SEQS}, Adam + grad clip, "
                                  f"{len(GRU_SEQS)} iterations"),
    # Recorded 2026-12-07, after preset:low_footprint was chosen: models none
    # of the earlier traces came from, to check the preset on traces it has
    # never seen.
    "alexnet-train": dict(vision("alexnet", 16), mode="train", iters=3,
                          opt=lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9),
                          desc="torchvision alexnet, batch 16, 224x224, SGD momentum 0.9, 3 iterations"),
    "googlenet-infer": dict(vision("googlenet", 8, init_weights=True), mode="infer", iters=5,
                            desc="torchvision googlenet, batch 8, 224x224, eval + no_grad, 5 iterations"),
    "shufflenet_v2-train": dict(vision("shufflenet_v2_x1_0", 16), mode="train", iters=3,
                                opt=lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=4e-5),
                                desc="torchvision shufflenet_v2_x1_0, batch 16, 224x224, SGD momentum 0.9 wd 4e-5, "
                                     "3 iterations"),
    "resnet34-infer": dict(vision("resnet34", 8), mode="infer", iters=5,
                           desc="torchvision resnet34, batch 8, 224x224, eval + no_grad, 5 iterations"),
    "mnasnet1_0-train": dict(vision("mnasnet1_0", 8), mode="train", iters=3,
                             opt=lambda p: torch.optim.RMSprop(p, lr=0.01, momentum=0.9),
                             desc="torchvision mnasnet1_0, batch 8, 224x224, RMSprop momentum 0.9, 3 iterations"),
    "regnet_x_400mf-train": dict(vision("regnet_x_400mf", 16), mode="train", iters=3,
                                 opt=lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=5e-5),
                                 desc="torchvision regnet_x_400mf, batch 16, 224x224, SGD momentum 0.9, "
                                      "3 iterations"),
    "mobilenet_v3_large-infer": dict(vision("mobilenet_v3_large", 4), mode="infer", iters=5,
                                     desc="torchvision mobilenet_v3_large, batch 4, 224x224, eval + no_grad, "
                                          "5 iterations"),
    "convnext_tiny-infer": dict(vision("convnext_tiny", 2), mode="infer", iters=5,
                                desc="torchvision convnext_tiny, batch 2, 224x224, eval + no_grad, 5 iterations"),
    "vit_b_16-infer": dict(vision("vit_b_16", 1), mode="infer", iters=5,
                           desc="torchvision vit_b_16, batch 1, 224x224, eval + no_grad, 5 iterations"),
    "lstm-lm-train": dict(build=lambda: LSTMLM(),
                          batch=lambda: (torch.randint(0, 10000, (20, 36)),),
                          fwd=lambda m, b: m(b[0][:, :-1]),
                          loss=lambda o, b: F.cross_entropy(o.reshape(-1, o.shape[-1]), b[0][:, 1:].reshape(-1)),
                          mode="train", iters=3, clip=0.25,
                          opt=lambda p: torch.optim.SGD(p, lr=20.0),
                          desc="word-level LSTM language model (embedding 400, 2x650 LSTM, vocab 10000), "
                               "batch 20, 35 steps, SGD + grad clip, 3 iterations"),
    # The third set (2026-12-07): recorded after the policy families of that
    # day had been modelled on everything above, again from models none of
    # the earlier traces came from.
    "wide_resnet50_2-infer": dict(vision("wide_resnet50_2", 4), mode="infer", iters=5,
                                  desc="torchvision wide_resnet50_2, batch 4, 224x224, eval + no_grad, 5 iterations"),
    "inception_v3-infer": dict(vision("inception_v3", 4, res=299, init_weights=False, aux_logits=False),
                               mode="infer", iters=5,
                               desc="torchvision inception_v3 (no auxiliary head), batch 4, 299x299, eval + no_grad, "
                                    "5 iterations"),
    "resnext50-train": dict(vision("resnext50_32x4d", 4), mode="train", iters=3,
                            opt=lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=1e-4),
                            desc="torchvision resnext50_32x4d, batch 4, 224x224, SGD momentum 0.9 wd 1e-4, "
                                 "3 iterations"),
    "vgg16_bn-train": dict(vision("vgg16_bn", 4), mode="train", iters=3,
                           opt=lambda p: torch.optim.Adam(p, lr=1e-4),
                           desc="torchvision vgg16_bn, batch 4, 224x224, Adam, 3 iterations"),
    "swin_t-infer": dict(vision("swin_t", 2), mode="infer", iters=5,
                         desc="torchvision swin_t, batch 2, 224x224, eval + no_grad, 5 iterations"),
    "efficientnet_b3-infer": dict(vision("efficientnet_b3", 4, res=300), mode="infer", iters=5,
                                  desc="torchvision efficientnet_b3, batch 4, 300x300, eval + no_grad, 5 iterations"),
    "mobilenet_v3_small-train": dict(vision("mobilenet_v3_small", 32), mode="train", iters=3,
                                     opt=lambda p: torch.optim.RMSprop(p, lr=0.01, momentum=0.9),
                                     desc="torchvision mobilenet_v3_small, batch 32, 224x224, RMSprop momentum 0.9, "
                                          "3 iterations"),
    "transformer-s2s-train": dict(build=lambda: Seq2SeqTransformer(),
                                  batch=lambda: (torch.randint(0, 8000, (16, 40)), torch.randint(0, 8000, (16, 33))),
                                  fwd=lambda m, b: m(b[0], b[1][:, :-1]),
                                  loss=lambda o, b: F.cross_entropy(o.reshape(-1, o.shape[-1]),
                                                                    b[1][:, 1:].reshape(-1)),
                                  mode="train", iters=3,
                                  opt=lambda p: torch.optim.Adam(p, lr=1e-4),
                                  desc="nn.Transformer encoder-decoder (d 256, 4 heads, 3+3 layers, ff 1024, vocab "
                                       "8000), batch 16, source 40, target 32, Adam, 3 iterations"),
}

cfg = CFG[name]
t_start = time.time()
lib.shim_start()
mark("construct")
model = cfg["build"]()
if cfg["mode"] == "train":
    model.train()
    mark("optimizer")
    opt = cfg["opt"](model.parameters())
    for i in range(cfg["iters"]):
        mark(f"iter{i}")
        b = cfg["batch"](i) if cfg.get("dynamic") else cfg["batch"]()
        out = cfg["fwd"](model, b)
        loss = cfg["loss"](out, b)
        opt.zero_grad()
        loss.backward()
        if cfg.get("clip"):
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["clip"])
        opt.step()
        print(f"{name} iter{i} loss {loss.item():.4f} t={time.time()-t_start:.1f}s", flush=True)
else:
    model.eval()
    with torch.no_grad():
        for i in range(cfg["iters"]):
            mark(f"iter{i}")
            b = cfg["batch"](i) if cfg.get("dynamic") else cfg["batch"]()
            out = cfg["fwd"](model, b)
            print(f"{name} iter{i} out {tuple(out.shape)} t={time.time()-t_start:.1f}s", flush=True)
mark("teardown")
if cfg["mode"] == "train":
    del opt, loss
del model, out, b
gc.collect()
mark("end")
lib.shim_stop()
n = lib.shim_dump(f"{outdir}/{name}.csv".encode(), f"{outdir}/meta/{name}.phases.csv".encode(),
                  f"{outdir}/meta/{name}.shim.txt".encode())
json.dump({"trace": f"{name}.csv", "description": cfg["desc"], "mode": cfg["mode"], "iterations": cfg["iters"],
           "torch_num_threads": torch.get_num_threads(), "torch": torch.__version__,
           "torchvision": torchvision.__version__, "wall_s": round(time.time() - t_start, 2),
           "filter": "posix_memalign calls whose return address is in libc10.so (c10::alloc_cpu) + frees of those pointers"},
          open(f"{outdir}/meta/{name}.run.json", "w"), indent=1)
print(f"{name}: {n} events, {time.time()-t_start:.1f}s")
