"""Gemma 3: HF parity both ways (a Gemma3ForCausalLM folder read, its logits on padded
real text within 1e-4 of transformers', written back bit for bit; the bidirectional
form against Gemma3TextModel with use_bidirectional_attention), the released 270M's and
1B's parameter counts equal to transformers' models of the same config, the sliding
window against its definition, cached sampling equal to greedy decoding, training on
the books, and bad configs refused in one line."""

import jax
import numpy as np
import pytest

from conftest import SENTENCES, greedy_without_cache, load_config, override
from pretrainx import interop
from pretrainx.errors import UserError
from pretrainx.families.gemma3 import model as gemma3


def _hf_config(transformers, vocab_size: int, **extra):
    """3 layers, the middle one global (pattern 2), a 4-key window: shorter than the
    sentences, so a wrong window shows."""
    keys = dict(vocab_size=vocab_size, hidden_size=64, intermediate_size=96,
                num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                query_pre_attn_scalar=24, sliding_window=4, sliding_window_pattern=2,
                layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                rope_theta=1_000_000.0, rope_local_base_freq=10_000.0,
                max_position_embeddings=512, pad_token_id=0)
    keys.update(extra)
    return transformers.Gemma3TextConfig(**keys)


def _perturbed(model, torch):
    """Gemma's norms start at zero (a scale of 1 + 0): move them so a swap would show."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.add_(0.3 * torch.randn_like(p))
    return model


def _hf_folder(tmp_path, shared_data, cls_name="Gemma3ForCausalLM", **extra):
    """A tiny Gemma 3 with random weights and GPT-2's tokenizer."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cls = getattr(transformers, cls_name)
    model = _perturbed(cls(_hf_config(transformers, 50257, **extra)).eval(), torch)
    folder = tmp_path / cls_name
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


def _rows(ids, mask):
    return {"inputs": ids, "segment_ids": mask,
            "positions": np.tile(np.arange(ids.shape[1]), (ids.shape[0], 1))}


def _same_params(a, b):
    for (path, x), (_, y) in zip(jax.tree_util.tree_leaves_with_path(a),
                                 jax.tree_util.tree_leaves_with_path(b)):
        assert np.asarray(x).tobytes() == np.asarray(y).tobytes(), path


