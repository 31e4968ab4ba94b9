"""T5Gemma's adaptation (Zhang et al. 2025): an encoder-decoder whose two stacks start
from pretrained Gemma 2 decoders (`adapt.encoder_from`, `adapt.decoder_from`: pretrainx
workdirs or HF folders; the decoder's defaults to the encoder's), then trained with UL2
or PrefixLM. The encoder takes its decoder's embeddings, layers and final norm and reads
them bidirectionally; the decoder takes its own, and each decoder layer's
cross-attention starts from that layer's self-attention (its norms from the
self-attention's), keys and values too where the two stacks have the same width; an
unbalanced pair (9B-2B) starts those two projections fresh, as they read another width.
The shapes must be the target's: another width, depth or head count is refused in one
line, naming the checkpoint and the key.
"""

from pretrainx import registry
from pretrainx.errors import UserError
from pretrainx.families.t5gemma import model as t5gemma
from pretrainx.models import imported as imported_lib

ENCODER, DECODER = "adapt.encoder_from", "adapt.decoder_from"


def imports(cfg) -> dict:
    a = cfg.adapt
    if not a.encoder_from and not a.decoder_from:
        return {}
    if not a.encoder_from:
        raise UserError(f"{DECODER} is set without {ENCODER}: the encoder needs a decoder "
                        "to start from too")
    return {ENCODER: a.encoder_from, DECODER: a.decoder_from or a.encoder_from}


def check_source(cfg, source, key: str, decoder: bool) -> None:
    """`source` (a Pretrained) is a Gemma 2 of the target stack's shape and vocabulary."""
    where, m = f"{key} {source.source}", source.model
    family = registry.FAMILIES.find(source.family)
    if family is None or family.base != "t5gemma" or not family.is_causal(m):
        raise UserError(f"{where} is a {source.family} model; T5Gemma adapts decoders of its "
                        "own blocks (Gemma 2)")
    target = t5gemma.stack(cfg.model, decoder)
    prefix = "model.decoder_" if decoder else "model."
    # the width first: the mismatch a wrong checkpoint shows most plainly
    for k in ("hidden_size",) + tuple(k for k in t5gemma.STACK_KEYS if k != "hidden_size"):
        ours = target[k]
        if m[k] != ours:
            name = "model.num_decoder_layers" if decoder and k == "num_layers" else prefix + k
            raise UserError(f"{where} has {k}={m[k]}; the target has {name}={ours}")
    for k in ("vocab_size", "rms_norm_eps", "rope_theta", "attn_logit_softcapping"):
        if m[k] != cfg.model[k]:
            raise UserError(f"{where} has {k}={m[k]}; the target has model.{k}="
                            f"{cfg.model[k]}")


def from_decoders(fresh: dict, encoder, decoder, cfg) -> dict:
    """The run's parameters (`fresh`'s tree) from the two decoders' (Pretrained)."""
    check_source(cfg, encoder, ENCODER, False)
    check_source(cfg, decoder, DECODER, True)
    e, d = encoder.params, decoder.params
    given = {"encoder_embed": e["token_embed"], "encoder_norm": e["final_norm"],
             "decoder_embed": d["token_embed"], "decoder_norm": d["final_norm"]}
    for i in range(cfg.model.num_layers):
        given[f"encoder_{i}"] = e[f"layer_{i}"]
    same_width = cfg.model.hidden_size == cfg.model.decoder_hidden_size
    for i in range(cfg.model.num_decoder_layers):
        layer = dict(d[f"layer_{i}"])
        cross = dict(layer["self_attention"])
        if not same_width:  # keys and values read the encoder's width: fresh
            cross.update({k: fresh[f"decoder_{i}"]["cross_attention"][k]
                          for k in ("key", "value")})
        layer.update(cross_attention=cross,
                     cross_attention_norm=layer["self_attention_norm"],
                     post_cross_attention_norm=layer["post_self_attention_norm"])
        given[f"decoder_{i}"] = layer
    if "output" in fresh:  # an untied target: its output layer starts as the word table
        given["output"] = {"kernel": d["token_embed"]["embedding"].T}
    return imported_lib.fit(fresh, given, f"{ENCODER} {encoder.source}")
