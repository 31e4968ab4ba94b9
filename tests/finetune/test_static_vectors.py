"""Static word vectors (word2vec, GloVe) as the input layer of a fine-tuned model: the
vectors come from the run, stay put when frozen and move when tuned, a token's NER
logits read only its window of 5, and the task's training loss falls on real data."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import SHARED_DATA, load_config, override, read_metrics
from pretrainx import interop
from pretrainx.finetune import loop as finetune_loop
from pretrainx.finetune.config import finetune_config
from pretrainx.models import static_vectors
from pretrainx.train import loop


def _word2vec_run(path):
    c = load_config("word2vec.py", "cpu")
    c.update(total_steps=20, global_batch_size=16, seq_len=64, log_every=5, eval_every=1000,
             eval_steps=2, checkpoint_every=20)
    c.model.update(embedding_size=32)
    loop.train(c, str(path), devices=jax.devices()[:1])
    return str(path)


def _finetune(run, workdir, **keys):
    c = finetune_config()
    c.task, c.init_from = "sst2", run
    c.data.glue_dir = str(SHARED_DATA / "glue")
    c.data.max_train_examples, c.data.max_eval_examples = 400, 200
    c.seq_len, c.epochs, c.global_batch_size, c.log_every = 48, 3, 16, 5
    c.optimizer.learning_rate = 3e-3
    override(c, keys)
    finetune_loop.train(c, str(workdir))
    return [r["loss"] for r in read_metrics(workdir)], interop.load(str(workdir)).params


@pytest.mark.slow
def test_word2vec_vectors_fine_tune_frozen_or_tuned(tmp_path):
    run = _word2vec_run(tmp_path / "w2v")
    pretrained = interop.load(run).params["inputs"]["embedding"]
    frozen, frozen_params = _finetune(run, tmp_path / "frozen",
                                      **{"optimizer.freeze_embeddings": True})
    np.testing.assert_array_equal(frozen_params["inputs"]["embedding"], pretrained)
    assert "outputs" not in frozen_params  # the context vectors stay behind
    tuned, tuned_params = _finetune(run, tmp_path / "tuned")
    assert np.abs(tuned_params["inputs"]["embedding"] - pretrained).max() > 1e-3
    for losses in (frozen, tuned):
        assert np.mean(losses[-3:]) < np.mean(losses[:3]), losses


def test_a_tokens_logits_read_its_window_of_five_only():
    cfg = load_config("word2vec.py", "cpu").model
    cfg.update(vocab_size=50, embedding_size=8)
    model = static_vectors.StaticVectorsForFineTuning(cfg, "tokens", 5, ("inputs",))
    ids = jnp.arange(4, 16)[None]
    batch = {"input_ids": ids, "attention_mask": jnp.ones_like(ids)}
    params = model.init(jax.random.key(0), batch)
    base = model.apply(params, batch)["logits"][0]

    def moved(at):
        changed = model.apply(params, dict(batch, input_ids=ids.at[0, at].set(40)))["logits"][0]
        return np.flatnonzero(np.abs(np.asarray(changed - base)).max(axis=-1) > 0).tolist()

    assert moved(6) == [4, 5, 6, 7, 8]
    assert moved(0) == [0, 1, 2]  # past the row's start: zeros