def test_hf_gemma3_reads_gives_its_logits_and_writes_back(shared_data, tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    folder, theirs_model, tokenizer = _hf_folder(tmp_path, shared_data)
    ours = interop.load(str(folder))
    assert ours.family == "gemma3" and ours.model.causal
    assert (ours.model.sliding_window, ours.model.sliding_window_pattern) == (4, 2)
    ids, mask = _padded(tokenizer)
    with torch.no_grad():
        theirs = theirs_model(input_ids=torch.tensor(ids),
                              attention_mask=torch.tensor(mask)).logits.numpy()
    mine = np.asarray(jax.jit(gemma3.Gemma3(ours.model).apply)({"params": ours.params},
                                                               _rows(ids, mask))["logits"])
    real = mask.astype(bool)
    assert np.abs(mine - theirs)[real].max() <= 1e-4
    out = tmp_path / "written"
    interop.hf.save(ours, str(out))
    back = interop.load(str(out))
    _same_params(ours.params, back.params)
    again = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    with torch.no_grad():
        written = again(input_ids=torch.tensor(ids),
                        attention_mask=torch.tensor(mask)).logits.numpy()
    np.testing.assert_array_equal(written[real], theirs[real])


def test_hf_gemma3_bidirectional_is_gemma3_text_model_both_ways(shared_data, tmp_path):
    """Gemma3TextModel with use_bidirectional_attention (EmbeddingGemma's layout, no
    `model.` prefix, no output layer): read as model.causal=False, its last states
    within 1e-4 of transformers' on padded text, and written back as that class."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    folder, _, tokenizer = _hf_folder(tmp_path, shared_data, "Gemma3TextModel",
                                      use_bidirectional_attention=True)
    # the model as its folder reads (transformers 4.57 saves the window it halved
    # for bidirectional attention, and halves it again when it reads the file)
    theirs_model = transformers.AutoModel.from_pretrained(folder).eval()
    ours = interop.load(str(folder))
    assert not ours.model.causal
    ids, mask = _padded(tokenizer)
    with torch.no_grad():
        theirs = theirs_model(input_ids=torch.tensor(ids),
                              attention_mask=torch.tensor(mask)).last_hidden_state.numpy()
    network = gemma3.Gemma3(ours.model)
    mine = np.asarray(jax.jit(lambda p, b: network.apply({"params": p}, b, method="hidden"))(
        ours.params, _rows(ids, mask)))
    real = mask.astype(bool)
    assert np.abs(mine - theirs)[real].max() <= 1e-4
    causal = gemma3.Gemma3(override_model(ours.model, causal=True))
    differs = np.asarray(causal.apply({"params": ours.params}, _rows(ids, mask),
                                      method="hidden"))
    assert np.abs(differs - theirs)[real].max() > 1e-2  # the switch is what made them agree
    out = tmp_path / "written"
    interop.hf.save(ours, str(out))
    assert transformers.AutoConfig.from_pretrained(out).architectures == ["Gemma3TextModel"]
    again = transformers.AutoModel.from_pretrained(out).eval()
    assert again.config.use_bidirectional_attention
    with torch.no_grad():
        written = again(input_ids=torch.tensor(ids),
                        attention_mask=torch.tensor(mask)).last_hidden_state.numpy()
    np.testing.assert_array_equal(written[real], theirs[real])
    _same_params(ours.params, interop.load(str(out)).params)


def override_model(model_cfg, **keys):
    cfg = model_cfg.copy_and_resolve_references()
    cfg.update(keys)
    return cfg


@pytest.mark.parametrize("causal", [True, False])
def test_the_sliding_window_is_the_keys_hf_lets_a_query_see(causal):
    """Layer 0 of the quickstart (a 16-key window): a query's output moves when a key
    inside the window changes and stays when one outside changes; causal: the 15 keys
    before it and itself; bidirectional: 8 on either side."""
    cfg = override_model(_quickstart().model, num_layers=1, causal=causal,
                         sliding_window_pattern=2)
    net = gemma3.Gemma3(cfg)
    n, q = 40, 20
    ids = np.arange(1, n + 1)[None]
    rows = {"inputs": ids, "segment_ids": np.ones_like(ids), "positions": np.arange(n)[None]}
    params = net.init(jax.random.key(0), rows)["params"]
    base = np.asarray(net.apply({"params": params}, rows, method="hidden"))[0, q]
    seen = []
    for k in range(n):
        moved = dict(rows, inputs=ids.copy())
        moved["inputs"][0, k] = 999
        out = np.asarray(net.apply({"params": params}, moved, method="hidden"))[0, q]
        if np.abs(out - base).max() > 1e-6:
            seen.append(k)
    expected = list(range(q - 15, q + 1)) if causal else list(range(q - 8, q + 9))
    assert seen == expected


def test_the_released_sizes_count_as_transformers_models():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from pretrainx.train import state as state_lib
    counts = {}
    for size in ("270m", "1b"):
        cfg = gemma3.default_config(size)
        batch = {k: np.zeros((1, 8), np.int32) for k in ("inputs", "segment_ids", "positions")}
        shapes = jax.eval_shape(lambda: gemma3.Gemma3(cfg).init(jax.random.key(0), batch))
        ours = state_lib.count_params({"params": shapes["params"]})
        with torch.device("meta"):
            theirs = transformers.Gemma3ForCausalLM(transformers.Gemma3TextConfig(
                vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size,
                intermediate_size=cfg.mlp_dim, num_hidden_layers=cfg.num_layers,
                num_attention_heads=cfg.num_heads, num_key_value_heads=cfg.num_kv_heads,
                head_dim=cfg.head_dim))
        assert ours == sum(p.numel() for p in theirs.parameters())
        counts[size] = ours
    assert counts == {"270m": 268_098_176, "1b": 999_885_952}


def _quickstart(**overrides):
    return override(load_config("gemma3.py", "quickstart"), overrides)


@pytest.mark.slow
def test_loss_falls_and_a_mesh_of_8_gives_the_same_losses(tmp_path):
    """The quickstart's first 40 steps on one device and on (data 2, fsdp 2, tensor 2):
    the same losses within 1e-4; the loss falls from ln(50,304) = 10.8 on the books."""
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
    """The cached decoder (sliding layers reading at most 15 keys back, two RoPE bases)
    writes what the whole prefix run again each step writes, past the window."""
    from pretrainx.data.tokenizers import load_tokenizer
    from pretrainx.trained import sampling
    cfg = _quickstart().model
    tok = load_tokenizer(str(shared_data / "tokenizers" / "gpt2"))
    model = gemma3.Gemma3(cfg)
    prompt = tok.encode("Alice was beginning to get very tired of sitting")
    params = jax.jit(model.init)(jax.random.key(1), {
        "inputs": np.array([prompt]), "segment_ids": np.ones((1, len(prompt)), np.int32),
        "positions": np.arange(len(prompt))[None]})["params"]
    cached = sampling.generate(cfg, params, prompt, 12, temperature=0.0)[0]
    assert len(prompt) + 12 > cfg.sliding_window
    assert list(cached) == greedy_without_cache(model, params, prompt, 12)


def test_documents_open_with_bos_where_the_tokenizer_has_one(shared_data):
    """Gemma's tokenizer adds <bos>: rows built from a tokenizer whose start token
    differs from its end token open each document with it; GPT-2's (one token for
    both) is not doubled."""
    import types
    from pretrainx.data.tokenizers import load_tokenizer
    from pretrainx.families.gemma3.gemma3_clm import Gemma3Clm
    cfg = _quickstart()
    tok = load_tokenizer(str(shared_data / "tokenizers" / "gpt2"))
    assert Gemma3Clm(cfg, tok).opening == []
    tok.cls_id = 3  # a start token of its own
    rows = Gemma3Clm(cfg, tok).examples_from_documents(
        [[[5, 6]], [[7]]], types.SimpleNamespace(seq_len=cfg.seq_len), train=False)
    assert list(rows[0]["tokens"]) == [3, 5, 6, tok.sep_id, 3, 7, tok.sep_id]


def test_bad_configs_are_refused_in_one_line():
    from pretrainx import objectives
    with pytest.raises(UserError, match="num_heads=4 is not a multiple of model.num_kv_heads=3"):
        objectives.validate(_quickstart(**{"model.num_kv_heads": 3}))
    with pytest.raises(UserError, match="scan_layers=True is not supported for gemma3"):
        objectives.validate(_quickstart(**{"model.scan_layers": True}))
    with pytest.raises(UserError, match="causal=False with objective gemma3_clm"):
        objectives.validate(_quickstart(**{"model.causal": False}))


def test_an_hf_config_it_cannot_hold_is_refused(tmp_path):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("torch")
    folder = tmp_path / "capped"
    transformers.Gemma3ForCausalLM(_hf_config(transformers, 512, final_logit_softcapping=30.0)
                                   ).save_pretrained(folder)
    with pytest.raises(UserError, match="final_logit_softcapping is not supported for gemma3"):
        interop.load(str(folder))
