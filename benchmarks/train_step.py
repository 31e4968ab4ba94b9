"""Train-step speed of our BERT, T5 and GPT-2 against HuggingFace's, in the same run.

    python benchmarks/train_step.py [--sizes=small,base,t5_small,gpt2_small]
                                    [--windows=3] [--steps=N] [--no_flax] [--no_keras]
                                    [--in_process]

For each size, on the same batch: tokens/s of our jitted train step (forward, loss,
grads, clipping at 1.0, AdamW; dropout on; float32) and of transformers' PyTorch
model on CPU with torch.optim.AdamW, timed over --windows windows of --steps steps
(median, min, max), their ratio of medians, and MFU of both against the float32
matmul peak of this machine measured in this run (before each size and after the last;
the best of them). Each side runs in a process of its own (`--in_process`: all in this
one), so no side is timed in what another left behind. Both use the tanh GELU.

BERT is reported two ways. "task": HF's BertForPreTraining as a user runs it, with
vocabulary logits at all 128 positions (2.4x our FLOPs per token at L4/H256, 1.2x at
Base), against ours with the MLM head at the 20 masked positions, as google-research
/bert does: what a user gets. "same work": HF's encoder and heads with its MLM head
applied only at the masked positions (a small wrapper): equal FLOPs, so the ratio
compares implementations. transformers' Flax BERT (jitted, all positions) is a second
peer for BERT, the JAX-to-JAX comparison, and KerasHub (Keras 3 on JAX, its
jit-compiled train function; benchmarks/keras_steps.py) the JAX peer for all three where
it is installed (beside the project, not in its extras: it brings TensorFlow). T5 (span
corruption, 512 -> 114) and GPT-2 (every next token) do equal work on both sides as HF
computes them.

`ratio` in the last line is ours / HF on equal work (the same-work figure for BERT).
Goals on 2 CPU cores (the speed issue's, which replaced the ratio goals that hung on how
well PyTorch used a machine's cores): BERT-Base, T5-small and GPT-2 small each at >= 65%
of the matmul peak measured in the run, and ahead of every peer on equal work. Tokens
are input tokens (T5: encoder inputs). The last line is one JSON object keyed by size.
The tiny sizes are the smoke test's (no figures).
"""

import argparse
import concurrent.futures
import importlib.util
import json
import multiprocessing
import os
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("KERAS_BACKEND", "jax")  # the KerasHub peer, before Keras is imported

import jax  # noqa: E402
import numpy as np  # noqa: E402

import hf_steps  # noqa: E402
import keras_steps  # noqa: E402
from pretrainx import config as config_lib, objectives, sharding  # noqa: E402
from pretrainx.models import attention  # noqa: E402
from pretrainx.train import metrics as metrics_lib, optim, schedules, state as state_lib  # noqa: E402
from pretrainx.train import step as step_lib  # noqa: E402

# family, shape, batch, sequence length (T5: inputs; targets follow from the noise)
SIZES = {
    "tiny": ("bert", {"layers": 2, "hidden": 64, "heads": 2, "mlp": 256}, 8, 128),
    "small": ("bert", {"layers": 4, "hidden": 256, "heads": 4, "mlp": 1024}, 32, 128),
    "base": ("bert", {"layers": 12, "hidden": 768, "heads": 12, "mlp": 3072}, 16, 128),
    "t5_tiny": ("t5", {"layers": 2, "hidden": 64, "heads": 2, "head_dim": 32, "mlp": 256},
                2, 128),
    "t5_small": ("t5", {"layers": 6, "hidden": 512, "heads": 8, "head_dim": 64, "mlp": 2048},
                 8, 512),
    "gpt2_tiny": ("gpt2", {"layers": 2, "hidden": 64, "heads": 2, "mlp": 256}, 2, 128),
    "gpt2_small": ("gpt2", {"layers": 12, "hidden": 768, "heads": 12, "mlp": 3072}, 4, 512),
}
OBJECTIVE = {"bert": "bert", "t5": "t5", "gpt2": "causal_lm", "modernbert": "modernbert"}
MAX_PRED = 20
SHARED = os.environ.get("PRETRAINX_SHARED_DATA",
                        os.path.join(os.path.dirname(REPO), "shared", "data"))
