"""GPT-2: byte-level BPE, packed causal LM, the model, sampling with a KV cache."""

import glob

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import REPO, greedy_without_cache, load_config, override, read_metrics
from pretrainx import config as config_lib
from pretrainx.data.tokenizers import load_tokenizer
from pretrainx.families.gpt2 import model as gpt2
from pretrainx.train import loop


@pytest.fixture(scope="module")
def vocab(shared_data):
    return str(shared_data / "tokenizers" / "gpt2")


def tiny_gpt2_config(vocab, **overrides):
    c = load_config("gpt2.py", "small")
    c.total_steps = 12
    c.global_batch_size = 8
    c.seq_len = 64
    c.log_every = 1
    c.eval_every = 1000
    c.checkpoint_every = 1000
    c.mesh.data, c.mesh.fsdp = -1, 1
    c.model.update(num_layers=2, hidden_size=64, num_heads=4, mlp_dim=256, dtype="float32")
    c.optimizer.learning_rate = 3e-3
    c.optimizer.warmup_steps = 2
    c.data.tokenizer = vocab
    c.data.train_files = str(REPO / "pretrainx" / "assets" / "text" /
                             "pg11_alice_in_wonderland.txt")
    return override(c, overrides)


def test_byte_level_bpe_matches_gpt2_tokenizer(shared_data, vocab):
    transformers = pytest.importorskip("transformers")
    # from the folder: transformers 5 ignores vocab_file / merges_file arguments
    reference = transformers.GPT2TokenizerFast.from_pretrained(str(vocab))
    ours = load_tokenizer(vocab)
    assert ours.vocab_size == 50257 and ours.eot_id == 50256
    lines = 0
    for path in sorted(glob.glob(str(shared_data / "corpus" / "*" / "*"))):
        text = open(path, encoding="utf-8").read()
        for line in text.splitlines(keepends=True)[:600]:
            assert ours.encode(line) == reference(line)["input_ids"], (path, line)
            lines += 1
        assert ours.decode(ours.encode(text[:5000])) == text[:5000]
    assert lines > 6000
    assert ours.decode(ours.encode("naïve café 東京 🙂")) == "naïve café 東京 🙂"


@pytest.mark.parametrize("size,published", [("small", 124_439_808), ("medium", 354_823_168),
                                            ("large", 774_030_080)])
def test_parameter_counts_match_the_paper_sizes(size, published):
    cfg = load_config(f"gpt2_{size}.py")
    assert abs(loop.describe(cfg)["params"] - published) / published < 0.01


def test_packed_rows_keep_documents_apart(vocab):
    """Every document ends with <|endoftext|>, positions restart per document, no
    target is predicted from another document, and every other next token is one."""
    from pretrainx import objectives
    cfg = tiny_gpt2_config(vocab)
    tokenizer = load_tokenizer(vocab)
    objective = objectives.build(cfg, tokenizer)
    phase = config_lib.phases(cfg)[0]
    docs = [[np.asarray(tokenizer.encode(t), np.int32)] for t in
            ("Alice was beginning to get very tired.", "So she was considering in her own mind.",
             "There was nothing so very remarkable in that.")] * 4
    rows = objective.examples_from_documents(docs, phase, train=False)
    transform = objective.transform(phase, train=False)
    examples = [transform(r, None) for r in rows]
    batch = {k: np.stack([e[k] for e in examples]) for k in examples[0]}
    stream = np.concatenate([r["tokens"][:-1] for r in rows] + [rows[-1]["tokens"][-1:]])
    assert (stream == tokenizer.eot_id).sum() == len(docs)
    stats = objective.batch_stats(batch)
    assert stats["cross_document_targets"] == 0
    real = batch["segment_ids"] > 0
    for row in range(len(rows)):
        seg, pos = batch["segment_ids"][row], batch["positions"][row]
        for s in set(seg[seg > 0]):
            assert list(pos[seg == s]) == list(range((seg == s).sum()))
        ends = batch["inputs"][row] == tokenizer.eot_id
        assert not batch["loss_weights"][row][ends & real[row]].any()  # eot: next doc
        inside = real[row] & ~ends
        assert batch["loss_weights"][row][inside][:-1].all()


def test_a_document_sees_nothing_of_its_neighbours(vocab):
    """The logits of a document packed after another equal its logits alone."""
    cfg = tiny_gpt2_config(vocab).model
    model = gpt2.GPT2(cfg)
    tok = load_tokenizer(vocab)
    a = tok.encode("Down, down, down. Would the fall never come to an end?")
    b = tok.encode("Alice was not a bit hurt, and she jumped up on to her feet.")
    packed = {"inputs": np.array([a + b]), "segment_ids": np.array([[1] * len(a) + [2] * len(b)]),
              "positions": np.array([list(range(len(a))) + list(range(len(b)))])}
    alone = {"inputs": np.array([b]), "segment_ids": np.ones((1, len(b)), np.int32),
             "positions": np.arange(len(b))[None]}
    params = jax.jit(model.init)(jax.random.key(0), alone)["params"]
    apply = jax.jit(model.apply)  # eagerly, every op of every layer compiles alone
    both = apply({"params": params}, packed)["logits"][0, len(a):]
    single = apply({"params": params}, alone)["logits"][0]
    np.testing.assert_allclose(both, single, atol=1e-5)


@pytest.mark.slow
def test_loss_falls_and_sharded_equals_unsharded(vocab, tmp_path):
    one = tiny_gpt2_config(vocab, **{"seq_len": 32, "model.dropout_rate": 0.0,
                                     "model.attention_dropout_rate": 0.0})
    loop.train(one, str(tmp_path / "one"), devices=jax.devices()[:1])
    mesh = tiny_gpt2_config(vocab, **{"seq_len": 32, "mesh.data": 4, "mesh.fsdp": 2,
                                      "model.dropout_rate": 0.0,
                                      "model.attention_dropout_rate": 0.0})
    loop.train(mesh, str(tmp_path / "mesh"))
    a = [r["loss"] for r in read_metrics(tmp_path / "one")]
    b = [r["loss"] for r in read_metrics(tmp_path / "mesh")]
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-4)
    assert a[-1] < a[0] - 1.0, a  # from log(50257) = 10.8 towards English


@pytest.mark.slow
def test_kv_cache_sampling(vocab):
    from pretrainx.trained import sampling
    cfg = tiny_gpt2_config(vocab).model
    cfg.dropout_rate = cfg.attention_dropout_rate = 0.0
    tok = load_tokenizer(vocab)
    model = gpt2.GPT2(cfg)
    prompt = tok.encode("Alice was beginning to get very tired of sitting")
    params = jax.jit(model.init)(jax.random.key(1), {
        "inputs": np.array([prompt]), "segment_ids": np.ones((1, len(prompt)), np.int32),
        "positions": np.arange(len(prompt))[None]})["params"]
    cached = sampling.generate(cfg, params, prompt, 12, temperature=0.0)[0]
    assert list(cached) == greedy_without_cache(model, params, prompt, 12)
    assert list(sampling.generate(cfg, params, prompt, 12, top_k=1)[0]) == list(cached)
    logits = jnp.log(jnp.array([[0.5, 0.3, 0.15, 0.05]]))
    kept = sampling.filter_logits(logits, 1.0, 0, 0.75)  # 0.5 + 0.3 reach 0.75
    assert np.isfinite(np.asarray(kept)).tolist() == [[True, True, False, False]]
    kept = sampling.filter_logits(logits, 1.0, 3, 1.0)
    assert np.isfinite(np.asarray(kept)).tolist() == [[True, True, True, False]]
