"""T5Gemma: the network against transformers' T5GemmaForConditionalGeneration at a tiny
random unbalanced config (logits on padded real text), its tensors both ways, packed
rows that never see each other, and a UL2 run whose loss falls."""

import jax
import numpy as np
import pytest

from conftest import REPO, SENTENCES, load_config, override, read_metrics, saved_params
from pretrainx import config as config_lib, objectives
from pretrainx.data.tokenizers import load_tokenizer
from pretrainx.families.t5gemma import hf as t5gemma_hf
from pretrainx.families.t5gemma import model as t5gemma
from pretrainx.train import loop

SPM = REPO / "pretrainx" / "assets" / "spm_ul2_4k.model"
# an encoder wider and shallower than its decoder, windows short enough to matter
TINY = {"vocab_size": 4224, "num_layers": 2, "hidden_size": 64, "mlp_dim": 128,
        "num_heads": 4, "num_kv_heads": 2, "head_dim": 16, "query_pre_attn_scalar": 16,
        "sliding_window": 4, "num_decoder_layers": 3, "decoder_hidden_size": 48,
        "decoder_mlp_dim": 96, "decoder_num_heads": 2, "decoder_num_kv_heads": 1,
        "decoder_head_dim": 16, "decoder_query_pre_attn_scalar": 16,
        "decoder_sliding_window": 3}


def _model_cfg(**keys):
    m = t5gemma.default_config()
    m.update({**TINY, **keys})
    return m


def _hf_model(cfg):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    if int(transformers.__version__.split(".")[0]) < 5:
        # 4.57's encoder windows are one key narrower a side (|q - k| < window; 5 reads
        # <= window, which we follow) and its untied output layer takes the encoder's width
        pytest.skip("T5Gemma's parity is held to transformers 5")
    config = t5gemma_hf.to_hf_config(cfg, type("T", (), {"pad_id": 0, "sep_id": 1})())
    config = transformers.T5GemmaConfig(
        encoder=transformers.T5GemmaModuleConfig(**{k: v for k, v in config["encoder"].items()
                                                    if k != "model_type"}),
        decoder=transformers.T5GemmaModuleConfig(**{k: v for k, v in config["decoder"].items()
                                                    if k != "model_type"}),
        vocab_size=cfg.vocab_size, tie_word_embeddings=cfg.tie_output,
        attn_implementation="eager")
    torch.manual_seed(0)
    hf = transformers.T5GemmaForConditionalGeneration(config).eval()
    with torch.no_grad():  # HF initialises norms at 0 (scale 1): make them count
        for name, p in hf.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
            if "lm_head" in name:  # an untied head's 0.02 init gives logits of 1e-3
                p.mul_(100.0)
    return torch, hf


def _padded(tok, texts, length):
    ids = np.zeros((len(texts), length), np.int32)
    for i, t in enumerate(texts):
        piece = tok.encode(t)[:length]
        ids[i, :len(piece)] = piece
    return ids, (ids > 0).astype(np.int32)


