"""BERT's objective: masked LM + next sentence prediction.

Pairs are built once per `dupe_factor` pass over the corpus (as
create_pretraining_data.py does); masks are drawn at batch time from an RNG keyed
by the example's global position, so every epoch sees fresh masks and a resumed
run sees the same ones.
"""

from pretrainx.models import transformer_encoder as enc
from pretrainx.objectives import assembled, encoder, mlm, nsp, packed_pairs, pairs

_LABEL = "next_sentence_label"


def piece_or_word_masking(tokenizer, data_cfg):
    """mask(padded, rng, special ids, max_predictions): 15% of the pieces, 80/10/10, or
    of the whole words with data.whole_word_masking (the later release's option)."""
    def mask(padded, rng, specials, max_predictions):
        starts = tokenizer.word_start_mask(padded) if data_cfg.whole_word_masking else None
        return mlm.mask_tokens(padded, rng, vocab_size=tokenizer.vocab_size,
                               mask_id=tokenizer.mask_id, special_ids=specials,
                               max_predictions=max_predictions, mask_prob=data_cfg.mask_prob,
                               word_starts=starts)
    return mask


class MlmNsp(assembled.Assembled):
    """NSP pairs (objectives/nsp.py) masked by pieces or words, and MLM + NSP's loss."""

    flops_formula = ("3 * (L * (2*(4*h^2 + 2*h*mlp) + 4*seq*h) "
                     "+ (P*2*(h^2 + h*V) + 2*(h^2 + 2*h)) / seq), P = max_predictions_per_seq")

    def __init__(self, cfg, tokenizer):
        rows = pairs.PairRows(cfg, tokenizer, make_pairs=nsp.create_pair_examples,
                              mask=piece_or_word_masking(tokenizer, cfg.data), label_key=_LABEL)
        super().__init__(cfg, tokenizer, enc.EncoderForPreTraining(cfg.model),
                         encoder.masked_corpus(cfg, tokenizer), data=rows,
                         losses=pairs.PairLoss(_LABEL, "nsp"))

    # ---- statistics (python -m pretrainx.data --stats) ----------------------
    def batch_stats(self, batch) -> dict:
        counts = mlm.masking_counts(batch, self.tokenizer.mask_id,
                                    encoder.unmasked_specials(self.tokenizer))
        labels = batch[_LABEL]
        weights = packed_pairs.real_examples(batch, _LABEL)
        return {**counts, "examples": int(weights.sum()),
                "is_next": int(((labels == 0) & weights).sum())}

    def summarize_stats(self, totals, phase) -> dict:
        return {**encoder.masking_summary(totals),
                "nsp_positive_fraction": totals["is_next"] / max(totals["examples"], 1),
                "padding_fraction": 1 - totals["real_tokens"] / max(totals["all_tokens"], 1),
                "examples_per_row": totals["examples"] / max(totals["rows"], 1),
                "max_predictions_per_seq": phase.max_predictions}

    def show(self, batch, count: int) -> list:
        return encoder.show_rows(self.tokenizer, batch, count, packed_pairs.label_text(
            batch, _LABEL, lambda label: "IsNext" if label == 0 else "NotNext"))

    def flops_per_token(self, phase) -> float:
        return enc.flops_per_token(self.cfg.model, phase.seq_len, phase.max_predictions)
