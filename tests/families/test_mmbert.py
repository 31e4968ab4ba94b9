"""mmBERT (Marone, Weller et al. 2025): the recipe's sizes against transformers' count at the
released shapes, its three phases as the paper anneals them, Gemma's SentencePiece layout
read as mmBERT reads it, and the multilingual lifecycle quickstart: languages added by
phase, each drawn at its phase's temperature, evaluated per language, exported to
ModernBertForMaskedLM with transformers' logits."""

import json

import jax
import numpy as np
import pytest
from flax import linen as nn

from cli_fork import run_module
from conftest import REPO, SHARED_DATA, load_config, read_metrics
from pretrainx import config as config_lib
from pretrainx.data.tokenizers import load_tokenizer
from pretrainx.families.modernbert import model as modernbert

# the released models (github.com/JHU-CLSP/mmBERT README): total and non-embedding
RELEASED = {"small": (140e6, 42e6), "base": (307e6, 110e6)}
MULTI = SHARED_DATA / "corpus" / "multilingual"


@pytest.mark.parametrize("size", list(RELEASED))
def test_sizes_count_what_transformers_builds_from_the_released_shapes(size):
    """configs/mmbert.py:SIZE holds exactly the parameters of transformers'
    ModernBertForMaskedLM at the authors' shapes (22 layers, GeGLU 2 x 1,152, 256,000
    pieces; built on the meta device), within 1% of the released totals, and within 2%
    outside the embedding (the README's 42M and 110M are rounded)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    m = load_config("mmbert.py", size).model
    ours = modernbert.ModernBertForMaskedLM(m)
    batch = {k: jax.ShapeDtypeStruct((1, 16), np.int32)
             for k in ("input_ids", "attention_mask", "positions")}
    batch["masked_lm_positions"] = jax.ShapeDtypeStruct((1, 2), np.int32)
    shapes = jax.eval_shape(lambda b: nn.unbox(ours.init(jax.random.key(0), b)), batch)
    count = sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(shapes))
    with torch.device("meta"):
        theirs = transformers.ModernBertForMaskedLM(transformers.ModernBertConfig(
            vocab_size=m.vocab_size, hidden_size=m.hidden_size, num_hidden_layers=m.num_layers,
            num_attention_heads=m.num_heads, intermediate_size=m.mlp_dim))
    assert count == sum(p.numel() for p in theirs.parameters())
    total, inner = RELEASED[size]
    assert abs(count / total - 1) <= 0.01
    assert abs((count - m.vocab_size * m.hidden_size) / inner - 1) <= 0.02


def test_phases_anneal_masking_temperature_and_rope_as_the_paper_does():
    """2.3T tokens at 1,024 (30%, tau 0.7, RoPE 10,000), 600B at 8,192 (15%, 0.5,
    160,000), 100B (5%, 0.3) decaying by 1 - sqrt to 2% of 8e-4; StableAdamW b2 0.95,
    eps 1e-8, decoupled weight decay 8e-5; each later phase's languages its own."""
    cfg = load_config("mmbert.py", "base")
    phases = config_lib.phases(cfg)
    want = {"pretrain": (2.3e12, 1024, 0.30, 0.7, 10_000.0),
            "extension": (600e9, 8192, 0.15, 0.5, 160_000.0),
            "decay": (100e9, 8192, 0.05, 0.3, 160_000.0)}
    assert [p.name for p in phases] == list(want)
    for p in phases:
        tokens, length, rate, alpha, rope = want[p.name]
        assert (p.end - p.start) * p.global_batch_size * p.seq_len == pytest.approx(tokens, 1e-3)
        d, m = p.cfg.data, p.cfg.model
        assert (p.seq_len, d.mask_prob, d.mixing_alpha) == (length, rate, alpha), p.name
        assert m.global_rope_theta == m.local_rope_theta == rope, p.name
        assert rate * (length - 2) <= p.max_predictions <= 1.1 * rate * length, p.name
    assert cfg.phases.extension.data.train_files is None  # the user's languages, by phase
    o, decay = cfg.optimizer, cfg.phases.decay.optimizer
    assert (o.name, o.b2, o.eps, o.learning_rate) == ("stable_adamw", 0.95, 1e-8, 8e-4)
    assert o.weight_decay * o.learning_rate == pytest.approx(8e-5)
    assert (decay.schedule, decay.final_lr_fraction, decay.decay_steps) == (
        "warmup_stable_decay", 0.02, phases[-1].end - phases[-1].start)
    assert cfg.global_batch_size * o.accumulate_to == 4608 and cfg.model.vocab_size == 256_000


def _gemma_layout_spm(tmp_path):
    """A SentencePiece model in Gemma 2's layout (what mmBERT's vocabulary is):
    <pad> <eos> <bos> <unk> <mask> at 0-4, trained on real Portuguese and Spanish."""
    import sentencepiece as spm
    prefix = str(tmp_path / "gemma_layout")
    spm.SentencePieceTrainer.train(
        input=f"{MULTI / 'fortunes.pt.txt'},{MULTI / 'fortunes.es.txt'}",
        model_prefix=prefix, vocab_size=2000, model_type="unigram",
        pad_id=0, eos_id=1, bos_id=2, unk_id=3, pad_piece="<pad>", eos_piece="<eos>",
        bos_piece="<bos>", unk_piece="<unk>", user_defined_symbols=["<mask>"],
        input_sentence_size=20000, shuffle_input_sentence=False, minloglevel=2)
    return prefix + ".model"


def test_gemma_layout_reads_bos_eos_mask_as_cls_sep_mask(tmp_path):
    """mmBERT frames rows <bos> text <eos> and masks with <mask>: the .model and its
    tokenizer.json (mmBERT's release ships one) both read so, with the same ids, and
    ModernBERT's objective accepts it."""
    from pretrainx.interop import tokenizer_json
    model_file = _gemma_layout_spm(tmp_path)
    sp = load_tokenizer(model_file)
    assert (sp.pad_id, sp.sep_id, sp.cls_id, sp.unk_id, sp.mask_id) == (0, 1, 2, 3, 4)
    tokenizer_json.write(sp, str(tmp_path))
    fast = load_tokenizer(str(tmp_path / "tokenizer.json"))
    assert (fast.pad_id, fast.sep_id, fast.cls_id, fast.unk_id, fast.mask_id) == (0, 1, 2, 3, 4)
    text = (MULTI / "fortunes.pt.txt").read_text(encoding="utf-8")[:3000]
    assert fast.encode(text) == sp.encode(text)
    assert set(map(int, sp.special_ids())) >= {0, 1, 2, 3, 4}
    cfg = load_config("mmbert_quickstart.py")
    cfg.data.tokenizer, cfg.model.vocab_size = model_file, sp.vocab_size
    from pretrainx import objectives
    objectives.build(cfg, sp)  # its row and mask checks pass


def _tiny_quickstart(**overrides):
    cfg = load_config("mmbert_quickstart.py")
    steps = {"pretrain": 4, "extension": 2, "decay": 2}
    for name, n in steps.items():
        cfg.phases[name].steps = n
    cfg.total_steps = sum(steps.values())
    cfg.phases.decay.optimizer.decay_steps = cfg.optimizer.decay_steps = 2
    cfg.optimizer.warmup_steps = 2
    cfg.checkpoint_every, cfg.eval_steps, cfg.log_every = 2, 1, 2
    cfg.update_from_flattened_dict(overrides)
    return cfg


@pytest.mark.slow
def test_quickstart_adds_languages_by_phase_at_each_temperature():
    """`python -m pretrainx.data --stats --phase_name=NAME`: the pretrain phase draws only its
    four languages, in proportion to tokens^0.7; the decay all eight, by tokens^0.3,
    Czech and Portuguese included; the drawn shares agree with the expected ones."""
    stats = {}
    for phase in ("pretrain", "decay"):
        out = run_module("pretrainx.data", ["--config=configs/mmbert_quickstart.py", "--stats",
                                            f"--phase_name={phase}", "--num_batches=100"],
                         cwd=REPO, check=True)
        stats[phase] = json.loads(out.stdout.strip().splitlines()[-1])
    first, last = stats["pretrain"], stats["decay"]
    assert list(first["source_fractions"]) == ["en", "de", "es", "ru"]
    assert list(last["source_fractions"]) == ["en", "de", "es", "ru", "it", "zh", "cs", "pt"]
    for s in (first, last):
        for name, share in s["source_fractions"].items():
            assert abs(share - s["expected_source_fractions"][name]) <= 0.03, (name, s)
    for s, alpha in ((first, 0.7), (last, 0.3)):
        tokens = {n: v["tokens"] for n, v in zip(s["source_fractions"], s["sources"].values())}
        e = s["expected_source_fractions"]
        assert e["en"] / e["de"] == pytest.approx((tokens["en"] / tokens["de"]) ** alpha,
                                                  rel=0.05), alpha
    assert last["masked_fraction"] == pytest.approx(0.05, abs=0.01)
    assert first["masked_fraction"] == pytest.approx(0.30, abs=0.02)


