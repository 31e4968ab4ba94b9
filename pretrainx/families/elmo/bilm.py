"""ELMo's objective: the joint log-likelihood of a forward and a backward LM.

Sentences are wrapped in <S> ... </S> and a group's documents (shuffled for
training) are joined into one stream, cut into rows of seq_len + 2 words that
overlap by two: the row's middle seq_len words are the inputs, the word after each
is the forward LM's target and the word before it the backward LM's, so every word
is predicted once from each side. Inputs are characters (any word), targets are
softmax ids: a word beyond `model.vocab_size` is predicted as <UNK>. The loss is
the mean of the two directions' per-word losses (bilm-tf's 0.5 (fwd + bwd)).
"""

import jax.numpy as jnp
import numpy as np
import optax

from pretrainx.data import charset
from pretrainx.data import corpus, words
from pretrainx.errors import UserError
from pretrainx.families.elmo import model as elmo
from pretrainx.objectives import accuracy

DIRECTIONS = ("forward", "backward")


class BiLM:
    flops_formula = ("3 * (CNN + highway*4*F^2 + 2*F*proj + 2*L*(16*H*proj + 2*H*proj) "
                     "+ 4*proj*V), CNN = the sum over filters (w, n_w) of "
                     "2*w*d_char*n_w*(chars - w + 1), F = the sum of n_w, H = lstm_dim, "
                     "proj = projection_dim")
    token_features = ("inputs",)

    def __init__(self, cfg, tokenizer):
        self.cfg = cfg
        self.tokenizer = tokenizer
        self.model = elmo.BiLM(cfg.model)
        self.corpus = corpus.Corpus(cfg, tokenizer)
        if tokenizer is not None:
            if not isinstance(tokenizer, words.WordTokenizer):
                raise UserError(f"ELMo reads words: data.tokenizer must be a .words vocabulary "
                                "(python -m pretrainx.tokenizer train --model_type=words ...), "
                                f"got {tokenizer.path}")
            self.chars = tokenizer.chars[:, :cfg.model.max_chars]

    def describe(self, phase) -> dict:
        import jax
        shapes = jax.eval_shape(lambda: self.model.init(
            jax.random.key(0), self.example_batch(1, phase), deterministic=True))
        return {"words_per_row": phase.seq_len,
                "params_without_softmax": elmo.count_without_softmax(shapes["params"])}

    # ---- data -------------------------------------------------------------
    def examples(self, files, phase, train: bool) -> list:
        return self.corpus.examples(self, files, phase, train)

    def examples_from_documents(self, docs, phase, train: bool, group: int = 0) -> list:
        key = [self.cfg.seed, phase.seq_len, int(train)] + ([group] if group else [])
        order = np.random.default_rng(key).permutation(len(docs)) if train else range(len(docs))
        bos, eos = self.tokenizer.bos_id, self.tokenizer.eos_id
        pieces = [np.concatenate([[bos], np.asarray(s, np.int32), [eos]]).astype(np.int32)
                  for d in order for s in docs[d] if len(s)]
        if not pieces:
            return []
        stream = np.concatenate(pieces)
        return [{"tokens": stream[start:start + phase.seq_len + 2]}
                for start in range(0, max(stream.size - 2, 1), phase.seq_len)
                if stream[start:start + phase.seq_len + 2].size >= 3]

    def transform(self, phase, train: bool):
        length, vocab, unk = phase.seq_len, self.cfg.model.vocab_size, self.tokenizer.unk_id
        chars = self.chars

        def fn(row, rng):
            del rng  # nothing random at batch time
            tokens = np.zeros(length + 2, np.int32)
            tokens[:row["tokens"].size] = row["tokens"]
            real = tokens > 0
            inputs = tokens[1:-1]
            softmax_ids = np.where(tokens < vocab, tokens, unk).astype(np.int32)
            return {"inputs": inputs, "chars": chars[inputs],
                    "segment_ids": real[1:-1].astype(np.int32),
                    "forward_targets": softmax_ids[2:], "backward_targets": softmax_ids[:-2],
                    "forward_weights": (real[1:-1] & real[2:]).astype(np.float32),
                    "backward_weights": (real[1:-1] & real[:-2]).astype(np.float32)}

        return fn

    def example_batch(self, batch_size: int, phase) -> dict:
        shape = (batch_size, phase.seq_len)
        out = {name: np.zeros(shape, np.int32)
               for name in ("inputs", "forward_targets", "backward_targets")}
        out["chars"] = np.zeros(shape + (self.cfg.model.max_chars,), np.int32)
        out["segment_ids"] = np.ones(shape, np.int32)
        out["forward_weights"] = np.ones(shape, np.float32)
        out["backward_weights"] = np.ones(shape, np.float32)
        return out

    # ---- loss -------------------------------------------------------------
    def loss_sums(self, outputs, batch) -> dict:
        sums = {}
        for d in DIRECTIONS:
            logits, targets = outputs[f"{d}_logits"], batch[f"{d}_targets"]
            w = batch[f"{d}_weights"]
            nll = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
            correct = accuracy.argmax_matches(logits, targets).astype(jnp.float32)
            sums[f"{d}_loss_sum"] = jnp.sum(nll * w)
            sums[f"{d}_correct_sum"] = jnp.sum(correct * w)
            sums[f"{d}_token_sum"] = jnp.sum(w)
        return sums

    def normalizers(self, batch) -> dict:
        return {d: jnp.maximum(jnp.sum(batch[f"{d}_weights"]), 1.0) for d in DIRECTIONS}

    def loss(self, sums, norms):
        return 0.5 * sum(sums[f"{d}_loss_sum"] / norms[d] for d in DIRECTIONS)

    def metrics(self, sums, norms) -> dict:
        out = {}
        for d in DIRECTIONS:
            out[f"{d}_loss"] = sums[f"{d}_loss_sum"] / norms[d]
            out[f"{d}_accuracy"] = sums[f"{d}_correct_sum"] / norms[d]
        return out

    def eval_metrics(self, totals) -> dict:
        out, losses = {}, []
        for d in DIRECTIONS:
            n = max(float(totals[f"{d}_token_sum"]), 1.0)
            loss = float(totals[f"{d}_loss_sum"]) / n
            losses.append(loss)
            out[f"{d}_loss"] = loss
            out[f"{d}_perplexity"] = float(np.exp(min(loss, 50.0)))
            out[f"{d}_accuracy"] = float(totals[f"{d}_correct_sum"]) / n
        out["loss"] = 0.5 * sum(losses)
        return out

    def flops_symbols(self, phase) -> dict:
        m = self.cfg.model
        filters = elmo.parse_filters(m.filters)
        return {"CNN": sum(2 * w * m.char_embed_dim * n * (m.max_chars - w + 1)
                           for w, n in filters),
                "F": sum(n for _, n in filters), "highway": m.num_highway, "H": m.lstm_dim,
                "proj": m.projection_dim}

    def flops_per_token(self, phase) -> float:
        return elmo.flops_per_token(self.cfg.model)

    # ---- statistics (python -m pretrainx.data --stats) ----------------------
    def batch_stats(self, batch) -> dict:
        real = batch["segment_ids"] > 0
        inputs, chars = batch["inputs"], batch["chars"]
        vocab, unk = self.cfg.model.vocab_size, self.tokenizer.unk_id
        softmax_inputs = np.where(inputs < vocab, inputs, unk)
        fw, bw = batch["forward_weights"] > 0, batch["backward_weights"] > 0
        body = (chars < 256) & real[..., None]  # the word's own bytes
        return {
            "rows": real.shape[0], "all_tokens": real.size, "real_tokens": int(real.sum()),
            "examples": int(real.any(axis=1).sum()),  # a row is one stretch of text
            "forward_targets": int(fw.sum()), "backward_targets": int(bw.sum()),
            # the forward target of word t is word t + 1, the backward one word t - 1
            # (checked where that word is in the row)
            "forward_checked": int(fw[:, :-1].sum()),
            "forward_shift_matches": int((batch["forward_targets"][:, :-1]
                                          == softmax_inputs[:, 1:])[fw[:, :-1]].sum()),
            "backward_checked": int(bw[:, 1:].sum()),
            "backward_shift_matches": int((batch["backward_targets"][:, 1:]
                                           == softmax_inputs[:, :-1])[bw[:, 1:]].sum()),
            "unk_targets": int(((batch["forward_targets"] == unk) & fw).sum()),
            "sentence_starts": int(((inputs == self.tokenizer.bos_id) & real).sum()),
            "word_bytes": int(body.sum()),
            "truncated_words": int(((chars[..., -1] == charset.EOW_CHAR) & real).sum()),
        }

    def summarize_stats(self, totals, phase) -> dict:
        real = max(totals["real_tokens"], 1)
        return {"real_token_fraction": totals["real_tokens"] / max(totals["all_tokens"], 1),
                "forward_target_fraction": totals["forward_targets"] / real,
                "backward_target_fraction": totals["backward_targets"] / real,
                "forward_shift_agreement": totals["forward_shift_matches"]
                / max(totals["forward_checked"], 1),
                "backward_shift_agreement": totals["backward_shift_matches"]
                / max(totals["backward_checked"], 1),
                "unk_target_fraction": totals["unk_targets"] / max(totals["forward_targets"], 1),
                "words_per_sentence": real / max(totals["sentence_starts"], 1),
                "mean_bytes_per_word": totals["word_bytes"] / real,
                "truncated_word_fraction": totals["truncated_words"] / real,
                "words_per_row": phase.seq_len}

    def show(self, batch, count: int) -> list:
        texts = []
        for row in range(min(count, batch["inputs"].shape[0])):
            real = batch["segment_ids"][row] > 0
            texts.append(f"--- row {row}\n" + self.tokenizer.decode(batch["inputs"][row][real]))
        return texts
