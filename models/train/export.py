#!/usr/bin/python3
"""Export a trained checkpoint to models/tiny (fla / Hugging Face layout) and write the card.

Usage: export.py [--run build-train/run] [--corpus build-train/corpus]
                 [--tokenizer build-train/tokenizer.json] [--out models/tiny]
                 [--reference tests/data/tiny_reference.json]
Writes OUT/{config.json, model.safetensors, tokenizer.json, generation_config.json,
README.md, loss.png} and the logits reference used by linfer's C++ forward test.
"""
import argparse
import json
import math
import os
import platform
import shutil
import struct
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bpe  # noqa: E402
from evaluate import heldout_loss, unigram_baselines  # noqa: E402
from model import GatedDeltaNetForCausalLM, intermediate_size_for  # noqa: E402

GEN = {"temperature": 0.8, "top_p": 0.95, "max_new_tokens": 200}


# ---------------------------------------------------------------------------------- safetensors
def write_safetensors(path, tensors, metadata=None):
    """tensors: dict name -> torch tensor (f32/bf16/f16).  Layout: u64 LE header length,
    JSON header (space-padded to a multiple of 8), then the packed little-endian data."""
    names = sorted(tensors)
    dtypes = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}
    header, blobs, off = {}, [], 0
    for n in names:
        t = tensors[n].detach().cpu().contiguous()
        raw = t.view(torch.int16).numpy().tobytes() if t.dtype == torch.bfloat16 \
            else t.numpy().tobytes()
        header[n] = {"dtype": dtypes[t.dtype], "shape": list(t.shape),
                     "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((-len(h)) % 8)
    assert sys.byteorder == "little"
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        assert e["dtype"] == "F32"
        a, b = e["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[a:b]), dtype=torch.float32).reshape(e["shape"])
    return out


# ----------------------------------------------------------------------------------- generation
@torch.no_grad()
def generate(model, enc, prompt, n, temperature, top_p, seed):
    g = torch.Generator().manual_seed(seed)
    ids = enc.encode(prompt, add_bos=True)
    logits, state = model(torch.tensor([ids]), state=None, return_state=True)
    out = []
    for _ in range(n):
        lg = logits[0, -1].float()
        if temperature == 0:
            nxt = int(lg.argmax())
        else:
            p = torch.softmax(lg / temperature, -1)
            sp, si = p.sort(descending=True)
            keep = (sp.cumsum(0) - sp) < top_p
            sp = sp * keep
            nxt = int(si[torch.multinomial(sp / sp.sum(), 1, generator=g)])
        out.append(nxt)
        if nxt == enc.specials[bpe.EOT]:
            break
        logits, state = model(torch.tensor([[nxt]]), state=state, return_state=True)
    return prompt + enc.decode(out)


def fla_config(cfg):
    return {
        "architectures": ["GatedDeltaNetForCausalLM"],
        "model_type": "gated_deltanet",
        "attn_mode": "chunk",
        "hidden_size": cfg["hidden_size"],
        "num_hidden_layers": cfg["num_hidden_layers"],
        "num_heads": cfg["num_heads"],
        "num_v_heads": None,
        "head_dim": cfg["head_dim"],
        "expand_v": cfg["expand_v"],
        "use_gate": True,
        "use_short_conv": True,
        "allow_neg_eigval": False,
        "conv_size": cfg["conv_size"],
        "max_position_embeddings": 2048,
        "hidden_ratio": cfg["hidden_ratio"],
        "intermediate_size": intermediate_size_for(cfg["hidden_size"], cfg["hidden_ratio"],
                                                   cfg.get("intermediate_size")),
        "hidden_act": "swish",
        "norm_eps": cfg["norm_eps"],
        "attn": None,
        "use_cache": True,
        "pad_token_id": None,
        "bos_token_id": cfg["bos_token_id"],
        "eos_token_id": cfg["eos_token_id"],
        "tie_word_embeddings": False,
        "initializer_range": cfg["initializer_range"],
        "fuse_norm": True,
        "fuse_swiglu": True,
        "fuse_cross_entropy": True,
        "fuse_linear_cross_entropy": False,
        "use_l2warp": False,
        "vocab_size": cfg["vocab_size"],
        "torch_dtype": "float32",
    }


def loss_png(log, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    tr = [r for r in log if r["event"] == "train"]
    ev = [r for r in log if r["event"] == "eval"]
    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=80)
    ax.plot([r["tokens"] / 1e6 for r in tr], [r["loss"] for r in tr], lw=1, label="train (10-step mean)")
    ax.plot([r["tokens"] / 1e6 for r in ev], [r["heldout_loss"] for r in ev], "o-", ms=3,
            label="held-out")
    ax.set_xlabel("tokens seen (millions)")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_ylim(top=min(8.5, max(r["loss"] for r in tr)))
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title("models/tiny: Gated DeltaNet, %.1fM params" % (log[0]["params"] / 1e6))
    fig.tight_layout()
    fig.savefig(path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", default="build-train/run")
    ap.add_argument("--corpus", default="build-train/corpus")
    ap.add_argument("--tokenizer", default="build-train/tokenizer.json")
    ap.add_argument("--out", default="models/tiny")
    ap.add_argument("--reference", default="tests/data/tiny_reference.json")
    ap.add_argument("--ref-tokens", type=int, default=32)
    ap.add_argument("--schedule-steps-before", default="",
                    help="the train.py option of the same name, if the run used it (for the card)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)

    st = torch.load(os.path.join(args.run, "ckpt.pt"), map_location="cpu")
    cfg = st["config"]
    model = GatedDeltaNetForCausalLM(cfg)
    model.load_state_dict(st["model"])
    model.eval()
    log = [json.loads(l) for l in open(os.path.join(args.run, "log.jsonl"))]
    start = [r for r in log if r["event"] == "start"][0]
    enc = bpe.Encoder.from_file(args.tokenizer)
    bos = enc.specials[bpe.EOT]
    with open(os.path.join(args.corpus, "manifest.json")) as f:
        manifest = json.load(f)

    # 1. weights, config, tokenizer, generation config
    sd = {k: v.float() for k, v in model.state_dict().items()}
    st_path = os.path.join(args.out, "model.safetensors")
    write_safetensors(st_path, sd, {"format": "pt"})
    back = read_safetensors(st_path)
    assert back.keys() == sd.keys() and all(torch.equal(back[k], sd[k]) for k in sd)
    fcfg = fla_config(cfg)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(fcfg, f, indent=2)
        f.write("\n")
    shutil.copyfile(args.tokenizer, os.path.join(args.out, "tokenizer.json"))
    gen_cfg = {"bos_token_id": bos, "eos_token_id": bos, "do_sample": True, **GEN}
    with open(os.path.join(args.out, "generation_config.json"), "w") as f:
        json.dump(gen_cfg, f, indent=2)
        f.write("\n")

    # 2. evaluation
    with open(os.path.join(args.corpus, "heldout.txt"), encoding="utf-8") as f:
        held_text = f.read()
    with open(os.path.join(args.corpus, "train.txt"), encoding="utf-8") as f:
        train_text = f.read()
    held = torch.tensor(enc.encode(held_text))
    train_ids = torch.tensor(enc.encode(train_text))
    nbytes = len(held_text.encode("utf-8"))
    t0 = time.time()
    nats, ntok = heldout_loss(model, held, bos, "cpu")
    eval_s = time.time() - t0
    uni = unigram_baselines(train_ids, held, len(enc.vocab))
    bpb = lambda x: x / math.log(2) / nbytes  # noqa: E731
    res = {"heldout_bytes": nbytes, "heldout_tokens": ntok, "loss": nats / ntok,
           "bpb": bpb(nats), "unigram_train_add1_bpb": bpb(uni["train_add1"]),
           "unigram_train_add1_loss": uni["train_add1"] / ntok,
           "unigram_heldout_ml_bpb": bpb(uni["heldout_ml"]), "eval_s": eval_s}
    print(json.dumps(res, indent=1))

    # 3. logits reference for linfer's C++ forward (BOS + the first held-out tokens)
    toks = [bos] + held[:args.ref_tokens - 1].tolist()
    with torch.no_grad():
        logits = model(torch.tensor([toks]))[0]
        ref64 = GatedDeltaNetForCausalLM(cfg).double()
        ref64.load_state_dict(st["model"])
        rec = ref64(torch.tensor([toks]), recurrent=True)[0]
    ref_err = (logits.double() - rec).abs().max().item()
    os.makedirs(os.path.dirname(args.reference), exist_ok=True)
    with open(args.reference, "w") as f:
        f.write('{"model": "models/tiny", "note": "f32 logits of models/train/model.py '
                '(chunk path) for BOS + the first held-out tokens; max abs diff to a float64 '
                'per-token recurrence: %.2e", "text": %s,\n "tokens": %s,\n "logits": [\n'
                % (ref_err, json.dumps(enc.decode(toks[1:])), json.dumps(toks)))
        f.write(",\n".join("[" + ",".join("%.7g" % x for x in row.tolist()) + "]"
                           for row in logits))
        f.write("]}\n")
    print(f"reference: {len(toks)} tokens, {os.path.getsize(args.reference)} bytes, "
          f"f32 vs f64 recurrent max diff {ref_err:.2e}")

    # 4. samples
    prompts = [("", 0), ("And the LORD said unto Moses,", 1), ("In the beginning", 2),
               ("LAWYER, n.", 3), ("hacker\n n.\n\n", 4), ("The computer", 5)]
    samples = []
    for p, seed in prompts:
        s = generate(model, enc, p, 120, GEN["temperature"], GEN["top_p"], seed)
        samples.append((p, seed, s))
        print("-----\n" + s)
    greedy = generate(model, enc, "And God said,", 60, 0, 1.0, 0)
    print("----- greedy\n" + greedy)

    # 5. loss curve and card
    loss_png(log, os.path.join(args.out, "loss.png"))
    write_card(args, fcfg, start, log, manifest, res, samples, greedy, enc, st, ref_err)
    for fn in sorted(os.listdir(args.out)):
        print(f"{fn}: {os.path.getsize(os.path.join(args.out, fn))} bytes")


def write_card(args, fcfg, start, log, manifest, res, samples, greedy, enc, st, ref_err):
    done = [r for r in log if r["event"] == "done"]
    evs = [r for r in log if r["event"] == "eval"]
    steps = st["step"]
    targs = start["args"]
    tokens = steps * targs["batch"] * targs["seq_len"]
    train_s = st["elapsed"]
    n_params = start["params"]
    emb = fcfg["vocab_size"] * fcfg["hidden_size"]
    src_rows = "\n".join(
        f"| {s['name']} | `{s['package']}` {s['version']} | {s['documents']} | {s['bytes']:,} | "
        f"{s['train_bytes']:,} | {s['heldout_bytes']:,} |" for s in manifest["sources"])
    sample_md = "\n\n".join(
        f"Prompt {json.dumps(p)} (seed {seed}):\n\n```text\n{s}\n```" for p, seed, s in samples)
    sched = ""
    if args.schedule_steps_before:
        n, k = args.schedule_steps_before.split("@")
        sched = (f" (the cosine schedule assumed {n} total steps until step {k}, when the run was"
                 f" shortened to {steps} steps because the shared machine had slowed down;"
                 f" `train.py --steps {steps} --schedule-steps-before {n}@{k}` reproduces it)")
    curve = "\n".join(f"| {r['step']} | {r['tokens']:,} | {r['heldout_loss']:.3f} | "
                      f"{r['heldout_bpb']:.3f} |" for r in evs)
    card = f"""# linfer tiny: a small Gated DeltaNet trained on public-domain English

The default model bundled with linfer (served when no `--model` is given). It is a
[fla](https://github.com/fla-org/flash-linear-attention) `gated_deltanet` checkpoint in the
Hugging Face layout (`config.json`, `model.safetensors`, `tokenizer.json`,
`generation_config.json`), trained from scratch by `models/train/` in {train_s / 60:.0f} minutes on one CPU thread.
It writes recognisable King-James-Bible / Jargon-File / Devil's-Dictionary style English; it
knows nothing else and is not useful for anything but demonstrating and testing linfer.

## Architecture

`GatedDeltaNetForCausalLM` ({n_params:,} parameters, {n_params - 2 * emb:,} outside the
embedding and the untied LM head), float32 weights ({os.path.getsize(os.path.join(args.out, 'model.safetensors')):,} bytes).

| field | value |
|---|---|
| hidden_size | {fcfg['hidden_size']} |
| num_hidden_layers | {fcfg['num_hidden_layers']} |
| num_heads / head_dim (dk) | {fcfg['num_heads']} / {fcfg['head_dim']} |
| expand_v (dv = head_dim * expand_v) | {fcfg['expand_v']} (dv = {int(fcfg['head_dim'] * fcfg['expand_v'])}) |
| short convolutions | q, k, v, kernel {fcfg['conv_size']}, silu |
| output gate | yes (o_norm RMSNorm * silu(g_proj x)) |
| MLP | SwiGLU, intermediate_size {fcfg['intermediate_size']} |
| norm_eps | {fcfg['norm_eps']} |
| vocab_size | {fcfg['vocab_size']} (byte-level BPE) |
| tie_word_embeddings | false |
| bos / eos | {fcfg['bos_token_id']} / {fcfg['eos_token_id']} (`<|endoftext|>`) |

Each block: `h += attn(attn_norm(h))`, `h += mlp(mlp_norm(h))`; the token mixer is the gated
delta rule with q/k L2-normalised, `beta = sigmoid(b_proj x)`,
`g = -exp(A_log) * softplus(a_proj x + dt_bias)` (see `/work/shared/design/MODELS.md` §1;
model code `models/train/model.py`).

## Tokenizer

Byte-level BPE (GPT-2 style: ByteLevel pre-tokenizer with the GPT-2 regex, no prefix space,
ByteLevel decoder) with {len(enc.vocab)} tokens: id 0 is `<|endoftext|>` (the only special
token, used as BOS and EOS), ids 1-256 the 256 bytes, then {len(enc.vocab) - 257} merges,
trained by `models/train/train_tokenizer.py` on the training split. The post-processor
(TemplateProcessing) prepends `<|endoftext|>` when special tokens are added, as in training.
The Hugging Face tokenizers library (npm `@anush008/tokenizers`) gives identical ids on the
held-out text (`models/train/check_tokenizer.py`). Held-out text: {res['heldout_bytes'] / res['heldout_tokens']:.3f}
UTF-8 bytes per token.

## Data

Public-domain English from Debian bookworm packages, assembled by `models/train/corpus.sh`.
Documents: a Bible chapter, or one dictionary entry. Every 20th document of each source is held
out.

| source | package | documents | bytes | train bytes | held-out bytes |
|---|---|---|---|---|---|
{src_rows}

The Bible text is read with the `bible` program of `bible-kjv` {manifest['reader']['version']}.
Train split {manifest['train.txt']['bytes']:,} bytes ({manifest['train.txt']['documents']}
documents), held-out split {manifest['heldout.txt']['bytes']:,} bytes
({manifest['heldout.txt']['documents']} documents); documents separated by a blank line.

## Training

AdamW (betas 0.9/0.95, weight decay {targs['weight_decay']} on matrices), peak learning rate
{targs['lr']} with {targs['warmup']} warm-up steps and cosine decay to {targs['min_lr_frac']}x,
gradient clipping 1.0{sched}, batch {targs['batch']} x {targs['seq_len']} tokens (each sequence:
`<|endoftext|>` + a random window of the training token stream), {steps} steps, seed
{targs['seed']}. Tokens seen: {tokens:,} (about {tokens / start['train_tokens']:.1f} epochs of the
{start['train_tokens']:,}-token training split).

Training time: {train_s / 60:.1f} minutes (excluding evaluation) on one thread of an
{platform.processor() or 'x86-64'} CPU ({_cpu_name()}), Debian python3-torch {start['torch']}
with OpenBLAS, shared with other jobs.

![loss curve](loss.png)

| step | tokens | held-out loss (nats/token) | held-out bits/byte |
|---|---|---|---|
{curve}

## Evaluation (held-out split)

The held-out file (`build-train/corpus/heldout.txt`, {res['heldout_bytes']:,} bytes,
{res['heldout_tokens']:,} tokens) is scored as one sequence: `<|endoftext|>` followed by the
whole file, every text token predicted once with the full recurrent context (fed in 1024-token
segments with the state carried over). Bits per byte = total nats / ln 2 / UTF-8 bytes.

| model | loss (nats/token) | bits per byte |
|---|---|---|
| this model | {res['loss']:.4f} | **{res['bpb']:.4f}** |
| token unigram, fitted on the training split (add-one) | {res['unigram_train_add1_loss']:.4f} | {res['unigram_train_add1_bpb']:.4f} |
| token unigram, fitted on the held-out file itself (optimistic) | - | {res['unigram_heldout_ml_bpb']:.4f} |

## Samples (PyTorch, temperature {GEN['temperature']}, top-p {GEN['top_p']}, 120 tokens)

{sample_md}

Greedy, prompt "And God said,":

```text
{greedy}
```

## Reproduce

See `models/train/README.md`. `tests/data/tiny_reference.json` holds this model's float32
logits (from `models/train/model.py`) for `<|endoftext|>` + the first held-out tokens; the
float32 chunked forward differs from a float64 per-token recurrence by at most {ref_err:.1e}.

## License

The texts are in the public domain (King James Version, Jargon File 4.4.7, The Devil's
Dictionary); the weights are released under the repository's license.
"""
    with open(os.path.join(args.out, "README.md"), "w") as f:
        f.write(card)


def _cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


if __name__ == "__main__":
    main()