@pytest.mark.slow
def test_quickstart_evaluates_each_phases_languages_and_exports_to_transformers(tmp_path):
    """A few steps of each phase: each phase's end evaluates its own languages (four,
    six, eight); each checkpoint reads as the RoPE bases its phase trained with (it read
    the run's top-level ones); the finished run (160,000 everywhere) exports as
    ModernBertForMaskedLM whose logits match ours within 1e-4 on real text of three
    languages in one padded batch, and AutoTokenizer gives the run's ids."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    import pretrainx
    from pretrainx import pretrain
    from pretrainx.interop import hf
    from pretrainx import interop
    workdir = str(tmp_path / "run")
    pretrain.train(_tiny_quickstart(), workdir, devices=jax.devices()[:1])
    by_phase = {}
    for name in ("en", "de", "es", "ru", "it", "zh", "cs", "pt"):
        for record in read_metrics(workdir, split="eval", source=name):
            by_phase.setdefault(record.get("phase"), set()).add(name)
    assert by_phase["pretrain"] == {"en", "de", "es", "ru"}
    assert by_phase["extension"] == {"en", "de", "es", "ru", "it", "zh"}
    assert by_phase["decay"] == {"en", "de", "es", "ru", "it", "zh", "cs", "pt"}
    # a checkpoint is read with the keys its phase trained with (the run's top-level
    # keys are ModernBERT's: 160,000 and 10,000)
    from pretrainx.interop.workdir import load_pretraining
    for step, rope in ((4, 10_000.0), (6, 160_000.0), (8, 160_000.0)):
        model = load_pretraining(workdir, step).model
        assert model.global_rope_theta == model.local_rope_theta == rope, step
    # mmBERT's decay mixes branch from the extension's end: its checkpoint resumes in a
    # new workdir with another decay mix (the data position is the start: nothing is
    # replayed or skipped), where a position inside a phase stays refused
    import shutil
    from pretrainx.errors import UserError
    branch = tmp_path / "decay-cont"
    shutil.copytree(f"{workdir}/checkpoints/6", branch / "checkpoints" / "6")
    cont = _tiny_quickstart()
    cont.phases.decay.data.update(train_files=cont.phases.extension.data.train_files,
                                  train_source_names=cont.phases.extension.data.train_source_names)
    pretrain.train(cont, str(branch), devices=jax.devices()[:1])
    records = [json.loads(line) for line in open(branch / "metrics.jsonl", encoding="utf-8")]
    assert {r["source"] for r in records if r.get("split") == "eval" and r.get("source")} \
        == {"en", "de", "es", "ru", "it", "zh"}
    inside = tmp_path / "inside"
    shutil.copytree(f"{workdir}/checkpoints/2", inside / "checkpoints" / "2")
    fewer = _tiny_quickstart()
    fewer.phases.pretrain.data.update(train_files=cont.phases.extension.data.train_files,
                                      train_source_names="en,de,es,ru,it,zh")
    with pytest.raises(UserError, match="belongs to other data"):
        pretrain.train(fewer, str(inside), devices=jax.devices()[:1])
    out = tmp_path / "hf"
    hf.save(interop.load(workdir), str(out))
    theirs = transformers.AutoModelForMaskedLM.from_pretrained(str(out)).eval()
    assert type(theirs).__name__ == "ModernBertForMaskedLM"
    texts = [(MULTI / f"fortunes.{x}.txt").read_text(encoding="utf-8")[:n]
             for x, n in (("pt", 400), ("cs", 150), ("zh", 60))]
    ours = pretrainx.load(workdir)(texts=texts)
    with torch.no_grad():
        reference = theirs(input_ids=torch.tensor(ours["input_ids"], dtype=torch.long),
                           attention_mask=torch.tensor(ours["attention_mask"])).logits.numpy()
    real = ours["attention_mask"].astype(bool)
    assert real.sum(axis=1).min() < real.shape[1]  # padding in the batch
    assert np.abs(ours["logits"] - reference)[real].max() <= 1e-4
    auto = transformers.AutoTokenizer.from_pretrained(str(out))
    tokenizer = load_tokenizer(str(REPO / "pretrainx" / "assets" / "spm_multi_8k.model"))
    for text in texts:
        assert auto(text)["input_ids"] == [tokenizer.cls_id] + tokenizer.encode(text) + [
            tokenizer.sep_id]
