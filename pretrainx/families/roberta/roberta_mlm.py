"""RoBERTa's objective (Liu et al. 2019): masked LM only, on FULL-SENTENCES rows.

Rows are packed once: whole sentences taken contiguously, in a (shuffled)
document order, until the next one would not fit in seq_len - 2 tokens; a
document boundary inside a row is marked by a </s> between the documents, and
every row reads <s> ... </s> (section 4.2, FULL-SENTENCES). A sentence longer
than a row is cut. Masks are drawn at batch time from an RNG keyed by the
row's global position (the pipeline's random_map), so a row seen again in a
later epoch gets a new mask: RoBERTa's dynamic masking, without BERT's ten
static copies. 15% of the non-special tokens are chosen; of those 80% become
<mask>, 10% a random token, 10% stay (objectives/mlm.py). No NSP.
"""


from pretrainx.data import bpe, corpus
from pretrainx.models import transformer_encoder as enc
from pretrainx.objectives import assembled, encoder, rows


class RobertaMlm(assembled.Assembled):
    flops_formula = ("3 * (L * (2*(4*h^2 + 2*h*mlp) + 4*seq*h) "
                     "+ P*2*(h^2 + h*V) / seq), P = max_predictions_per_seq")

    def __init__(self, cfg, tokenizer):
        if tokenizer is not None:
            # GPT-2's vocabulary takes RoBERTa's layout (<s> <pad> </s> <unk> first, <mask>)
            tokenizer = bpe.roberta_ids(tokenizer)
            encoder.require_mask(tokenizer, "mask")
            encoder.require_vocab_fits(tokenizer, cfg)
        super().__init__(cfg, tokenizer, enc.EncoderForMaskedLM(cfg.model),
                         corpus.Corpus(cfg, tokenizer),
                         data=rows.FullSentencesRows(cfg, tokenizer), losses=encoder.MlmLoss())

    def flops_per_token(self, phase) -> float:
        m = self.cfg.model
        h, n = m.hidden_size, m.num_layers
        per_layer = 2 * (4 * h * h + 2 * h * m.mlp_dim) + 2 * 2 * phase.seq_len * h
        head = phase.max_predictions * 2 * (h * h + h * m.vocab_size)
        return 3.0 * (n * per_layer + head / phase.seq_len)
