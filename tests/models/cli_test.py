#!/usr/bin/env python3
"""Black-box tests of the `linfer` binary on reference fixtures: `logits` prints the reference
logits (both recurrence forms), `generate` (greedy) produces the same ids as greedy decoding with
the independent float64 reference, and bad arguments exit non-zero with a message naming them.
Usage: cli_test.py LINFER_BINARY FIXTURES_DIR"""
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "reference"))
sys.path.insert(0, os.path.join(HERE, "..", "testing"))
import fla_reference  # noqa: E402
from harness import check, finish  # noqa: E402


def run(binary, *args, env=None):
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=120, env=env)


def cpu_flags():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def main():
    binary, fixtures = sys.argv[1], sys.argv[2]
    for case in ["gdn_default", "deltanet_default", "gla_default", "retnet_default",
                 "linear_attn_hadamard"]:
        d = os.path.join(fixtures, case)
        exp = json.load(open(os.path.join(d, "expected.json")))
        ref = np.fromfile(os.path.join(d, exp["logits_file"]), dtype="<f8")
        ref = ref.reshape(len(exp["tokens"]), exp["vocab_size"])
        ids = ",".join(map(str, exp["tokens"]))
        for mode in ["chunked", "recurrent"]:
            r = run(binary, "logits", "--model", d, "--tokens", ids, "--mode", mode,
                    "--chunk_size", "16")
            check(r.returncode == 0, f"{case} logits {mode}: {r.stderr}")
            if r.returncode != 0:
                continue
            out = json.loads(r.stdout)
            got = np.array(out["logits"], dtype=np.float64)
            check(out["tokens"] == exp["tokens"], f"{case}: tokens echoed")
            err = np.abs(got - ref).max() / max(1.0, np.abs(ref).max())
            check(err < 1e-4, f"{case} {mode}: rel err {err:.2e}")
        # Greedy generation: the reference decodes token by token from its own state.
        model = fla_reference.load_model(d)
        prompt = exp["tokens"][:10]
        logits, state = model.forward(prompt)
        want = []
        for _ in range(12):
            nxt = int(np.argmax(logits[-1]))
            want.append(nxt)
            logits, state = model.forward([nxt], state)
        r = run(binary, "generate", "--model", d, "--tokens", ",".join(map(str, prompt)),
                "--max_tokens", "12", "--temperature", "0")
        check(r.returncode == 0, f"{case} generate: {r.stderr}")
        if r.returncode == 0:
            got = json.loads(r.stdout)["tokens"]
            check(got == want, f"{case} greedy generate: {got} != reference {want}")
    d = os.path.join(fixtures, "gdn_default")
    for args, needle in [
        (["logits", "--model", d, "--tokens", "1,x"], "'x' is not an integer"),
        (["logits", "--model", d, "--tokens", "1,100000"], "outside the vocabulary"),
        (["logits", "--model", d, "--tokens", "1", "--mode", "fast"], "--mode"),
        (["logits", "--model", d, "--tokens", "1", "--chunk_size", "0"], "chunk size"),
        (["logits", "--model", "/nonexistent", "--tokens", "1"], "config.json"),
        (["generate", "--model", d, "--tokens", "1", "--temperature", "-1"], "temperature"),
        (["frobnicate"], "unknown command"),
        # A boolean flag's value after a space is a stray word (absl), refused, not ignored.
        (["serve", "--model", d, "--prefix_cache_slots", "false"],
         "linfer serve: unexpected argument 'false' (a boolean flag takes its value after '='"),
        (["info", "--model", d, "extra"], "linfer info: unexpected argument 'extra'"),
        (["serve", "--model", d, "--prefix_cache_disk_mb", "-1"],
         "--prefix_cache_disk_mb must be 0 to 1073741824; got -1"),
        (["serve", "--model", d, "--presample", "maybe"], "--presample must be auto, on or off"),
        (["serve", "--model", d, "--prefix_branch_tokens", "-1"],
         "--prefix_branch_tokens must be 0 to 1048576; got -1"),
        (["serve", "--model", d, "--scheduling_policy", "lifo"],
         "--scheduling_policy must be fcfs or priority"),
        (["serve", "--model", d, "--max_step_tokens", "-1"],
         "--max_step_tokens must be positive, or 0 (by device); got -1"),
        (["serve", "--model", d, "--state_memory_mb", "-5"],
         "--state_memory_mb and --kv_memory_mb must be positive"),
        (["serve", "--model", d, "--kv_memory_mb", str(1 << 50)], f"got 0 and {1 << 50}"),
        (["info", "--model", d, "--device", "gpu"], "--device must be auto, cuda or cpu"),
        (["info", "--model", d, "--weight_dtype", "f8"], "--weight_dtype must be"),
        (["info", "--model", d, "--state_dtype", "f16"], "--state_dtype must be"),
        (["info", "--model", d, "--kv_dtype", "f16"], "--kv_dtype must be f32, bf16, fp8 or fp8_e4m3"),
        (["info", "--model", d, "--device", "cpu", "--state_dtype", "bf16"],
         "state dtype bf16 on cpu"),
    ]:
        r = run(binary, *args)
        check(r.returncode != 0 and needle in r.stderr,
              f"{' '.join(args)}: exit {r.returncode}, stderr {r.stderr!r}")
    # The device: reported by info; `--device cuda` runs on a GPU or says why it cannot.
    r = run(binary, "info", "--model", d, "--device", "cpu")
    check(r.returncode == 0 and json.loads(r.stdout)["device"] == "cpu", f"info --device cpu: {r}")
    # 16-bit weights on the CPU: reported, and the logits stay near the f32 ones.
    for w in ["bf16", "f16"]:
        r = run(binary, "info", "--model", d, "--device", "cpu", "--weight_dtype", w)
        check(r.returncode == 0 and json.loads(r.stdout)["weight_dtype"] == w,
              f"info --weight_dtype {w}: {r}")
    r = run(binary, "info", "--model", d, "--device", "cpu")
    check(r.returncode == 0 and json.loads(r.stdout)["weight_dtype"] == "f32", f"info: {r}")
    r = run(binary, "info", "--model", d, "--device", "cuda", "--weight_dtype", "f16")
    check(r.returncode != 0 and ("f16" in r.stderr or "--device cuda:" in r.stderr),
          f"info --device cuda --weight_dtype f16 is refused: {r}")
    r = run(binary, "info", "--model", d, "--device", "cuda")
    check((r.returncode == 0 and json.loads(r.stdout)["device"] == "cuda")
          or (r.returncode != 0 and "--device cuda:" in r.stderr), f"info --device cuda: {r}")
    # OpenBLAS' kernels: never the generic SSE3 set on a CPU with AVX2 + FMA (linfer restarts with
    # OPENBLAS_CORETYPE when OpenBLAS did not know the CPU model), unless the user chose one.
    base_env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    r = run(binary, "info", "--model", d, "--device", "cpu", env=base_env)
    blas = json.loads(r.stdout)["blas"] if r.returncode == 0 else None
    generic = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom", "Unknown"}
    if {"avx2", "fma"} <= cpu_flags():
        check(blas is not None and blas not in generic, f"info: BLAS kernels {blas} on an AVX2 CPU")
    r = run(binary, "info", "--model", d, "--device", "cpu",
            env=dict(base_env, OPENBLAS_CORETYPE="Prescott"))
    check(r.returncode == 0 and json.loads(r.stdout)["blas"] == "Prescott",
          f"info with OPENBLAS_CORETYPE=Prescott keeps the user's choice: {r}")
    # Storage dtypes: a recurrent model has no KV; a hybrid's halves with --kv_dtype bf16 and
    # quarters with fp8.
    r = run(binary, "info", "--model", d, "--device", "cpu")
    info = json.loads(r.stdout) if r.returncode == 0 else {}
    check(info.get("state_dtype") == "f32" and info.get("kv_dtype") == "none",
          f"info: state and KV dtypes of {d}: {r.stdout}")
    if len(sys.argv) > 3:
        h = os.path.join(sys.argv[3], "qwen35_text_f32")
        by_dtype = {}
        for kv, shown in [("f32", "f32"), ("bf16", "bf16"), ("fp8", "f8_e4m3")]:
            r = run(binary, "info", "--model", h, "--device", "cpu", "--kv_dtype", kv)
            by_dtype[kv] = json.loads(r.stdout) if r.returncode == 0 else {}
            check(by_dtype[kv].get("kv_dtype") == shown,
                  f"info --kv_dtype {kv}: {r.stdout} {r.stderr}")
        check(by_dtype["f32"].get("kv_bytes_per_token", 0) > 0 and
              by_dtype["f32"].get("kv_bytes_per_token") ==
              2 * by_dtype["bf16"].get("kv_bytes_per_token", -1) ==
              4 * by_dtype["fp8"].get("kv_bytes_per_token", -1),
              f"--kv_dtype bf16 halves the KV bytes a token, fp8 quarters them: {by_dtype}")
        r = run(binary, "generate", "--model", h, "--device", "cpu", "--kv_dtype", "fp8",
                "--tokens", "1,2,3", "--max_tokens", "5", "--ignore_eos")
        check(r.returncode == 0 and len(json.loads(r.stdout)["tokens"]) == 5,
              f"generate --kv_dtype fp8: {r.stdout} {r.stderr}")
        # A Qwen3.5 MoE checkpoint: info names its experts (read from its text_config), and greedy
        # generation runs through the experts.
        m = os.path.join(sys.argv[3], "qwen35moe_vlm_bf16_per_expert")
        r = run(binary, "info", "--model", m, "--device", "cpu")
        info = json.loads(r.stdout) if r.returncode == 0 else {}
        check((info.get("model_type"), info.get("experts"), info.get("experts_per_token"),
               info.get("expert_intermediate_size"), info.get("shared_expert_intermediate_size"))
              == ("qwen3_5_moe", 6, 3, 24, 16) and "experts" not in by_dtype["f32"],
              f"info on a MoE checkpoint: {r.stdout} {r.stderr}")
        # --ignore_eos: generate samples (the fixtures' defaults, a fresh seed each run), and an
        # end-of-sequence among the first five tokens would make the count flaky.
        r = run(binary, "generate", "--model", m, "--tokens", "1,2,3", "--max_tokens", "5",
                "--ignore_eos")
        check(r.returncode == 0 and len(json.loads(r.stdout)["tokens"]) == 5,
              f"generate on a MoE checkpoint: {r.stdout} {r.stderr}")
        # A block-wise fp8 checkpoint: info names the quantization, generate runs on bf16 weights.
        q = os.path.join(sys.argv[3], "qwen35moe_vlm_fp8_fused")
        r = run(binary, "info", "--model", q, "--device", "cpu", "--weight_dtype", "bf16")
        info = json.loads(r.stdout) if r.returncode == 0 else {}
        check((info.get("quantization"), info.get("fp8_scales"), info.get("weight_block_size"),
               info.get("weight_dtype")) == ("fp8", "block", [16, 16], "bf16")
              and "quantization" not in by_dtype["f32"],
              f"info on an fp8 checkpoint: {r.stdout} {r.stderr}")
        r = run(binary, "generate", "--model", q, "--weight_dtype", "bf16", "--tokens", "1,2,3",
                "--max_tokens", "5", "--ignore_eos")
        check(r.returncode == 0 and len(json.loads(r.stdout)["tokens"]) == 5,
              f"generate on an fp8 checkpoint: {r.stdout} {r.stderr}")
        # On the CPU its fp8 weights stay fp8 (auto), or are dequantized on request: info says
        # which and what the weights take; greedy generation runs either way.
        held = {}
        for mode in ("auto", "keep", "dequantize"):
            r = run(binary, "info", "--model", q, "--device", "cpu", "--fp8_weights", mode)
            held[mode] = json.loads(r.stdout) if r.returncode == 0 else {}
            # --ignore_eos, as above: the tokens are sampled.
            r = run(binary, "generate", "--model", q, "--device", "cpu", "--fp8_weights", mode,
                    "--tokens", "1,2,3", "--max_tokens", "5", "--ignore_eos")
            check(r.returncode == 0 and len(json.loads(r.stdout)["tokens"]) == 5,
                  f"generate with --fp8_weights {mode}: {r.stdout} {r.stderr}")
        check([held[m].get("fp8_weights") for m in ("auto", "keep", "dequantize")]
              == ["kept", "kept", "dequantized"]
              and held["auto"].get("weight_bytes") == held["keep"].get("weight_bytes")
              and 2.5 * held["keep"].get("weight_bytes", 1e18)
              < held["dequantize"].get("weight_bytes", 0),
              f"--fp8_weights on an fp8 checkpoint: {held}")
        # --quantization fp8 on a bf16 checkpoint: its projections quantized on load (cpu); other
        # methods refused. The fla family too (every matmul weight but the tables).
        m = os.path.join(sys.argv[3], "qwen35moe_vlm_bf16_per_expert")
        r = run(binary, "info", "--model", m, "--device", "cpu", "--quantization", "fp8")
        qi = json.loads(r.stdout) if r.returncode == 0 else {}
        r2 = run(binary, "info", "--model", m, "--device", "cpu")
        plain = json.loads(r2.stdout) if r2.returncode == 0 else {}
        check((qi.get("quantization"), qi.get("fp8_weights"), qi.get("fp8_scales"),
               qi.get("weight_block_size")) == ("fp8", "quantized", "block", [128, 128])
              and 2 * qi.get("weight_bytes", 1e18) < plain.get("weight_bytes", 0)
              and "quantization" not in plain,
              f"--quantization fp8: {r.stdout} {r.stderr} / {r2.stdout}")
        r = run(binary, "generate", "--model", m, "--device", "cpu", "--quantization", "fp8",
                "--tokens", "1,2,3", "--max_tokens", "5", "--ignore_eos")
        check(r.returncode == 0 and len(json.loads(r.stdout)["tokens"]) == 5,
              f"generate with --quantization fp8: {r.stdout} {r.stderr}")
        g = os.path.join(sys.argv[2], "gdn_default")
        r = run(binary, "generate", "--model", g, "--device", "cpu", "--quantization", "fp8",
                "--tokens", "1,2,3", "--max_tokens", "5", "--ignore_eos")
        check(r.returncode == 0 and len(json.loads(r.stdout)["tokens"]) == 5,
              f"generate on gated_deltanet with --quantization fp8: {r.stdout} {r.stderr}")
        r = run(binary, "info", "--model", m, "--quantization", "awq")
        check(r.returncode != 0 and "--quantization must be fp8 or none" in r.stderr,
              f"a bad --quantization: {r.stdout} {r.stderr}")
        r = run(binary, "info", "--model", q, "--fp8_weights", "int4")
        check(r.returncode != 0 and "--fp8_weights must be auto, keep or dequantize" in r.stderr,
              f"a bad --fp8_weights: {r.stdout} {r.stderr}")
    r = run(binary, "serve", "--help")
    check(r.returncode == 0 and "--device" in r.stdout and "--state_dtype" in r.stdout
          and "--kv_dtype" in r.stdout,
          f"serve --help lists the device flags: {r.stdout[:300]}")
    # Help and version behave like their peers': exit 0 on stdout, a command's own flags.
    r = run(binary, "--help")
    check(r.returncode == 0 and "serve" in r.stdout and "--model" in r.stdout, f"--help: {r}")
    r = run(binary, "serve", "--help")
    check(r.returncode == 0 and "--port" in r.stdout and "--session_disk_dir" in r.stdout
          and "--tokens" not in r.stdout, f"serve --help lists serve's flags only: {r.stdout[:300]}")
    r = run(binary, "generate", "--help")
    check(r.returncode == 0 and "--temperature" in r.stdout and "--port" not in r.stdout,
          f"generate --help: {r.stdout[:300]}")
    r = run(binary, "--version")
    check(r.returncode == 0 and r.stdout.startswith("linfer ") and "Debug" not in r.stdout
          and "build" in r.stdout, f"--version: {r.stdout!r}")
    r = run(binary, "info", "--model", d)
    check(r.returncode == 0 and json.loads(r.stdout)["state_bytes_per_sequence"] > 0,
          f"info: {r.stdout} {r.stderr}")
    # The bundled model: perplexity on a held-out excerpt beats the unigram baseline; it is the
    # default model, and a text prompt streams English text.
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = run(binary, "perplexity", "--model", os.path.join(root, "models", "tiny"),
            os.path.join(root, "tests", "data", "heldout_sample.txt"))
    check(r.returncode == 0, f"perplexity: {r.stderr}")
    if r.returncode == 0:
        p = json.loads(r.stdout)
        check(p["bits_per_byte"] < 0.75 * p["unigram_bits_per_byte"], f"perplexity: {p}")
    # A file the user names may be a pipe (read as `cat` reads it); a directory is refused.
    with open(os.path.join(root, "tests", "data", "heldout_sample.txt")) as f:
        sample = f.read()
    r = subprocess.run([binary, "perplexity", "--model", os.path.join(root, "models", "tiny"),
                        "/dev/stdin"], input=sample, capture_output=True, text=True, timeout=120)
    check(r.returncode == 0 and json.loads(r.stdout)["bits_per_byte"] == p["bits_per_byte"],
          f"perplexity of a pipe = of the file: {r.returncode} {r.stdout[:200]} {r.stderr[-200:]}")
    r = run(binary, "perplexity", "--model", os.path.join(root, "models", "tiny"), root)
    check(r.returncode != 0 and "is not a regular file" in r.stderr,
          f"perplexity of a directory: {r.returncode} {r.stderr[-200:]}")
    r = subprocess.run([binary, "generate", "And the LORD said", "--max_tokens", "12"],
                       capture_output=True, text=True, timeout=120, cwd=root)
    check(r.returncode == 0 and len(r.stdout.split()) >= 5, f"default-model text: {r}")
    # End ids the model can never produce (generation_config.json) are dropped with a warning:
    # they used to make every request fail with an error about its stop ids.
    import shutil
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        tiny = os.path.join(tmp, "tiny")
        shutil.copytree(os.path.join(root, "models", "tiny"), tiny)
        with open(os.path.join(tiny, "generation_config.json"), "w") as f:
            json.dump({"eos_token_id": [5000, 1, 1]}, f)
        r = run(binary, "generate", "--model", tiny, "--tokens", "1,2", "--max_tokens", "3")
        check(r.returncode == 0 and "eos_token_id 5000 is outside the model's vocabulary" in
              r.stderr, f"an eos id past the vocabulary is dropped: {r.returncode} {r.stderr}")
        # A default max_new_tokens past the engine's limit yields to it (every request that gave
        # no max_tokens used to fail).
        with open(os.path.join(tiny, "generation_config.json"), "w") as f:
            json.dump({"max_new_tokens": 100000, "temperature": 0}, f)
        r = run(binary, "generate", "--model", tiny, "--tokens", "1,2")
        check(r.returncode == 0 and 0 < len(json.loads(r.stdout or "{}").get("tokens", [])) <= 4094,
              f"max_new_tokens 100000 as a default: {r.returncode} {r.stderr[-300:]}")
        with open(os.path.join(tiny, "generation_config.json"), "w") as f:
            json.dump({"eos_token_id": list(range(2000))}, f)
        r = run(binary, "generate", "--model", tiny, "--tokens", "1,2", "--max_tokens", "3")
        check(r.returncode != 0 and "name 2000 distinct end-of-sequence ids" in r.stderr,
              f"2000 eos ids: refused at load ({r.returncode} {r.stderr})")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
