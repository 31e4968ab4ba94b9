"""Causal language modelling: predict every next token of packed documents, as
GPT-2 and the decoders after it (Qwen3) train. A family's objective names its
`network` (the decoder: batch of inputs, segment_ids, positions -> logits), `flops`
and `flops_formula`.

Each document ends with <|endoftext|> (or the tokenizer's end token) and, in a family
that asks for it, opens with the start token; a group's documents (shuffled for
training) are joined into one stream and cut into rows of seq_len + 1 tokens that
overlap by one, so every token is a target once. A row keeps which document each
token came from: attention stays inside a document, positions restart at its
start, and the first token of the next document is never predicted from the
previous one (its loss weight is 0).
"""

import jax.numpy as jnp
import numpy as np

from pretrainx import config as config_lib
from pretrainx.data import corpus
from pretrainx.errors import UserError
from pretrainx.objectives import next_token

FEATURES = ("inputs", "targets", "segment_ids", "positions", "loss_weights")


def check_decoder(cfg) -> None:
    """A grouped-query decoder's shapes (Qwen3's, Gemma 3's): positive sizes, query heads
    a multiple of the key/value heads, rows no longer than the positions RoPE was
    trained for."""
    config_lib.check_positive(cfg, "model.hidden_size", "model.num_heads",
                              "model.num_kv_heads", "model.head_dim", "model.mlp_dim")
    m = cfg.model
    if m.num_heads % m.num_kv_heads:
        raise UserError(f"model.num_heads={m.num_heads} is not a multiple of "
                        f"model.num_kv_heads={m.num_kv_heads} (each key/value head serves "
                        "a group of query heads)")
    if cfg.seq_len > m.max_position_embeddings:
        raise UserError(f"seq_len={cfg.seq_len} exceeds model.max_position_embeddings="
                        f"{m.max_position_embeddings}")


def check_causal(cfg) -> None:
    """Next-token prediction needs causal attention: a decoder made bidirectional
    (model.causal=False) trains with an encoder objective (MNTP, MLM)."""
    if not cfg.model.causal:
        raise UserError(f"model.causal=False with objective {cfg.objective}: next-token "
                        "prediction needs causal attention (a bidirectional decoder trains "
                        "with an encoder objective, e.g. MNTP)")


