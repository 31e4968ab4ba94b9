"""BERT's architecture modifications (model.norm, norm_position, position_embedding, glu):
each is the architecture it names, trains on real text, keeps packed examples apart, and
is refused where it cannot go (an HF BERT, a value it does not know)."""

import types

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import (ALICE, assert_packed_examples_see_only_themselves, read_metrics,
                      tiny_bert_config)
from pretrainx.errors import UserError
from pretrainx.families.bert import hf as hf_bert
from pretrainx.families.bert import model as bert
from pretrainx import objectives
from pretrainx.train import loop


def _model_cfg(**keys):
    m = bert.default_config(num_layers=2, hidden_size=32, num_heads=2, mlp_dim=64,
                            vocab_size=120, dropout_rate=0.0, attention_dropout_rate=0.0)
    m.update(keys)
    return m


class _NoTypes(bert.BertForMaskedLM):
    """BertForMaskedLM fed as the packing helper feeds models: no token types."""

    def encode(self, batch, deterministic):
        return self.bert(batch["input_ids"], jnp.zeros_like(batch["input_ids"]),
                         batch["attention_mask"], deterministic, batch.get("positions"))


def _params(cfg, batch):
    return jax.jit(_NoTypes(cfg).init)(jax.random.key(0), batch)["params"]


@pytest.mark.parametrize("positions", ["rotary", "relative"])
def test_packed_examples_see_only_themselves_with_rotary_or_relative_positions(positions):
    cfg = _model_cfg(position_embedding=positions, norm_position="pre")
    rng = np.random.default_rng(0)
    examples = [rng.integers(5, 120, n).astype(np.int32) for n in (9, 14, 6)]
    assert_packed_examples_see_only_themselves(
        _NoTypes(cfg), lambda batch: _params(cfg, batch), examples, 32)


def test_rotary_positions_see_distances_only_and_learned_ones_see_places():
    ids = jnp.asarray(np.random.default_rng(1).integers(5, 120, (1, 12)), jnp.int32)
    batch = {"input_ids": ids, "attention_mask": jnp.ones_like(ids),
             "masked_lm_positions": jnp.arange(12)[None]}

    def shift_changes(cfg) -> float:
        model, params = _NoTypes(cfg), _params(cfg, batch)
        apply = jax.jit(lambda b: model.apply({"params": params}, b)["mlm_logits"])
        here = apply(dict(batch, positions=jnp.arange(12)[None]))
        later = apply(dict(batch, positions=jnp.arange(12)[None] + 9))
        return float(jnp.abs(here - later).max())

    assert shift_changes(_model_cfg(position_embedding="rotary")) < 1e-4
    assert shift_changes(_model_cfg()) > 1e-3


def test_each_key_builds_the_architecture_it_names():
    ids = jnp.ones((1, 8), jnp.int32)
    batch = {"input_ids": ids, "attention_mask": ids, "masked_lm_positions": ids}

    def encoder(**keys):
        tree = jax.eval_shape(lambda: _params(_model_cfg(**keys), batch))["bert"]
        return flax.core.meta.unbox(tree)

    post, pre = encoder(), encoder(norm_position="pre", norm="rmsnorm", glu=True)
    assert "embed_norm" in post and "final_norm" not in post
    assert "final_norm" in pre and "embed_norm" not in pre  # Megatron-BERT's block
    assert set(pre["layer_0"]["mlp_norm"]) == {"scale"}  # RMSNorm: no shift
    assert set(post["layer_0"]["mlp_norm"]) == {"scale", "bias"}
    assert pre["layer_0"]["mlp"]["wi"]["kernel"].shape == (32, 2, 64)  # gate and value
    assert "position_embed" not in encoder(position_embedding="rotary")
    relative = encoder(position_embedding="relative")
    assert relative["relative_bias"]["rel_embedding"].shape == (32, 2)  # T5's buckets, heads
    glu, plain = (bert.flops_per_token(_model_cfg(glu=g), 128, 20) for g in (True, False))
    assert glu - plain == 3 * 2 * 2 * 32 * 64  # one more h x mlp projection a layer


@pytest.mark.slow
def test_modified_bert_trains_on_real_text(tmp_path):
    cfg = tiny_bert_config(**{"total_steps": 30, "data.train_files": ALICE,
                              "model.norm": "rmsnorm", "model.norm_position": "pre",
                              "model.position_embedding": "rotary", "model.glu": True,
                              "model.hidden_act": "silu", "optimizer.learning_rate": 2e-3})
    loop.train(cfg, str(tmp_path), devices=jax.devices()[:1])  # the loss, not the mesh
    losses = [r["loss"] for r in read_metrics(tmp_path)]
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.5, losses


def test_unknown_values_and_hf_exports_are_refused_in_one_line():
    cfg = tiny_bert_config(**{"model.norm": "batchnorm"})
    with pytest.raises(UserError, match="'model.norm' is 'batchnorm'; expected one of "
                                        "layernorm, rmsnorm"):
        objectives.validate(cfg)
    pretrained = types.SimpleNamespace(model=_model_cfg(glu=True, norm_position="pre"),
                                       source="run/checkpoints/30", head="mlm")
    with pytest.raises(UserError, match=r"run/checkpoints/30 sets model.norm_position='pre', "
                                        r"model.glu=True, which no HF"):
        hf_bert.check_architecture(pretrained)
    hf_bert.check_architecture(types.SimpleNamespace(model=_model_cfg(), source="x"))
