"""python -m pretrainx.merge: checkpoint averaging and TIES-Merging into a workdir that
loads, exports and trains on like any other; mismatched inputs refused in one line."""

import json
import os
import pathlib

import jax
import numpy as np
import pytest

from conftest import read_metrics, tiny_bert_config
from pretrainx import interop
from pretrainx.trained import merge
from pretrainx.errors import UserError


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A tiny BERT trained 6 steps on real text, checkpoints at 3 and 6."""
    from pretrainx.train import loop
    workdir = str(tmp_path_factory.mktemp("merge") / "run")
    loop.train(tiny_bert_config(total_steps=6, checkpoint_every=3, keep_checkpoints=5),
               workdir, devices=jax.devices()[:1])
    return workdir


@pytest.mark.slow
def test_average_of_two_checkpoints_is_their_weighted_mean_and_a_workdir(run, tmp_path):
    a, b = f"{run}/checkpoints/3", f"{run}/checkpoints/6"
    out = str(tmp_path / "merged")
    assert merge.main([f"--inputs={a},{b}", "--weights=1,3", f"--output={out}"]) == 0
    record = json.load(open(os.path.join(out, merge.MERGE_FILE)))
    assert record["steps"] == [3, 6] and record["weights"] == [1.0, 3.0]
    pa, pb, got = (interop.load(p).params for p in (a, b, out))
    for x, y, z in zip(*(jax.tree_util.tree_leaves(t) for t in (pa, pb, got))):
        np.testing.assert_allclose(z, 0.25 * x + 0.75 * y, rtol=1e-6, atol=1e-7)
    assert any(not np.allclose(x, y) for x, y in zip(jax.tree_util.tree_leaves(pa),
                                                     jax.tree_util.tree_leaves(pb)))
    # it evaluates (at the newest input's step: 6), exports, and trains on from the
    # merged weights with that input's optimizer state and data position
    import contextlib
    import io
    from pretrainx.evaluate import heldout as evaluate
    scores = {}
    for name, path in (("run", run), ("merged", out)):
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            assert evaluate.main([f"--workdir={path}", "--eval_steps=2"]) == 0
        scores[name] = json.loads(printed.getvalue().strip().splitlines()[-1])
    assert scores["run"]["step"] == scores["merged"]["step"] == 6
    # evaluating with other eval_steps than it trained with leaves its config.json alone
    trained_as = pathlib.Path(run, "config.json").read_text()
    with contextlib.redirect_stdout(io.StringIO()):
        assert evaluate.main([f"--workdir={run}", "--eval_steps=1"]) == 0
    assert pathlib.Path(run, "config.json").read_text() == trained_as
    assert scores["merged"]["eval"]["loss"] != scores["run"]["eval"]["loss"]
    assert abs(scores["merged"]["eval"]["loss"] / scores["run"]["eval"]["loss"] - 1) < 0.05
    written = interop.hf.save(interop.load(out), str(tmp_path / "hf"))
    assert "model.safetensors" in written
    from pretrainx.train import loop
    loop.train(tiny_bert_config(total_steps=8, checkpoint_every=3), out,
               devices=jax.devices()[:1])
    assert [r["step"] for r in read_metrics(out)] == [7, 8]


def test_ties_trims_elects_a_sign_and_averages_the_agreeing_entries():
    """Trimming keeps each task vector's largest entries over all its tensors together
    (Yadav et al.'s top-k of the flattened vector), not each tensor's."""
    base = {"w": np.zeros(4, np.float32), "v": np.zeros(2, np.float32)}
    one = {"w": np.array([3.0, -1.0, 0.2, 2.0], np.float32),
           "v": np.array([0.5, 0.1], np.float32), "head": np.ones(2, np.float32)}
    two = {"w": np.array([1.0, 2.0, -0.1, -4.0], np.float32),
           "v": np.array([-0.3, 5.0], np.float32), "head": 3 * np.ones(2, np.float32)}
    got = merge.ties(base, [one, two], density=0.5, scale=1.0)
    # one keeps 3, 2, -1 (all in w); two keeps 5, -4, 2. Elected signs: +, + (2 - 1), 0,
    # - (2 - 4); v: 0, +.
    np.testing.assert_allclose(got["w"], [3.0, 2.0, 0.0, -4.0])
    np.testing.assert_allclose(got["v"], [0.0, 5.0])  # one's 0.5 fell to the global cut
    np.testing.assert_allclose(got["head"], [2.0, 2.0])  # the base lacks it: averaged
    np.testing.assert_allclose(merge.ties(base, [one, two], 0.5, 0.5)["w"], [1.5, 1.0, 0, -2])


@pytest.mark.slow
def test_mismatched_inputs_are_refused_in_one_line_and_nothing_is_written(run, tmp_path):
    from pretrainx.train import loop
    wider = str(tmp_path / "wider")
    loop.train(tiny_bert_config(total_steps=3, **{"model.mlp_dim": 256}), wider,
               devices=jax.devices()[:1])
    out = tmp_path / "merged"
    with pytest.raises(UserError, match=r"wider/checkpoints/3's \['bert'\]\[.*\] is \[256.*\], "
                                        r".*run/checkpoints/3's \[128.*\]: only models of one "
                                        r"shape merge"):
        merge.merge([f"{run}/checkpoints/3", f"{wider}/checkpoints/3"], str(out))
    with pytest.raises(UserError, match=r"holds no checkpoint at step 7 \(it holds \[3, 6\]\)"):
        merge.merge([f"{run}/checkpoints/3", f"{run}/checkpoints/7"], str(out))
    with pytest.raises(UserError, match=r"--weights=1\.0: expected 2 positive numbers"):
        merge.merge([f"{run}/checkpoints/3", run], str(out), weights=[1])
    assert not out.exists()


@pytest.mark.slow
def test_ties_merges_two_finetunings_against_their_base(shared_data, pretrained_workdir,
                                                        tmp_path):
    """Two SST-2 fine-tunings of one pretrained BERT (two seeds) TIES-merged against it:
    a fine-tuning workdir whose encoder moved from the base by the elected deltas and whose
    head is the two heads' mean; it loads and exports as any fine-tuned model."""
    from test_finetune import ft_config
    from pretrainx.finetune import loop
    tuned = []
    for seed in (0, 1):
        tuned.append(str(tmp_path / f"sst2_{seed}"))
        loop.train(ft_config(shared_data, init_from=pretrained_workdir, seed=seed), tuned[-1],
                   devices=jax.devices()[:1])
    out = str(tmp_path / "merged")
    record = merge.merge(tuned, out, method="ties", base=pretrained_workdir, density=0.5)
    assert record["base"] == pretrained_workdir and record["density"] == 0.5
    got = interop.load(out)
    assert got.head == "classify" and got.task == "sst2"
    a, b, base = (merge.Checkpoint(p).params for p in (*tuned, pretrained_workdir))

    def flat(tree):
        return dict(jax.tree_util.tree_flatten_with_path(tree)[0])
    fa, fb, fbase, fout = flat(a), flat(b), flat(base), flat(merge.Checkpoint(out).params)
    heads = [p for p in fout if p not in fbase]
    assert heads and all(np.allclose(fout[p], (fa[p] + fb[p]) / 2) for p in heads)
    moved = [p for p in fout if p in fbase and not np.allclose(fout[p], fbase[p])]
    assert len(moved) > len(fbase) // 2
    assert "model.safetensors" in interop.hf.save(got, str(tmp_path / "hf"))
    with pytest.raises(UserError, match="the base holds .* it is not the model they were tuned"):
        merge.ties({"other": np.zeros(3)}, [a, b], 0.5, 1.0)


@pytest.mark.slow
def test_ema_follows_its_recursion_across_checkpoints_and_becomes_a_workdir(tmp_path):
    """optimizer.ema_decay: each checkpoint's (bias-corrected) average is the decay-weighted
    mean of the parameters of the updates so far; --from_ema writes it as a workdir's
    parameters, which evaluates; a run without an average is refused in one line."""
    from pretrainx.train import loop, optim
    run = str(tmp_path / "run")
    loop.train(tiny_bert_config(total_steps=3, checkpoint_every=1, keep_checkpoints=5,
                                **{"optimizer.ema_decay": 0.75}), run, devices=jax.devices()[:1])
    one, two, three = (merge.Checkpoint(f"{run}/checkpoints/{s}") for s in (1, 2, 3))
    ema1, ema2, ema3 = (optim.ema_of(c.state["opt_state"], 0.75) for c in (one, two, three))
    # bias-corrected: after one update the average is that update's parameters, after
    # three it is (p1 d^2 + p2 d + p3) (1 - d) / (1 - d^3)
    for e1, e3, p1, p2, p3 in zip(*(jax.tree_util.tree_leaves(t) for t in (
            ema1, ema3, one.params, two.params, three.params))):
        np.testing.assert_allclose(e1, p1, rtol=1e-5, atol=1e-7)
        expected = (0.5625 * p1 + 0.75 * p2 + p3) * 0.25 / (1 - 0.75 ** 3)
        np.testing.assert_allclose(e3, expected, rtol=1e-5, atol=1e-7)
    assert any(not np.allclose(e, p) for e, p in zip(jax.tree_util.tree_leaves(ema3),
                                                     jax.tree_util.tree_leaves(three.params)))
    out = str(tmp_path / "ema")
    assert merge.merge([run], out, from_ema=True)["steps"] == [3]
    for e, p in zip(jax.tree_util.tree_leaves(ema3),
                    jax.tree_util.tree_leaves(merge.Checkpoint(out).params)):
        np.testing.assert_array_equal(e, p)
    import ml_collections
    with open(os.path.join(out, "config.json"), encoding="utf-8") as f:
        stored = ml_collections.ConfigDict(json.load(f))
    assert loop.evaluate(stored, out, devices=jax.devices()[:1])["eval"]["loss"] > 0
    with pytest.raises(UserError, match=r"written with optimizer\.ema_decay=0\.75, this config "
                                        r"has 0\.0: its optimizer state holds the parameter"):
        loop.evaluate(tiny_bert_config(), out, devices=jax.devices()[:1])
    plain = str(tmp_path / "plain")
    loop.train(tiny_bert_config(total_steps=1), plain, devices=jax.devices()[:1])
    with pytest.raises(UserError, match=r"plain holds no average of its parameters: train with "
                                        r"--config\.optimizer\.ema_decay"):
        merge.merge([plain], str(tmp_path / "none"), from_ema=True)