class CausalLM:
    network = None  # (model_cfg) -> the decoder module
    flops = None  # (model_cfg, seq_len) -> training FLOPs per token
    flops_formula = ""
    # documents open with the tokenizer's start token (Gemma's <bos>), where it has one
    # apart from the end-of-text token
    begins_with_bos = False

    def __init__(self, cfg, tokenizer):
        self.cfg = cfg
        self.tokenizer = tokenizer
        self.model = self.network(cfg.model)
        self.corpus = corpus.Corpus(cfg, tokenizer)
        if tokenizer is not None:
            self.eot_id = getattr(tokenizer, "eot_id", tokenizer.sep_id)
            if self.eot_id < 0:
                raise UserError(f"tokenizer {tokenizer.path} has no end-of-text (or EOS) id")
            bos = tokenizer.cls_id if self.begins_with_bos else -1
            self.opening = [bos] if bos >= 0 and bos != self.eot_id else []

    def describe(self, phase) -> dict:
        return {"tokens_per_row": phase.seq_len}

    # ---- data -------------------------------------------------------------
    def examples(self, files, phase, train: bool) -> list:
        return self.corpus.examples(self, files, phase, train)

    def examples_from_documents(self, docs, phase, train: bool, group: int = 0) -> list:
        """Rows of seq_len + 1 tokens and their document numbers (1, 2, ... per row)."""
        key = [self.cfg.seed, phase.seq_len, int(train)] + ([group] if group else [])
        order = np.random.default_rng(key).permutation(len(docs)) if train else range(len(docs))
        tokens, owners = [], []
        for number, d in enumerate(order, start=1):
            doc = [np.asarray(s, np.int32) for s in docs[d]]
            ids = np.concatenate([np.array(self.opening, np.int32)] + doc
                                 + [np.array([self.eot_id], np.int32)])
            tokens.append(ids)
            owners.append(np.full(ids.size, number, np.int32))
        if not tokens:
            return []
        stream, owner = np.concatenate(tokens), np.concatenate(owners)
        length = phase.seq_len
        rows = []
        for start in range(0, max(stream.size - 1, 1), length):
            chunk, who = stream[start:start + length + 1], owner[start:start + length + 1]
            if chunk.size < 2:
                break
            _, renumbered = np.unique(who, return_inverse=True)
            rows.append({"tokens": chunk, "documents": (renumbered + 1).astype(np.int32)})
        return rows

    def transform(self, phase, train: bool):
        length = phase.seq_len

        def fn(row, rng):
            del rng  # nothing random at batch time
            tokens = np.zeros(length + 1, np.int32)
            docs = np.zeros(length + 1, np.int32)
            n = row["tokens"].size
            tokens[:n], docs[:n] = row["tokens"], row["documents"]
            segments = docs[:-1]
            starts = np.ones(length, bool)
            starts[1:] = segments[1:] != segments[:-1]
            index = np.arange(length)
            positions = index - np.maximum.accumulate(np.where(starts, index, 0))
            same = (docs[1:] == docs[:-1]) & (segments > 0)
            return {"inputs": tokens[:-1], "targets": tokens[1:], "segment_ids": segments,
                    "positions": np.where(segments > 0, positions, 0).astype(np.int32),
                    "loss_weights": same.astype(np.float32)}

        return fn

    def example_batch(self, batch_size: int, phase) -> dict:
        out = {name: np.zeros((batch_size, phase.seq_len), np.int32) for name in FEATURES}
        out["segment_ids"] = np.ones((batch_size, phase.seq_len), np.int32)
        out["loss_weights"] = np.ones((batch_size, phase.seq_len), np.float32)
        return out

    # ---- loss -------------------------------------------------------------
    def loss_sums(self, outputs, batch) -> dict:
        return next_token.token_sums(outputs["logits"], batch["targets"],
                                     batch["loss_weights"])

    def normalizers(self, batch) -> dict:
        return {"tokens": jnp.maximum(jnp.sum(batch["loss_weights"]), 1.0)}

    def loss(self, sums, norms):
        return sums["loss_sum"] / norms["tokens"]

    def metrics(self, sums, norms) -> dict:
        return {"accuracy": sums["correct_sum"] / norms["tokens"]}

    def eval_metrics(self, totals) -> dict:
        return next_token.eval_metrics(totals)

    def flops_per_token(self, phase) -> float:
        return self.flops(self.cfg.model, phase.seq_len)

    # ---- statistics (python -m pretrainx.data --stats) ----------------------
    token_features = ("inputs",)

    def batch_stats(self, batch) -> dict:
        seg, w = batch["segment_ids"], batch["loss_weights"]
        real = seg > 0
        boundary = real[:, 1:] & (seg[:, 1:] != seg[:, :-1])
        return {"rows": seg.shape[0], "all_tokens": seg.size, "real_tokens": int(real.sum()),
                "targets": int(w.sum()), "examples": int(real[:, 0].sum() + boundary.sum()),
                "eot_inputs": int(((batch["inputs"] == self.eot_id) & real).sum()),
                # targets whose input token is from another document: must be 0
                "cross_document_targets": int((w[:, :-1] > 0).sum() - (
                    (w[:, :-1] > 0) & (seg[:, 1:] == seg[:, :-1])).sum()),
                "eot_targets": int(((batch["targets"] == self.eot_id) & (w > 0)).sum())}

    def summarize_stats(self, totals, phase) -> dict:
        return {"real_token_fraction": totals["real_tokens"] / max(totals["all_tokens"], 1),
                "target_fraction": totals["targets"] / max(totals["real_tokens"], 1),
                "eot_per_document": totals["eot_targets"] / max(totals["eot_inputs"], 1),
                "cross_document_targets": totals["cross_document_targets"],
                "tokens_per_row": phase.seq_len}

    def show(self, batch, count: int) -> list:
        texts = []
        for row in range(min(count, batch["inputs"].shape[0])):
            real = batch["segment_ids"][row] > 0
            texts.append(f"--- row {row} ({int(batch['segment_ids'][row].max())} documents)\n"
                         + self.tokenizer.decode(batch["inputs"][row][real]))
        return texts
