"""ELMo: words read by their characters, a forward and a backward LSTM LM, the
scalar mix, the paper's sizes, and the shared loop's guarantees."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import REPO, load_config, override, read_metrics
from pretrainx import config as config_lib, objectives
from pretrainx.data import charset, words
from pretrainx.data.tokenizers import load_tokenizer
from pretrainx.families.elmo import model as elmo
from pretrainx.train import loop

TEXT = REPO / "pretrainx" / "assets" / "text"
ALICE = TEXT / "pg11_alice_in_wonderland.txt"
VOCAB = REPO / "pretrainx" / "assets" / "books.words"


def tiny_elmo_config(**overrides):
    c = load_config("elmo.py", "cpu")
    c.update(total_steps=30, global_batch_size=8, seq_len=16, log_every=1, eval_every=1000,
             eval_steps=2, checkpoint_every=1000)
    c.model.update(filters="1:8,2:8,3:16", lstm_dim=64, projection_dim=32, vocab_size=2048,
                   dropout_rate=0.0)
    c.data.train_files = str(ALICE)
    c.data.eval_files = ""
    return override(c, overrides)


def _objective(cfg):
    return objectives.build(cfg, load_tokenizer(cfg.data.tokenizer))


def _batch(objective, cfg, rows):
    phase = config_lib.phases(cfg)[0]
    fn = objective.transform(phase, train=False)
    examples = [fn(r, None) for r in rows]
    return {k: np.stack([e[k] for e in examples]) for k in examples[0]}


def test_words_are_read_by_their_characters():
    tok = words.WordTokenizer(str(VOCAB))
    sentence = "Alice was beginning to get very tired of sitting by her sister on the bank."
    ids = tok.encode(sentence)
    assert tok.decode(ids) == " ".join(words.split_words(sentence))
    assert words.split_words(sentence)[-1] == "."  # punctuation is a word of its own
    for word, i in zip(words.split_words(sentence), ids):
        row = tok.chars[i]
        body = list(word.encode("utf-8"))
        assert row[0] == charset.BOW_CHAR and list(row[1:1 + len(body)]) == body
        assert row[1 + len(body)] == charset.EOW_CHAR
        assert (row[2 + len(body):] == charset.PAD_CHAR).all()
    assert list(tok.chars[tok.bos_id][:3]) == [charset.BOW_CHAR, charset.BOS_CHAR, charset.EOW_CHAR]
    assert list(tok.chars[tok.eos_id][:3]) == [charset.BOW_CHAR, charset.EOS_CHAR, charset.EOW_CHAR]
    assert tok.encode("Xyzzyplugh") == [tok.unk_id]
    long = charset.char_ids("a" * 80)
    assert long.size == charset.MAX_CHARS and long[-1] == charset.EOW_CHAR  # cut at 48 bytes


def test_every_word_is_predicted_once_from_each_side():
    """The paper's objective: the forward LM predicts each next word, the backward LM
    each previous one; words beyond the softmax are predicted as <UNK>."""
    cfg = tiny_elmo_config()
    objective = _objective(cfg)
    tok = objective.tokenizer
    phase = config_lib.phases(cfg)[0]
    text = ALICE.read_text(encoding="utf-8").split("\n\n")[20:60]
    docs = [[np.asarray(tok.encode(p), np.int32) for p in text if p.strip()]]
    rows = objective.examples_from_documents(docs, phase, train=False)
    batch = _batch(objective, cfg, rows)
    stream = np.concatenate([np.concatenate([[tok.bos_id], s, [tok.eos_id]]) for s in docs[0]])
    as_softmax = np.where(stream < cfg.model.vocab_size, stream, tok.unk_id)
    fw = batch["forward_weights"] > 0
    bw = batch["backward_weights"] > 0
    inputs = batch["inputs"][batch["segment_ids"] > 0]
    assert inputs.size >= stream.size - 2  # all but the first (and maybe the last) word
    np.testing.assert_array_equal(inputs, stream[1:1 + inputs.size])
    np.testing.assert_array_equal(batch["forward_targets"][fw], as_softmax[2:])
    np.testing.assert_array_equal(batch["backward_targets"][bw], as_softmax[:inputs.size])
    np.testing.assert_array_equal(batch["chars"], tok.chars[batch["inputs"]])
    stats = objective.summarize_stats(objective.batch_stats(batch), phase)
    assert stats["forward_shift_agreement"] == 1.0 and stats["backward_shift_agreement"] == 1.0
    assert 0.0 < stats["unk_target_fraction"] < 0.2  # the 2,048 commonest words cover most
    assert 3.0 < stats["mean_bytes_per_word"] < 5.0  # English words and punctuation


def test_each_direction_sees_only_its_own_side():
    """Changing word k changes the forward LM's outputs from k on and the backward
    LM's up to k, nothing else; padding restarts the state."""
    cfg = tiny_elmo_config().model
    model = elmo.BiLM(cfg)
    tok = words.WordTokenizer(str(VOCAB))
    ids = np.array([tok.encode("Down , down , down . Would the fall never come to an end ?")])
    batch = {"chars": tok.chars[ids], "segment_ids": np.ones_like(ids)}
    params = jax.jit(model.init)(jax.random.key(0), batch)["params"]
    apply = jax.jit(model.apply)
    base = apply({"params": params}, batch)
    k = 6
    changed = dict(batch, chars=batch["chars"].copy())
    changed["chars"][0, k] = tok.chars[tok.encode("Queen")[0]]
    moved = apply({"params": params}, changed)
    diff = {d: np.abs(np.asarray(moved[f"{d}_logits"] - base[f"{d}_logits"])).max(-1)[0]
            for d in ("forward", "backward")}
    assert (diff["forward"][:k] == 0).all() and (diff["forward"][k:] > 0).all()
    assert (diff["backward"][k + 1:] == 0).all() and (diff["backward"][:k + 1] > 0).all()
    # a row padded at its end gives its words the logits they have alone
    n = ids.shape[1]
    padded = {"chars": np.concatenate([batch["chars"], tok.chars[np.zeros((1, 5), int)]], 1),
              "segment_ids": np.concatenate([np.ones((1, n), int), np.zeros((1, 5), int)], 1)}
    out = apply({"params": params}, padded)
    for d in ("forward", "backward"):
        np.testing.assert_allclose(out[f"{d}_logits"][:, :n], base[f"{d}_logits"], atol=1e-5)


