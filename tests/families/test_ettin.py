"""Ettin's pair (Weller et al. 2025): the ModernBERT decoder against transformers'
ModernBertDecoderForCausalLM both ways and sampled from its cache, the recipe's sizes
against the released shapes, the decoder trained on the encoder's own rows, packed
examples that never see each other, and checkpoints moving between the objectives."""

import json

import jax
import numpy as np
import pytest
from flax import linen as nn

from conftest import (ALICE, REPO, SHARED_DATA, assert_packed_examples_see_only_themselves,
                      load_config, override, read_metrics)
from test_interop import SENTENCES
from pretrainx import config as config_lib
from pretrainx import interop, objectives
from pretrainx.trained import sampling
from pretrainx.data.tokenizers import load_tokenizer
from pretrainx.errors import UserError
from pretrainx.families.modernbert import model as modernbert
from pretrainx import pretrain
from pretrainx.train import loop

SPM = str(REPO / "pretrainx" / "assets" / "spm_4k.model")


def _hf_decoder(tmp_path):
    """A tiny ModernBertDecoderForCausalLM (4 layers, global every third, an 8-token
    window) saved with GPT-2's real vocabulary, and transformers' model read back from
    the folder (what a user loads)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.ModernBertDecoderConfig(
        vocab_size=50265, hidden_size=32, num_hidden_layers=4, num_attention_heads=2,
        intermediate_size=64, local_attention=8, global_attn_every_n_layers=3,
        global_rope_theta=160_000.0, local_rope_theta=160_000.0, pad_token_id=1,
        bos_token_id=0, cls_token_id=0, eos_token_id=2, sep_token_id=2)
    folder = tmp_path / "hf"
    transformers.ModernBertDecoderForCausalLM(config).save_pretrained(folder)
    for f in (SHARED_DATA / "tokenizers" / "gpt2").iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    return folder, transformers.AutoModelForCausalLM.from_pretrained(folder).eval()


def test_decoder_matches_transformers_both_ways_and_samples_from_its_cache(tmp_path):
    """pretrainx.load on an HF decoder: next-token logits within 1e-4 of transformers'
    on real text, two rows padded to one batch (rows past the window, so local and
    global layers both count); exported again, transformers reads the same logits; and
    greedy decoding from our key-value cache (the window applied step by step) writes
    transformers' greedy continuation."""
    import pretrainx
    import torch
    folder, theirs = _hf_decoder(tmp_path)
    model = pretrainx.load(str(folder))
    assert model.pretrained.model.causal and model.pretrained.head == "causal_lm"
    ours = model(texts=SENTENCES[:2])
    with torch.no_grad():
        reference = theirs(input_ids=torch.tensor(ours["input_ids"], dtype=torch.long),
                           attention_mask=torch.tensor(ours["attention_mask"])).logits.numpy()
    for row in range(2):
        n = int(ours["attention_mask"][row].sum())
        assert n > 8
        assert np.abs(ours["logits"][row, :n] - reference[row, :n]).max() <= 1e-4
    out = tmp_path / "out"
    interop.hf.save(model.pretrained, str(out))
    assert json.loads((out / "config.json").read_text())["model_type"] == "modernbert-decoder"
    again = type(theirs).from_pretrained(out).eval()
    ids = torch.tensor(ours["input_ids"][:1, :int(ours["attention_mask"][0].sum())],
                       dtype=torch.long)
    with torch.no_grad():
        assert np.abs(again(input_ids=ids).logits.numpy() - theirs(input_ids=ids).logits.numpy()
                      ).max() <= 1e-6
        greedy = theirs.generate(ids[:, :12], max_new_tokens=10, min_new_tokens=10,
                                 do_sample=False)[0, 12:].tolist()
    sampled = sampling.generate(model.pretrained.model, model.pretrained.params,
                                ids[0, :12].tolist(), 10, temperature=0.0)
    assert [int(t) for t in sampled[0]] == greedy


def test_generate_samples_a_decoder_and_refuses_an_encoder(tmp_path):
    """python -m pretrainx.generate continues a prompt with a ModernBERT decoder (greedy:
    transformers' continuation of [CLS] + the prompt) and names an encoder's folder."""
    import pretrainx
    import torch
    import transformers
    from cli_fork import run_module
    folder, theirs = _hf_decoder(tmp_path)
    done = run_module("pretrainx.trained.generate", [f"--workdir={folder}", "--prompt=It is a truth",
                                             "--max_new_tokens=6", "--temperature=0"])
    assert done.returncode == 0, done.stderr[-2000:]
    tokenizer = pretrainx.load(str(folder)).tokenizer
    prompt = [tokenizer.cls_id] + list(tokenizer.encode("It is a truth"))
    with torch.no_grad():
        greedy = theirs.generate(torch.tensor([prompt]), max_new_tokens=6, min_new_tokens=6,
                                 do_sample=False)[0, len(prompt):].tolist()
    assert done.stdout.strip().endswith("It is a truth" + tokenizer.decode(greedy))
    encoder = tmp_path / "encoder"
    transformers.ModernBertForMaskedLM(transformers.ModernBertConfig(
        vocab_size=50265, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=64, pad_token_id=1)).save_pretrained(encoder)
    for f in (SHARED_DATA / "tokenizers" / "gpt2").iterdir():
        (encoder / f.name).write_bytes(f.read_bytes())
    refused = run_module("pretrainx.trained.generate", [f"--workdir={encoder}", "--prompt=It is"])
    assert refused.returncode == 2 and "holds a modernbert encoder" in refused.stderr


def test_decoder_with_two_rope_bases_is_refused_on_export(tmp_path):
    """transformers 4 and 5 disagree on a decoder's local base: refused in one line."""
    import pretrainx
    folder, _ = _hf_decoder(tmp_path)
    pretrained = pretrainx.load(str(folder)).pretrained
    pretrained.model.local_rope_theta = 10_000.0
    with pytest.raises(UserError, match="local_rope_theta=10000.0 differs"):
        interop.hf.save(pretrained, str(tmp_path / "out"))


