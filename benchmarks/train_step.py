"""Train-step speed of our BERT against HuggingFace's, measured in the same run.

    python benchmarks/train_step.py [--sizes=small,base] [--steps=N]

For each size: tokens/s of our jitted train step (forward, MLM+NSP loss, grads,
clipping, AdamW; dropout on; float32; sequence 128; vocab 30522) and of
transformers' BertForPreTraining on PyTorch CPU with torch.optim.AdamW on the same
batch, their ratio, and MFU against the float32 matmul peak of this machine
measured in this run. Targets on 2 CPU cores: >= 2.0x at small, >= 1.3x at base.
The last line is one JSON object with every figure.

Token ids come from real text (BERT's sample text under ../shared/data, tokenized
with the original vocab) when it is there; speed does not depend on them.
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import numpy as np  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from pretrainx import config as config_lib, objectives, sharding  # noqa: E402
from pretrainx.models import bert  # noqa: E402
from pretrainx.train import metrics as metrics_lib, optim, state as state_lib  # noqa: E402
from pretrainx.train import step as step_lib  # noqa: E402

SIZES = {  # layers, hidden, heads, mlp, batch
    "small": (4, 256, 4, 1024, 32),
    "base": (12, 768, 12, 3072, 16),
}
SEQ, MAX_PRED, VOCAB = 128, 20, 30522
SHARED = os.path.join(os.path.dirname(REPO), "shared", "data")


def make_batch(batch_size: int, seed: int = 0) -> dict:
    """A BERT batch: [CLS] A [SEP] B [SEP] of real ids where available, 15% masked."""
    rng = np.random.default_rng(seed)
    ids = None
    vocab = os.path.join(SHARED, "tokenizers", "bert-base-uncased", "vocab.txt")
    text = os.path.join(SHARED, "corpus", "misc", "bert_sample_text.txt")
    if os.path.exists(vocab) and os.path.exists(text):
        from pretrainx.data.tokenizers import load_tokenizer
        tok = load_tokenizer(vocab)
        with open(text, encoding="utf-8") as f:
            stream = np.array([i for line in f for i in tok.encode(line)], np.int32)
        starts = rng.integers(0, stream.size - SEQ, batch_size)
        ids = np.stack([stream[s:s + SEQ] for s in starts])
    if ids is None:
        ids = rng.integers(1000, VOCAB, (batch_size, SEQ)).astype(np.int32)
    ids[:, 0], ids[:, SEQ // 2], ids[:, -1] = 101, 102, 102
    types = np.zeros_like(ids)
    types[:, SEQ // 2 + 1:] = 1
    positions = np.sort(np.stack([rng.choice(np.arange(1, SEQ - 1), MAX_PRED, replace=False)
                                  for _ in range(batch_size)]), axis=1).astype(np.int32)
    labels = np.take_along_axis(ids, positions, axis=1)
    masked = ids.copy()
    np.put_along_axis(masked, positions, 103, axis=1)
    return {
        "input_ids": masked, "token_type_ids": types.astype(np.int32),
        "attention_mask": np.ones_like(ids), "masked_lm_positions": positions,
        "masked_lm_ids": labels, "masked_lm_weights": np.ones((batch_size, MAX_PRED), np.float32),
        "next_sentence_label": rng.integers(0, 2, batch_size).astype(np.int32),
        "_original_ids": ids,
    }


def model_config(size: str):
    layers, hidden, heads, mlp, batch = SIZES[size]
    c = objectives.default_config("bert")
    c.model.num_layers, c.model.hidden_size, c.model.num_heads = layers, hidden, heads
    c.model.mlp_dim, c.model.vocab_size, c.model.dtype = mlp, VOCAB, "float32"
    c.global_batch_size, c.seq_len, c.data.max_predictions_per_seq = batch, SEQ, MAX_PRED
    c.phase2.fraction = 0.0
    c.mesh.data = 1
    return c, batch


def time_ours(size: str, steps: int) -> dict:
    cfg, batch_size = model_config(size)
    objective = objectives.build(cfg, tokenizer=None)
    mesh = sharding.make_mesh(cfg.mesh, jax.devices()[:1])
    rules = sharding.rules_of(cfg)
    phase = config_lib.phases(cfg)[0]
    tx = optim.make_optimizer(cfg.optimizer, cfg.total_steps)
    state, shardings = state_lib.create_state(objective.model, tx, objective.example_batch(1, phase),
                                              0, mesh, rules)
    batch = {k: v for k, v in make_batch(batch_size).items() if not k.startswith("_")}
    batch_sharding = {k: sharding.batch_sharding(mesh, rules) for k in batch}
    schedule = optim.learning_rate_schedule(cfg.optimizer, cfg.total_steps)
    train_step = step_lib.compile_train_step(
        step_lib.make_train_step(objective.model, tx, objective, schedule, 1),
        mesh, rules, shardings, batch_sharding)
    batch = jax.device_put(batch, batch_sharding)
    key = jax.random.key(0)
    for _ in range(2):  # compile + warm up
        state, m = train_step(state, batch, key)
    jax.block_until_ready(m)
    t = time.perf_counter()
    for _ in range(steps):
        state, m = train_step(state, batch, key)
    jax.block_until_ready(m)
    seconds = (time.perf_counter() - t) / steps
    return {"tokens_per_sec": batch_size * SEQ / seconds, "seconds_per_step": seconds,
            "flops_per_token": bert.flops_per_token(cfg.model, SEQ, MAX_PRED),
            "loss": float(m["loss"])}


def time_hf(size: str, steps: int) -> dict | None:
    try:
        import torch
        from transformers import BertConfig, BertForPreTraining
    except ImportError:
        return None
    layers, hidden, heads, mlp, batch_size = SIZES[size]
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(
        vocab_size=VOCAB, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
        intermediate_size=mlp, max_position_embeddings=512))  # HF default: fused exact GELU
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, eps=1e-6)
    b = make_batch(batch_size)
    labels = np.full_like(b["_original_ids"], -100)
    np.put_along_axis(labels, b["masked_lm_positions"],
                      np.take_along_axis(b["_original_ids"], b["masked_lm_positions"], 1), axis=1)
    inputs = {
        "input_ids": torch.from_numpy(b["input_ids"].astype(np.int64)),
        "token_type_ids": torch.from_numpy(b["token_type_ids"].astype(np.int64)),
        "attention_mask": torch.from_numpy(b["attention_mask"].astype(np.int64)),
        "labels": torch.from_numpy(labels.astype(np.int64)),
        "next_sentence_label": torch.from_numpy(b["next_sentence_label"].astype(np.int64)),
    }

    def one_step():
        opt.zero_grad(set_to_none=True)
        loss = model(**inputs).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    for _ in range(2):
        one_step()
    t = time.perf_counter()
    for _ in range(steps):
        loss = one_step()
    seconds = (time.perf_counter() - t) / steps
    return {"tokens_per_sec": batch_size * SEQ / seconds, "seconds_per_step": seconds,
            "loss": float(loss.detach()), "torch_threads": torch.get_num_threads()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="small,base")
    parser.add_argument("--steps", type=int, default=0, help="timed steps (default: by size)")
    args = parser.parse_args()
    peak = metrics_lib.measured_matmul_peak(size=2048)
    print(f"float32 matmul peak of this machine (2048^3, jitted): {peak / 1e9:.0f} GFLOP/s")
    targets = {"small": 2.0, "base": 1.3}
    results = {"peak_flops": peak}
    for size in args.sizes.split(","):
        steps = args.steps or (20 if size == "small" else 5)
        ours = time_ours(size, steps)
        ours["mfu"] = ours["flops_per_token"] * ours["tokens_per_sec"] / peak
        hf = time_hf(size, steps)
        row = {"ours": ours, "hf_pytorch": hf, "target_ratio": targets.get(size)}
        line = (f"{size:5s} batch {SIZES[size][4]} x {SEQ}: ours {ours['tokens_per_sec']:,.0f} tok/s "
                f"(MFU {ours['mfu']:.1%})")
        if hf:
            row["ratio"] = ours["tokens_per_sec"] / hf["tokens_per_sec"]
            line += (f" | HF PyTorch {hf['tokens_per_sec']:,.0f} tok/s | ratio "
                     f"{row['ratio']:.2f}x (target >= {targets.get(size)}x)")
        else:
            line += " | HF PyTorch not installed (pip install torch==2.13.0 transformers==4.57.6)"
        print(line, flush=True)
        results[size] = row
    print(json.dumps(results))


if __name__ == "__main__":
    main()
