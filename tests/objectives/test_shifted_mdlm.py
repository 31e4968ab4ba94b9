"""Masked diffusion for a decoder made bidirectional (gemma3_mdlm, qwen3_mdlm,
gpt2_mdlm: Dream's shift): on the books' rows each masked token is the target of the
position before it, weighted 1/t at its row's rate, never a document's first token or a
special one, and the batch's rates are MDLM's evenly spread draw; continued from a
causal run the bound falls, and python -m pretrainx.generate fills a canvas after a
prompt deterministically; bad input in one line."""

import types

import numpy as np
import pytest

from conftest import load_config, override, read_metrics
from pretrainx import objectives
from pretrainx.errors import UserError
from pretrainx.objectives import mdlm, shifted_mdlm


def _config(**keys):
    return override(load_config("mdlm.py", "gemma3"), keys)


def test_masked_tokens_are_the_previous_positions_targets_at_their_rows_rate():
    cfg = _config()
    tok, diffusion = objectives.for_run(cfg)
    phase = types.SimpleNamespace(seq_len=cfg.seq_len, global_batch_size=16, index=0)
    rows = diffusion.examples(cfg.data.train_files, phase, train=True)[:320]
    plain = super(shifted_mdlm.Diffused, diffusion).transform(phase, True)  # causal rows
    masked = diffusion.transform(phase, True)
    assert masked.indexed
    specials = np.asarray(tok.special_ids())
    chosen_total = maskable_total = 0
    rates = []
    for i, row in enumerate(rows):
        before = plain(row, np.random.default_rng(i))
        after = masked(row, np.random.default_rng(i), i)
        t = float(after["mask_rate"])
        rates.append(t)
        w = after["loss_weights"]
        chosen = np.zeros(w.size, bool)
        chosen[1:] = w[:-1] > 0  # input j is chosen where position j - 1 carries a loss
        maskable = np.zeros(w.size, bool)
        maskable[1:] = (before["loss_weights"][:-1] > 0) & ~np.isin(before["inputs"][1:],
                                                                     specials)
        assert not (chosen & ~maskable).any()
        assert after["mdlm_tokens"] == maskable.sum()
        np.testing.assert_allclose(w[w > 0], 1.0 / t, rtol=1e-6)
        # every chosen token is the mask (no 80/10/10), and nothing else changed
        assert (after["inputs"][chosen] == diffusion.mask_id).all()
        np.testing.assert_array_equal(after["inputs"][~chosen], before["inputs"][~chosen])
        np.testing.assert_array_equal(after["targets"], before["targets"])
        chosen_total += chosen.sum()
        maskable_total += maskable.sum() * t
    # 20 batches of 16: each batch's rates cover (0, 1) evenly, a draw a batch
    for b in range(20):
        gaps = np.diff(np.sort(rates[16 * b:16 * (b + 1)]))
        np.testing.assert_allclose(gaps, 1 / 16, atol=1e-3)
    assert abs(chosen_total / maskable_total - 1.0) < 0.03  # masked at rate t
    assert tok.id_to_piece(diffusion.mask_id) == "_"


def test_the_shifted_logits_read_the_output_before_each_position():
    logits = np.arange(12.0).reshape(4, 3)
    np.testing.assert_array_equal(shifted_mdlm.shifted_logits(logits),
                                  logits[[0, 0, 1, 2]])


@pytest.mark.slow
def test_continued_from_a_causal_run_the_bound_falls_and_generate_fills_a_canvas(tmp_path):
    """40 causal steps of the Gemma 3 quickstart, then 60 of gemma3_mdlm from them: the
    run is bidirectional whatever the checkpoint says and its held-out bound falls; the
    sampler fills 8 masks after a prompt, the same text under the same seed."""
    from pretrainx import interop, pretrain
    clm = override(load_config("gemma3.py", "quickstart"),
                   dict(total_steps=40, log_every=20, eval_every=40, checkpoint_every=40))
    pretrain.train(clm, str(tmp_path / "clm"))
    cfg = _config(total_steps=60, log_every=20, eval_every=30, checkpoint_every=60,
                  init_from=str(tmp_path / "clm"))
    pretrain.train(cfg, str(tmp_path / "mdlm"))
    evals = read_metrics(tmp_path / "mdlm", "eval")
    assert [r["step"] for r in evals] == [0, 30, 60]
    assert evals[-1]["loss"] < evals[0]["loss"] - 0.1
    assert evals[-1]["bound_perplexity"] == pytest.approx(np.exp(evals[-1]["loss"]))
    assert interop.load(str(tmp_path / "mdlm")).model.causal is False
    from cli_fork import run_module
    args = [f"--workdir={tmp_path / 'mdlm'}", "--prompt=Alice was", "--diffusion_steps=4",
            "--canvas=8", "--temperature=0.8", "--seed=3"]
    outs = [run_module("pretrainx.generate", args, cwd=tmp_path) for _ in range(2)]
    assert all(o.returncode == 0 for o in outs), outs[0].stderr[-2000:]
    assert outs[0].stdout == outs[1].stdout and outs[0].stdout.startswith("Alice was ")
    empty = run_module("pretrainx.generate", args[:1] + ["--prompt=", "--diffusion_steps=2",
                                                         "--canvas=4"], cwd=tmp_path)
    # the quickstart's byte-level BPE has no <bos> to open a text: nothing to predict from
    assert empty.returncode != 0 and "--prompt is empty" in empty.stderr
    assert len(empty.stderr.strip().splitlines()) == 1


def test_bad_input_is_refused_in_one_line():
    cfg = _config(**{"model.causal": True})
    with pytest.raises(UserError, match="objective=gemma3_mdlm unmasks with bidirectional "
                                        "attention: set model.causal=False"):
        objectives.get(cfg.objective).validate(cfg)
    with pytest.raises(UserError, match="--diffusion_steps=9 is more than the 8 masked"):
        mdlm.reveal_counts(8, 9)
