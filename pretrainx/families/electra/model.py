"""ELECTRA's pretraining model (Clark et al. 2020): a small generator and a
discriminator, trained together.

* One embedding block (word, position and type tables, their LayerNorm; E wide,
  `model.embedding_size`, 0 meaning the discriminator's hidden size) feeds both
  networks, as google-research/electra builds both under the scope
  "electra/embeddings". Each network projects E to its own width when that differs
  (the shared Encoder's `embedding_projection`).
* The generator is BERT's encoder `model.generator_size` as wide (1/4 for Small and
  Large, 1/3 for Base): hidden g = round(H x size), FFN 4g, g / 64 heads (at least
  one), `model.generator_layers` x L layers (ELECTRA's get_generator_config), with
  BERT's MLM head at the masked positions (g -> E transform, LayerNorm, the tied
  E-wide table + bias).
* At each masked position a token is sampled from the generator's softmax
  (Gumbel-max: argmax(logits + Gumbel noise), on stop_gradient(logits): nothing
  flows back through the sample) and written in place of the masked token. The
  discriminator (BERT's encoder at full size, the network that fine-tuning keeps)
  reads the result and a per-token head (dense H -> H, activation, dense H -> 1)
  says whether each token is the original; a sampled token that equals the
  original counts as original (ELECTRA's labels).

The Gumbel noise hashes each element's index with a per-call seed (as
layers.Dropout does), so the sample is the same however the batch and the
vocabulary are sharded. Training draws the seed from the "dropout" stream; with
deterministic=True (evaluation, init) the seed is fixed, so evaluation is
repeatable.
"""

import jax
import jax.numpy as jnp
import ml_collections
from flax import linen as nn

from pretrainx.models import dropout, heads, layers
from pretrainx.families.bert import model as bert
from pretrainx.models import transformer_encoder as enc

_EVAL_SEEDS = (0x9E3779B9, 0x85EBCA6B, 0xC2B2AE35)


def default_config() -> ml_collections.ConfigDict:
    """ELECTRA-Small's model keys (google-research/electra): BERT's encoder 256 wide with
    128-wide embeddings, and a generator 1/4 as wide, as deep."""
    return bert.default_config(
        family="electra", num_layers=12, hidden_size=256, num_heads=4, mlp_dim=1024,
        embedding_size=128,
        generator_size=0.25,  # of hidden size, FFN size and heads (1/3 for Base)
        generator_layers=1.0,  # of num_layers
        # the embedding block is shared by two towers: BERT's architecture keys stay out
        **{key: bert.OMIT for key in (*enc.MODIFICATIONS, "rope_theta")})


