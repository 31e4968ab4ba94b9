"""MNTP (LLM2Vec): the masking statistics of LLM2Vec's collator on the books' rows (20%
of the maskable tokens, 80/10/10, never a document's first token or a special one),
each chosen token the target of the position before it, continued from a causal run
with bidirectional attention whatever the checkpoint's config says, the masked-token
loss falling, and bad input refused in one line."""

import types

import numpy as np
import pytest

from conftest import load_config, override, read_metrics
from pretrainx import objectives
from pretrainx.errors import UserError
from pretrainx.objectives import mntp as mntp_lib


def _config(**keys):
    return override(load_config("llm2vec.py", "quickstart"), keys)


def _built(cfg):
    tokenizer, objective = objectives.for_run(cfg)
    phase = types.SimpleNamespace(seq_len=cfg.seq_len)
    return tokenizer, objective, phase


def test_masking_is_llm2vecs_and_each_chosen_token_is_the_previous_positions_target():
    cfg = _config()
    tok, mntp, phase = _built(cfg)
    rows = mntp.examples(cfg.data.train_files, phase, train=True)[:400]
    plain = super(mntp_lib.Masked, mntp).transform(phase, True)  # the causal rows
    masked = mntp.transform(phase, True)
    specials = np.asarray(tok.special_ids())
    counts = dict(maskable=0, chosen=0, mask=0, same=0, random=0)
    for i, row in enumerate(rows):
        before = plain(row, np.random.default_rng(i))
        after = masked(row, np.random.default_rng(i))
        w = after["loss_weights"] > 0
        chosen = np.zeros_like(w)
        chosen[1:] = w[:-1]  # input j is chosen where position j - 1 carries a loss
        maskable = np.zeros_like(w)
        maskable[1:] = (before["loss_weights"][:-1] > 0) & ~np.isin(before["inputs"][1:],
                                                                     specials)
        assert not (chosen & ~maskable).any()  # no first token, special or padding
        # the target of position j - 1 is the original token j
        np.testing.assert_array_equal(after["targets"][w], before["inputs"][1:][w[:-1]])
        changed = after["inputs"] != before["inputs"]
        assert not (changed & ~chosen).any()
        counts["maskable"] += maskable.sum()
        counts["chosen"] += chosen.sum()
        counts["mask"] += (chosen & (after["inputs"] == mntp.mask_id)).sum()
        counts["same"] += (chosen & ~changed).sum()
        counts["random"] += (chosen & changed & (after["inputs"] != mntp.mask_id)).sum()
    n = counts["chosen"]
    assert counts["maskable"] > 20_000
    assert abs(n / counts["maskable"] - 0.2) < 0.01
    assert abs(counts["mask"] / n - 0.8) < 0.02
    assert abs(counts["same"] / n - 0.1) < 0.015
    assert abs(counts["random"] / n - 0.1) < 0.015
    assert tok.id_to_piece(mntp.mask_id) == "_"  # GPT-2's BPE has no mask: LLM2Vec's blank


@pytest.mark.slow
def test_continued_from_a_causal_run_it_reads_both_ways_and_its_loss_falls(tmp_path):
    """40 causal steps of the Gemma 3 quickstart, then 60 of MNTP from them: the run
    keeps model.causal=False though the checkpoint's config says True, and the masked
    tokens' eval loss falls."""
    from pretrainx import pretrain
    clm = override(load_config("gemma3.py", "quickstart"),
                   dict(total_steps=40, log_every=20, eval_every=40, checkpoint_every=40))
    pretrain.train(clm, str(tmp_path / "clm"))
    cfg = _config(total_steps=60, log_every=20, eval_every=30, checkpoint_every=60,
                  init_from=str(tmp_path / "clm"))
    pretrain.train(cfg, str(tmp_path / "mntp"))
    evals = read_metrics(tmp_path / "mntp", "eval")
    assert [r["step"] for r in evals] == [0, 30, 60]
    assert evals[-1]["loss"] < evals[0]["loss"] - 0.1
    from pretrainx import interop
    assert interop.load(str(tmp_path / "mntp")).model.causal is False


def test_bad_input_is_refused_in_one_line():
    with pytest.raises(UserError, match="bert has no causal form, and MNTP predicts"):
        objectives.get("bert_mntp")
    with pytest.raises(UserError, match=r"data.mask_token=' the cat' is 2 tokens"):
        _built(_config(**{"data.mask_token": " the cat"}))
    with pytest.raises(UserError, match=r"data.mask_prob=0.0 must be in \(0, 1\)"):
        objectives.validate(_config(**{"data.mask_prob": 0.0}))
    with pytest.raises(UserError, match="model.causal=False with objective gemma3_clm"):
        objectives.validate(override(load_config("gemma3.py", "quickstart"),
                                     {"model.causal": False}))


