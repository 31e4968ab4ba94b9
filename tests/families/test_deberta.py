"""DeBERTa-v2/v3's encoder: disentangled attention over log-bucketed relative
positions, against transformers' DebertaV2 PyTorch models, and packed segments that
never see each other."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn

from conftest import ALICE, REPO
from pretrainx import interop
from pretrainx.data.tokenizers import load_tokenizer
from pretrainx.families.deberta import model as deberta

SPM = str(REPO / "pretrainx" / "assets" / "spm_4k.model")


def _cfg(**overrides):
    """A tiny DeBERTa-v3: 8 buckets (distances past 4 log-bucketed up to 32)."""
    cfg = deberta.default_config()
    cfg.update(num_layers=2, hidden_size=64, num_heads=4, mlp_dim=128, vocab_size=4096,
               position_buckets=8, max_relative_positions=32, dropout_rate=0.0,
               attention_dropout_rate=0.0, **overrides)
    return cfg


def _batch():
    tokenizer = load_tokenizer(SPM)
    text = open(ALICE, encoding="utf-8").read()
    rows = [[tokenizer.cls_id] + tokenizer.encode(text[8000 + 500 * i:8000 + 500 * i + 260 - 70 * i])
            + [tokenizer.sep_id] for i in range(3)]
    length = max(map(len, rows))
    ids = np.full((3, length), tokenizer.pad_id, np.int32)
    mask = np.zeros((3, length), np.int32)
    for i, row in enumerate(rows):
        ids[i, :len(row)], mask[i, :len(row)] = row, 1
    return {"input_ids": ids, "token_type_ids": np.zeros_like(ids), "attention_mask": mask,
            "masked_lm_positions": np.tile(np.arange(length, dtype=np.int32), (3, 1))}


def _init(model, batch):
    params = jax.device_get(nn.unbox(jax.jit(model.init)(jax.random.key(3), batch)["params"]))
    return jax.tree_util.tree_map(lambda x: np.asarray(x, np.float32), params)


def test_log_buckets_are_microsoft_debertas():
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers.models.deberta_v2 import modeling_deberta_v2 as theirs
    relative = np.arange(-600, 601)
    for buckets, largest in ((256, 512), (8, 32)):
        expected = theirs.make_log_bucket_position(torch.tensor(relative), buckets, largest)
        got = deberta.log_buckets(jnp.asarray(relative), buckets, largest)
        np.testing.assert_array_equal(np.asarray(got), expected.numpy().astype(np.int64))
    assert int(deberta.log_buckets(jnp.asarray(511), 256, 512)) == 255  # the table's edge


@pytest.mark.parametrize("share", [True, False], ids=["share_att_key", "own_position_proj"])
def test_matches_hf_deberta_v2_and_round_trips(tmp_path, share):
    """DebertaV2ForMaskedLM (legacy head) on real sentences padded in a batch: logits
    within 1e-4; ours -> HF -> ours bit-exact."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from pretrainx.interop import hf
    cfg, batch = _cfg(share_att_key=share), _batch()
    assert batch["input_ids"].shape[1] > 2 * 8  # distances past the buckets' linear part
    model = deberta.DebertaForMaskedLM(cfg)
    params = _init(model, batch)
    pretrained = interop.Pretrained(model=cfg, params=params, tokenizer=SPM, lower_case=True,
                                    head="mlm", source="test")
    hf.save(pretrained, str(tmp_path))
    theirs = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path).eval()
    assert type(theirs).__name__ == "DebertaV2ForMaskedLM"
    with torch.no_grad():
        logits = theirs(input_ids=torch.tensor(batch["input_ids"], dtype=torch.long),
                        attention_mask=torch.tensor(batch["attention_mask"], dtype=torch.long)
                        ).logits.numpy()
    mine = np.asarray(jax.jit(model.apply)({"params": params}, batch)["mlm_logits"])
    real = batch["attention_mask"].astype(bool)
    assert np.abs(mine - logits)[real].max() <= 1e-4
    back = interop.load(str(tmp_path))
    assert (back.family, back.head, back.model.share_att_key) == ("deberta", "mlm", share)
    flat = lambda tree: {jax.tree_util.keystr(p): np.asarray(x).tobytes()
                         for p, x in jax.tree_util.tree_leaves_with_path(tree)}
    assert flat(back.params) == flat(params)


