"""NeoBERT (Le Breton et al. 2025): the released shape and its parameter count, packed
documents isolated, the schedule that ends at 10% of its peak, 20% masking, a loss that
falls on real text with sharded == unsharded, the workdir pretrainx.load reads, and its
bad input in one line. transformers has no NeoBERT class, so there is no HF parity."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pretrainx
from conftest import (ALICE, REPO, assert_packed_examples_see_only_themselves, load_config,
                      losses_on_one_and_a_mesh, override)
from pretrainx import config as config_lib
from pretrainx import objectives
from pretrainx.data.tokenizers import load_tokenizer
from pretrainx.errors import UserError
from pretrainx.families.neobert import model as neobert
from pretrainx.train import schedules

SPM = str(REPO / "pretrainx" / "assets" / "spm_4k.model")


def _count(model_cfg) -> int:
    model = neobert.NeoBertForMaskedLM(model_cfg)
    batch = {"input_ids": jnp.zeros((1, 8), jnp.int32),
             "attention_mask": jnp.ones((1, 8), jnp.int32),
             "masked_lm_positions": jnp.zeros((1, 2), jnp.int32)}
    shapes = jax.eval_shape(model.init, jax.random.key(0), batch)["params"]
    return sum(int(np.prod(leaf.shape)) for leaf in jax.tree_util.tree_leaves(shapes))


def test_the_recipe_is_the_released_shape_and_schedule():
    """28 x 768, 12 heads, SwiGLU 2,048, bert-base-uncased's 30,522 pieces: the built
    model holds exactly what parameter_count says (245,136,954; 221,665,536 without the
    decoder), within 2% of the paper's "250M"; phase 1 is 1M steps of 2,048 x 1,024 and
    phase 2 50,000 of 512 x 4,096 (2M tokens a step both), 20% masked."""
    cfg = load_config("neobert.py")
    m = cfg.model
    assert (m.num_layers, m.hidden_size, m.num_heads, m.mlp_dim, m.vocab_size) == (
        28, 768, 12, 2048, 30522)
    assert neobert.parameter_count(m) == 245_136_954 == _count(m)
    assert abs(neobert.parameter_count(m) / 250e6 - 1) < 0.02
    one, two = config_lib.phases(cfg)
    assert (one.end, one.seq_len, one.global_batch_size) == (1_000_000, 1024, 2048)
    assert (two.end - two.start, two.seq_len, two.global_batch_size) == (50_000, 4096, 512)
    assert one.seq_len * one.global_batch_size == two.seq_len * two.global_batch_size
    assert cfg.data.mask_prob == 0.2 and (cfg.optimizer.b2, cfg.optimizer.eps) == (0.95, 1e-8)
    objectives.validate(cfg)


def test_cosine_ends_at_a_tenth_of_the_peak():
    cfg = load_config("neobert.py")
    rate = schedules.learning_rate_schedule(cfg.optimizer, cfg.total_steps)
    peak = cfg.optimizer.learning_rate
    assert float(rate(1000)) == pytest.approx(peak / 2, rel=1e-6)  # warming up
    assert float(rate(2000)) == pytest.approx(peak, rel=1e-6)
    middle = 2000 + (cfg.total_steps - 2000) / 2
    assert float(rate(middle)) == pytest.approx(peak * (0.1 + 0.9 * 0.5), rel=1e-5)
    assert float(rate(cfg.total_steps)) == pytest.approx(peak * 0.1, rel=1e-6)


def test_packed_documents_never_see_each_other():
    """Three examples packed in one row (segment ids, restarting positions) give each
    example's logits as it gets alone, within 1e-5."""
    cfg = load_config("neobert.py", "quickstart").model
    tokenizer = load_tokenizer(SPM)
    words = open(ALICE, encoding="utf-8").read().split()
    examples = [np.asarray(tokenizer.encode(" ".join(words[i:i + n]))[:n], np.int32)
                for i, n in ((1000, 30), (2000, 21), (3000, 12))]
    model = neobert.NeoBertForMaskedLM(cfg)
    assert_packed_examples_see_only_themselves(
        model, lambda batch: jax.jit(model.init)(jax.random.key(1), batch)["params"], examples, 64)


def _quick(**overrides):
    return override(load_config("neobert.py", "quickstart"), {
        "total_steps": 12, "log_every": 1, "eval_every": 12, "eval_steps": 1,
        "checkpoint_every": 12, "global_batch_size": 16, "seq_len": 64,
        "data.max_predictions_per_seq": 13, "model.num_layers": 2,
        "model.max_position_embeddings": 64, "optimizer.warmup_steps": 2,
        "data.train_files": str(ALICE), **overrides})


@pytest.mark.slow
def test_loss_falls_sharded_equals_unsharded_loads_and_glue_finetunes(shared_data, tmp_path):
    """12 steps on Alice: the loss falls from log(4096), a (data 2, fsdp 2, tensor 2)
    mesh gives the single device's losses, pretrainx.load runs the workdir, and the run
    fine-tunes on SST-2 from it (the pretrained encoder under the classifier)."""
    from pretrainx import interop
    from pretrainx.finetune import loop as finetune_loop
    from pretrainx.finetune.config import finetune_config
    one = str(tmp_path / "one")
    a, b = losses_on_one_and_a_mesh(_quick, tmp_path)
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)
    assert a[0] > 7.5 and np.mean(a[-3:]) < a[0] - 1.0, a
    loaded = pretrainx.load(one)
    out = loaded(["Alice was beginning to get very tired."])
    assert np.isfinite(np.asarray(out["logits"])).all()
    assert np.shape(out["hidden_states"])[-1] == 128
    cfg = finetune_config()
    cfg.update_from_flattened_dict({
        "init_from": one, "task": "sst2", "data.glue_dir": str(shared_data / "glue"),
        "seq_len": 64, "global_batch_size": 16, "epochs": 1, "data.max_train_examples": 64,
        "data.max_eval_examples": 32})
    result = finetune_loop.train(cfg, str(tmp_path / "ft"), devices=jax.devices()[:1])
    assert 0 <= result["best"]["accuracy"] <= 1
    tuned = interop.load(str(tmp_path / "ft"))
    assert (tuned.family, tuned.head) == ("neobert", "classify")
    pretrained = interop.load(one).params["model"]["token_embed"]["embedding"]
    moved = tuned.params["model"]["token_embed"]["embedding"]
    # started from the pretrained table (a fresh one differs by ~0.02 a weight) and moved
    assert 0 < np.abs(np.asarray(moved) - np.asarray(pretrained)).max() < 5e-3


@pytest.mark.parametrize("key,value,words", [
    ("model.num_heads", 128, "even head size"),  # a head of 1: nothing to rotate
    ("optimizer.final_lr_fraction", 1.5, "final_lr_fraction=1.5"),
    ("data.max_predictions_per_seq", 10, "by more than 10%"),
])
def test_bad_input_is_one_line(key, value, words):
    cfg = override(load_config("neobert.py", "quickstart"), {key: value})
    with pytest.raises(UserError) as err:
        objectives.validate(cfg)
    assert words in str(err.value) and "\n" not in str(err.value)
