"""BART's model (Lewis et al. 2020) against transformers' BartForConditionalGeneration:
logits, the round trip of its tensors, packed segments that never see each other, and
the released sizes."""

import shutil

import jax
import numpy as np
import pytest
from flax import linen as nn

from pretrainx import interop
from pretrainx.errors import UserError
from pretrainx.interop import hf as hf_lib
from pretrainx.families.bart import hf as hf_bart
from pretrainx.families.bart import model as bart

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def _tiny_hf(seed=0):
    torch.manual_seed(seed)
    config = transformers.BartConfig(
        vocab_size=50265, d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
        decoder_ffn_dim=64, max_position_embeddings=64, dropout=0.0, attention_dropout=0.0,
        activation_dropout=0.0)
    model = transformers.BartForConditionalGeneration(config).eval()
    with torch.no_grad():  # released models keep it 0; a random one tests its place
        model.final_logits_bias.normal_(0, 0.1)
        for p in model.parameters():  # biases and norms away from their 0 / 1 init
            p.add_(torch.randn_like(p) * 0.02)
    return model


def _batch(rng, lengths=((9, 6), (12, 4))):
    enc_len, dec_len = max(a for a, _ in lengths), max(b for _, b in lengths)
    enc = np.ones((len(lengths), enc_len), np.int32)  # <pad> is id 1
    dec = np.ones((len(lengths), dec_len), np.int32)
    for i, (a, b) in enumerate(lengths):
        enc[i, :a] = rng.integers(4, 50000, a)
        dec[i, :b] = rng.integers(4, 50000, b)
    return enc, dec


def _assert_same_logits(ours, model, rng):
    """Our logits and transformers' on padded rows agree within 1e-4 where real."""
    enc, dec = _batch(rng)
    mine = np.asarray(jax.jit(bart.Bart(ours.model).apply)({"params": ours.params}, {
        "encoder_input_tokens": enc, "encoder_segment_ids": (enc != 1).astype(np.int32),
        "decoder_input_tokens": dec, "decoder_segment_ids": (dec != 1).astype(np.int32)},
    )["logits"])
    with torch.no_grad():
        theirs = model(input_ids=torch.tensor(enc, dtype=torch.long),
                       attention_mask=torch.tensor(enc != 1, dtype=torch.long),
                       decoder_input_ids=torch.tensor(dec, dtype=torch.long)).logits.numpy()
    assert np.abs(mine - theirs)[dec != 1].max() <= 1e-4


def test_logits_match_transformers_and_the_tensors_round_trip(shared_data, tmp_path):
    """Imported from an HF directory (GPT-2's byte-level files as BART's), ours gives
    transformers' logits within 1e-4 on padded rows, and writes the very tensors back."""
    model = _tiny_hf()
    directory = tmp_path / "hf"
    model.save_pretrained(directory)
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(shared_data / "tokenizers" / "gpt2" / name, directory / name)
    loaded = interop.load(str(directory))
    assert loaded.family == "bart" and loaded.head == "seq2seq"
    _assert_same_logits(loaded, model, np.random.default_rng(0))
    state = {k: v.numpy() for k, v in model.state_dict().items()}
    back = hf_bart.to_hf_state(loaded.params, loaded.model)
    for name, value in back.items():
        assert value.tobytes() == state[name].tobytes(), name
    assert set(state) == set(back)


