"""ELECTRA's objective (Clark et al. 2020): replaced token detection.

Examples follow google-research/electra's build_pretraining_dataset.py
(ExampleBuilder): sentences of one document are gathered until they reach the
target length, then split into two segments, [CLS] A [SEP] B [SEP] (token types 0
and 1; B is A's continuation, there is no next-sentence task). A goes up to half the
target (a sentence that would overshoot joins A half the time while B is empty),
10% of the examples are a single segment, and after 5% of the examples the next
target is a random length in [5, seq_len] instead of seq_len. A document's end closes
an example; a row never holds two documents.

Masks are drawn at batch time (a new draw whenever a row is seen, as ELECTRA masks
inside its model): 15% of the non-special tokens (objectives/mlm.py, stochastic
rounding); a chosen token becomes [MASK] 85% of the time and stays as it is 15%,
never a random token (ELECTRA's pretrain_helpers.mask: the generator supplies the
replacements). Two deliberate differences from ELECTRA's code: the 15% is of the
non-special tokens (ELECTRA takes 15% of all real tokens, [CLS] and [SEP] included),
and positions are drawn without replacement (ELECTRA's tf.random.categorical draws
with replacement, so duplicates leave about 14% of the tokens masked at length 128).

The loss is ELECTRA's: the generator's MLM cross-entropy (mean over the masked
positions, weight `gen_weight` = 1) + `disc_weight` (50) x the discriminator's
sigmoid cross-entropy, the mean over every real token ([CLS] and [SEP] included, as
ELECTRA's input_mask). The model (families/electra/model.py) samples the replacements.
"""

import jax
import numpy as np

from pretrainx.data import corpus
from pretrainx.families.electra import model as electra
from pretrainx.objectives import assembled, encoder, mlm, rtd

ONE_SEGMENT_PROB = 0.1  # ExampleBuilder: "small chance to only have one segment"
RANDOM_LENGTH_PROB = 0.05  # "small chance for random-length instead of max_length"
MIN_RANDOM_LENGTH = 5
MASK_FRACTION = 0.85  # pretrain_helpers.mask: [MASK] with probability 0.85, else kept


def build_examples(docs, max_length: int, rng, cls_id: int, sep_id: int) -> list:
    """ELECTRA's ExampleBuilder over documents of sentence id arrays (see the module
    docstring): [{"input_ids", "token_type_ids"}] of at most max_length tokens."""
    out, target = [], max_length

    def make(sentences):
        nonlocal target
        if rng.random() < ONE_SEGMENT_PROB:
            first_target = 100_000
        else:
            first_target = (target - 3) // 2  # -3: [CLS] and two [SEP] to come
        first, second = [], []
        used_first = used_second = 0
        for s in sentences:
            if (used_first == 0 or used_first + s.size < first_target
                    or (used_second == 0 and used_first < first_target
                        and rng.random() < 0.5)):
                first.append(s)
                used_first += s.size
            else:
                second.append(s)
                used_second += s.size
        a = np.concatenate(first)[:max_length - 2]
        b = np.concatenate(second)[:max(0, max_length - a.size - 3)] if second else a[:0]
        if rng.random() < RANDOM_LENGTH_PROB:
            target = int(rng.integers(MIN_RANDOM_LENGTH, max_length + 1))
        else:
            target = max_length
        ids = [np.array([cls_id], np.int32), a, np.array([sep_id], np.int32)]
        types = np.zeros(a.size + 2, np.int32)
        if b.size:
            ids += [b, np.array([sep_id], np.int32)]
            types = np.concatenate([types, np.ones(b.size + 1, np.int32)])
        out.append({"input_ids": np.concatenate(ids).astype(np.int32), "token_type_ids": types})

    for doc in docs:
        current, length = [], 0
        for sentence in doc:
            sentence = np.asarray(sentence, np.int32)
            if not sentence.size:
                continue
            current.append(sentence)
            length += sentence.size
            if length >= target:
                make(current)
                current, length = [], 0
        if current:  # the document's end (ELECTRA: the blank line between documents)
            make(current)
    return out


