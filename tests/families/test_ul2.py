"""UL2 on T5: each of the seven denoisers against the paper on real text, the mixture's
shares, mode tokens, packed rows that rebuild their text, bad input in one line, and a
run whose loss falls."""

import json

import jax
import numpy as np
import pytest

from cli_fork import run_module
from conftest import REPO, load_config, override, read_metrics
from pretrainx import config as config_lib, objectives
from pretrainx.data import sources
from pretrainx.data.tokenizers import load_tokenizer
from pretrainx.errors import UserError
from pretrainx.objectives import spans, ul2
from pretrainx.train import loop

SPM = REPO / "pretrainx" / "assets" / "spm_ul2_4k.model"
PAPER = ul2.parse_denoisers(ul2.UL2_DENOISERS)


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(str(SPM))


@pytest.fixture(scope="module")
def unseen_docs(shared_data, tokenizer):
    """Two books of the shared corpus the bundled vocabulary never saw, tokenized."""
    gutenberg = shared_data / "corpus" / "gutenberg"
    docs, _ = sources.read_documents(f"{gutenberg}/pg84_frankenstein.txt,"
                                     f"{gutenberg}/pg74_tom_sawyer.txt")
    return [[np.asarray(tokenizer.encode(s), np.int32) for s in d] for d in docs]


def _objective(tokenizer, **overrides):
    cfg = override(load_config("ul2.py", "quickstart"), overrides)
    return objectives.build(cfg, tokenizer)


def _rebuild(inputs, targets, sentinels):
    """The raw tokens an R/X example came from: each target span put back at its sentinel."""
    by_sentinel, current = {}, None
    for t in targets[:-1]:
        if t in sentinels:
            current = int(t)
            by_sentinel[current] = []
        else:
            by_sentinel[current].append(int(t))
    out = []
    for t in inputs[:-1]:
        out.extend(by_sentinel[int(t)] if t in sentinels else [int(t)])
    return np.asarray(out), by_sentinel


@pytest.mark.parametrize("denoiser", PAPER[:-1], ids=lambda d: d.name)
def test_each_span_denoiser_at_512_inputs_matches_the_paper(denoiser, tokenizer, unseen_docs):
    """Inputs of exactly 512 (mode token and EOS in), density at the paper's rate, mean span
    at T5's arithmetic for mu (round(noise / mu) spans), the text rebuilt from both sides."""
    sentinels = spans.sentinel_ids(tokenizer.vocab_size + 128, 128)
    mode = np.asarray(tokenizer.encode("[NLU]" if denoiser.kind == "R" else "[NLG]"), np.int32)
    raw_len = ul2.raw_length(denoiser, 512, mode.size)
    stream = np.concatenate([s for d in unseen_docs for s in d])
    examples = [stream[i:i + raw_len] for i in range(0, stream.size - raw_len, raw_len)][:300]
    rng = np.random.default_rng(0)
    noise = count = total = 0
    for raw in examples:
        inputs, targets = ul2.denoise(raw, denoiser, 0, mode, rng, sentinels, tokenizer.sep_id)
        assert inputs.size == 512 and targets.size <= 512
        np.testing.assert_array_equal(inputs[:mode.size], mode)
        assert inputs[-1] == targets[-1] == tokenizer.sep_id
        rebuilt, by_sentinel = _rebuild(inputs[mode.size:], targets, set(sentinels.tolist()))
        np.testing.assert_array_equal(rebuilt, raw)
        noise += sum(map(len, by_sentinel.values()))
        count += len(by_sentinel)
        total += raw.size
    expected_noise, expected_spans = spans.noise_counts(raw_len, denoiser.density,
                                                        denoiser.mean_span)
    assert abs(noise / total - denoiser.density) < 0.005
    assert noise / count == pytest.approx(expected_noise / expected_spans, rel=1e-9)
    if denoiser.mean_span < 64:  # 64 at 512 inputs: 1 span of 90 (15%) or 8 of 63 (50%)
        assert abs(noise / count - denoiser.mean_span) < 0.1 * denoiser.mean_span