def test_packed_segments_never_see_each_other():
    """Two texts packed in one row (segment ids 1 and 2) give each text's outputs as it
    gives them alone: relative positions do not see where a segment starts."""
    cfg, batch = _cfg(), _batch()
    encoder = deberta.DebertaEncoder(cfg)
    a = batch["input_ids"][1][batch["attention_mask"][1] > 0]
    b = batch["input_ids"][2][batch["attention_mask"][2] > 0]
    packed = np.concatenate([a, b])[None]
    segments = np.concatenate([np.ones(len(a), np.int32), np.full(len(b), 2, np.int32)])[None]
    # jitted (eagerly, every op of every layer compiles alone); `True`: deterministic
    params = jax.jit(encoder.init, static_argnums=4)(
        jax.random.key(0), packed, np.zeros_like(packed), segments, True)
    apply = jax.jit(encoder.apply, static_argnums=4)
    run = lambda ids, seg: np.asarray(apply(params, ids, np.zeros_like(ids), seg, True)[0])
    together = run(packed, segments)[0]
    alone_a = run(a[None], np.ones((1, len(a)), np.int32))[0]
    alone_b = run(b[None], np.ones((1, len(b)), np.int32))[0]
    np.testing.assert_allclose(together[:len(a)], alone_a, atol=2e-5)
    np.testing.assert_allclose(together[len(a):], alone_b, atol=2e-5)


def test_enhanced_mask_decoder_reuses_the_last_layer(tmp_path):
    """The EMD adds only its position table; its logits differ from the plain head's,
    and export writes the rest exactly and says what it leaves out."""
    from pretrainx.interop import hf
    batch = _batch()
    plain = _init(deberta.DebertaForMaskedLM(_cfg()), batch)
    cfg = _cfg(enhanced_mask_decoder=True)
    model = deberta.DebertaForMaskedLM(cfg)
    params = _init(model, batch)
    assert set(params) - set(plain) == {"emd_position"}
    without = dict(params)
    del without["emd_position"]
    assert jax.tree_util.tree_structure(without) == jax.tree_util.tree_structure(plain)
    with_emd = np.asarray(jax.jit(model.apply)({"params": params}, batch)["mlm_logits"])
    no_emd = np.asarray(deberta.DebertaForMaskedLM(_cfg()).apply({"params": without},
                                                                 batch)["mlm_logits"])
    assert np.abs(with_emd - no_emd).max() > 1e-3
    pretrained = interop.Pretrained(model=cfg, params=params, tokenizer=SPM, lower_case=True,
                                    head="mlm", source="test")
    assert "enhanced mask decoder" in hf.caveat(pretrained)


@pytest.mark.slow
def test_mlm_loss_falls_and_sharded_equals_unsharded(tmp_path):
    """The MLM objective with the EMD learns Alice (16 steps) and gives the same losses
    on one device and on a (data, fsdp, tensor) = (2, 2, 2) mesh."""
    from conftest import read_metrics, shrink_recipe
    from pretrainx.train import loop
    quiet = {"model.dropout_rate": 0.0, "model.attention_dropout_rate": 0.0,
             "data.tokenizer": SPM, "data.lower_case": True}
    model = {"vocab_size": 4096, "position_buckets": 8, "max_relative_positions": 32}
    loop.train(shrink_recipe("deberta_mlm.py", learning_rate=1e-2, model=model, **quiet),
               str(tmp_path / "one"), devices=jax.devices()[:1])
    loop.train(shrink_recipe("deberta_mlm.py", learning_rate=1e-2, model=model, **quiet,
                             **{"mesh.data": 2, "mesh.fsdp": 2, "mesh.tensor": 2}),
               str(tmp_path / "mesh"))
    a = [r["loss"] for r in read_metrics(tmp_path / "one")]
    b = [r["loss"] for r in read_metrics(tmp_path / "mesh")]
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-4)
    assert np.mean(a[-4:]) < a[0] - 1.0, a  # from log(4096) = 8.3
    back = interop.load(str(tmp_path / "one"))
    assert (back.family, back.head) == ("deberta", "mlm") and "emd_position" in back.params