GOALS = {size: {"mfu": 0.65, "ahead_of_every_peer": True}
         for size in ("base", "t5_small", "gpt2_small")}


def bert_batch(batch_size: int, seq: int, seed: int = 0) -> dict:
    """[CLS] A [SEP] B [SEP] of real ids where the shared data is, 15% masked."""
    rng = np.random.default_rng(seed)
    vocab = os.path.join(SHARED, "tokenizers", "bert-base-uncased", "vocab.txt")
    text = os.path.join(SHARED, "corpus", "misc", "bert_sample_text.txt")
    if os.path.exists(vocab) and os.path.exists(text):
        from pretrainx.data.tokenizers import load_tokenizer
        tok = load_tokenizer(vocab)
        with open(text, encoding="utf-8") as f:
            stream = np.array([i for line in f for i in tok.encode(line)], np.int32)
        starts = rng.integers(0, stream.size - seq, batch_size)
        ids = np.stack([stream[s:s + seq] for s in starts])
    else:
        ids = rng.integers(1000, hf_steps.VOCAB["bert"], (batch_size, seq)).astype(np.int32)
    ids[:, 0], ids[:, seq // 2], ids[:, -1] = 101, 102, 102
    types = np.zeros_like(ids)
    types[:, seq // 2 + 1:] = 1
    positions = np.sort(np.stack([rng.choice(np.arange(1, seq - 1), MAX_PRED, replace=False)
                                  for _ in range(batch_size)]), axis=1).astype(np.int32)
    masked = ids.copy()
    np.put_along_axis(masked, positions, 103, axis=1)
    return {"input_ids": masked, "token_type_ids": types.astype(np.int32),
            "attention_mask": np.ones_like(ids), "masked_lm_positions": positions,
            "masked_lm_ids": np.take_along_axis(ids, positions, axis=1),
            "masked_lm_weights": np.ones((batch_size, MAX_PRED), np.float32),
            "next_sentence_label": rng.integers(0, 2, batch_size).astype(np.int32),
            "_original_ids": ids}


def our_config(size: str, dtype: str = "float32", attention_impl: str = "xla",
               overrides: dict | None = None):
    """The size's config; `overrides` ({dotted key: value}) applied last."""
    family, shape, batch, seq = SIZES[size]
    c = objectives.default_config(OBJECTIVE[family])
    m = c.model
    m.num_layers, m.hidden_size, m.num_heads, m.mlp_dim = (shape["layers"], shape["hidden"],
                                                           shape["heads"], shape["mlp"])
    m.vocab_size, m.dtype, m.attention_impl = hf_steps.VOCAB[family], dtype, attention_impl
    if attention_impl in attention.KERNELS:  # a kernel applies no attention dropout
        m[attention.attention_dropout_key(m)] = 0.0
    if family == "t5":
        m.num_decoder_layers, m.head_dim = shape["layers"], shape["head_dim"]
    if family == "bert":
        c.data.max_predictions_per_seq = MAX_PRED
        c.phase2.fraction = 0.0
    if family == "modernbert":  # the recipe's 30% of a row, one document a row
        c.data.max_predictions_per_seq = modernbert_predictions(seq)
    c.global_batch_size, c.seq_len, c.mesh.data = batch, seq, 1
    c.optimizer.name = "adamw"
    for key, value in (overrides or {}).items():
        *path, leaf = key.split(".")
        node = c
        for part in path:
            node = node[part]
        node[leaf] = value
    return c


def modernbert_predictions(seq: int) -> int:
    return int(0.3 * (seq - 2)) + 1


def modernbert_batch(batch_size: int, seq: int, seed: int = 0) -> dict:
    """One document per row (segment 1 everywhere, positions from 0), 30% of it
    masked: ids drawn over the vocabulary."""
    rng = np.random.default_rng(seed)
    vocab, predictions = hf_steps.VOCAB["modernbert"], modernbert_predictions(seq)
    ids = rng.integers(1000, vocab - 100, (batch_size, seq)).astype(np.int32)
    positions = np.sort(np.stack([rng.choice(np.arange(1, seq - 1), predictions,
                                             replace=False) for _ in range(batch_size)]),
                        axis=1).astype(np.int32)
    return {"input_ids": ids, "token_type_ids": np.zeros_like(ids),
            "attention_mask": np.ones_like(ids),
            "positions": np.broadcast_to(np.arange(seq, dtype=np.int32), ids.shape).copy(),
            "masked_lm_positions": positions,
            "masked_lm_ids": np.take_along_axis(ids, positions, axis=1),
            "masked_lm_weights": np.ones(positions.shape, np.float32)}


def setup(size: str, dtype: str = "float32", attention_impl: str = "xla",
          overrides: dict | None = None):
    """(config, objective, its first phase, the size's batch as numpy): what both sides
    of a comparison need, without building a model."""
    family, _, batch_size, seq = SIZES[size]
    cfg = our_config(size, dtype, attention_impl, overrides)
    objective = objectives.build(cfg, tokenizer=None)
    phase = config_lib.phases(cfg)[0]
    if family == "bert":
        batch = bert_batch(batch_size, seq)
    elif family == "modernbert":
        batch = modernbert_batch(batch_size, seq)
    else:  # the objective's own shapes, with ids drawn over the vocabulary
        rng = np.random.default_rng(0)
        batch = {k: np.asarray(v) for k, v in objective.example_batch(batch_size, phase).items()}
        for k in ("encoder_input_tokens", "decoder_target_tokens", "inputs"):
            if k in batch:
                batch[k] = rng.integers(3, hf_steps.VOCAB[family] - 200, batch[k].shape,
                                        dtype=np.int32)
        if "decoder_input_tokens" in batch:
            batch["decoder_input_tokens"] = np.concatenate(
                [np.zeros_like(batch["decoder_target_tokens"][:, :1]),
                 batch["decoder_target_tokens"][:, :-1]], axis=1)
        if "targets" in batch:  # GPT-2: the next token, as HF's labels=inputs shift them
            batch["targets"] = np.roll(batch["inputs"], -1, axis=1)
        for k in [k for k in batch if k.endswith("positions")]:  # one example a row
            batch[k] = np.broadcast_to(np.arange(batch[k].shape[1], dtype=np.int32),
                                       batch[k].shape).copy()
    return cfg, objective, phase, batch


def our_step(size: str, dtype: str = "float32", attention_impl: str = "xla",
             overrides: dict | None = None):
    """(one_step, tokens per step, FLOPs per step, the batch as numpy, the config).
    one_step() waits for the step's loss; one_step(wait=False) returns it unread."""
    _, _, batch_size, seq = SIZES[size]
    cfg, objective, phase, batch = setup(size, dtype, attention_impl, overrides)
    mesh = sharding.make_mesh(cfg.mesh, jax.devices()[:1])
    rules = sharding.rules_of(cfg)
    tx = optim.make_optimizer(cfg.optimizer, cfg.total_steps)
    state, shardings = state_lib.create_state(objective.model, tx,
                                              objective.example_batch(1, phase), 0, mesh, rules)
    ours = {k: v for k, v in batch.items() if not k.startswith("_")}
    batch_sharding = {k: sharding.batch_sharding(mesh, rules) for k in ours}
    schedule = schedules.learning_rate_schedule(cfg.optimizer, cfg.total_steps)
    train_step = step_lib.compile_train_step(
        step_lib.make_train_step(objective.model, tx, objective, schedule, 1),
        mesh, rules, shardings, batch_sharding)
    on_device, key = jax.device_put(ours, batch_sharding), jax.random.key(0)
    holder = {"state": state, "step": 0}
    repl = sharding.replicated(mesh)

    def one_step(wait: bool = True):
        clock = step_lib.clock(holder["step"], 1, repl)  # as the train loop passes it
        holder["state"], m = train_step(holder["state"], on_device, key, clock)
        holder["step"] += 1
        return float(m["loss"]) if wait else m["loss"]

    tokens = batch_size * seq
    return one_step, tokens, objective.flops_per_token(phase) * tokens, batch, cfg


def bert_all_positions_flops(cfg) -> float:
    """FLOPs per step with the MLM head at every position (HF's BertForPreTraining)."""
    from pretrainx.families.bert import model as bert
    return bert.flops_per_token(cfg.model, cfg.seq_len, cfg.seq_len) * (
        cfg.seq_len * cfg.global_batch_size)


def time_windows(one_step, tokens: int, windows: int, steps: int,
                 wait_each_step: bool = True) -> dict:
    """tokens/s of `windows` timed windows after two warm-up steps (compilation). With
    wait_each_step=False only a window's last loss is read, as the train loop reads its
    metrics every log_every steps: the host queues a step while the device runs one."""
    for _ in range(2):
        loss = one_step()
    rates = []
    for _ in range(windows):
        t = time.perf_counter()
        for _ in range(steps):
            loss = one_step(wait_each_step)
        loss = float(loss)
        rates.append(tokens * steps / (time.perf_counter() - t))
    return {"tokens_per_sec": statistics.median(rates), "min": min(rates), "max": max(rates),
            "windows": windows, "steps_per_window": steps, "loss": loss,
            "wait_each_step": wait_each_step}


def _time_ours(size, windows, steps, dtype, attention_impl, wait_each_step) -> dict:
    one_step, tokens, _, _, _ = our_step(size, dtype, attention_impl)
    return time_windows(one_step, tokens, windows, steps, wait_each_step)


def _time_peer(make, shape, batch, tokens, windows, steps, wait_each_step) -> dict:
    """A peer's timing and the work it does; {"missing", "install"} where its package
    is not importable (each peer's module says how to install what it needs)."""
    try:
        peer_step, work = make(shape, batch)
    except ImportError as e:
        return _missing(make, str(e))
    return {**time_windows(peer_step, tokens, windows, steps, wait_each_step), "work": work}


def _missing(make, why: str) -> dict:
    return {"missing": why, "install": sys.modules[make.__module__].INSTALL}


def _not_installed(make):
    """The row of a peer whose packages are not installed (its module's REQUIRES), found
    here, not by spawning a process to fail that import (the smoke test without
    KerasHub: 50.3 s -> 46.2 s alone); None when they are all there."""
    absent = [name for name in getattr(sys.modules[make.__module__], "REQUIRES", ())
              if importlib.util.find_spec(name) is None]
    return _missing(make, f"not installed: {', '.join(absent)}") if absent else None


def _here(fn, *args):
    return fn(*args)


def _in_fresh_process(fn, *args):
    """fn(*args) in a new interpreter: each side is timed from a clean process, as a user
    runs it. In one process PyTorch's run before ours left ours slower (GPT-2 small
    186 -> 163 tok/s after HF's T5 step, 2026-11-30), so the order of the sides
    decided part of their ratio."""
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as pool:
        return pool.submit(fn, *args).result()


def measure(size, windows, steps, peak, flax, dtype="float32", attention_impl="xla",
            wait_each_step=True, keras=False, isolate=False) -> dict:
    """Ours and the size's peers on the same batch; `isolate`: each side in its own
    process (train_step.py's default; gpu.py keeps one process, whose JAX holds the GPU)."""
    family, shape, batch_size, seq = SIZES[size]
    run = _in_fresh_process if isolate else _here
    cfg, objective, phase, batch = setup(size, dtype, attention_impl)
    tokens = batch_size * seq
    flops = objective.flops_per_token(phase) * tokens
    row = {"ours": run(_time_ours, size, windows, steps, dtype, attention_impl,
                       wait_each_step)}
    row["ours"]["mfu"] = flops / tokens * row["ours"]["tokens_per_sec"] / peak
    peers = {"bert": [("hf_pytorch_task", hf_steps.bert_task_step),
                      ("hf_pytorch_same_work", hf_steps.bert_same_work_step)]
             + ([("hf_flax_task", hf_steps.bert_flax_step)] if flax else []),
             "t5": [("hf_pytorch", hf_steps.t5_step)],
             "modernbert": [("hf_pytorch", hf_steps.modernbert_step)],
             "gpt2": [("hf_pytorch", hf_steps.gpt2_step)]}[family]
    if keras and family in ("bert", "t5", "gpt2"):
        peers.append(("keras_hub", getattr(keras_steps, f"{family}_step")))
    for name, make in peers:
        peer = _not_installed(make) or run(_time_peer, make, shape, batch, tokens, windows,
                                           steps, wait_each_step)
        row[name] = peer
        if "missing" in peer:
            continue
        peer_flops = bert_all_positions_flops(cfg) if peer["work"] == "all_positions" else flops
        peer.update(mfu=peer_flops / tokens * peer["tokens_per_sec"] / peak,
                    ratio_ours_over_this=row["ours"]["tokens_per_sec"] / peer["tokens_per_sec"])
    equal = row.get("hf_pytorch_same_work", row.get("hf_pytorch", {}))
    if "tokens_per_sec" in equal:
        row["ratio"] = row["ours"]["tokens_per_sec"] / equal["tokens_per_sec"]
    row["goals"] = GOALS.get(size)
    return row


def _line(size, row) -> str:
    o = row["ours"]
    text = (f"{size}: ours {o['tokens_per_sec']:,.0f} tok/s (min {o['min']:,.0f}, max "
            f"{o['max']:,.0f}; MFU {o['mfu']:.1%})")
    for name, peer in row.items():
        if isinstance(peer, dict) and "ratio_ours_over_this" in peer:
            text += (f" | {name} {peer['tokens_per_sec']:,.0f} ({peer['min']:,.0f}-"
                     f"{peer['max']:,.0f}; MFU {peer['mfu']:.1%}) -> "
                     f"{peer['ratio_ours_over_this']:.2f}x")
        elif isinstance(peer, dict) and "missing" in peer:
            text += f" | {name} not installed ({peer['install']})"
    return text


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="small,base,t5_small,gpt2_small")
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--steps", type=int, default=0,
                        help="steps per window (default: 5 for small sizes, 2 for large)")
    parser.add_argument("--no_flax", action="store_true", help="skip HF's Flax BERT")
    parser.add_argument("--no_keras", action="store_true", help="skip the KerasHub peer")
    parser.add_argument("--in_process", action="store_true",
                        help="time every side in this process (default: each in its own)")
    args = parser.parse_args()
    unknown = [s for s in args.sizes.split(",") if s not in SIZES]
    if unknown:
        parser.error(f"--sizes: unknown {unknown}; known: {', '.join(SIZES)}")
    peaks = []

    def best_peak() -> float:
        """The matmul peak, measured again before each size and after the last: one
        measurement at the start read 116-163 GFLOP/s in some runs on a machine that
        gives 196-214 (a transient), which would inflate every MFU of the run."""
        peaks.append(metrics_lib.measured_matmul_peak.__wrapped__(size=2048))  # uncached
        return max(peaks)

    results, peak_used = {}, {}
    for size in args.sizes.split(","):
        steps = args.steps or (5 if size in ("tiny", "small", "t5_tiny", "gpt2_tiny") else 2)
        results[size] = measure(size, args.windows, steps, best_peak(), not args.no_flax,
                                keras=not args.no_keras, isolate=not args.in_process)
        peak_used[size] = max(peaks)
        print(_line(size, results[size]), flush=True)
    peak = best_peak()
    for size, row in results.items():  # every MFU against the run's best peak
        scale = peak_used[size] / peak
        for side in row.values():
            if isinstance(side, dict) and "mfu" in side:
                side["mfu"] *= scale
    results = {"peak_flops": peak, "peaks_measured": peaks, **results}
    print(f"float32 matmul peak of this machine (2048^3, jitted, best of the "
          f"{len(peaks)} measured in the run): {peak / 1e9:.0f} GFLOP/s; against it:")
    for size in args.sizes.split(","):
        print(_line(size, results[size]), flush=True)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