def test_s_denoiser_splits_uniformly_and_keeps_order(tokenizer, unseen_docs):
    """PrefixLM: prefix uniform in [1, n - 1] (mean share 1/2, quartiles 1/4 and 3/4), the
    inputs the prefix, the targets the rest, in order."""
    s = ul2.Denoiser("S")
    mode = np.asarray(tokenizer.encode("[S2S]"), np.int32)
    n = ul2.raw_length(s, 512, mode.size)
    stream = np.concatenate([t for d in unseen_docs for t in d])
    rng = np.random.default_rng(0)
    shares = []
    for i in range(0, min(stream.size - n, 2000 * n), n):
        raw = stream[i:i + n]
        prefix = ul2.draw_prefix(raw.size, rng)
        inputs, targets = ul2.denoise(raw, s, prefix, mode, rng, None, tokenizer.sep_id)
        assert 1 <= prefix <= n - 1 and inputs.size <= 512 and targets.size <= 512
        assert (inputs.size, targets.size) == ul2.lengths(s, n, prefix, mode.size)
        np.testing.assert_array_equal(np.concatenate([inputs[mode.size:-1], targets[:-1]]), raw)
        shares.append(prefix / n)
    assert len(shares) > 300
    assert abs(np.mean(shares) - 0.5) < 0.03
    assert abs(np.quantile(shares, 0.25) - 0.25) < 0.05
    assert abs(np.quantile(shares, 0.75) - 0.75) < 0.05


def test_planned_rows_mix_denoisers_by_weight_and_rebuild_the_text(tokenizer, unseen_docs):
    """The draw follows the weights (R 40%, X 40%, S 20%); every packed example opens with
    its kind's mode token, fits its row, and gives back the tokens it was planned from."""
    objective = _objective(tokenizer)
    phase = config_lib.phases(objective.cfg)[0]
    rows = objective.examples_from_documents(unseen_docs, phase, train=True)
    kinds = np.concatenate([r["denoisers"] for r in rows])
    shares = np.bincount(kinds, minlength=7) / kinds.size
    assert kinds.size > 600
    np.testing.assert_allclose(shares, ul2.parse_weights(ul2.UL2_WEIGHTS, 7), atol=0.04)
    sentinels = set(objective.sentinels.tolist())
    transform = objective.transform(phase, train=True)
    rng = np.random.default_rng(1)
    for row in rows[:200]:
        pairs = objective.denoise_row(row, rng)
        start = 0
        for (inputs, targets), n, k, prefix in zip(pairs, row["lengths"], row["denoisers"],
                                                   row["prefixes"]):
            d = objective.denoisers[int(k)]
            mode = objective.mode[d.kind]
            np.testing.assert_array_equal(inputs[:mode.size], mode)
            assert objective.kind_of(inputs) == d.kind
            raw = row["tokens"][start:start + n]
            start += n
            if d.kind == "S":
                rebuilt = np.concatenate([inputs[mode.size:-1], targets[:-1]])
            else:
                rebuilt, _ = _rebuild(inputs[mode.size:], targets, sentinels)
            np.testing.assert_array_equal(rebuilt, raw)
        packed = transform(row, np.random.default_rng(2))
        assert packed["encoder_input_tokens"].shape == (256,)
        assert packed["decoder_target_tokens"].shape == (256,)
        assert int(packed["encoder_segment_ids"].max()) == len(row["lengths"])


def test_mode_tokens_come_from_the_vocabulary(tokenizer):
    assert [tokenizer.encode(t)[-1] for t in ("[NLU]", "[NLG]", "[S2S]")] == [3, 4, 5]
    t5_vocab = load_tokenizer(str(REPO / "pretrainx" / "assets" / "spm_t5_4k.model"))
    with pytest.raises(UserError, match=r"'\[NLU\]' is not in the vocabulary of .*spm_t5_4k"):
        _objective(t5_vocab)
    plain = _objective(t5_vocab, **{"data.mode_tokens": ""})  # UL2 without mode switching
    assert all(ids.size == 0 for ids in plain.mode.values())