@pytest.mark.parametrize("tied", [True, False])
def test_matches_transformers_t5gemma_on_padded_real_text(tied):
    cfg = _model_cfg(tie_output=tied)
    torch, hf = _hf_model(cfg)
    state = {k: v.detach().numpy() for k, v in hf.state_dict().items()}
    params = t5gemma_hf.from_hf_state(state, cfg, "hf")
    back = t5gemma_hf.to_hf_state(params, cfg)
    for name, value in back.items():  # the same tensors, both ways
        np.testing.assert_array_equal(value, state[name], err_msg=name)
    tok = load_tokenizer(str(SPM))
    enc, enc_mask = _padded(tok, SENTENCES, 24)
    dec, dec_mask = _padded(tok, SENTENCES[::-1], 12)
    dec_in = np.concatenate([np.zeros((3, 1), np.int32), dec[:, :-1]], 1)
    dec_in_mask = np.concatenate([np.ones((3, 1), np.int32), dec_mask[:, :-1]], 1)
    batch = {"encoder_input_tokens": enc, "encoder_segment_ids": enc_mask,
             "decoder_input_tokens": dec_in, "decoder_segment_ids": dec_in_mask}
    ours = np.asarray(jax.jit(t5gemma.T5Gemma(cfg).apply)({"params": params}, batch)["logits"])
    with torch.no_grad():
        theirs = hf(input_ids=torch.tensor(enc, dtype=torch.long),
                    attention_mask=torch.tensor(enc_mask),
                    decoder_input_ids=torch.tensor(dec_in, dtype=torch.long),
                    decoder_attention_mask=torch.tensor(dec_in_mask)).logits.numpy()
    real = dec_in_mask > 0
    diff = np.abs(ours[real] - theirs[real]).max()
    print(f"max |ours - transformers| {diff:.2e} (tied={tied})")
    assert diff < 1e-4 and np.abs(theirs[real]).max() > 1e-2


def test_packed_examples_never_see_each_other():
    cfg = _model_cfg()
    net = t5gemma.T5Gemma(cfg)
    rng = np.random.default_rng(0)
    enc = rng.integers(5, 4000, (1, 20)).astype(np.int32)
    dec = rng.integers(5, 4000, (1, 10)).astype(np.int32)
    seg_e = np.array([[1] * 12 + [2] * 8])
    seg_d = np.array([[1] * 6 + [2] * 4])
    pos = lambda s: np.concatenate([np.arange((s == k).sum()) for k in (1, 2)])[None]  # noqa
    batch = {"encoder_input_tokens": enc, "encoder_segment_ids": seg_e,
             "encoder_positions": pos(seg_e), "decoder_input_tokens": dec,
             "decoder_segment_ids": seg_d, "decoder_positions": pos(seg_d)}
    params = jax.jit(net.init)(jax.random.key(0), batch)["params"]
    apply = jax.jit(lambda b: net.apply({"params": params}, b)["logits"][0])
    base = np.asarray(apply(batch))
    changed_e, changed_d = enc.copy(), dec.copy()
    changed_e[0, 12:] = rng.integers(5, 4000, 8)
    changed_d[0, 6:] = rng.integers(5, 4000, 4)
    moved = np.asarray(apply(dict(batch, encoder_input_tokens=changed_e,
                                  decoder_input_tokens=changed_d)))
    np.testing.assert_array_equal(moved[:6], base[:6])  # the first example, bit for bit
    alone = {k: v[:, :12] if k.startswith("encoder") else v[:, :6] for k, v in batch.items()}
    np.testing.assert_allclose(np.asarray(apply(alone)), base[:6], atol=1e-5)


def _ul2_run_config(**keys):
    base = load_config("ul2.py", "quickstart")
    cfg = objectives.default_config("t5gemma_ul2")
    cfg.model.update(TINY)
    cfg.data.update(train_files=base.data.train_files, eval_files=base.data.eval_files,
                    tokenizer=base.data.tokenizer, num_sentinels=100)
    return override(cfg, {"global_batch_size": 8, "seq_len": 64, "data.targets_length": 64,
                          "log_every": 1, "eval_steps": 1, "model.dtype": "float32",
                          "optimizer.warmup_steps": 2, **keys})


@pytest.mark.slow
def test_one_device_and_a_mesh_of_eight_give_the_same_losses(tmp_path):
    """Grouped-query cross-attention from a wider encoder, soft-capped, sharded: the same
    numbers as on one device (jax 0.10's XLA:CPU once made NaNs of it, mha.py)."""
    keys = {"total_steps": 4, "eval_every": 4, "checkpoint_every": 4}
    loop.train(_ul2_run_config(**keys, **{"mesh.data": 1}), str(tmp_path / "one"),
               devices=jax.devices()[:1])
    loop.train(_ul2_run_config(**keys, **{"mesh.data": 4, "mesh.fsdp": 2}),
               str(tmp_path / "mesh"))
    a, b = ([r["loss"] for r in read_metrics(tmp_path / d)] for d in ("one", "mesh"))
    assert len(a) == 4 and a[0] != a[-1]
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)
    e1, e8 = (read_metrics(tmp_path / d, "eval")[-1]["loss"] for d in ("one", "mesh"))
    assert np.isfinite(e8) and abs(e1 - e8) < 1e-5