def test_packed_segments_never_see_each_other():
    """Two examples packed in one row (positions restarting) give the logits each gives
    alone: no attention crosses a segment in the encoder, decoder or cross attention."""
    cfg = bart.default_config()
    cfg.update(num_layers=2, num_decoder_layers=2, hidden_size=32, num_heads=4, mlp_dim=64,
               vocab_size=500, max_position_embeddings=64)
    model = bart.Bart(cfg)
    rng = np.random.default_rng(1)
    a_in, a_out, b_in, b_out = (rng.integers(4, 500, n).astype(np.int32) for n in (7, 5, 6, 4))

    def row(parts):
        tokens = np.concatenate(parts)[None]
        segments = np.concatenate([np.full(len(p), i + 1) for i, p in enumerate(parts)])[None]
        positions = np.concatenate([np.arange(len(p)) for p in parts])[None]
        return tokens, segments.astype(np.int32), positions.astype(np.int32)

    apply = jax.jit(model.apply)

    def logits(params, ins, outs):
        (ei, es, ep), (di, ds, dp) = row(ins), row(outs)
        return np.asarray(apply({"params": params}, {
            "encoder_input_tokens": ei, "encoder_segment_ids": es, "encoder_positions": ep,
            "decoder_input_tokens": di, "decoder_segment_ids": ds, "decoder_positions": dp,
        })["logits"])[0]

    ei, es, ep = row([a_in])
    params = jax.jit(model.init)(jax.random.key(0), {
        "encoder_input_tokens": ei, "encoder_segment_ids": es,
        "decoder_input_tokens": row([a_out])[0], "decoder_segment_ids": row([a_out])[1]})
    params = jax.device_get(nn.unbox(params)["params"])
    packed = logits(params, [a_in, b_in], [a_out, b_out])
    np.testing.assert_allclose(packed[:5], logits(params, [a_in], [a_out]), atol=1e-5)
    np.testing.assert_allclose(packed[5:], logits(params, [b_in], [b_out]), atol=1e-5)


@pytest.mark.parametrize("size, layers, width, heads, ffn", [
    ("base", 6, 768, 12, 3072), ("large", 12, 1024, 16, 4096)])
def test_released_sizes_count_as_transformers_does(size, layers, width, heads, ffn):
    """bart.base and bart.large: ours holds transformers' parameters plus the
    final_logits_bias it keeps as a buffer (50,265 values)."""
    cfg = bart.default_config()
    cfg.update(num_layers=layers, num_decoder_layers=layers, hidden_size=width,
               num_heads=heads, mlp_dim=ffn)
    batch = {k: np.ones((1, 4), np.int32) for k in (
        "encoder_input_tokens", "encoder_segment_ids", "decoder_input_tokens",
        "decoder_segment_ids")}
    shapes = jax.eval_shape(lambda: bart.Bart(cfg).init(jax.random.key(0), batch))
    ours = sum(np.prod(x.shape) for x in jax.tree_util.tree_leaves(nn.unbox(shapes["params"])))
    with torch.device("meta"):
        hf = transformers.BartForConditionalGeneration(transformers.BartConfig(
            encoder_layers=layers, decoder_layers=layers, d_model=width,
            encoder_attention_heads=heads, decoder_attention_heads=heads,
            encoder_ffn_dim=ffn, decoder_ffn_dim=ffn))
    theirs = sum(p.numel() for p in hf.parameters())
    assert ours == theirs + 50265
    assert ours == pytest.approx({"base": 139e6, "large": 406e6}[size], rel=0.01)


def test_a_variant_bart_cannot_hold_is_named():
    with pytest.raises(UserError, match="scale_embedding"):
        hf_bart.model_config_from_hf({"scale_embedding": True}, bart.default_config(),
                                     "mbart/config.json")
    assert hf_lib.ADAPTERS.find("bart") is not None


# ---- the denoising objective ------------------------------------------------------

def test_infilling_masks_30_percent_in_separate_spans_of_one_mask_each():
    """Each span, zero-length ones included, is one <mask>; spans never touch; exactly
    round(0.3 n) tokens are taken; lengths average 3 over many draws."""
    from pretrainx.families.bart.bart_denoising import infill
    rng = np.random.default_rng(0)
    tokens = np.arange(100, 600, dtype=np.int32)  # 500 distinct tokens
    lengths = []
    for _ in range(200):
        noised, count, spans = infill(tokens, rng, 0.3, 3.0, 7, 0.0, 50000)
        assert count == 150 == sum(spans)
        assert (noised == 7).sum() == len(spans)
        kept = noised[noised != 7]
        assert kept.size == 350 and np.all(np.diff(kept) > 0)  # order kept, nothing repeated
        assert not np.any((noised[1:] == 7) & (noised[:-1] == 7))  # no two masks adjacent
        lengths += spans
    assert np.mean(lengths) == pytest.approx(3.0, abs=0.15)
    assert 0 in lengths  # zero-length spans insert a <mask>


