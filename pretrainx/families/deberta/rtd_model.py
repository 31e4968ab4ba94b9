"""DeBERTa-v3's pretraining model (He et al. 2023): ELECTRA's replaced token detection
(a generator trained by MLM, a discriminator that tells replaced tokens) on DeBERTa's
encoder, with gradient-disentangled embedding sharing (GDES).

* The generator is the discriminator's width at `model.generator_layers` of its depth
  (half in the v3 checkpoints), with the MLM head over its own word table.
* GDES: the discriminator's word table is E_G under stop_gradient plus its own
  residual E_delta, which starts at zero; the discriminator's loss moves E_delta only,
  the generator's MLM loss moves E_G. Each network keeps its own embedding LayerNorm
  and relative table. The discriminator that fine-tuning and export take has the word
  table E_G + E_delta (`as_pretrained`).
* Sampling, the written-in samples and the labels are ELECTRA's (families/electra/model.py);
  the discriminator's head is ELECTRA's (dense, activation, dense to one logit).
"""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import linen as nn

from pretrainx.models import layers
from pretrainx.families.deberta import model as deberta
from pretrainx.families.electra import model as electra


def generator_config(cfg) -> ml_collections.ConfigDict:
    g = ml_collections.ConfigDict(cfg.to_dict())
    g.num_layers = max(1, int(round(cfg.num_layers * cfg.generator_layers)))
    g.enhanced_mask_decoder = False
    return g


class DebertaV3ForPreTraining(nn.Module):
    """mlm_logits (generator, at the masked positions), disc_logits, disc_labels and
    disc_input_ids, as families/electra/model.py's ElectraForPreTraining returns them."""
    cfg: ml_collections.ConfigDict

    def setup(self):
        cfg = self.cfg
        self.dtype = jnp.dtype(cfg.dtype)
        self.generator = deberta.DebertaEncoder(generator_config(cfg))
        self.discriminator = deberta.DebertaEncoder(cfg, residual_embeddings=True)
        electra.declare_heads(self, cfg.hidden_size)

    def __call__(self, batch, deterministic: bool = True):
        ids, types, mask = batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]
        x = self.generator(ids, types, mask, deterministic)[0]
        mlm_logits = electra.head_mlm_logits(self, x, batch["masked_lm_positions"],
                                             self.generator.token_embed)
        disc_ids, labels = electra.replace_masked(
            batch, electra.sample(self, mlm_logits, deterministic))
        y = self.discriminator(disc_ids, types, mask, deterministic,
                               shared_table=self.generator.token_embed.embedding)[0]
        return {"mlm_logits": mlm_logits, "disc_logits": electra.head_disc_logits(self, y),
                "disc_labels": layers.constrain(labels, ("batch", "length")),
                "disc_input_ids": disc_ids}


def as_pretrained(model_cfg, params: dict) -> tuple:
    """A v3 run's parameters as the models others take: "deberta" the discriminator
    (its word table E_G + E_delta, as GDES computes it), its head, and "generator" the
    generator as DebertaForMaskedLM's tree."""
    disc = dict(params["discriminator"])
    shared = np.asarray(params["generator"]["token_embed"]["embedding"], np.float32)
    disc["token_embed"] = {"embedding": shared + np.asarray(disc["token_embed"]["embedding"],
                                                            np.float32)}
    generator = {"deberta": params["generator"]}
    generator.update({k: params[k] for k in ("mlm_transform", "mlm_norm", "mlm_bias")})
    return model_cfg, {"deberta": disc, "discriminator_dense": params["discriminator_dense"],
                       "discriminator_out": params["discriminator_out"],
                       "generator": generator}


def from_pretrained(params: dict, fresh: dict) -> dict:
    """as_pretrained's inverse, to continue a v3 run from an export or a release: the
    discriminator's word table back to E_delta = E_D - E_G, with E_G the generator's
    table where the import has a generator, else the run's fresh one (so that E_G +
    E_delta is the released table either way)."""
    disc = dict(params.get("deberta", {}))
    out = {"discriminator": disc}
    out.update({k: params[k] for k in ("discriminator_dense", "discriminator_out")
                if k in params})
    generator = params.get("generator")
    if generator:
        out["generator"] = generator["deberta"]
        out.update({k: generator[k] for k in ("mlm_transform", "mlm_norm", "mlm_bias")})
    if "token_embed" in disc:
        shared = (generator or {"deberta": fresh["generator"]})["deberta"]["token_embed"]
        disc["token_embed"] = {"embedding": np.asarray(disc["token_embed"]["embedding"],
                                                       np.float32)
                               - np.asarray(shared["embedding"], np.float32)}
    return out


def split_counts(params) -> dict:
    """The discriminator as exported (one word table, its encoder and head), its
    backbone (the layers and the relative table) and embeddings, and the generator."""
    params = nn.unbox(params)
    size = lambda tree: int(sum(x.size for x in jax.tree_util.tree_leaves(tree)))
    disc = params["discriminator"]
    embeddings = size(disc["token_embed"]) + size(disc["embed_norm"])
    backbone = size(disc) - embeddings
    head = size(params["discriminator_dense"]) + size(params["discriminator_out"])
    return {"discriminator_params": size(disc) + head, "backbone_params": backbone,
            "embedding_params": embeddings,
            "generator_params": size(params["generator"]) - size(
                params["generator"]["token_embed"]) + sum(
                size(params[k]) for k in ("mlm_transform", "mlm_norm", "mlm_bias"))}
