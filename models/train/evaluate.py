"""Held-out evaluation shared by train.py and export.py.

The held-out file is tokenised as one stream (no special tokens inside) and scored as ONE
sequence: input [BOS, t_0, ..., t_{n-2}], targets [t_0, ..., t_{n-1}], so every text token is
predicted once, with the full recurrent context.  loss = mean nats per token;
bits per byte = total nats / ln 2 / UTF-8 bytes of the file.
"""
import torch
import torch.nn.functional as F


@torch.no_grad()
def heldout_loss(model, ids, bos, dev, segment=1024):
    """Returns (total nats, number of predicted tokens).  The sequence is fed in segments
    with the recurrent and conv state carried over: identical to one call."""
    model.eval()
    x = torch.cat([torch.tensor([bos]), ids[:-1]]).to(dev)[None]
    y = ids.to(dev)
    total, state = 0.0, None
    for s in range(0, x.shape[1], segment):
        logits, state = model(x[:, s:s + segment], state=state, return_state=True)
        total += F.cross_entropy(logits[0].float(), y[s:s + segment], reduction="sum").item()
    model.train()
    return total, len(ids)


def unigram_baselines(train_ids, held_ids, vocab_size):
    """Token-unigram cross-entropies (nats, total) on the held-out ids:
    'train_add1': unigram fitted on the train split with add-one smoothing;
    'heldout_ml': the held-out file's own token frequencies (maximum likelihood, optimistic)."""
    tc = torch.bincount(train_ids, minlength=vocab_size).double() + 1
    lp = (tc / tc.sum()).log()
    train_add1 = -lp[held_ids].sum().item()
    hc = torch.bincount(held_ids, minlength=vocab_size).double()
    nz = hc[hc > 0]
    heldout_ml = -(nz * (nz / nz.sum()).log()).sum().item()
    return {"train_add1": train_add1, "heldout_ml": heldout_ml}
