"""Qwen3: HF parity both ways (a Qwen3ForCausalLM folder read, its logits on padded real
text within 1e-4 of transformers', written back bit for bit, tied and untied), the
released 0.6B's parameter count equal to transformers' model of the same config,
grouped-query attention against its repeated-heads definition, training on the books,
and bad configs refused in one line."""

import jax
import numpy as np
import pytest

from conftest import SENTENCES, greedy_without_cache, load_config, override
from pretrainx import interop
from pretrainx.errors import UserError
from pretrainx.families.qwen3 import model as qwen3

TINY = dict(num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2, head_dim=16,
            mlp_dim=96)


def _hf_config(transformers, vocab_size: int, tie: bool, **extra):
    return transformers.Qwen3Config(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6,
        rope_theta=1_000_000.0, max_position_embeddings=512, tie_word_embeddings=tie,
        **extra)


def _hf_folder(tmp_path, shared_data, tie: bool):
    """A tiny Qwen3ForCausalLM with random weights (its norms too) and GPT-2's tokenizer."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = transformers.Qwen3ForCausalLM(_hf_config(transformers, 50257, tie)).eval()
    with torch.no_grad():  # norms start at one: move them so that a swap would show
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.add_(0.1 * torch.randn_like(p))
    folder = tmp_path / ("tied" if tie else "untied")
    model.save_pretrained(folder)
    tokenizer = transformers.GPT2TokenizerFast.from_pretrained(
        str(shared_data / "tokenizers" / "gpt2"))
    tokenizer.save_pretrained(folder)
    return folder, model, tokenizer


def _padded(tokenizer):
    rows = [tokenizer(s)["input_ids"] for s in SENTENCES]
    width = max(map(len, rows))
    ids = np.array([r + [0] * (width - len(r)) for r in rows])
    mask = np.array([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    return ids, mask


@pytest.mark.parametrize("tie", [True, False])
def test_hf_qwen3_reads_gives_its_logits_and_writes_back(shared_data, tmp_path, tie):
    torch = pytest.importorskip("torch")
    folder, theirs_model, tokenizer = _hf_folder(tmp_path, shared_data, tie)
    ours = interop.load(str(folder))
    assert ours.family == "qwen3" and ours.model.tie_output == tie
    assert (ours.model.num_kv_heads, ours.model.head_dim) == (2, 16)
    ids, mask = _padded(tokenizer)
    with torch.no_grad():
        theirs = theirs_model(input_ids=torch.tensor(ids),
                              attention_mask=torch.tensor(mask)).logits.numpy()
    batch = {"inputs": ids, "segment_ids": mask,
             "positions": np.tile(np.arange(ids.shape[1]), (ids.shape[0], 1))}
    mine = np.asarray(jax.jit(qwen3.Qwen3(ours.model).apply)({"params": ours.params},
                                                             batch)["logits"])
    assert np.abs(mine - theirs)[mask.astype(bool)].max() <= 1e-4
    out = tmp_path / "written"
    interop.hf.save(ours, str(out))
    back = interop.load(str(out))
    assert back.model.tie_output == tie
    for (path, a), (_, b) in zip(jax.tree_util.tree_leaves_with_path(ours.params),
                                 jax.tree_util.tree_leaves_with_path(back.params)):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes(), path
    transformers = pytest.importorskip("transformers")
    again = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    with torch.no_grad():
        written = again(input_ids=torch.tensor(ids),
                        attention_mask=torch.tensor(mask)).logits.numpy()
    np.testing.assert_array_equal(written[mask.astype(bool)], theirs[mask.astype(bool)])


def test_the_released_sizes_count_as_transformers_models(shared_data):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from pretrainx.train import state as state_lib
    cfg = qwen3.default_config("0.6b")
    batch = {k: np.zeros((1, 8), np.int32) for k in ("inputs", "segment_ids", "positions")}
    shapes = jax.eval_shape(lambda: qwen3.Qwen3(cfg).init(jax.random.key(0), batch))
    ours = state_lib.count_params({"params": shapes["params"]})
    with torch.device("meta"):
        theirs = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(
            vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size,
            intermediate_size=cfg.mlp_dim, num_hidden_layers=cfg.num_layers,
            num_attention_heads=cfg.num_heads, num_key_value_heads=cfg.num_kv_heads,
            head_dim=cfg.head_dim, tie_word_embeddings=cfg.tie_output))
    assert ours == sum(p.numel() for p in theirs.parameters()) == 596_049_920


def test_grouped_query_attention_is_attention_with_each_kv_head_repeated():
    """kv_heads=2 under 4 query heads gives what 4 heads give with the key and value
    kernels of each of the 2 repeated for its group."""
    from pretrainx.models import mha
    x = np.random.default_rng(0).normal(size=(2, 5, 32)).astype(np.float32)
    gqa = mha.MultiHeadAttention(num_heads=4, head_dim=8, kv_heads=2, use_bias=False)
    from flax import linen as nn
    params = nn.unbox(gqa.init(jax.random.key(0), x, x, np.zeros((1, 1, 5, 5), np.float32),
                               True))
    full = jax.tree_util.tree_map(lambda a: a, params)
    for name in ("key", "value"):
        kernel = params["params"][name]["kernel"]
        full["params"][name]["kernel"] = np.repeat(np.asarray(kernel), 2, axis=1)
    dense = mha.MultiHeadAttention(num_heads=4, head_dim=8, use_bias=False)
    bias = np.zeros((1, 1, 5, 5), np.float32)
    np.testing.assert_allclose(gqa.apply(params, x, x, bias, True),
                               dense.apply(full, x, x, bias, True), rtol=1e-6, atol=1e-6)


def _quickstart(**overrides):
    return override(load_config("qwen3.py", "quickstart"), overrides)


@pytest.mark.slow
def test_loss_falls_and_a_mesh_of_8_gives_the_same_losses(tmp_path):
    """The quickstart's first 40 steps on one device and on (data 2, fsdp 2, tensor 2):
    the key/value heads split over the tensor axis, the same losses within 1e-4; the
    loss falls from ln(50,304) = 10.8 on the books."""
    from conftest import read_metrics
    from pretrainx import pretrain
    keys = dict(total_steps=40, log_every=10, eval_every=40, checkpoint_every=40)
    out = pretrain.train(_quickstart(**keys), str(tmp_path / "one"), devices=jax.devices()[:1])
    pretrain.train(_quickstart(**keys, **{"mesh.data": 2, "mesh.fsdp": 2, "mesh.tensor": 2}),
                   str(tmp_path / "mesh"))
    one = [r["loss"] for r in read_metrics(tmp_path / "one") if "split" not in r]
    mesh = [r["loss"] for r in read_metrics(tmp_path / "mesh") if "split" not in r]
    np.testing.assert_allclose(one, mesh, rtol=0, atol=1e-4)
    assert out["train"]["loss"] < 9.5 < np.log(50304) and out["eval"]["accuracy"] > 0.02


def test_kv_cache_sampling_is_greedy_decoding_without_it(shared_data):
    """The cached decoder (grouped keys and values in the cache, rotary positions per
    step) writes what the whole prefix run again each step writes."""
    from pretrainx.data.tokenizers import load_tokenizer
    from pretrainx.trained import sampling
    cfg = _quickstart().model
    tok = load_tokenizer(str(shared_data / "tokenizers" / "gpt2"))
    model = qwen3.Qwen3(cfg)
    prompt = tok.encode("Alice was beginning to get very tired of sitting")
    params = jax.jit(model.init)(jax.random.key(1), {
        "inputs": np.array([prompt]), "segment_ids": np.ones((1, len(prompt)), np.int32),
        "positions": np.arange(len(prompt))[None]})["params"]
    cached = sampling.generate(cfg, params, prompt, 10, temperature=0.0)[0]
    assert list(cached) == greedy_without_cache(model, params, prompt, 10)


def test_bad_configs_are_refused_in_one_line():
    from pretrainx import objectives
    with pytest.raises(UserError, match="num_heads=4 is not a multiple of model.num_kv_heads=3"):
        objectives.validate(_quickstart(**{"model.num_kv_heads": 3}))
    with pytest.raises(UserError, match="seq_len=128 exceeds model.max_position_embeddings=64"):
        objectives.validate(_quickstart(seq_len=128))


def test_an_hf_config_it_cannot_hold_is_refused(shared_data, tmp_path):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("torch")
    folder = tmp_path / "windowed"
    transformers.Qwen3ForCausalLM(_hf_config(transformers, 512, True, use_sliding_window=True,
                                             sliding_window=16)).save_pretrained(folder)
    with pytest.raises(UserError, match="use_sliding_window is not supported for qwen3"):
        interop.load(str(folder))
