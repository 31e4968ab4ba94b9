"""RoBERTa's model keys (Liu et al. 2019; fairseq's roberta.base): BERT's modules with
exact GeLU, LayerNorm eps 1e-5, one token type, and 514 learned positions numbered
from padding_idx + 1 = 2, as fairseq and HF's RobertaModel number them. The
pretraining model is the shared EncoderForMaskedLM (no pooler, no NSP)."""

from pretrainx.families.bert import model as bert


def default_config():
    return bert.default_config(
        family="roberta",
        vocab_size=50265,  # GPT-2's 50,257 pieces + <s> <pad> </s> <unk> + <mask>
        max_position_embeddings=514,
        position_offset=2,  # positions start at padding_idx + 1
        type_vocab_size=1,
        layer_norm_eps=1e-5,
        hidden_act="gelu")