@pytest.mark.slow
def test_the_shipped_decoder_recipe_exports_as_transformers_reads_it(tmp_path):
    """configs/ettin_quickstart.py:decoder (its network shrunk) trains, exports, and
    transformers' ModernBertDecoderForCausalLM computes its logits within 1e-4 on real
    text: the recipe has one RoPE base (it had two, which only the export refused)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    import pretrainx
    cfg = _tiny("decoder", total_steps=4, checkpoint_every=4, **{"optimizer.warmup_steps": 1,
                                                               "optimizer.decay_steps": 2})
    assert cfg.model.local_rope_theta == cfg.model.global_rope_theta
    loop.train(cfg, str(tmp_path / "dec"), devices=jax.devices()[:1])
    interop.hf.save(interop.load(str(tmp_path / "dec")), str(tmp_path / "hf"))
    theirs = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    assert type(theirs).__name__ == "ModernBertDecoderForCausalLM"
    tokenizer = load_tokenizer(cfg.data.tokenizer)
    ids = [tokenizer.cls_id] + tokenizer.encode(" ".join(SENTENCES))[:60]
    assert len(ids) > cfg.model.local_attention  # local and global layers both count
    ours = pretrainx.load(str(tmp_path / "dec"))(ids=[ids])["logits"][0]
    with torch.no_grad():
        reference = theirs(input_ids=torch.tensor([ids])).logits.numpy()[0]
    assert np.abs(ours - reference).max() <= 1e-4


# The released shapes (the authors' pretraining/configs/standard/*/encoder_*.yaml) and
# their nominal sizes
SIZES = {"17m": 17e6, "32m": 32e6, "68m": 68e6, "150m": 150e6, "400m": 400e6, "1b": 1e9}


@pytest.mark.parametrize("size", list(SIZES))
def test_sizes_count_what_transformers_builds_from_the_released_shapes(size):
    """configs/ettin.py:SIZE's encoder and decoder hold exactly the parameters of
    transformers' ModernBertForMaskedLM / ModernBertDecoderForCausalLM built from the
    released shapes (on the meta device: no memory), and the name's size within 15%
    (68m holds 68.7M; 17m holds 16.8M...)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    counts = {}
    for kind in ("encoder", "decoder"):
        cfg = load_config("ettin.py", f"{size},{kind}")
        m = cfg.model
        model = modernbert.ModernBertForCausalLM(m) if kind == "decoder" else \
            modernbert.ModernBertForMaskedLM(m)
        batch = {"input_ids": jax.ShapeDtypeStruct((1, 16), np.int32),
                 "attention_mask": jax.ShapeDtypeStruct((1, 16), np.int32),
                 "positions": jax.ShapeDtypeStruct((1, 16), np.int32),
                 "masked_lm_positions": jax.ShapeDtypeStruct((1, 2), np.int32)}
        shapes = jax.eval_shape(lambda b: nn.unbox(model.init(jax.random.key(0), b)), batch)
        counts[kind] = sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(shapes))
        shape = dict(vocab_size=m.vocab_size, hidden_size=m.hidden_size,
                     num_hidden_layers=m.num_layers, num_attention_heads=m.num_heads,
                     intermediate_size=m.mlp_dim)
        with torch.device("meta"):
            theirs = transformers.ModernBertDecoderForCausalLM(
                transformers.ModernBertDecoderConfig(**shape)) if kind == "decoder" else \
                transformers.ModernBertForMaskedLM(transformers.ModernBertConfig(**shape))
        assert counts[kind] == sum(p.numel() for p in theirs.parameters()), kind
    assert counts["encoder"] == counts["decoder"]  # one network, two attentions
    assert abs(counts["encoder"] / SIZES[size] - 1) <= 0.15, counts


def test_decoders_packed_examples_never_see_each_other():
    """Causal and windowed: three examples packed in one row give each its logits alone."""
    tokenizer = load_tokenizer(SPM)
    cfg = modernbert.default_config()
    cfg.update(num_layers=4, hidden_size=64, num_heads=4, mlp_dim=96, vocab_size=4096,
               local_attention=8, causal=True)
    text = open(ALICE, encoding="utf-8").read()
    examples = [np.asarray([tokenizer.cls_id] + tokenizer.encode(text[s:s + 900])[:n]
                           + [tokenizer.sep_id], np.int32)
                for s, n in ((4000, 28), (6000, 19), (8000, 10))]
    model = modernbert.ModernBertForMaskedLM(cfg)
    assert_packed_examples_see_only_themselves(
        model, lambda batch: model.init(jax.random.key(1), batch)["params"], examples, 64)


def _tiny(kind: str, **overrides):
    c = load_config("ettin_quickstart.py", kind)
    return override(c, {"total_steps": 30, "global_batch_size": 8, "seq_len": 64,
                        "log_every": 10, "eval_every": 1000, "eval_steps": 2,
                        "checkpoint_every": 30, "model.num_layers": 2, "model.hidden_size": 64,
                        "model.mlp_dim": 128, "model.local_attention": 16,
                        "model.max_position_embeddings": 64,
                        "data.max_predictions_per_seq": 20, "optimizer.warmup_steps": 5,
                        "optimizer.decay_steps": 10, **overrides})