def generator_config(cfg: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """The generator's model keys: ELECTRA's get_generator_config (hidden x size,
    FFN 4 x hidden, hidden / 64 heads, layers x generator_layers), E-wide embeddings."""
    g = ml_collections.ConfigDict(cfg.to_dict())
    g.hidden_size = max(1, int(round(cfg.hidden_size * cfg.generator_size)))
    g.mlp_dim = 4 * g.hidden_size
    g.num_heads = max(1, g.hidden_size // 64)
    g.num_layers = max(1, int(round(cfg.num_layers * cfg.generator_layers)))
    g.embedding_size = enc.embedding_size(cfg)
    return g


def discriminator_config(cfg: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    d = ml_collections.ConfigDict(cfg.to_dict())
    d.embedding_size = enc.embedding_size(cfg)
    return d


class _Embeddings(enc.Encoder):
    """The shared Encoder's embedding block alone (its layers are never built)."""

    def __call__(self, input_ids, token_type_ids, deterministic):
        x = self.token_embed(input_ids)
        positions = jnp.arange(x.shape[1]) + self.cfg.position_offset
        x = x + self.type_embed(token_type_ids) + self.position_embed(positions)[None]
        x = self.embed_dropout(self.embed_norm(x), deterministic=deterministic)
        return layers.constrain(x, ("batch", "length", "embed"))


class _Tower(enc.Encoder):
    """The shared Encoder's E -> hidden projection and layer stack over embeddings computed
    elsewhere (its own tables are never built): the parameter names are the Encoder's,
    so the discriminator's load into EncoderForFineTuning as they are."""

    def __call__(self, embedded, attention_mask, deterministic):
        x = embedded
        if enc.factorised(self.cfg):
            x = layers.constrain(self.embedding_projection(x), ("batch", "length", "embed"))
        return layers.apply_stack(self.layers, x, layers.Mask(attention_mask, attention_mask),
                                  None, deterministic)


def gumbel_noise(shape, seeds):
    """Gumbel(0, 1) noise of `shape` [batch, ...]: two rounds of an integer hash of
    each element's index within its row, mixed with a hash of the row and the seeds;
    iotas partition with the array, so the noise does not depend on the sharding
    (and rows of a large batch never share an index space that could wrap)."""
    inner_shape = shape[1:]
    inner = jnp.zeros(shape, jnp.uint32)
    stride = 1
    for dim in reversed(range(1, len(shape))):
        inner = inner + jax.lax.broadcasted_iota(jnp.uint32, shape, dim) * jnp.uint32(stride)
        stride = (stride * inner_shape[dim - 1]) & 0xFFFFFFFF
    row = jax.lax.broadcasted_iota(jnp.uint32, shape, 0)
    h = dropout.mix32(dropout.mix32(inner + seeds[0]) ^ dropout.mix32(row ^ seeds[1]))
    h = dropout.mix32(h ^ seeds[2])
    u = ((h >> 8).astype(jnp.float32) + 0.5) * (2.0 ** -24)  # in (0, 1)
    return -jnp.log(-jnp.log(u))


def sample(module: nn.Module, logits, deterministic: bool):
    """Gumbel-max samples of softmax(logits) [batch, pred, vocab], no gradient: the
    seeds from `module`'s "dropout" stream in training, fixed in evaluation."""
    if deterministic:
        seeds = jnp.asarray(_EVAL_SEEDS, jnp.uint32)
    else:
        seeds = jax.random.bits(module.make_rng("dropout"), (3,), jnp.uint32)
    noisy = jax.lax.stop_gradient(logits) + gumbel_noise(logits.shape, seeds)
    noisy = layers.constrain(noisy, ("batch", "pred", "vocab"))
    return jnp.argmax(noisy, axis=-1).astype(jnp.int32)


def replace_masked(batch, sampled) -> tuple:
    """The discriminator's input (the samples written at the masked positions) and its
    labels (1 where a sample differs from the original: ELECTRA's)."""
    ids, positions = batch["input_ids"], batch["masked_lm_positions"]
    # Scatter without a scatter: [batch, pred, length] hits of the (distinct) positions.
    hit = ((positions[..., None] == jnp.arange(ids.shape[1])[None, None, :])
           & (batch["masked_lm_weights"] > 0)[..., None])
    replaced = hit.any(axis=1)
    sampled_at = jnp.sum(jnp.where(hit, sampled[..., None], 0), axis=1)
    original_at = jnp.sum(jnp.where(hit, batch["masked_lm_ids"][..., None], 0), axis=1)
    disc_ids = jax.lax.stop_gradient(jnp.where(replaced, sampled_at, ids).astype(jnp.int32))
    return disc_ids, (replaced & (sampled_at != original_at)).astype(jnp.float32)


def declare_heads(module: nn.Module, mlm_width: int) -> None:
    """The heads of a replaced-token-detection model, declared from its setup() under
    the names ELECTRA and DeBERTa-v3 share: the generator's MLM transform (to
    `mlm_width`), norm and output bias, and the discriminator's dense layer and
    one-logit output. `module` has `cfg` and `dtype`."""
    cfg = module.cfg
    init = layers.truncated_normal(cfg.initializer_range)
    module.mlm_transform = layers.Dense(mlm_width, ("embed", "mlp"), dtype=module.dtype,
                                        kernel_init=init)
    module.mlm_norm = layers.LayerNorm(cfg.layer_norm_eps, module.dtype)
    module.mlm_bias = module.param("mlm_bias", nn.with_logical_partitioning(
        nn.initializers.zeros, ("vocab",)), (cfg.vocab_size,), jnp.float32)
    module.output = layers.output_layer(cfg, module.dtype, init)
    module.discriminator_dense = layers.Dense(cfg.hidden_size, ("embed", "mlp"),
                                              dtype=module.dtype, kernel_init=init)
    module.discriminator_out = layers.Dense(1, ("mlp", "classes"), dtype=module.dtype,
                                            kernel_init=init)


def head_mlm_logits(module: nn.Module, x, positions, token_embed):
    """The generator's vocabulary logits [batch, pred, vocab] (float32) at `positions`
    of its output `x`, through the word table `token_embed` unless the output layer is
    untied (declare_heads' heads)."""
    axes = ("batch", "pred", "embed")
    picked = layers.constrain(jnp.take_along_axis(x, positions[..., None], axis=1), axes)
    h = layers.activation(module.cfg.hidden_act)(module.mlm_transform(picked))
    h = layers.constrain(module.mlm_norm(layers.constrain(h, axes)), axes)
    logits = (layers.vocab_logits(token_embed, module.output, h)
              + module.mlm_bias.astype(module.dtype))
    return layers.constrain(logits, ("batch", "pred", "vocab")).astype(jnp.float32)


def head_disc_logits(module: nn.Module, y):
    """The discriminator's logit [batch, length] (float32) for each token of its output y."""
    h = layers.activation(module.cfg.hidden_act)(module.discriminator_dense(y))
    h = layers.constrain(h, ("batch", "length", "mlp"))
    return module.discriminator_out(h)[..., 0].astype(jnp.float32)


class ElectraForPreTraining(nn.Module):
    """mlm_logits (generator, at the masked positions), disc_logits [batch, length]
    (discriminator), disc_labels (1 where the discriminator's input differs from the
    original) and the discriminator's input ids."""
    cfg: ml_collections.ConfigDict

    def setup(self):
        cfg = self.cfg
        self.dtype = jnp.dtype(cfg.dtype)
        gen, disc = generator_config(cfg), discriminator_config(cfg)
        self.embeddings = _Embeddings(disc)
        self.generator = _Tower(gen)
        self.discriminator = _Tower(disc)
        declare_heads(self, enc.embedding_size(cfg))

    def __call__(self, batch, deterministic: bool = True):
        ids, types, mask = batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]
        positions = batch["masked_lm_positions"]
        x = self.generator(self.embeddings(ids, types, deterministic), mask, deterministic)
        mlm_logits = head_mlm_logits(self, x, positions, self.embeddings.token_embed)
        sampled = sample(self, mlm_logits, deterministic)
        disc_ids, labels = replace_masked(batch, sampled)
        y = self.discriminator(self.embeddings(disc_ids, types, deterministic), mask,
                               deterministic)
        return {"mlm_logits": mlm_logits, "disc_logits": head_disc_logits(self, y),
                "disc_labels": layers.constrain(labels, ("batch", "length")),
                "disc_input_ids": disc_ids, "sampled_ids": sampled}


def split_counts(params) -> dict:
    """Parameters of the discriminator (shared embeddings + its encoder + its head: what
    HF's ElectraForPreTraining holds), of its encoder alone (what fine-tuning takes),
    and of the generator without the shared embeddings."""
    params = nn.unbox(params)
    size = lambda tree: int(sum(x.size for x in jax.tree_util.tree_leaves(tree)))
    encoder = size(params["embeddings"]) + size(params["discriminator"])
    head = size(params["discriminator_dense"]) + size(params["discriminator_out"])
    generator = size(params["generator"]) + sum(
        size(params[k]) for k in ("mlm_transform", "mlm_norm", "mlm_bias"))
    return {"discriminator_params": encoder + head, "discriminator_encoder_params": encoder,
            "generator_params": generator}


def as_pretrained(model_cfg, params: dict) -> dict:
    """An ELECTRA run's parameters laid out as the models others take:
    "bert" is the discriminator as the shared Encoder's tree (the shared embeddings and its
    layers: what BertForFineTuning reads), "discriminator_dense"/"_out" its head, and
    "generator" the generator as BertForMaskedLM's tree (the same embeddings, its
    layers, its MLM head). `model_cfg` keeps the ELECTRA keys, with embedding_size
    made explicit."""
    model = ml_collections.ConfigDict(model_cfg.to_dict())
    model.embedding_size = enc.embedding_size(model_cfg)
    generator = {"bert": {**params["embeddings"], **params["generator"]}}
    generator.update({k: params[k] for k in ("mlm_transform", "mlm_norm", "mlm_bias")})
    return model, {"bert": {**params["embeddings"], **params["discriminator"]},
                   "discriminator_dense": params["discriminator_dense"],
                   "discriminator_out": params["discriminator_out"], "generator": generator}


def from_pretrained(params: dict, fresh: dict) -> dict:
    """as_pretrained's inverse, to continue a run from an export or a release: "bert"
    split into the shared embeddings (the keys of the run's "embeddings") and the
    discriminator, the generator's tree (where there is one) back into "generator" and
    the MLM head."""
    shared = set(fresh["embeddings"])
    bert = params.get("bert", {})
    out = {"embeddings": {k: v for k, v in bert.items() if k in shared},
           "discriminator": {k: v for k, v in bert.items() if k not in shared}}
    out.update({k: params[k] for k in ("discriminator_dense", "discriminator_out")
                if k in params})
    generator = params.get("generator")
    if generator:
        out["generator"] = {k: v for k, v in generator["bert"].items() if k not in shared}
        out.update({k: generator[k] for k in ("mlm_transform", "mlm_norm", "mlm_bias")})
    return out


def outputs(cfg, params, batch) -> dict:
    """For pretrainx.load: the discriminator's last states (what ElectraModel and
    ElectraForPreTraining compute as last_hidden_state) and the generator's vocabulary
    logits at every position, where the checkpoint holds a generator (an ELECTRA run, an
    ElectraForPreTraining folder with generator/, or an ElectraForMaskedLM folder, which
    is a generator alone: its own states and logits)."""
    if "mlm_transform" in params:  # ElectraForMaskedLM: a generator alone
        return heads.mlm_outputs(enc.EncoderForMaskedLM(discriminator_config(cfg)), params, batch)
    states = enc.Encoder(discriminator_config(cfg)).apply(
        {"params": params["bert"]}, batch["input_ids"], batch["token_type_ids"],
        batch["attention_mask"], True)
    if "generator" not in params:  # a released discriminator alone
        return {"hidden_states": states}
    generated = heads.mlm_outputs(enc.EncoderForMaskedLM(generator_config(cfg)),
                                  params["generator"], batch)
    return {"hidden_states": states, "logits": generated["logits"]}


def flops_per_token(cfg, seq_len: int, max_predictions: int) -> float:
    """Training FLOPs per token: both encoders (the shared encoder's per-layer
    terms), their E -> width projections, the generator's MLM head at max_predictions rows
    (g x E transform, E x V decoder) and the discriminator's head (H x H + H) per
    token. The sampling's elementwise work is left out."""
    e = enc.embedding_size(cfg)
    total = 0.0
    for tower in (generator_config(cfg), discriminator_config(cfg)):
        h, n = tower.hidden_size, tower.num_layers
        total += n * (2 * (4 * h * h + 2 * h * tower.mlp_dim) + 2 * 2 * seq_len * h)
        total += 2 * e * h if e != h else 0
    g, h = generator_config(cfg).hidden_size, cfg.hidden_size
    total += max_predictions * 2 * (g * e + e * cfg.vocab_size) / seq_len
    total += 2 * (h * h + h)
    return 3.0 * total