def test_finetuning_inputs_start_with_the_mode_token_as_pretraining_did(tokenizer):
    """data.mode_token (the paper adds one to fine-tuning inputs): the ids UL2's rows put
    before an R example start every text-to-text input; a token the vocabulary lacks is
    refused in one line."""
    from pretrainx.finetune import text_to_text as t2t
    nlu = ul2.mode_ids({"R": "[NLU]"}, tokenizer)["R"]
    texts = ["sst2 sentence: a gripping film", "sst2 sentence: dull"]
    plain, led = (t2t.encode_pairs(texts, ["positive", "negative"], tokenizer, 32, 4,
                                   lead=lead)["encoder_input_tokens"] for lead in ([], nlu))
    for p, m in zip(plain, led):
        n = int((p > 0).sum())
        np.testing.assert_array_equal(m[:len(nlu)], nlu)
        np.testing.assert_array_equal(m[len(nlu):len(nlu) + n], p[:n])
    assert t2t.mode_ids("[NLU]", tokenizer) == list(nlu)
    t5_vocab = load_tokenizer(str(REPO / "pretrainx" / "assets" / "spm_t5_4k.model"))
    with pytest.raises(UserError, match=r"data.mode_token: '\[NLU\]' is not in the voc"):
        t2t.mode_ids("[NLU]", t5_vocab)


@pytest.mark.parametrize("key,value,message", [
    ("data.denoiser_weights", "0,0,0,0,0,0,0", "sum to a positive value"),
    ("data.denoiser_weights", "0.5,0.5", "2 weights for 7 data.denoisers"),
    ("data.denoisers", "R:3:1.5,S", "density in \\(0, 1\\)"),
    ("data.denoisers", "Q:3:0.15", "'Q:3:0.15' is not"),
    ("data.mode_tokens", "R[NLU]", "'R\\[NLU\\]' is not KIND=TOKEN"),
])
def test_bad_mixture_is_refused_in_one_line(key, value, message):
    cfg = override(load_config("ul2.py", "quickstart"), {key: value})
    with pytest.raises(UserError, match=message):
        objectives.get(cfg.objective).validate(cfg)


def test_rows_too_short_or_too_few_sentinels_are_refused(tokenizer):
    phase = lambda o: config_lib.phases(o.cfg)[0]  # noqa: E731
    short = _objective(tokenizer, **{"data.targets_length": 128})
    with pytest.raises(UserError, match=r"denoiser X:3:0.5 makes targets of 2\d\d tokens"):
        short.raw_lengths(phase(short))
    few = _objective(tokenizer, **{"data.num_sentinels": 20})
    with pytest.raises(UserError, match=r"denoiser X:3:0.5 makes \d+ spans .* raise "
                                        "data.num_sentinels=20"):
        few.raw_lengths(phase(few))


