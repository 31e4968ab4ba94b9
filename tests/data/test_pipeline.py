"""The batches training sees: statistics of the recipe, multi-process sharding, resume."""

import numpy as np
import pytest

from conftest import tiny_bert_config
from pretrainx import config as config_lib, objectives
from pretrainx.data import pipeline
from pretrainx.data.tokenizers import load_tokenizer
from pretrainx.objectives import encoder, mlm


@pytest.fixture(scope="module")
def setup():
    cfg = tiny_bert_config(seq_len=128, **{"data.max_predictions_per_seq": 20,
                                           "data.dupe_factor": 2})
    tok = load_tokenizer(cfg.data.tokenizer)
    objective = objectives.build(cfg, tok)
    phase = config_lib.phases(cfg)[0]
    examples = objective.examples(cfg.data.train_files, phase, train=True)
    return cfg, tok, objective, phase, examples


def _dataset(setup, batch=32, **kw):
    cfg, _, objective, phase, examples = setup
    return pipeline.make_dataset(examples, objective.transform(phase, train=True), batch,
                                 seed=0, **kw)


def test_batches_follow_the_recipe(setup):
    _, tok, _, phase, examples = setup
    ds = _dataset(setup)
    specials = encoder.unmasked_specials(tok)  # [CLS], [SEP], ...: [UNK] is maskable
    counts = dict(candidates=0, chosen=0, mask=0, same=0, nsp_pos=0, rows=0, capped=0)
    for i in range(60):  # 1920 sequences
        b = ds[i]
        ids, w = b["input_ids"], b["masked_lm_weights"]
        assert ids.shape == (32, 128) and b["masked_lm_positions"].shape == (32, 20)
        real = b["attention_mask"].astype(bool)
        for r in range(32):
            n = int(w[r].sum())
            pos = b["masked_lm_positions"][r, :n]
            labels = b["masked_lm_ids"][r, :n]
            assert real[r, pos].all()  # never past the padding
            assert not np.isin(labels, specials).any()  # never a special token
            original = ids[r].copy()
            original[pos] = labels
            cand = int((~np.isin(original[real[r]], specials)).sum())
            # 15% rounded stochastically (floor or ceil), capped at 20
            assert n in {min(20, max(1, int(np.floor(cand * 0.15)))),
                         min(20, max(1, int(np.ceil(cand * 0.15))))}
            if np.ceil(cand * 0.15) < 20:  # where the cap does not bind
                counts["candidates"] += cand
                counts["chosen_uncapped"] = counts.get("chosen_uncapped", 0) + n
            counts["capped"] += int(n == 20)
            counts["chosen"] += n
            counts["mask"] += int((ids[r, pos] == tok.mask_id).sum())
            counts["same"] += int((ids[r, pos] == labels).sum())
        counts["nsp_pos"] += int((b["next_sentence_label"] == 0).sum())
        counts["rows"] += 32
    assert abs(counts["chosen_uncapped"] / counts["candidates"] - 0.15) < 0.01
    assert abs(counts["mask"] / counts["chosen"] - 0.8) < 0.02
    random_ = counts["chosen"] - counts["mask"] - counts["same"]
    assert abs(random_ / counts["chosen"] - 0.1) < 0.02
    assert abs(counts["same"] / counts["chosen"] - 0.1) < 0.02
    assert abs(counts["nsp_pos"] / counts["rows"] - 0.5) < 0.03


def test_masks_are_fresh_each_epoch_and_repeatable(setup):
    """The same pair, met again an epoch later, gets a new mask; the same run seed
    gives the same masks."""
    examples = setup[4]
    ds = _dataset(setup, batch=1, shuffle=False)  # row k and row k + len: the same pair
    a, b = ds[0], _dataset(setup, batch=1, shuffle=False)[0]
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])  # same seed, same row, same mask
    changed = 0
    for k in range(20):
        first, again = ds[k], ds[k + len(examples)]
        np.testing.assert_array_equal(mlm.unmasked_ids(first), mlm.unmasked_ids(again))
        changed += not np.array_equal(first["masked_lm_positions"], again["masked_lm_positions"])
    assert changed >= 19  # two independent draws of ~18 positions of ~120 rarely agree


@pytest.mark.parametrize("processes", [2, 4])
def test_global_batch_is_the_same_for_any_process_count(setup, processes):
    one = _dataset(setup, batch=8, process_index=0, process_count=1)
    parts = [_dataset(setup, batch=8, process_index=p, process_count=processes)
             for p in range(processes)]
    for step in (0, 1, 57):
        whole = one[step]
        joined = {k: np.concatenate([p[step][k] for p in parts]) for k in whole}
        for k in whole:
            np.testing.assert_array_equal(whole[k], joined[k])


def test_iterator_resumes_exactly(setup):
    ds = _dataset(setup, batch=8)
    it = pipeline.make_iterator(ds)
    for _ in range(5):
        next(it)
    state = it.get_state()
    expected = [next(it) for _ in range(3)]
    fresh = pipeline.make_iterator(ds)
    fresh.set_state(state)
    for want in expected:
        got = next(fresh)
        for k in want:
            np.testing.assert_array_equal(want[k], got[k])