def test_decoder_reads_the_encoders_rows_in_the_same_order():
    """The decoder's batch is the encoder's before masking: the same tokens, rows and
    segments (the masked positions hold what the decoder reads)."""
    tokenizer = load_tokenizer(SPM)
    batches = {}
    for kind in ("encoder", "decoder"):
        cfg = _tiny(kind)
        objective = objectives.build(cfg, tokenizer)
        phase = config_lib.phases(cfg)[0]
        rows = objective.examples(ALICE, phase, train=True)[:8]
        fn = objective.transform(phase, train=True)
        batches[kind] = [fn(r, np.random.default_rng(i)) for i, r in enumerate(rows)]
    for mlm, clm in zip(batches["encoder"], batches["decoder"]):
        assert np.array_equal(mlm["attention_mask"], clm["attention_mask"])
        restored = mlm["input_ids"].copy()
        picked = mlm["masked_lm_weights"] > 0
        restored[mlm["masked_lm_positions"][picked]] = mlm["masked_lm_ids"][picked]
        assert np.array_equal(restored, clm["input_ids"])


@pytest.mark.slow
def test_decoder_learns_and_each_checkpoint_continues_the_other_objective(tmp_path):
    """The decoder's next-token loss falls on real text; its checkpoint starts the
    encoder's MLM run (init_from: every parameter taken, by the same paths) and the
    encoder's starts a decoder run: Ettin's cross-objective continuation."""
    loop.train(_tiny("decoder"), str(tmp_path / "dec"), devices=jax.devices()[:1])
    losses = [r["loss"] for r in read_metrics(tmp_path / "dec")]
    held_out = read_metrics(tmp_path / "dec", split="eval")[-1]["loss"]
    assert losses[-1] < losses[0] - 0.5 and held_out < np.log(4096) - 1.0, (losses, held_out)
    dec = interop.load(str(tmp_path / "dec"))
    assert dec.head == "causal_lm" and dec.model.causal
    one_small_step = {"total_steps": 1, "optimizer.schedule": "constant",
                      "optimizer.warmup_steps": 0, "optimizer.learning_rate": 1e-6}
    pretrain.train(_tiny("encoder", init_from=str(tmp_path / "dec"), **one_small_step),
                   str(tmp_path / "enc"), devices=jax.devices()[:1])
    enc = interop.load(str(tmp_path / "enc"))
    assert not enc.model.causal
    drift = jax.tree_util.tree_map(lambda a, b: float(np.abs(np.asarray(a) - np.asarray(b)).max()),
                                   enc.params, dec.params)
    assert max(jax.tree_util.tree_leaves(drift)) < 1e-4  # one step at a rate of 1e-6
    pretrain.train(_tiny("decoder", init_from=str(tmp_path / "enc"), **one_small_step),
                   str(tmp_path / "dec2"), devices=jax.devices()[:1])
    assert interop.load(str(tmp_path / "dec2")).model.causal


def test_objectives_refuse_the_other_attention():
    for kind, causal, words in (("encoder", True, "set model.causal=False"),
                                ("decoder", False, "set model.causal=True")):
        cfg = _tiny(kind, **{"model.causal": causal})
        with pytest.raises(UserError, match=words):
            objectives.validate(cfg)


def test_rope_bases_read_from_either_transformers_layout():
    """transformers 5 writes RoPE's bases as rope_parameters per kind of layer, 4.x as
    global_rope_theta / local_rope_theta: an Ettin encoder (160,000 in both) reads the
    same from either (it read 10,000 in the local layers from 5's file)."""
    from pretrainx.families.modernbert import hf
    shape = {"num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 2,
             "intermediate_size": 64, "vocab_size": 100}
    four = dict(shape, global_rope_theta=160_000.0, local_rope_theta=160_000.0)
    five = dict(shape, rope_parameters={
        "full_attention": {"rope_type": "default", "rope_theta": 160_000.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 160_000.0}})
    for config in (four, five):
        m = hf.model_config(config, "config.json")
        assert (m.global_rope_theta, m.local_rope_theta) == (160_000.0, 160_000.0)
    assert hf.model_config(shape, "config.json").local_rope_theta == 10_000.0  # 4.x default
    five["rope_parameters"]["sliding_attention"]["rope_type"] = "yarn"
    with pytest.raises(UserError, match="sliding_attention.rope_type='yarn' is not supported"):
        hf.model_config(five, "config.json")