def test_stats_command_reports_each_mode():
    out = run_module("pretrainx.data", ["--config=configs/ul2.py:quickstart", "--stats",
                                        "--num_batches=60", "--show=2"], cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    stats = json.loads(out.stdout.strip().splitlines()[-1])
    assert "[NLU]" in out.stderr or "[NLG]" in out.stderr or "[S2S]" in out.stderr
    assert abs(stats["R_noise_density"] - 0.15) < 0.01
    assert 3.0 < stats["R_mean_noise_span_length"] < 8.0
    assert abs(stats["S_mean_prefix_share"] - 0.5) < 0.1
    assert abs(stats["R_share"] - 0.4) < 0.1 and abs(stats["S_share"] - 0.2) < 0.1


def test_ul2_loss_falls_on_real_text(tmp_path):
    cfg = override(load_config("ul2.py", "quickstart"), {
        "total_steps": 40, "log_every": 10, "eval_every": 40, "checkpoint_every": 40,
        "seq_len": 128, "data.targets_length": 128, "model.num_layers": 1,
        "model.num_decoder_layers": 1, "model.hidden_size": 64, "model.num_heads": 4,
        "model.head_dim": 16, "model.mlp_dim": 128, "optimizer.warmup_steps": 5})
    result = loop.train(cfg, str(tmp_path), devices=jax.devices()[:1])
    losses = [r["loss"] for r in read_metrics(tmp_path)]
    assert losses[-1] < losses[0] - 1.5, losses
    assert result["eval"]["cross_entropy"] < np.log(4224) - 1.5


def test_20b_recipe_counts_as_google_ul2():
    """configs/ul2.py:20b has google/ul2's config (32 + 32 layers of 4096, gated-SiLU,
    untied): the same parameters as transformers' T5 of that config (on the meta device)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from flax import linen as nn
    from pretrainx.families.t5 import model as t5
    cfg = load_config("ul2.py", "20b").model
    batch = {k: np.ones((1, 4), np.int32) for k in (
        "encoder_input_tokens", "encoder_segment_ids", "decoder_input_tokens",
        "decoder_segment_ids")}
    shapes = jax.eval_shape(lambda: t5.T5(cfg).init(jax.random.key(0), batch))
    ours = sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(
        nn.unbox(shapes["params"])))
    with torch.device("meta"):
        hf = transformers.T5ForConditionalGeneration(transformers.T5Config(
            vocab_size=32128, d_model=4096, d_kv=256, d_ff=16384, num_layers=32,
            num_decoder_layers=32, num_heads=16, feed_forward_proj="gated-silu",
            tie_word_embeddings=False))
    theirs = sum(p.numel() for p in hf.parameters())
    if transformers.__version__.startswith("4."):  # 5 ties lm_head to the word table
        assert ours == theirs
    else:
        assert ours == theirs + 32128 * 4096
    assert ours == 19_591_209_984  # "20B"


def test_bundled_ul2_vocabulary_is_its_documented_recipe(tmp_path):
    """spm_ul2_4k.model is `python -m pretrainx.tokenizer train --style=t5 --lower_case=false
    --vocab_size=4000 --user_symbols=[NLU],[NLG],[S2S]` on the two training books."""
    from pretrainx.data import bundled
    from pretrainx.data.tokenizers import train_sentencepiece
    path = train_sentencepiece([bundled.book(b) for b in bundled.TRAIN_BOOKS],
                               str(tmp_path / "ul2"), vocab_size=4000, lower_case=False,
                               style="t5", user_symbols=["[NLU]", "[NLG]", "[S2S]"])
    assert open(path, "rb").read() == SPM.read_bytes()


def test_prefixlm_recipe_is_s_alone_without_mode_tokens(tokenizer, unseen_docs):
    """configs/ul2.py:prefixlm, the encoder-decoder's PrefixLM: every example is a prefix
    and its continuation, nothing before the prefix, no sentinel anywhere."""
    cfg = load_config("ul2.py", "prefixlm")
    objective = objectives.build(cfg, tokenizer)
    phase = config_lib.phases(cfg)[0]
    rows = objective.examples_from_documents(unseen_docs, phase, train=True)
    rng = np.random.default_rng(0)
    shares = []
    for row in rows[:300]:
        start = 0
        for (inputs, targets), n in zip(objective.denoise_row(row, rng), row["lengths"]):
            raw = row["tokens"][start:start + n]
            start += n
            np.testing.assert_array_equal(np.concatenate([inputs[:-1], targets[:-1]]), raw)
            assert not np.isin(np.concatenate([inputs, targets]), objective.sentinels).any()
            shares.append((inputs.size - 1) / n)
    assert abs(np.mean(shares) - 0.5) < 0.05
    batch = _stacked(objective, rows[:16], phase)
    stats = objective.summarize_stats(objective.batch_stats(batch), phase)
    assert stats["S_share"] == 1.0 and abs(stats["S_mean_prefix_share"] - 0.5) < 0.2


def _stacked(objective, rows, phase):
    """A batch of the transformed `rows`."""
    transform = objective.transform(phase, True)
    packed = [transform(r, np.random.default_rng(i)) for i, r in enumerate(rows)]
    return {k: np.stack([p[k] for p in packed]) for k in packed[0]}
