"""pretrainx.load: a stored model run on texts, without transformers (the parity with
transformers' hidden states and logits is tests/interop/test_interop.py's)."""

import numpy as np
import pytest

import pretrainx
from pretrainx.compare import notebook
from pretrainx.errors import UserError


def test_a_workdir_runs_on_texts_and_agrees_with_fill_mask(pretrained_workdir):
    model = pretrainx.load(pretrained_workdir)
    tok = model.tokenizer
    out = model(texts=["The Hatter was the first to break the silence.", "Alice"])
    rows, width = out["input_ids"].shape
    assert rows == 2 and out["hidden_states"].shape == (2, width, 64)
    assert out["logits"].shape == (2, width, 4096) and np.isfinite(out["logits"]).all()
    first = out["input_ids"][0][out["attention_mask"][0] > 0]
    assert first[0] == tok.cls_id and first[-1] == tok.sep_id
    assert out["attention_mask"][1].sum() == len(model.ids("Alice")) < width
    # a row alone gives what it gives padded beside a longer one
    alone = model(texts=["Alice"])
    n = alone["input_ids"].shape[1]
    np.testing.assert_allclose(alone["logits"][0], out["logits"][1, :n], atol=1e-5)
    # at a [MASK], the best guess is the one notebook.fill_mask fills in
    left, right = "The Hatter was the", "to break the silence."
    ids = [tok.cls_id, *tok.encode(left), tok.mask_id, *tok.encode(right), tok.sep_id]
    at = 1 + len(tok.encode(left))
    best = int(model(ids=[ids])["logits"][0, at].argmax())
    filled = notebook.fill_mask(pretrained_workdir, [f"{left} [MASK] {right}"], top_k=1)[0]
    assert filled["predictions"][0][0][0] == (tok.decode([best]) or tok.id_to_piece(best))


def test_a_t5_workdir_gives_encoder_states_and_decoder_logits(pretrained_t5_workdir):
    """T5's rows are framed text </s> (no [CLS]); the states are the encoder's, the logits
    the decoder's as it reads the row shifted right from 0."""
    model = pretrainx.load(pretrained_t5_workdir)
    out = model(texts=["The Hatter was the first to break the silence."])
    ids = out["input_ids"][0]
    assert ids[-1] == model.tokenizer.sep_id and model.tokenizer.cls_id not in ids
    cfg = model.pretrained.model
    assert out["hidden_states"].shape == (1, len(ids), cfg.hidden_size)
    assert out["logits"].shape == (1, len(ids), cfg.vocab_size)
    assert np.isfinite(out["logits"]).all()


def test_a_family_it_does_not_run_yet_is_one_line(pretrained_workdir, monkeypatch):
    from pretrainx import interop
    elmo = interop.load(pretrained_workdir)
    elmo.model.family = "elmo"
    monkeypatch.setattr(interop, "load", lambda path: elmo)
    with pytest.raises(UserError, match="an? elmo model; pretrainx.load runs .*bert"):
        pretrainx.load("a_run")


def test_importing_pretrainx_stays_light():
    import subprocess
    import sys
    code = "import sys, pretrainx; print('jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr
