"""Decoders made sentence encoders: contrastive fine-tuning of a Gemma 3 / Qwen3 / GPT-2
(its states pooled by mean, last token or first token), unsupervised SimCSE (each
sentence its own positive, the views differing by dropout), Matryoshka losses scored at
each width, and the export: a bidirectional Gemma 3 as Gemma3TextModel with
sentence-transformers' files, whose embeddings match pretrainx's within 1e-4; bad input
in one line."""

import jax.numpy as jnp
import numpy as np
import pytest

from conftest import SENTENCES, load_config, override, read_metrics
from pretrainx import interop
from pretrainx.errors import UserError
from pretrainx.finetune import contrastive, loop as finetune_loop
from pretrainx.finetune.config import finetune_config


@pytest.fixture(scope="module")
def gemma_workdir(tmp_path_factory):
    """The Gemma 3 quickstart, 30 causal steps (a decoder to convert)."""
    from pretrainx import pretrain
    out = tmp_path_factory.mktemp("gemma3")
    pretrain.train(override(load_config("gemma3.py", "quickstart"),
                            dict(total_steps=30, log_every=10, eval_every=30,
                                 checkpoint_every=30)), str(out))
    return out


@pytest.fixture(scope="module")
def mntp_workdir(gemma_workdir, tmp_path_factory):
    """MNTP's model (model.causal=False), 10 steps from the decoder above."""
    from pretrainx import pretrain
    out = tmp_path_factory.mktemp("mntp")
    pretrain.train(override(load_config("llm2vec.py", "quickstart"),
                            dict(total_steps=10, log_every=5, eval_every=10,
                                 checkpoint_every=10, init_from=str(gemma_workdir))), str(out))
    return out


def _cfg(shared_data, init_from, **overrides):
    c = finetune_config()
    c.task = "contrastive"
    c.init_from = str(init_from)
    c.data.glue_dir = str(shared_data / "glue")
    c.seq_len = 32
    c.global_batch_size = 16
    c.eval_batch_size = 64
    c.epochs = 1
    c.log_every = 1
    c.data.max_train_examples = 64
    c.data.max_eval_examples = 64
    c.optimizer.learning_rate = 1e-3
    return override(c, overrides)


def test_infonce_with_matryoshka_dims_sums_the_loss_at_each_width():
    rng = np.random.default_rng(0)
    e = jnp.asarray(rng.normal(size=(4, 2, 8)), jnp.float32)
    batch = {"weight": jnp.ones(4)}
    full = contrastive.InfoNceLoss(0.1).loss_sums({"logits": e}, batch)
    cut = contrastive.InfoNceLoss(0.1).loss_sums({"logits": e[..., :4]}, batch)
    both = contrastive.InfoNceLoss(0.1, (8, 4)).loss_sums({"logits": e}, batch)
    np.testing.assert_allclose(both["loss_sum"], full["loss_sum"] + cut["loss_sum"], rtol=1e-6)
    assert both["correct_sum"] == full["correct_sum"]


@pytest.mark.slow
@pytest.mark.parametrize("pooling", ["mean", "last"])
def test_a_bidirectional_gemma3_trains_contrastively_and_scores_each_width(
        shared_data, gemma_workdir, tmp_path, pooling):
    """STS-B's pairs, the decoder's attention turned both ways by the checkpoint's own
    key (model.causal=False is set on a copy of its workdir's config by MNTP; here the
    causal checkpoint is tuned as it is, mean or last-token pooled), Matryoshka at 64
    and 32: the loss falls and Spearman is reported at each width."""
    cfg = _cfg(shared_data, gemma_workdir, **{"data.pooling": pooling,
                                              "data.max_train_examples": 128,
                                              "data.matryoshka_dims": "64,32"})
    out = finetune_loop.train(cfg, str(tmp_path / "tuned"))
    losses = [r["loss"] for r in read_metrics(tmp_path / "tuned") if "loss" in r]
    assert np.mean(losses[-3:]) < losses[0], losses
    assert {"spearman_at_64", "spearman_at_32"} <= set(out["best"])
    tuned = interop.load(str(tmp_path / "tuned"))
    assert tuned.head == f"embed_{pooling}" and tuned.family == "gemma3"


@pytest.mark.slow
def test_unsupervised_simcse_reads_single_sentences_with_dropout(shared_data, gemma_workdir,
                                                                  tmp_path):
    cfg = _cfg(shared_data, gemma_workdir, **{"data.simcse": True})
    data = finetune_loop._Setup(cfg).data
    ids = data.train["input_ids"]
    np.testing.assert_array_equal(ids[:, 0], ids[:, 1])  # each sentence its own positive
    assert len({tuple(r) for r in ids[:, 0]}) == len(ids)  # distinct sentences
    finetune_loop.train(cfg, str(tmp_path / "simcse"))
    first = [r for r in read_metrics(tmp_path / "simcse") if "loss" in r][0]
    # dropout at 0.1 makes the views differ, so the loss starts above a dropout-free
    # model's ln(1) - at equal views each anchor's own positive is its exact copy
    assert first["loss"] > 0.0 and np.isfinite(first["loss"])
    assert interop.load(str(tmp_path / "simcse")).model.dropout_rate == 0.1