@pytest.mark.slow
def test_glue_finetunes_from_an_hf_deberta_directory(shared_data, tmp_path):
    """An HF DeBERTa-v2/v3 directory (here one we export) fine-tunes on SST-2 with
    DeBERTa's pooler (dense + GeLU on [CLS]) and exports as
    DebertaV2ForSequenceClassification with the same logits."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from pretrainx.finetune import loop as finetune_loop
    from pretrainx.finetune.config import finetune_config
    from pretrainx.interop import hf
    batch = _batch()
    params = _init(deberta.DebertaForMaskedLM(_cfg()), batch)
    hf.save(interop.Pretrained(model=_cfg(), params=params, tokenizer=SPM, lower_case=True,
                               head="mlm", source="test"), str(tmp_path / "hf"))
    cfg = finetune_config()
    cfg.update_from_flattened_dict({
        "init_from": str(tmp_path / "hf"), "task": "sst2", "seq_len": 32,
        "data.glue_dir": str(shared_data / "glue"), "global_batch_size": 16, "epochs": 1,
        "data.max_train_examples": 32, "data.max_eval_examples": 32})
    out = finetune_loop.train(cfg, str(tmp_path / "ft"), devices=jax.devices()[:1])
    assert 0 <= out["best"]["accuracy"] <= 1
    tuned = interop.load(str(tmp_path / "ft"))
    assert (tuned.family, tuned.head) == ("deberta", "classify")
    hf.save(tuned, str(tmp_path / "hf_tuned"))
    theirs = transformers.AutoModelForSequenceClassification.from_pretrained(
        tmp_path / "hf_tuned").eval()
    tuned.model.dropout_rate = tuned.model.attention_dropout_rate = 0.0
    mine = deberta.DebertaForFineTuning(tuned.model, "classify", 2).apply(
        {"params": tuned.params}, batch)["logits"]
    with torch.no_grad():
        logits = theirs(input_ids=torch.tensor(batch["input_ids"], dtype=torch.long),
                        attention_mask=torch.tensor(batch["attention_mask"], dtype=torch.long)
                        ).logits.numpy()
    assert np.abs(np.asarray(mine) - logits).max() <= 1e-4


def test_v3_base_discriminator_is_184m():
    """--describe's discriminator_params for DeBERTa-v3-base: 184M +-1% (the model card:
    86M backbone + 98M embeddings)."""
    from conftest import load_config
    from pretrainx import pretrain
    out = pretrain.describe(load_config("deberta_v3_base.py"))
    assert abs(out["discriminator_params"] / 184e6 - 1) < 0.01, out
    assert abs(out["backbone_params"] / 86e6 - 1) < 0.01 and abs(
        out["embedding_params"] / 98e6 - 1) < 0.01, out
    assert out["generator"] == "L6/H768/A12"


def test_gradient_disentangled_embedding_sharing():
    """GDES: the discriminator's word table is sg(E_G) + E_delta with E_delta = 0 at the
    start; the RTD loss moves E_delta and nothing of the generator, the MLM loss moves
    the generator (E_G included) and nothing of the discriminator."""
    from pretrainx.families.deberta import rtd_model as deberta_rtd
    from pretrainx.objectives import rtd
    cfg = _cfg(generator_layers=0.5)
    batch = _batch()
    weights = np.zeros(batch["masked_lm_positions"].shape, np.float32)
    weights[:, 1:12] = 1.0
    batch = dict(batch, masked_lm_ids=batch["input_ids"], masked_lm_weights=weights,
                 masked_lm_positions=np.tile(np.arange(batch["input_ids"].shape[1],
                                                       dtype=np.int32), (3, 1)))
    model = deberta_rtd.DebertaV3ForPreTraining(cfg)
    params = nn.unbox(jax.jit(model.init)(jax.random.key(0), batch)["params"])
    assert not np.any(np.asarray(params["discriminator"]["token_embed"]["embedding"]))

    def grads(gen_weight, disc_weight):
        def loss(p):
            out = model.apply({"params": p}, batch, deterministic=False,
                              rngs={"dropout": jax.random.key(1)})
            sums = rtd.loss_sums(out, batch)
            return rtd.loss(sums, rtd.normalizers(batch), gen_weight, disc_weight)
        return jax.jit(jax.grad(loss))(params)

    def moved(tree):
        return any(np.any(np.asarray(x)) for x in jax.tree_util.tree_leaves(tree))

    disc = grads(0.0, 50.0)
    assert not moved(disc["generator"]) and not moved(disc["mlm_transform"])
    assert moved(disc["discriminator"]["token_embed"])
    gen = grads(1.0, 0.0)
    assert not moved(gen["discriminator"]) and not moved(gen["discriminator_dense"])
    assert moved(gen["generator"]["token_embed"])


@pytest.mark.slow
def test_v3_rtd_learns_sharded_equals_unsharded_and_exports(shared_data, tmp_path):
    """RTD on Alice: the generator's MLM loss and the discriminator's loss fall; 1 device
    == a (2, 2, 2) mesh; the run exports its discriminator (DebertaV2Model, word table
    E_G + E_delta) and its generator (generator/ DebertaV2ForMaskedLM) with HF's
    outputs equal to ours."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from conftest import read_metrics, shrink_recipe
    from pretrainx.interop import hf
    from pretrainx.families.deberta import rtd_model as deberta_rtd
    from pretrainx.train import loop
    quiet = {"model.dropout_rate": 0.0, "model.attention_dropout_rate": 0.0,
             "data.tokenizer": SPM, "data.lower_case": True}
    model = {"vocab_size": 4096, "position_buckets": 8, "max_relative_positions": 32}
    cfg = lambda **kw: shrink_recipe("deberta_v3_base.py", learning_rate=1e-2, model=model,
                                     **quiet, **kw)
    loop.train(cfg(checkpoint_every=16), str(tmp_path / "one"), devices=jax.devices()[:1])
    loop.train(cfg(**{"mesh.data": 2, "mesh.fsdp": 2, "mesh.tensor": 2}),
               str(tmp_path / "mesh"))
    a, b = read_metrics(tmp_path / "one"), read_metrics(tmp_path / "mesh")
    np.testing.assert_allclose([r["loss"] for r in a], [r["loss"] for r in b], rtol=0,
                               atol=2e-4)
    mlm, disc = [r["mlm_loss"] for r in a], [r["disc_loss"] for r in a]
    assert np.mean(mlm[-4:]) < mlm[0] - 1.0 and np.mean(disc[-4:]) < disc[0], (mlm, disc)
    pretrained = interop.load(str(tmp_path / "one"))
    assert (pretrained.family, pretrained.head) == ("deberta", "pretrain")
    assert "replaced-token head" in hf.caveat(pretrained)
    written = hf.save(pretrained, str(tmp_path / "hf"))
    assert "generator/model.safetensors" in written
    batch = _batch()
    torch_in = dict(input_ids=torch.tensor(batch["input_ids"], dtype=torch.long),
                    attention_mask=torch.tensor(batch["attention_mask"], dtype=torch.long))
    real = batch["attention_mask"].astype(bool)
    m = pretrained.model
    m.dropout_rate = m.attention_dropout_rate = 0.0
    ours = deberta.DebertaEncoder(m).apply({"params": pretrained.params["deberta"]},
                                           batch["input_ids"], batch["token_type_ids"],
                                           batch["attention_mask"], True)[0]
    gen_cfg = deberta_rtd.generator_config(m)
    gen_logits = deberta.DebertaForMaskedLM(gen_cfg).apply(
        {"params": pretrained.params["generator"]}, batch)["mlm_logits"]
    with torch.no_grad():
        hidden = transformers.AutoModel.from_pretrained(tmp_path / "hf").eval()(
            **torch_in).last_hidden_state.numpy()
        logits = transformers.AutoModelForMaskedLM.from_pretrained(
            tmp_path / "hf" / "generator").eval()(**torch_in).logits.numpy()
    assert np.abs(np.asarray(ours) - hidden)[real].max() <= 1e-4
    assert np.abs(np.asarray(gen_logits) - logits)[real].max() <= 1e-4
    # GLUE from the workdir: the discriminator's encoder under DeBERTa's pooler.
    from pretrainx.finetune import loop as finetune_loop
    from pretrainx.finetune.config import finetune_config
    ft = finetune_config()
    ft.update_from_flattened_dict({
        "init_from": str(tmp_path / "one"), "task": "sst2", "seq_len": 32,
        "data.glue_dir": str(shared_data / "glue"), "global_batch_size": 16, "epochs": 1,
        "data.max_train_examples": 32, "data.max_eval_examples": 32})
    out = finetune_loop.train(ft, str(tmp_path / "ft"), devices=jax.devices()[:1])
    assert 0 <= out["best"]["accuracy"] <= 1
    assert interop.load(str(tmp_path / "ft")).family == "deberta"