def test_t5gemma_ul2_loss_falls_on_real_text(tmp_path):
    cfg = _ul2_run_config(**{"total_steps": 40, "seq_len": 128, "data.targets_length": 128,
                             "log_every": 10, "eval_every": 40, "eval_steps": 2,
                             "checkpoint_every": 40, "optimizer.learning_rate": 3e-3,
                             "optimizer.warmup_steps": 5})
    result = loop.train(cfg, str(tmp_path), devices=jax.devices()[:1])
    losses = [r["loss"] for r in read_metrics(tmp_path)]
    assert losses[-1] < losses[0] - 1.5, losses
    assert result["eval"]["cross_entropy"] < np.log(4224) - 1.5


@pytest.mark.parametrize("size", ["2b-2b", "9b-2b"])
def test_released_sizes_count_as_transformers_does(size):
    """configs/t5gemma.py's released pairs hold transformers' parameters (its model on
    the meta device; the output layer tied to the decoder's word table)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from flax import linen as nn
    cfg = load_config("t5gemma.py", size).model
    batch = {k: np.ones((1, 4), np.int32) for k in (
        "encoder_input_tokens", "encoder_segment_ids", "decoder_input_tokens",
        "decoder_segment_ids")}
    shapes = jax.eval_shape(lambda: t5gemma.T5Gemma(cfg).init(jax.random.key(0), batch))
    ours = sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(
        nn.unbox(shapes["params"])))
    config = t5gemma_hf.to_hf_config(cfg, type("T", (), {"pad_id": 0, "sep_id": 1})())
    module = lambda side: transformers.T5GemmaModuleConfig(  # noqa: E731
        **{k: v for k, v in config[side].items() if k != "model_type"})
    with torch.device("meta"):
        hf = transformers.T5GemmaForConditionalGeneration(transformers.T5GemmaConfig(
            encoder=module("encoder"), decoder=module("decoder"), vocab_size=cfg.vocab_size))
    theirs = sum(p.numel() for p in hf.parameters())
    assert ours == theirs
    print(size, ours)


# ---- Gemma 2, and the adaptation ------------------------------------------------

GEMMA2_TINY = {"total_steps": 2, "global_batch_size": 8, "seq_len": 64, "log_every": 1,
               "eval_every": 2, "eval_steps": 1, "checkpoint_every": 2,
               "max_position_embeddings": 64}


def _gemma2_run(tmp_path, name, decoder: bool):
    """A Gemma 2 of TINY's encoder (or decoder) shape trained 2 steps on the books."""
    from pretrainx import pretrain
    prefix = "decoder_" if decoder else ""
    shape = {k: TINY[prefix + k] for k in ("hidden_size", "mlp_dim", "num_heads",
                                            "num_kv_heads", "head_dim",
                                            "query_pre_attn_scalar", "sliding_window")}
    shape["num_layers"] = TINY["num_decoder_layers" if decoder else "num_layers"]
    cfg = load_config("gemma2.py", "quickstart")
    cfg.model.update(shape)
    cfg = override(cfg, {k: v for k, v in GEMMA2_TINY.items() if k != "max_position_embeddings"})
    cfg.model.max_position_embeddings = 64
    pretrain.train(cfg, str(tmp_path / name))
    return str(tmp_path / name)


