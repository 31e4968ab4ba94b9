"""ALBERT's model keys (Lan et al. 2020; google-research/albert's albert_base v2):
BERT's modules with 128-wide factorised embeddings, one layer's parameters shared by
all 12 (the shared encoder's embedding_size and share_layers), dropout 0 and 30,000 SentencePiece
pieces. The pretraining model is the shared EncoderForPreTraining, its two-way head read as
sentence-order prediction."""

from pretrainx.families.bert import model as bert


def default_config():
    return bert.default_config(
        family="albert",
        vocab_size=30000,
        embedding_size=128,
        share_layers=True,
        dropout_rate=0.0,  # v2; v1 had 0.1
        attention_dropout_rate=0.0,
        hidden_act="gelu_tanh")  # albert's modeling.py gelu (HF: gelu_new)
