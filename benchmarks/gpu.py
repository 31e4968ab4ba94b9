"""BERT-Base, GPT-2 small, T5-Base and ModernBERT-base train steps in bf16 on the
visible NVIDIA GPU, ours against transformers' PyTorch models, in the same run.

    python benchmarks/gpu.py [--sizes=bert_base,bert_base_b512,gpt2_small,t5_base,...]
                             [--windows=5] [--steps=10] [--attention_impl=xla|cudnn|auto]
                             [--budget_s=S] [--json_out=FILE] [--sync_every_step]

Ours: the jitted train step of benchmarks/train_step.py (forward, loss, grads,
clipping at 1.0, AdamW; dropout on) with model.dtype=bfloat16, parameters and
optimizer state float32. HF: the same model (BertForPreTraining with its MLM head at
the masked positions only, equal FLOPs; GPT2LMHeadModel; T5ForConditionalGeneration;
ModernBertForMaskedLM with sparse_prediction, its head at the masked positions only)
under torch.autocast(bfloat16) with SDPA attention (transformers' default) and
torch.optim.AdamW, parameters float32. Both on the same batch, timed over --windows
windows of --steps steps after warm-up (median, min, max), with the ratio of medians
and MFU against the GPU's dense bf16 peak from pretrainx/train/chips.py. Both sides read the
loss once per window, as pretrainx's train loop reads its metrics every log_every steps
(the host queues the next step while the device runs one); --sync_every_step reads it
after every step, as this script did before 2026-11-27 (on an H100 that cost our
BERT-Base step 15%: benchmarks/gpu_levers.py's sync and async levers).

--attention_impl=cudnn runs our attention through cuDNN's fused kernel, which applies
no attention dropout: ours then trains without it (HF keeps its 0.1), and the line says
so. Goal on one H100: BERT-Base >= 1.3x HF's tokens/s and MFU >= 45%.

--budget_s: a size is skipped (and said so) once the time spent leaves less than the
slowest size so far took; --json_out: the results so far, rewritten after each size, so
a run stopped part way keeps what it measured. Without a GPU it refuses, unless
--allow_cpu (the tiny sizes, a smoke test of the script: no figures).
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cuda")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402

import hf_steps  # noqa: E402
import train_step as bench  # noqa: E402
from pretrainx.train import metrics as metrics_lib  # noqa: E402

# family, shape, batch, sequence length: batches that fill an 80 GB GPU's step
GPU_SIZES = {
    "bert_base": ("bert", {"layers": 12, "hidden": 768, "heads": 12, "mlp": 3072}, 128, 128),
    # the same model at 4x the batch: a 16k-token step leaves an H200 waiting on launches
    "bert_base_b512": ("bert", {"layers": 12, "hidden": 768, "heads": 12, "mlp": 3072},
                       512, 128),
    "gpt2_small": ("gpt2", {"layers": 12, "hidden": 768, "heads": 12, "mlp": 3072}, 16, 1024),
    "t5_base": ("t5", {"layers": 12, "hidden": 768, "heads": 12, "head_dim": 64,
                       "mlp": 3072}, 32, 512),
    # 22 layers x 768, GeGLU 2 x 1,152, the recipe's 1,024 tokens
    "modernbert_base": ("modernbert", {"layers": 22, "hidden": 768, "heads": 12,
                                       "mlp": 1152}, 32, 1024),
    "tiny": bench.SIZES["tiny"],
    "t5_tiny": bench.SIZES["t5_tiny"],
    "gpt2_tiny": bench.SIZES["gpt2_tiny"],
    "modernbert_tiny": ("modernbert", {"layers": 3, "hidden": 64, "heads": 2, "mlp": 96},
                        2, 128),
}
GOALS = {"bert_base": {"ratio": 1.3, "mfu": 0.45},
         "bert_base_b512": {"ratio": 1.3, "mfu": 0.45}}


def write_results(path: str, results: dict) -> None:
    """The results so far to `path` (if given): a run stopped part way keeps them."""
    if path:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)


def visible_gpu(allow_cpu: bool):
    """JAX's first device; refuses a CPU unless allowed (a smoke test, no figures)."""
    device = jax.devices()[0]
    if device.platform != "gpu" and not allow_cpu:
        raise SystemExit(f"error: no NVIDIA GPU visible to JAX (found {device.platform}); "
                         "pip install -e '.[cuda]', or --allow_cpu for a smoke test")
    return device


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="bert_base,bert_base_b512,gpt2_small,t5_base,"
                                             "modernbert_base")
    parser.add_argument("--windows", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--attention_impl", default="xla", choices=("xla", "cudnn", "auto"))
    parser.add_argument("--budget_s", type=float, default=0.0,
                        help="skip the sizes that would not fit in this many seconds")
    parser.add_argument("--json_out", default="", help="the results, rewritten after each size")
    parser.add_argument("--sync_every_step", action="store_true",
                        help="read the loss after every step (default: once per window)")
    parser.add_argument("--allow_cpu", action="store_true",
                        help="run on the CPU (tiny sizes: a smoke test, no figures)")
    args = parser.parse_args()
    sizes = args.sizes.split(",")
    unknown = [s for s in sizes if s not in GPU_SIZES]
    if unknown:
        parser.error(f"--sizes: unknown {unknown}; known: {', '.join(GPU_SIZES)}")
    device = visible_gpu(args.allow_cpu)
    on_gpu = device.platform == "gpu"
    try:
        import torch
        import transformers
        hf_steps.configure("cuda" if on_gpu else "cpu", torch.bfloat16)
        if on_gpu:
            torch.backends.cuda.matmul.allow_tf32 = True
        versions = f"torch {torch.__version__}, transformers {transformers.__version__}"
    except ImportError as e:  # ours alone; each peer then says it is missing
        versions = f"no reference ({e})"
    peak, source = metrics_lib.peak_flops_per_device()
    print(f"device: {device.device_kind}; bf16 peak {peak / 1e12:.0f} TFLOP/s ({source}); "
          f"{versions}, jax {jax.__version__}", flush=True)
    bench.SIZES.update(GPU_SIZES)
    results = {"device": device.device_kind, "peak_flops": peak,
               "attention_impl": args.attention_impl, "versions": versions,
               "jax": jax.__version__, "sync_every_step": args.sync_every_step}
    start, slowest = time.perf_counter(), 0.0
    for size in sizes:
        spent = time.perf_counter() - start
        if args.budget_s and spent + slowest > args.budget_s:
            results[size] = {"skipped": f"time budget: {spent:.0f} s of {args.budget_s:.0f} "
                                        f"spent, the slowest size took {slowest:.0f} s"}
            print(f"{size}: skipped ({results[size]['skipped']})", flush=True)
            continue
        kernel = args.attention_impl == "cudnn"
        began = time.perf_counter()
        try:
            row = bench.measure(size, args.windows, args.steps, peak, flax=False,
                                dtype="bfloat16", attention_impl=args.attention_impl,
                                wait_each_step=args.sync_every_step)
        except Exception as e:  # one size failing leaves the others' figures
            results[size] = {"error": f"{type(e).__name__}: {str(e)[:500]}"}
            print(f"{size}: failed ({results[size]['error']})", flush=True)
            continue
        finally:
            slowest = max(slowest, time.perf_counter() - began)
        row["goals"] = GOALS.get(size)
        row["seconds"] = time.perf_counter() - began
        if kernel:
            row["note"] = "ours without attention dropout (cuDNN applies none); HF with it"
        results[size] = row
        print(bench._line(size, row) + (f" [{row['note']}]" if kernel else ""), flush=True)
        write_results(args.json_out, results)
    write_results(args.json_out, results)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