class ElectraRtd(assembled.Assembled):
    """Its own rows of one or two segments and RTD's loss part (rtd.RtdLoss)."""

    flops_formula = ("3 * (L * (2*(4*h^2 + 2*h*mlp) + 4*seq*h) + 2*E*h*(E != h) "
                     "+ L_gen * (2*(4*g^2 + 2*g*mlp_gen) + 4*seq*g) + 2*E*g*(E != g) "
                     "+ P*2*(g*E + E*V)/seq + 2*(h^2 + h)), g, mlp_gen, L_gen = the "
                     "generator's width, MLP width and layers, P = max_predictions_per_seq")

    def __init__(self, cfg, tokenizer):
        if tokenizer is not None:
            encoder.check_row_tokenizer(tokenizer, cfg, "ELECTRA", "[CLS] A [SEP] B [SEP]")
        super().__init__(cfg, tokenizer, electra.ElectraForPreTraining(cfg.model),
                         corpus.Corpus(cfg, tokenizer),
                         losses=rtd.RtdLoss(cfg.gen_weight, cfg.disc_weight))

    def describe(self, phase) -> dict:
        shapes = jax.eval_shape(lambda: self.model.init(
            jax.random.key(0), self.example_batch(1, phase), deterministic=True))
        gen = electra.generator_config(self.cfg.model)
        return {"max_predictions_per_seq": phase.max_predictions,
                "generator": f"L{gen.num_layers}/H{gen.hidden_size}/A{gen.num_heads}"
                             f"/I{gen.mlp_dim}",
                **electra.split_counts(shapes["params"])}

    def examples_from_documents(self, docs, phase, train: bool, group: int = 0) -> list:
        key = [self.cfg.seed, phase.seq_len, int(train)] + ([group] if group else [])
        rng = np.random.default_rng(key)
        order = rng.permutation(len(docs)) if train else range(len(docs))
        return build_examples([docs[d] for d in order], phase.seq_len, rng,
                              self.tokenizer.cls_id, self.tokenizer.sep_id)

    def transform(self, phase, train: bool):
        tok, data = self.tokenizer, self.cfg.data
        specials = encoder.unmasked_specials(tok)
        seq_len, max_pred = phase.seq_len, phase.max_predictions

        def fn(example, rng):
            padded, types, attention = mlm.pad_pair(example, seq_len, tok.pad_id)
            masked = mlm.mask_tokens(padded, rng, vocab_size=tok.vocab_size, mask_id=tok.mask_id,
                                     special_ids=specials, max_predictions=max_pred,
                                     mask_prob=data.mask_prob, mask_fraction=MASK_FRACTION,
                                     keep_fraction=1.0 - MASK_FRACTION)
            return dict(masked, token_type_ids=types, attention_mask=attention)

        return fn

    def example_batch(self, batch_size: int, phase) -> dict:
        return encoder.example_batch(batch_size, phase)

    def flops_symbols(self, phase) -> dict:
        gen = electra.generator_config(self.cfg.model)
        return {"g": gen.hidden_size, "mlp_gen": gen.mlp_dim, "L_gen": gen.num_layers}

    def flops_per_token(self, phase) -> float:
        return electra.flops_per_token(self.cfg.model, phase.seq_len, phase.max_predictions)

    # ---- statistics (python -m pretrainx.data --stats) ----------------------
    def batch_stats(self, batch) -> dict:
        counts = mlm.masking_counts(batch, self.tokenizer.mask_id,
                                    encoder.unmasked_specials(self.tokenizer))
        return {**counts, "examples": batch["input_ids"].shape[0],
                "full_rows": encoder.full_rows(batch),
                "two_segment_rows": int((batch["token_type_ids"] > 0).any(axis=1).sum())}

    def summarize_stats(self, totals, phase) -> dict:
        rows = max(totals["rows"], 1)
        return {**encoder.masking_summary(totals),
                "rows_at_least_95pct_full_fraction": totals["full_rows"] / rows,
                "max_predictions_per_seq": phase.max_predictions,
                "two_segment_rows_fraction": totals["two_segment_rows"] / rows,
                "mean_row_tokens": totals["real_tokens"] / rows}

    def show(self, batch, count: int) -> list:
        return encoder.show_rows(self.tokenizer, batch, count)


def as_pretrained(model_cfg, params):
    """The discriminator is the model others fine-tune (under "bert"); the generator
    and both heads come along for export (families/electra/model.py:as_pretrained)."""
    model, params = electra.as_pretrained(model_cfg, params)
    return model, params, "pretrain"
