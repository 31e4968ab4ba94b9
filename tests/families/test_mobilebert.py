"""MobileBERT and IB-BERT: the released configurations' sizes, HF parity both ways
(MobileBertForPreTraining's logits within 1e-4 on padded real sentences), packed
examples that stay apart through the 3-gram embedding, and a loss that falls on Alice."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn

from conftest import ALICE, REPO, load_config, override, read_metrics, sentence_batch
from pretrainx import interop
from pretrainx.data.tokenizers import load_tokenizer
from pretrainx.families.mobilebert import model as mobilebert
from pretrainx.interop import hf
from pretrainx.train import loop

SPM = str(REPO / "pretrainx" / "assets" / "spm_4k.model")
# small versions of the three released layouts: (size, model keys)
SMALL = {"num_layers": 2, "hidden_size": 64, "intra_size": 32, "embedding_size": 16,
         "num_heads": 2, "mlp_dim": 48, "vocab_size": 4096, "dropout_rate": 0.0,
         "attention_dropout_rate": 0.0, "dtype": "float32"}
LAYOUTS = {"mobilebert": {}, "tiny": {}, "ib_bert": {"intra_size": 96, "mlp_dim": 128}}


def _cfg(size, **model):
    c = load_config("mobilebert.py", size)
    c.model.update(**SMALL)
    c.model.update(**LAYOUTS[size], **model)
    return override(c, {"data.tokenizer": SPM, "data.train_files": str(ALICE)})


def _batch(tokenizer):
    """Pairs, padded two past the longest row: the last real tokens of every row see
    [PAD] on their right, as HF reads them."""
    return sentence_batch(tokenizer, pairs=True, extra_padding=2)


def _numpy(params):
    return jax.tree_util.tree_map(lambda x: np.asarray(x, np.float32),
                                  jax.device_get(interop.unstack_layers(params)))


@pytest.mark.parametrize("size", ["mobilebert", "tiny"])
def test_the_released_layouts_have_hfs_parameter_counts(size):
    """google-research/mobilebert's config files, counted as HF's MobileBertModel counts
    them (no pooler: classifier_activation is false): 24,581,888 and 15,485,696."""
    cfg = load_config("mobilebert.py", size).model
    batch = {k: jnp.ones((1, 8), jnp.int32) for k in ("input_ids", "token_type_ids",
                                                      "attention_mask", "masked_lm_positions")}
    shapes = jax.eval_shape(lambda: mobilebert.MobileBertForPreTraining(cfg).init(
        jax.random.key(0), batch))["params"]
    encoder = sum(int(np.prod(x.value.shape if hasattr(x, "value") else x.shape))
                  for x in jax.tree_util.tree_leaves(shapes["bert"]))
    assert encoder == {"mobilebert": 24_581_888, "tiny": 15_485_696}[size]
    transformers = pytest.importorskip("transformers")
    from pretrainx.families.mobilebert import hf as mobilebert_hf
    theirs = transformers.MobileBertModel(transformers.MobileBertConfig(
        **mobilebert_hf.to_hf_config(cfg, "encoder")), add_pooling_layer=False)
    assert sum(p.numel() for p in theirs.parameters()) == encoder


def test_ib_bert_is_refused_by_the_hf_export_in_one_line(tmp_path):
    """The teacher's queries and keys read the 512-wide layer input, which HF's
    MobileBERT (intra-width queries only) cannot hold."""
    from pretrainx.errors import UserError
    cfg = _cfg("ib_bert")
    pretrained = interop.Pretrained(model=cfg.model, params={}, tokenizer=SPM,
                                    lower_case=True, head="pretrain", source="run/7")
    with pytest.raises(UserError, match="run/7 reads attention's queries and keys from the "
                                        "64-wide layer input"):
        hf.save(pretrained, str(tmp_path / "out"))


@pytest.mark.parametrize("size", ["mobilebert", "tiny"])
def test_hf_mobilebert_for_pretraining_both_ways(size, tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = _cfg(size)
    tokenizer = load_tokenizer(SPM)
    batch = _batch(tokenizer)
    model = mobilebert.MobileBertForPreTraining(cfg.model)
    params = _numpy(nn.unbox(jax.jit(model.init)(jax.random.key(0), batch)["params"]))
    pretrained = interop.Pretrained(model=cfg.model, params=params, tokenizer=SPM,
                                    lower_case=True, head="pretrain", source="test")
    hf.save(pretrained, str(tmp_path / "out"))
    theirs = transformers.AutoModelForPreTraining.from_pretrained(tmp_path / "out").eval()
    assert type(theirs).__name__ == "MobileBertForPreTraining"
    as_torch = {k: torch.tensor(batch[k], dtype=torch.long)
                for k in ("input_ids", "token_type_ids", "attention_mask")}
    with torch.no_grad():
        out = theirs(**as_torch)
    mine = jax.jit(model.apply)({"params": params}, batch)
    real = batch["attention_mask"].astype(bool)
    assert np.abs(mine["mlm_logits"] - out.prediction_logits.numpy())[real].max() <= 1e-4
    assert np.abs(mine["nsp_logits"] - out.seq_relationship_logits.numpy()).max() <= 1e-4
    back = interop.load(str(tmp_path / "out"))
    assert (back.family, back.head) == ("mobilebert", "pretrain")
    for path, x in jax.tree_util.tree_leaves_with_path(params):
        got = back.params
        for k in path:
            got = got[k.key]
        assert np.asarray(got).tobytes() == np.asarray(x).tobytes(), path
    # HF's own random initialisation (NoNorm's ones and zeros, its init), read by us
    fresh = transformers.MobileBertForPreTraining(theirs.config).eval()
    torch.nn.init.normal_(fresh.cls.predictions.bias, std=0.1)
    fresh.save_pretrained(tmp_path / "fresh")
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (tmp_path / "out" / name).exists():
            (tmp_path / "fresh" / name).write_bytes((tmp_path / "out" / name).read_bytes())
    read = interop.load(str(tmp_path / "fresh"))
    with torch.no_grad():
        expected = fresh(**as_torch)
    read_model = mobilebert.MobileBertForPreTraining(read.model)
    got = jax.jit(read_model.apply)({"params": read.params}, batch)
    assert np.abs(got["mlm_logits"] - expected.prediction_logits.numpy())[real].max() <= 1e-4


@pytest.mark.parametrize("size", ["mobilebert", "tiny"])
def test_packed_examples_see_only_themselves_through_the_3_gram(size):
    """Three examples packed in one row (segment ids, restarting positions) give each the
    logits it gets alone in a padded row: its last token sees [PAD] on the right either
    way, its first zeros on the left."""
    from pretrainx.data import packing
    cfg = _cfg(size).model
    model = mobilebert.MobileBertForPreTraining(cfg)
    rng = np.random.default_rng(0)
    examples = [rng.integers(5, 4096, n).astype(np.int32) for n in (9, 14, 6)]
    row = packing.pack_examples(examples, 40)[0]
    n = row["input_ids"].size

    def batch(ids, segments, positions, length):
        pad = lambda x: np.pad(x, (0, length - x.size))[None]  # noqa: E731
        return {"input_ids": pad(ids), "attention_mask": pad(segments),
                "token_type_ids": np.zeros((1, length), np.int32), "positions": pad(positions),
                "masked_lm_positions": np.arange(length, dtype=np.int32)[None]}

    packed = batch(row["input_ids"], row["segment_ids"], row["positions"], 40)
    params = jax.jit(model.init)(jax.random.key(0), packed)["params"]
    apply = jax.jit(lambda b: model.apply({"params": params}, b)["mlm_logits"])
    together = np.asarray(apply(packed))[0]
    start = 0
    for e in examples:
        alone = np.asarray(apply(batch(e, np.ones_like(e), np.arange(e.size), e.size + 1)))[0]
        np.testing.assert_allclose(together[start:start + e.size], alone[:e.size], atol=1e-5)
        start += e.size
    assert start == n


@pytest.mark.slow
def test_mobilebert_learns_mlm_and_nsp_on_alice(tmp_path):
    cfg = _cfg("tiny")
    cfg.update(total_steps=30, global_batch_size=8, seq_len=64, log_every=1,
               eval_every=1000, checkpoint_every=1000)
    cfg.mesh.data, cfg.mesh.fsdp = -1, 1
    # LAMB (the recipe's): a step moves a layer by lr x its norm
    cfg.optimizer.update(learning_rate=2e-2, warmup_steps=3)
    cfg.data.max_predictions_per_seq = 10
    loop.train(cfg, str(tmp_path), devices=jax.devices()[:1])  # the loss, not the mesh
    losses = [r["loss"] for r in read_metrics(tmp_path)]
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.5, losses
