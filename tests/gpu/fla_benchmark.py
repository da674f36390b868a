"""fla's Triton Gated DeltaNet kernels on the shapes of tests/bench/cuda_recurrence_benchmark.cc.

Runs on the GPU machine, in the same call as linfer's benchmark (tests/gpu/run_on_gpu.sh), with
fla copied into .device/fla by tests/gpu/fetch_fla.sh:
    PYTHONPATH=.device/fla python3 tests/gpu/fla_benchmark.py --out $OUT/fla.json

  decode:  fused_recurrent_gated_delta_rule, one token for B sequences (B = 1, 16, 64, 256), f32
           initial state in, final state out (state bytes read + written, as linfer counts them)
  prefill: chunk_gated_delta_rule on 8 x 8192 and 1 x 32768 tokens from zero states
Layers: Qwen3.5-0.8B GDN (16 qk / 16 v heads, dk = dv = 128) and fla 1.3B GDN (6 heads, 256 x 512).
Inputs are bf16 (fla's usual dtype; linfer's op reads f32), and f32 where fla accepts them. Each
figure is the median of CUDA-event timings after warm-up (Triton compiles and autotunes there),
"cold" with the L2 overwritten before every timed call and "warm" without.
"""

import argparse
import json
import math
import sys

import torch

LAYERS = [("qwen3.5-0.8b", 16, 128, 128), ("fla-1.3b", 6, 256, 512)]
DECODE_BATCHES = [1, 16, 64, 256]
PREFILL_SHAPES = [(8, 8192), (1, 32768)]


def timed(fn, flush, cold, reps):
    """Median seconds of `fn` over `reps` CUDA-event timings (after 3 warm-up calls)."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        if cold:
            flush.add_(1)
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / 1e3)
    times.sort()
    return times[len(times) // 2]


def inputs(seqs, tokens, h, dk, dv, dtype, device):
    torch.manual_seed(0)
    q = torch.randn(seqs, tokens, h, dk, device=device, dtype=dtype)
    k = torch.nn.functional.normalize(
        torch.randn(seqs, tokens, h, dk, device=device, dtype=torch.float32), dim=-1).to(dtype)
    v = torch.randn(seqs, tokens, h, dv, device=device, dtype=dtype)
    g = (-0.01 - 0.19 * torch.rand(seqs, tokens, h, device=device)).to(dtype)
    beta = (0.1 + 0.8 * torch.rand(seqs, tokens, h, device=device)).to(dtype)
    return q, k, v, g, beta


def copy_bandwidth():
    """Device-to-device copy of 1 GiB: bytes read + written per second, best of 10."""
    a = torch.ones(1 << 28, device="cuda")
    b = torch.empty_like(a)
    best = 0.0
    for _ in range(10):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        b.copy_(a)
        stop.record()
        stop.synchronize()
        best = max(best, 2 * a.numel() * 4 / (start.elapsed_time(stop) / 1e3))
    return best


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="fla.json")
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule
    import fla

    props = torch.cuda.get_device_properties(0)
    flush = torch.empty(2 * props.L2_cache_size // 4 + 1, device="cuda")
    copy_bps = copy_bandwidth()
    results = {"device": props.name, "fla_version": fla.__version__, "torch": torch.__version__,
               "copy_GBps": copy_bps / 1e9, "runs": []}
    print(f"device: {props.name}, copy {copy_bps / 1e9:.0f} GB/s, fla {fla.__version__}, "
          f"torch {torch.__version__}", flush=True)

    def record(**row):
        # The file is rewritten after every row: a run stopped at its time budget keeps them.
        results["runs"].append(row)
        print(json.dumps(row), flush=True)
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)

    # bf16 inputs (fla's usual and faster path) for both layers first, then f32: a run cut by its
    # time budget keeps the rows the speed-up column uses (2026-11-27: the 1.3B layer's f32
    # prefill did not finish).
    for dtype in (torch.bfloat16, torch.float32):
        dname = str(dtype).replace("torch.", "")
        for name, h, dk, dv in LAYERS:
            scale = 1.0 / math.sqrt(dk)
            for batch in DECODE_BATCHES:
                q, k, v, g, beta = inputs(batch, 1, h, dk, dv, dtype, "cuda")
                state = torch.zeros(batch, h, dk, dv, device="cuda", dtype=torch.float32)

                def decode():
                    return fused_recurrent_gated_delta_rule(
                        q, k, v, g=g, beta=beta, scale=scale, initial_state=state,
                        output_final_state=True)
                try:
                    for cold in (True, False):
                        s = timed(decode, flush, cold, 10 * args.reps)
                        gbps = 2 * state.numel() * 4 / s / 1e9
                        record(kind="decode", layer=name, inputs=dname, batch=batch,
                               temp="cold" if cold else "warm", us=s * 1e6, state_GBps=gbps,
                               vs_copy=gbps * 1e9 / copy_bps)
                except Exception as e:  # noqa: BLE001 - report and go on with the next shape
                    record(kind="decode", layer=name, inputs=dname, batch=batch, error=repr(e))
            for seqs, tokens in PREFILL_SHAPES:
                q, k, v, g, beta = inputs(seqs, tokens, h, dk, dv, dtype, "cuda")
                state = torch.zeros(seqs, h, dk, dv, device="cuda", dtype=torch.float32)

                def prefill():
                    return chunk_gated_delta_rule(
                        q, k, v, g=g, beta=beta, scale=scale, initial_state=state,
                        output_final_state=True)
                try:
                    for cold in (True, False):
                        s = timed(prefill, flush, cold, args.reps)
                        n = seqs * tokens
                        record(kind="prefill", layer=name, inputs=dname, shape=f"{seqs}x{tokens}",
                               temp="cold" if cold else "warm", ms=s * 1e3, tokens_per_s=n / s,
                               TFLOPs_fi=n * h * 4 * dk * dv / s / 1e12)
                except Exception as e:  # noqa: BLE001
                    record(kind="prefill", layer=name, inputs=dname, shape=f"{seqs}x{tokens}",
                           error=repr(e))
                del q, k, v, g, beta, state
                torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
