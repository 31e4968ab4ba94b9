"""MobileBERT's own pretraining objective: BERT's masked LM + next sentence prediction
over MobileBERT's (or IB-BERT's) model, on BERT's pairs and masks (the released code
reads create_pretraining_data.py's examples as BERT does)."""

from pretrainx.errors import UserError
from pretrainx.families.bert import mlm_nsp as bert_mlm_nsp
from pretrainx.families.mobilebert import model as mobilebert
from pretrainx.objectives import assembled, encoder, nsp, pairs

LABEL = "next_sentence_label"


FLOPS = ("3 * (L * (2*(b*h*i + 2*q*i + v*i + i^2 + F*2*i*mlp + i*h) + 4*seq*i) "
         "+ 2*e*h + (P*2*(h^2 + h*V) + 4*h) / seq)")
FLOPS_SYMBOLS = ("b = 1 or 2 bottlenecks, q, v = query and value inputs, e = 3E (3-gram), "
                 "P = max_predictions_per_seq")


def parts(cfg, tokenizer) -> dict:
    """The corpus, rows and loss of MobileBERT's pretraining (its distillation's too)."""
    if tokenizer is not None and tokenizer.pad_id != cfg.model.pad_token_id:
        raise UserError(f"model.pad_token_id={cfg.model.pad_token_id} but "
                        f"{cfg.data.tokenizer} pads with id {tokenizer.pad_id}: set "
                        f"--config.model.pad_token_id={tokenizer.pad_id}")
    rows = pairs.PairRows(cfg, tokenizer, make_pairs=nsp.create_pair_examples,
                          mask=bert_mlm_nsp.piece_or_word_masking(tokenizer, cfg.data),
                          label_key=LABEL)
    return {"corpus": encoder.masked_corpus(cfg, tokenizer), "data": rows,
            "losses": pairs.PairLoss(LABEL, "nsp")}


class MobileBertMlmNsp(assembled.Assembled):
    """NSP pairs masked by pieces (or whole words), MLM + NSP's loss."""

    flops_formula = f"{FLOPS}, {FLOPS_SYMBOLS}"

    def __init__(self, cfg, tokenizer):
        super().__init__(cfg, tokenizer, mobilebert.MobileBertForPreTraining(cfg.model),
                         **parts(cfg, tokenizer))

    def flops_symbols(self, phase) -> dict:
        return flops_symbols(self.cfg.model)

    def flops_per_token(self, phase) -> float:
        return mobilebert.flops_per_token(self.cfg.model, phase.seq_len, phase.max_predictions)


def flops_symbols(m) -> dict:
    """The symbols of MobileBertMlmNsp.flops_formula for model keys `m`."""
    shared = m.key_query_shared_bottleneck and not m.bottleneck_attention
    return {"i": m.intra_size, "F": m.num_ffn, "b": 2 if shared else 1,
            "q": m.intra_size if m.bottleneck_attention or shared else m.hidden_size,
            "v": m.intra_size if m.bottleneck_attention else m.hidden_size,
            "e": (3 if m.trigram else 1) * m.embedding_size}