@pytest.mark.parametrize("family", ["qwen3", "gemma3", "gpt2"])
def test_model_causal_false_lets_a_position_read_the_tokens_after_it(family):
    """The decoders' one switch: with model.causal=True position 2's state ignores a
    change at position 5; with False it moves (and the export of a family whose HF
    class has no such switch says so in one line)."""
    import jax
    from pretrainx import registry
    from pretrainx.interop import hf
    from pretrainx.interop.pretrained import Pretrained
    cfg = registry.FAMILIES.get(family, "model.family").default_config()
    cfg.update(num_layers=1, hidden_size=32, num_heads=2, mlp_dim=64, vocab_size=64)
    if family != "gpt2":
        cfg.update(num_kv_heads=1, head_dim=16)
    if family == "gemma3":
        cfg.update(query_pre_attn_scalar=16)
    network = registry.FAMILIES.get(family, "model.family").causal_sampling
    ids = np.arange(1, 9)[None]
    rows = {"inputs": ids, "segment_ids": np.ones_like(ids), "positions": np.arange(8)[None]}
    changed = dict(rows, inputs=np.where(np.arange(8) == 5, 60, ids))
    moved = {}
    for causal in (True, False):
        cfg.causal = causal
        net = type(network(cfg))(cfg)  # the family's decoder, without a cache
        params = net.init(jax.random.key(0), rows)["params"]
        a, b = (np.asarray(net.apply({"params": params}, r, method="hidden"))[0, 2]
                for r in (rows, changed))
        moved[causal] = float(np.abs(a - b).max())
    assert moved[True] == 0.0 and moved[False] > 1e-4
    said = hf.caveat(Pretrained(model=cfg, params={}, tokenizer="", lower_case=False,
                                head="causal_lm", source="here"))
    assert ("has no such switch" in said) == (family != "gemma3")


def _ettin_mntp(**keys):
    """MNTP from Ettin's decoder at CPU size (configs/ettin_quickstart.py:decoder):
    bidirectional, mean-pooled, 20% of the tokens."""
    return override(load_config("llm2vec.py", "ettin_quickstart"), keys)


def test_ettins_decoder_masks_as_llm2vec_inside_each_example():
    cfg = _ettin_mntp()
    tok, mntp = objectives.for_run(cfg)
    phase = types.SimpleNamespace(seq_len=cfg.seq_len, max_predictions=cfg.seq_len)
    examples = mntp.examples(cfg.data.train_files, phase, train=True)[:200]
    plain = super(type(mntp), mntp).transform(phase, True)  # the decoder's rows
    masked = mntp.transform(phase, True)
    specials = np.asarray(tok.special_ids())
    chosen_n = maskable_n = mask_n = 0
    for i, example in enumerate(examples):
        before = plain(example, np.random.default_rng(i))
        after = masked(example, np.random.default_rng(i))
        ids, seg = before["input_ids"], before["attention_mask"]
        follows = np.zeros(ids.size, bool)
        follows[1:] = (seg[1:] == seg[:-1]) & (seg[1:] > 0)
        maskable = follows & ~np.isin(ids, specials)
        w = after["loss_weights"] > 0
        chosen = np.zeros(ids.size, bool)
        chosen[1:] = w[:-1]
        assert not (chosen & ~maskable).any()  # never [CLS]/[SEP], padding or across rows
        np.testing.assert_array_equal(after["next_ids"][w], ids[1:][w[:-1]])
        chosen_n += chosen.sum()
        maskable_n += maskable.sum()
        mask_n += (after["input_ids"][chosen] == tok.mask_id).sum()
    assert maskable_n > 10_000
    assert abs(chosen_n / maskable_n - 0.2) < 0.015
    assert abs(mask_n / chosen_n - 0.8) < 0.03


@pytest.mark.slow
def test_ettins_decoder_continued_with_mntp_reads_both_ways_and_exports_a_sentence_encoder(
        tmp_path):
    from pretrainx import interop, pretrain
    short = {"optimizer.warmup_steps": 4, "optimizer.decay_steps": 10}
    decoder = override(load_config("ettin_quickstart.py", "decoder"),
                       dict(total_steps=40, log_every=20, eval_every=40, checkpoint_every=40,
                            **short))
    pretrain.train(decoder, str(tmp_path / "decoder"))
    cfg = _ettin_mntp(total_steps=60, log_every=20, eval_every=30, checkpoint_every=60,
                      init_from=str(tmp_path / "decoder"))
    pretrain.train(cfg, str(tmp_path / "mntp"))
    evals = read_metrics(tmp_path / "mntp", "eval")
    assert [r["step"] for r in evals] == [0, 30, 60]
    assert evals[-1]["loss"] < evals[0]["loss"] - 0.05  # 6.01 to 5.94 when written
    converted = interop.load(str(tmp_path / "mntp"))
    assert converted.model.causal is False and converted.model.classifier_pooling == "mean"
    # exported as the encoder (ModernBertForMaskedLM) with a mean-pooling ST folder
    pytest.importorskip("torch")
    st = pytest.importorskip("sentence_transformers")
    import pretrainx
    from conftest import SENTENCES
    interop.hf.save(converted, str(tmp_path / "export"))
    theirs = st.SentenceTransformer(str(tmp_path / "export"), device="cpu").encode(SENTENCES)
    ours = pretrainx.load(str(tmp_path / "mntp")).embed(SENTENCES)
    assert np.abs(ours - theirs).max() <= 1e-4
