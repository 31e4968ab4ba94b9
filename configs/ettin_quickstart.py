"""Ettin's pair at CPU size: an encoder and a decoder trained alike on the bundled novels.

    python -m pretrainx.main --config=configs/ettin_quickstart.py --workdir=/tmp/ettin-enc
    python -m pretrainx.main --config=configs/ettin_quickstart.py:decoder --workdir=/tmp/ettin-dec

The encoder is configs/modernbert_quickstart.py with one RoPE base (160,000) in every
layer, as Ettin's released models (3 layers x 128, a 32-token window, 30% MLM on packed
[CLS] text [SEP] examples of Pride and Prejudice and The Adventures of Sherlock Holmes, StableAdamW's trapezoid over 1,500 steps). The decoder
is the same config with the decoder's objective (next-token prediction, causal
attention, on the same rows in the same order) and its classifier's pooling (the last
token): only what configs/ettin.py changes between the two. Eval: Alice's Adventures in
Wonderland (MLM accuracy at 15%; next-token perplexity). Either continues the other's
objective with `--config.init_from=/tmp/ettin-dec` (the paper's cross-objective runs).
Measured side by side, with both fine-tuned on SST-2: benchmarks/ettin_pair.py.
"""

from pretrainx.config import sibling_config
from pretrainx.objectives import default_config


def get_config(kind: str = "encoder"):
    if kind not in ("encoder", "decoder"):
        raise ValueError(f"configs/ettin_quickstart.py:{kind}: expected encoder or decoder")
    c = sibling_config(__file__, "modernbert_quickstart.py")
    # One RoPE base in every layer, as Ettin's released models have it (ModernBERT's
    # local layers use 10,000): transformers 4.x's decoder applies the global base in
    # every layer and 5.x the local one in local layers, so only one base exports.
    c.model.local_rope_theta = c.model.global_rope_theta
    if kind == "decoder":
        decoder = default_config("modernbert_clm")
        c.objective = decoder.objective
        c.model.causal = decoder.model.causal
        c.model.classifier_pooling = decoder.model.classifier_pooling
    return c