@pytest.mark.slow
def test_bidirectional_gemma3_exports_a_sentence_transformers_folder(mntp_workdir, tmp_path):
    """MNTP's model (model.causal=False) exported: Gemma3TextModel with
    use_bidirectional_attention and mean pooling, which sentence-transformers loads
    and whose embeddings match pretrainx.load(...).embed within 1e-4."""
    pytest.importorskip("torch")
    st = pytest.importorskip("sentence_transformers")
    import pretrainx
    out = tmp_path / "export"
    written = interop.hf.save(interop.load(str(mntp_workdir)), str(out))
    assert "modules.json" in written
    model = st.SentenceTransformer(str(out), device="cpu")
    theirs = model.encode(SENTENCES, convert_to_numpy=True, batch_size=3)
    ours = pretrainx.load(str(mntp_workdir)).embed(SENTENCES)
    assert ours.shape == theirs.shape == (3, 64)
    assert np.abs(ours - theirs).max() <= 1e-4


def test_bad_input_is_refused_in_one_line(shared_data, tmp_path):
    from pretrainx.finetune import config as ft_config
    with pytest.raises(UserError, match="data.matryoshka_dims='64,x'"):
        ft_config.validate(_cfg(shared_data, "", **{"data.matryoshka_dims": "64,x"}))
    with pytest.raises(UserError, match="has 768, wider than the model's embeddings \\(64\\)"):
        contrastive.matryoshka_dims("768,512", 64)
    with pytest.raises(UserError, match="data.simcse_dropout=0.0 must be in"):
        ft_config.validate(_cfg(shared_data, "", **{"data.simcse": True,
                                                     "data.simcse_dropout": 0.0}))
    from pretrainx.families.qwen3 import model as qwen3
    with pytest.raises(UserError, match="a qwen3 model fine-tunes as a sentence embedder"):
        qwen3.finetune_model(qwen3.default_config(), "classify", 2, None)


def test_distillation_gap_is_cosine_or_mean_squared():
    s = jnp.asarray([[[3.0, 4.0], [1.0, 0.0]]])  # [B=1, k=2, H=2]
    t = jnp.asarray([[[6.0, 8.0], [0.0, 1.0]]])
    np.testing.assert_allclose(contrastive.distill_gap(s, t, "cosine"), [(0.0 + 1.0) / 2])
    np.testing.assert_allclose(contrastive.distill_gap(s, t, "mse"),
                               [(9 + 16 + 1 + 1) / 4])


@pytest.mark.slow
def test_distilling_a_model_from_itself_starts_at_no_gap(shared_data, mntp_workdir, tmp_path):
    """The teacher's embeddings are the student's own (one model, pooled alike, framed
    alike): the first step's gap is 0, so texts, framing and pooling line up."""
    cfg = _cfg(shared_data, mntp_workdir, **{"data.teacher": str(mntp_workdir),
                                              "optimizer.learning_rate": 1e-4})
    finetune_loop.train(cfg, str(tmp_path / "distilled"))
    first = [r for r in read_metrics(tmp_path / "distilled") if "loss" in r][0]
    assert first["distill"] < 1e-5
    with pytest.raises(UserError, match="gives 64-wide embeddings; the student's are 32"):
        contrastive.teacher_embeddings(str(mntp_workdir), [("a b",)], 32)


@pytest.mark.slow
def test_a_contrastive_sentence_embedder_loads_embeds_and_exports_normalised(
        shared_data, mntp_workdir, tmp_path):
    """A bidirectional Gemma 3 tuned contrastively (mean pooling, Matryoshka 64 and 32):
    pretrainx.load gives its unit vectors (and none of the vocabulary outputs it has no
    head for); its export is a sentence-transformers folder with Normalize whose vectors,
    whole and truncated to 32, match within 1e-4; the card names the widths."""
    pytest.importorskip("torch")
    st = pytest.importorskip("sentence_transformers")
    import pretrainx
    cfg = _cfg(shared_data, mntp_workdir, **{"data.matryoshka_dims": "64,32"})
    finetune_loop.train(cfg, str(tmp_path / "tuned"))
    model = pretrainx.load(str(tmp_path / "tuned"))
    ours = model.embed(SENTENCES)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=-1), 1.0, rtol=1e-5)
    with pytest.raises(UserError, match="is a sentence embedder .*embed\\(texts\\)"):
        model(texts=SENTENCES)
    with pytest.raises(UserError, match="dim=128: a width of the model's 64-wide"):
        model.embed(SENTENCES, dim=128)
    out = tmp_path / "export"
    written = interop.hf.save(interop.load(str(tmp_path / "tuned")), str(out))
    assert "modules.json" in written
    for dim in (0, 32):
        theirs = st.SentenceTransformer(str(out), device="cpu", truncate_dim=dim or None
                                        ).encode(SENTENCES, convert_to_numpy=True)
        mine = model.embed(SENTENCES, dim=dim)
        assert mine.shape == theirs.shape == (3, dim or 64)
        assert np.abs(mine - theirs).max() <= 1e-4
    assert "Matryoshka widths it was trained at: 64, 32" in (out / "README.md").read_text()
