#!/usr/bin/python3
"""Train the bundled tiny Gated DeltaNet LM (models/tiny).

Usage: train.py --corpus build-train/corpus --tokenizer build-train/tokenizer.json \
                --out build-train/run [--steps 1200] ...
Resumes from OUT/ckpt.pt when present (same arguments).  Logs one JSON line per event to
OUT/log.jsonl.  Deterministic given the seed (batch k is drawn from a generator seeded with
(seed, k)), on CPU with one thread; runs unchanged on a GPU when torch.cuda.is_available().

Training data: the train split tokenised as one stream (no special tokens inside); each
sample is [BOS] + a random window of seq_len tokens, loss on all seq_len positions.
Held-out evaluation (see evaluate.py): BOS + the whole held-out file as one sequence.
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bpe  # noqa: E402
from evaluate import heldout_loss  # noqa: E402
from model import GatedDeltaNetForCausalLM  # noqa: E402


def model_config(args, vocab_size, bos_id):
    return dict(hidden_size=args.hidden, num_hidden_layers=args.layers, num_heads=args.heads,
                head_dim=args.head_dim, expand_v=args.expand_v, conv_size=4, norm_eps=1e-6,
                vocab_size=vocab_size, hidden_ratio=4, intermediate_size=args.intermediate,
                bos_token_id=bos_id, eos_token_id=bos_id, initializer_range=0.02)


def load_tokens(args, enc):
    cache = os.path.join(args.out, "tokens.pt")
    if os.path.exists(cache):
        return torch.load(cache)
    d = {}
    for split in ("train", "heldout"):
        with open(os.path.join(args.corpus, split + ".txt"), encoding="utf-8") as f:
            text = f.read()
        d[split] = torch.tensor(enc.encode(text), dtype=torch.int16 if len(enc.vocab) < 32768
                                else torch.int32)
        d[split + "_bytes"] = len(text.encode("utf-8"))
    torch.save(d, cache)
    return d


def lr_at(step, args):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    total = args.steps
    if args.schedule_steps_before:  # "N@K": the schedule assumed N total steps before step K
        n, k = map(int, args.schedule_steps_before.split("@"))
        if step < k:
            total = n
    p = (step - args.warmup) / max(1, total - args.warmup)
    return args.lr * (args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * p)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default="build-train/corpus")
    ap.add_argument("--tokenizer", default="build-train/tokenizer.json")
    ap.add_argument("--out", default="build-train/run")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--expand-v", type=float, default=1.0)
    ap.add_argument("--intermediate", type=int, default=512)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=1200)
    ap.add_argument("--warmup", type=int, default=60)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--schedule-steps-before", default="",
                    help="N@K: before step K the cosine schedule used N total steps (records a run "
                         "that was shortened to --steps while training)")
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--ckpt-every", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    os.makedirs(args.out, exist_ok=True)
    enc = bpe.Encoder.from_file(args.tokenizer)
    bos = enc.specials[bpe.EOT]
    data = load_tokens(args, enc)
    train_ids = data["train"].long()
    held_ids = data["heldout"].long()

    torch.manual_seed(args.seed)
    cfg = model_config(args, len(enc.vocab), bos)
    model = GatedDeltaNetForCausalLM(cfg).to(dev)
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (decay if p.dim() >= 2 and "conv1d" not in n else no_decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    step, elapsed = 0, 0.0
    ckpt = os.path.join(args.out, "ckpt.pt")
    if os.path.exists(ckpt):
        st = torch.load(ckpt, map_location=dev)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        step, elapsed = st["step"], st["elapsed"]
        print(f"resumed at step {step}", flush=True)
    logf = open(os.path.join(args.out, "log.jsonl"), "a")
    if step > 0:
        logf.write(json.dumps({"event": "resume", "step": step, "args": vars(args)}) + "\n")

    def log(rec):
        logf.write(json.dumps(rec) + "\n")
        logf.flush()
        print(json.dumps(rec), flush=True)

    if step == 0:
        n_params = sum(p.numel() for p in model.parameters())
        log({"event": "start", "config": cfg, "args": vars(args), "params": n_params,
             "train_tokens": len(train_ids), "heldout_tokens": len(held_ids),
             "device": str(dev), "torch": torch.__version__, "threads": args.threads})

    def save():
        tmp = ckpt + ".tmp"
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                    "elapsed": elapsed, "config": cfg}, tmp)
        os.replace(tmp, ckpt)

    S, B = args.seq_len, args.batch
    bos_col = torch.full((B, 1), bos, dtype=torch.long)
    run_loss, run_n = 0.0, 0
    t_last = time.time()
    while step < args.steps:
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + step)
        starts = torch.randint(0, len(train_ids) - S, (B,), generator=g)
        win = torch.stack([train_ids[s:s + S] for s in starts.tolist()])
        x = torch.cat([bos_col, win[:, :-1]], 1).to(dev)
        y = win.to(dev)
        for grp in opt.param_groups:
            grp["lr"] = lr_at(step, args)
        model.train()
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        now = time.time()
        elapsed += now - t_last
        t_last = now
        run_loss += loss.item()
        run_n += 1
        if step % 10 == 0:
            log({"event": "train", "step": step, "loss": run_loss / run_n, "lr": lr_at(step - 1, args),
                 "grad_norm": float(gn), "tokens": step * B * S, "elapsed_s": round(elapsed, 1)})
            run_loss, run_n = 0.0, 0
        if step % args.eval_every == 0 or step == args.steps:
            t0 = time.time()
            nats, ntok = heldout_loss(model, held_ids, bos, dev)
            log({"event": "eval", "step": step, "tokens": step * B * S,
                 "heldout_loss": nats / ntok,
                 "heldout_bpb": nats / math.log(2) / data["heldout_bytes"],
                 "eval_s": round(time.time() - t0, 1), "elapsed_s": round(elapsed, 1)})
            t_last = time.time()  # evaluation time is not counted as training time
        if step % args.ckpt_every == 0 or step == args.steps:
            save()
    log({"event": "done", "step": step, "elapsed_s": round(elapsed, 1)})


if __name__ == "__main__":
    main()
