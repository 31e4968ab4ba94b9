"""BERT as the paper and google-research/bert define it: the shared Transformer encoder
(pretrainx/models/transformer_encoder.py) with BERT-Base's model keys. The families
built on BERT (spec.py's `base="bert"`) start their keys from `default_config`."""

import ml_collections

from pretrainx.models import layers
from pretrainx.models import transformer_encoder as enc


OMIT = object()  # a key a family built on BERT's keys does not have

def default_config(**family) -> ml_collections.ConfigDict:
    """BERT-Base's model keys (Devlin et al. 2019, google-research/bert), with the
    values `family` gives instead (RoBERTa's, ALBERT's, ...; OMIT leaves a key out), so
    that each key is set once, to its value."""
    given, m = dict(family), ml_collections.ConfigDict()

    def put(key, default):
        value = given.pop(key, default)
        if value is not OMIT:
            m[key] = value

    put("family", "bert")
    put("num_layers", 12)
    put("hidden_size", 768)
    put("num_heads", 12)
    put("mlp_dim", 3072)
    put("vocab_size", 30522)
    put("max_position_embeddings", 512)
    put("type_vocab_size", 2)
    put("dropout_rate", 0.1)
    put("attention_dropout_rate", 0.1)
    put("layer_norm_eps", 1e-12)
    put("initializer_range", 0.02)
    put("hidden_act", "gelu_tanh")  # google-research/bert's gelu is the tanh form
    for key, value in layers.compute_keys().items():
        put(key, value)
    # ALBERT: embedding tables E wide, projected to hidden_size (0: E = hidden_size)
    put("embedding_size", 0)
    put("share_layers", False)  # ALBERT: one layer's parameters for every layer
    # architecture modifications (the module docstring); the defaults are BERT
    for key, value in enc.MODIFICATIONS.items():
        put(key, value)
    put("rope_theta", 10_000.0)  # rotary positions' base
    # False: the MLM decoder has a kernel of its own (output/kernel), as an HF
    # checkpoint saved with tie_word_embeddings=False has; True ties it to the word table
    put("tie_output", True)
    # learned positions are read from row position_offset on (RoBERTa: 2, as fairseq
    # numbers them from padding_idx + 1)
    put("position_offset", 0)
    # the fine-tuning pooler's activation: tanh (BERT's pooler), relu (DistilBERT's
    # pre_classifier)
    put("pooler_activation", "tanh")
    for key, value in given.items():  # keys of the family's own (position_offset, ...)
        m[key] = value
    return m



# BERT's names for the shared encoder's modules and functions
BertLayer, BertEncoder = enc.EncoderLayer, enc.Encoder
BertForMaskedLM, BertForPreTraining = enc.EncoderForMaskedLM, enc.EncoderForPreTraining
BertForFineTuning = enc.EncoderForFineTuning
MODIFICATIONS, embedding_size, factorised, modified = (
    enc.MODIFICATIONS, enc.embedding_size, enc.factorised, enc.modified)
flops_per_token, outputs = enc.flops_per_token, enc.outputs
fill_mask_model, finetune_model = enc.fill_mask_model, enc.finetune_model