def _tiny_bart(**overrides):
    """The CPU recipe at test size: one layer a side (conftest.TINY_LAYERS), 32 wide, 8
    rows of 64 tokens of Alice."""
    from conftest import ALICE, TINY_LAYERS, load_config, override
    c = load_config("bart_quickstart.py")
    c.update_from_flattened_dict({
        "global_batch_size": 8, "seq_len": 32, "log_every": 1, "eval_every": 1000,
        "checkpoint_every": 1000, "mesh.data": -1, "mesh.fsdp": 1, "data.train_files": ALICE,
        "data.eval_files": "", "optimizer.learning_rate": 1e-2, "optimizer.warmup_steps": 2,
        "model.num_layers": TINY_LAYERS, "model.num_decoder_layers": TINY_LAYERS,
        "model.hidden_size": 32, "model.num_heads": 4, "model.mlp_dim": 64,
        "model.max_position_embeddings": 64, "model.dropout_rate": 0.0,
        "model.attention_dropout_rate": 0.0, "model.activation_dropout_rate": 0.0})
    return override(c, overrides)


def test_stats_are_the_papers_and_show_writes_masks(shared_data):
    """--stats at length 128 (on Alice, the quicker to tokenize): mask_ratio 0.30 +- 0.01,
    mean span length 3 +- 0.3, and most examples' sentences reordered."""
    from conftest import ALICE, load_config
    from pretrainx.prepare import data_cli
    cfg = load_config("bart_quickstart.py")
    cfg.data.train_files = ALICE
    cfg.seq_len = cfg.model.max_position_embeddings = 128
    stats = data_cli.batch_statistics(cfg, 10, show=0)
    assert stats["mask_ratio"] == pytest.approx(0.30, abs=0.01)
    assert stats["mean_span_length"] == pytest.approx(3.0, abs=0.3)
    assert 0.5 < stats["permuted_fraction"] <= stats["permutable_fraction"] <= 1.0


def test_one_sentence_is_left_in_place_and_bad_ratios_are_named(shared_data):
    from conftest import load_config
    from pretrainx import objectives
    from pretrainx.data.tokenizers import load_tokenizer
    cfg = load_config("bart_quickstart.py")
    objective = objectives.build(cfg, load_tokenizer(cfg.data.tokenizer, lower_case=False))
    one = {"tokens": np.arange(50, 90, dtype=np.int32), "sentence_lengths": np.array([40])}
    noised, original, counts = objective.noise(one, np.random.default_rng(0))
    assert counts[2:] == (0, 0)  # not permuted, not permutable
    np.testing.assert_array_equal(original[1:-1], one["tokens"])
    cfg.data.permute_sentence_ratio = 0.5
    with pytest.raises(UserError, match="permute_sentence_ratio"):
        objectives.validate(cfg)


@pytest.mark.slow
def test_loss_falls_sharded_equals_unsharded_and_exports(shared_data, tmp_path):
    """On the novels the loss falls from log(50265); a (data, fsdp) mesh of 8 logs the
    losses of one device; the run exports as BartForConditionalGeneration with
    transformers' logits within 1e-4."""
    from conftest import read_metrics
    from pretrainx.train import loop
    from test_interop import _export
    one, mesh = str(tmp_path / "one"), str(tmp_path / "mesh")
    loop.train(_tiny_bart(total_steps=8, checkpoint_every=8), one, devices=jax.devices()[:1])
    loop.train(_tiny_bart(total_steps=8, **{"mesh.data": 2, "mesh.fsdp": 4}), mesh)
    a = [r["loss"] for r in read_metrics(one)]
    np.testing.assert_allclose(a, [r["loss"] for r in read_metrics(mesh)], rtol=0, atol=1e-5)
    assert np.mean(a[-3:]) < a[0] - 0.5, a  # from log(50265) = 10.8 (9.9 by step 8)
    out = tmp_path / "hf"
    _export(one, out)
    ours = interop.load(one)
    model = transformers.BartForConditionalGeneration.from_pretrained(out).eval()
    _assert_same_logits(ours, model, np.random.default_rng(2))
    back = interop.load(str(out))
    for (path, x), (_, y) in zip(jax.tree_util.tree_leaves_with_path(ours.params),
                                 jax.tree_util.tree_leaves_with_path(back.params)):
        assert np.asarray(x).tobytes() == np.asarray(y).tobytes(), path