def test_gemma2_matches_transformers_both_ways():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from pretrainx.families.gemma2 import hf as gemma2_hf, model as gemma2
    cfg = load_config("gemma2.py", "quickstart").model
    cfg.update(sliding_window=4)
    config = gemma2_hf.to_hf_config(cfg, type("T", (), {"pad_id": 0, "sep_id": 1,
                                                         "cls_id": -1})())
    torch.manual_seed(0)
    hf = transformers.Gemma2ForCausalLM(transformers.Gemma2Config(
        **{k: v for k, v in config.items() if k not in ("model_type", "architectures")},
        attn_implementation="eager")).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    state = {k: v.detach().numpy() for k, v in hf.state_dict().items()}
    params = gemma2_hf.from_hf_state(state, cfg, "hf")
    for name, value in gemma2_hf.to_hf_state(params, cfg).items():
        np.testing.assert_array_equal(value, state[name], err_msg=name)
    tok = load_tokenizer(str(SPM))
    ids, mask = _padded(tok, SENTENCES, 24)
    out = gemma2.outputs(cfg, params, {"input_ids": ids, "attention_mask": mask})
    with torch.no_grad():
        theirs = hf(input_ids=torch.tensor(ids, dtype=torch.long),
                    attention_mask=torch.tensor(mask)).logits.numpy()
    real = mask > 0
    assert np.abs(np.asarray(out["logits"])[real] - theirs[real]).max() < 1e-4


def test_adapted_from_two_gemma2_decoders_of_an_unbalanced_pair(tmp_path):
    """Each stack starts from its decoder; the decoder's cross-attention from its
    self-attention (queries, outputs, norms), its keys and values fresh (they read the
    wider encoder); the run trains from there."""
    from pretrainx import interop, pretrain
    enc_dir, dec_dir = _gemma2_run(tmp_path, "enc", False), _gemma2_run(tmp_path, "dec", True)
    cfg = _ul2_run_config(**{"total_steps": 3, "eval_every": 3, "checkpoint_every": 3,
                             "adapt.encoder_from": enc_dir, "adapt.decoder_from": dec_dir})
    imported = {"adapt.encoder_from": interop.load(enc_dir),
                "adapt.decoder_from": interop.load(dec_dir)}
    objective = objectives.build(cfg, None, imported)
    batch = objective.example_batch(1, config_lib.phases(cfg)[0])
    fresh = jax.device_get(jax.jit(objective.model.init)(jax.random.key(0), batch)["params"])
    from flax import linen as nn
    fresh = nn.unbox(fresh)
    params = objective.adopt(fresh, imported)
    e, d = imported["adapt.encoder_from"].params, imported["adapt.decoder_from"].params
    np.testing.assert_array_equal(params["encoder_1"]["mlp"]["wi"]["kernel"],
                                  e["layer_1"]["mlp"]["wi"]["kernel"])
    np.testing.assert_array_equal(params["decoder_embed"]["embedding"],
                                  d["token_embed"]["embedding"])
    cross = params["decoder_2"]["cross_attention"]
    np.testing.assert_array_equal(cross["query"]["kernel"],
                                  d["layer_2"]["self_attention"]["query"]["kernel"])
    np.testing.assert_array_equal(cross["key"]["kernel"],
                                  fresh["decoder_2"]["cross_attention"]["key"]["kernel"])
    np.testing.assert_array_equal(params["decoder_0"]["cross_attention_norm"]["scale"],
                                  d["layer_0"]["self_attention_norm"]["scale"])
    pretrain.train(cfg, str(tmp_path / "adapted"))  # the imports' path: adopt, then train
    assert len(read_metrics(tmp_path / "adapted")) == 3
    assert np.isfinite(read_metrics(tmp_path / "adapted", "eval")[-1]["loss"])
    wide = override(cfg, {"adapt.decoder_from": enc_dir})
    with pytest.raises(Exception, match=r"adapt.decoder_from .* has hidden_size=64; the "
                                        r"target has model.decoder_hidden_size=48"):
        pretrain.train(wide, str(tmp_path / "refused"))