def test_scalar_mix_weights_the_layers():
    model = elmo.BiLM(tiny_elmo_config().model)
    tok = words.WordTokenizer(str(VOCAB))
    ids = np.array([tok.encode("The Queen was in a furious passion .")])
    batch = {"chars": tok.chars[ids], "segment_ids": np.ones_like(ids)}
    params = jax.jit(model.init)(jax.random.key(0), batch)["params"]
    reps = jax.jit(lambda p: model.apply({"params": p}, batch, representations=True))(
        params)["layers"]
    assert len(reps) == 3 and all(r.shape == (1, ids.shape[1], 64) for r in reps)
    np.testing.assert_allclose(reps[0][..., :32], reps[0][..., 32:])  # token layer doubled
    mix = elmo.ScalarMix(3)
    mix_params = mix.init(jax.random.key(1), reps)["params"]
    np.testing.assert_allclose(mix.apply({"params": mix_params}, reps), sum(reps) / 3, atol=1e-6)
    w = jnp.log(jnp.array([1.0, 2.0, 5.0]))
    out = mix.apply({"params": {"weights": w, "gamma": jnp.array(2.0)}}, reps)
    np.testing.assert_allclose(out, 2.0 * (reps[0] + 2 * reps[1] + 5 * reps[2]) / 8, atol=1e-6)
    grads = jax.grad(lambda p: mix.apply({"params": p}, reps).sum())(mix_params)
    assert np.abs(grads["weights"]).max() > 0 and grads["gamma"] != 0


@pytest.mark.parametrize("size,published", [("original", 93.6e6), ("medium", 28.0e6),
                                            ("small", 13.6e6)])
def test_parameter_counts_match_the_published_sizes(size, published):
    """AllenNLP's counts, which leave out the softmax."""
    described = loop.describe(load_config("elmo.py", size))
    counted = described["params_without_softmax"]
    assert abs(counted - published) / published < 0.01, counted


@pytest.mark.slow
def test_loss_falls_and_sharded_equals_unsharded(tmp_path):
    one = tiny_elmo_config()
    loop.train(one, str(tmp_path / "one"), devices=jax.devices()[:1])
    mesh = tiny_elmo_config(**{"mesh.data": 2, "mesh.fsdp": 2, "mesh.tensor": 2})
    loop.train(mesh, str(tmp_path / "mesh"))
    a = [r["loss"] for r in read_metrics(tmp_path / "one")]
    b = [r["loss"] for r in read_metrics(tmp_path / "mesh")]
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-4)
    assert a[-1] < a[0] - 1.0, a  # from log(2048) = 7.6 towards English


def test_stats_command_figures():
    """`python -m pretrainx.data --stats` for ELMo: the shifts agree everywhere."""
    from pretrainx.prepare.data_cli import batch_statistics
    stats = batch_statistics(tiny_elmo_config(), num_batches=2)
    assert stats["forward_shift_agreement"] == 1.0 and stats["backward_shift_agreement"] == 1.0
    assert stats["forward_target_fraction"] > 0.9 and stats["words_per_row"] == 16


def test_elmo_needs_a_word_vocabulary():
    from pretrainx.errors import UserError
    cfg = tiny_elmo_config(**{"data.tokenizer": str(REPO / "pretrainx/assets/spm_4k.model")})
    with pytest.raises(UserError, match="spm_4k.model"):
        _objective(cfg)