@pytest.mark.slow
def test_t5gemma_pretrained_on_ul2_finetunes_text_to_text(shared_data, tmp_path):
    """A T5Gemma from UL2's mixture learns SST-2 with its label words, as T5 does, its
    inputs led by [NLU] as the paper's are: every
    greedy output on dev reads back as a label, the score is that of those outputs, and
    it beats the majority class (0.509; 0.698 measured)."""
    from pretrainx import interop
    from pretrainx.finetune import loop as finetune_loop, text_to_text as t2t
    from pretrainx.finetune.config import finetune_config
    from pretrainx.models import decoding
    keys = {"total_steps": 20, "eval_every": 20, "checkpoint_every": 20, "log_every": 10}
    loop.train(_ul2_run_config(**keys), str(tmp_path / "pre"), devices=jax.devices()[:1])
    cfg = override(finetune_config(), {
        "init_from": str(tmp_path / "pre"), "data.glue_dir": str(shared_data / "glue"),
        "seq_len": 64, "global_batch_size": 32, "eval_batch_size": 64, "epochs": 2,
        "log_every": 1000, "data.max_train_examples": 4000, "data.max_eval_examples": 0,
        "optimizer.learning_rate": 1e-3, "data.mode_token": "[NLU]"})
    out = finetune_loop.train(cfg, str(tmp_path / "ft"), devices=jax.devices()[:1])
    tuned = interop.load(str(tmp_path / "ft"))
    assert tuned.family == "t5gemma" and tuned.head == "seq2seq"
    tokenizer = load_tokenizer(tuned.tokenizer)
    data = t2t.build(cfg, tokenizer)
    dev = data.dev[0].arrays
    generated = np.asarray(decoding.encoder_decoder(
        t5gemma.T5Gemma(tuned.model), tuned.params, dev["encoder_input_tokens"],
        dev["encoder_segment_ids"], data.train["decoder_target_tokens"].shape[1]))
    words = [t2t.decode(tokenizer, g) for g in generated]
    assert all(t2t.read_label("sst2", w) is not None for w in words), set(words)
    assert data.dev[0].score(generated)["accuracy"] == out["best"]["accuracy"]
    assert out["best"]["accuracy"] > 0.6, out["history"]


def _prefixlm_kd_config(teacher: str, **keys):
    return _ul2_run_config(**{"data.denoisers": "S", "data.denoiser_weights": "1",
                              "data.mode_tokens": "", "distill.teacher": teacher, **keys})


def test_teacher_reads_each_prefixlm_example_as_one_causal_row(tmp_path):
    """PrefixLM + KD: at target j the teacher's logits are those it gives reading the
    example alone, prefix then targets before j, causally (packed beside other examples
    they are the same to 1e-5); its rows hold each example's text in order."""
    from pretrainx import interop
    from pretrainx.objectives import logit_distill
    teacher_dir = _gemma2_run(tmp_path, "teacher", True)
    teacher = interop.load(teacher_dir)
    cfg = _prefixlm_kd_config(teacher_dir)
    tok = load_tokenizer(str(SPM))
    objective = objectives.build(cfg, tok, {"distill.teacher": teacher})
    phase = config_lib.phases(cfg)[0]
    docs = [[np.asarray(tok.encode(s), np.int32) for s in SENTENCES]]
    rows = objective.examples_from_documents(docs, phase, True)[:2]
    built = objective.transform(phase, True)(rows[0], np.random.default_rng(0))
    one = objective.denoise_row(rows[0], np.random.default_rng(0))
    for k, v in logit_distill.teacher_rows(one, 128, 64).items():
        np.testing.assert_array_equal(built[k], v)  # what the pipeline gives the teacher
    # two examples side by side in one row (S fills a row at 64 inputs: cut them short)
    eos = np.asarray([1], np.int32)
    pairs = [(np.concatenate([i[:n], eos]), np.concatenate([t[:m], eos])) for (i, t), n, m in
             zip((objective.denoise_row(r, np.random.default_rng(0))[0] for r in rows),
                 (20, 9), (25, 14))]
    batch = dict(objective.pack(pairs, phase), **logit_distill.teacher_rows(pairs, 128, 64))
    seg, index = batch["teacher_segment_ids"], batch["teacher_index"]
    for k, (inputs, targets) in enumerate(pairs, start=1):
        np.testing.assert_array_equal(batch["teacher_inputs"][seg == k],
                                      np.concatenate([inputs[:-1], targets[:-1]]))
    network = t5gemma.T5Gemma(cfg.model)
    student_batch = {k: v[None] for k, v in batch.items()}
    student = jax.jit(network.init)(jax.random.key(0), student_batch)["params"]
    from flax import linen as nn
    params = {"student": nn.unbox(student), "teacher": teacher.params}
    got = np.asarray(jax.jit(lambda b: objective.model.apply({"params": params}, b))(
        student_batch)["teacher_logits"][0])
    alone = logit_distill.teacher_network(cfg, teacher)
    dec_seg = batch["decoder_segment_ids"]
    for k, (inputs, targets) in enumerate(pairs, start=1):
        text = np.concatenate([inputs[:-1], targets[:-1]])[None]
        ones = np.ones_like(text)
        want = np.asarray(alone.apply({"params": teacher.params}, {
            "inputs": text, "segment_ids": ones, "positions": np.arange(text.shape[1])[None]
        })["logits"][0])[len(inputs) - 2:]
        np.testing.assert_allclose(got[dec_seg == k], want, atol=1e-5)
        assert (index[dec_seg == k] >= 0).all()


def test_prefixlm_kd_from_the_decoder_it_adapts(tmp_path):
    """T5Gemma's PrefixLM + KD: adapted from a Gemma 2 that also teaches it; every step's
    loss is (1 - alpha) x the cross-entropy + alpha x the KL, the teacher stays bit for
    bit, and the run reads back as T5Gemma alone; the mixture with a teacher is refused
    in one line."""
    from pretrainx import interop, pretrain
    from pretrainx.errors import UserError
    teacher_dir = _gemma2_run(tmp_path, "teacher", False)
    cfg = _prefixlm_kd_config(teacher_dir, **{
        "adapt.encoder_from": teacher_dir, "model.decoder_hidden_size": 64,
        "model.decoder_mlp_dim": 128, "model.decoder_num_heads": 4,
        "model.decoder_num_kv_heads": 2, "model.num_decoder_layers": 2,
        "model.decoder_sliding_window": 4, "distill.alpha": 0.25, "total_steps": 6,
        "eval_every": 6, "checkpoint_every": 6})
    pretrain.train(cfg, str(tmp_path / "student"))
    rows = read_metrics(tmp_path / "student")
    for r in rows:
        assert r["loss"] == pytest.approx(0.75 * (r["cross_entropy"] + r["z_loss"])
                                          + 0.25 * r["kl"], rel=1e-4)
    assert "kl" in read_metrics(tmp_path / "student", "eval")[-1]
    student = interop.load(str(tmp_path / "student"))
    assert student.family == "t5gemma" and "teacher" not in student.params
    from flax import traverse_util
    saved = {k[1:]: v for k, v in saved_params(tmp_path / "student").items()
             if k[0] == "teacher"}
    taught = traverse_util.flatten_dict(interop.load(teacher_dir).params)
    assert saved.keys() == taught.keys()
    for key, value in taught.items():
        np.testing.assert_array_equal(np.asarray(saved[key]), np.asarray(value))
    mixture = override(cfg, {"data.denoisers": "R:3:0.15,S", "data.denoiser_weights": "1,1"})
    with pytest.raises(UserError, match=r"distill.teacher reads PrefixLM rows: set "
                                        r"data.denoisers=S \(it is 'R:3:0.15,S'\)"):
        objectives.get(cfg.objective).validate(mixture)
