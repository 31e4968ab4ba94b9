"""Fine-tuning on GLUE, parameter-efficient tuning, and the official metrics."""

import json
import os

import jax
import numpy as np
import pytest
from scipy import stats

from conftest import override, tiny_bert_config
from pretrainx import interop
from pretrainx.errors import UserError
from pretrainx.finetune import glue as tasks, scores
from pretrainx.finetune.config import finetune_config


def ft_config(shared_data, **overrides):
    c = finetune_config()
    c.data.glue_dir = str(shared_data / "glue")
    c.seq_len = 64
    c.global_batch_size = 16
    c.eval_batch_size = 64
    c.epochs = 1
    c.log_every = 1000
    c.data.max_train_examples = 64
    c.data.max_eval_examples = 64
    c.optimizer.learning_rate = 1e-3
    return override(c, overrides)


def test_official_metrics_on_known_cases():
    labels, preds = [1, 1, 0, 0, 1], [1, 0, 0, 0, 1]
    assert scores.accuracy(labels, preds) == pytest.approx(0.8)
    assert scores.f1(labels, preds) == pytest.approx(2 * 2 / (2 * 2 + 0 + 1))
    # MCC = (tp*tn - fp*fn) / sqrt(...) = (2*2 - 0*1) / sqrt(2*3*2*3)
    assert scores.matthews_corr(labels, preds) == pytest.approx(4 / 6)
    assert scores.matthews_corr([1, 0, 1], [1, 1, 1]) == 0.0  # constant prediction
    rng = np.random.default_rng(0)
    y, p = rng.normal(size=50), rng.normal(size=50)
    assert scores.pearson(y, p) == pytest.approx(np.corrcoef(y, p)[0, 1])
    ranks = lambda v: stats.rankdata(v)
    assert scores.spearman(y, p) == pytest.approx(np.corrcoef(ranks(y), ranks(p))[0, 1])
    got = scores.score(("f1", "accuracy"), labels, preds)
    assert got["score"] == pytest.approx((got["f1"] + got["accuracy"]) / 2)


@pytest.mark.parametrize("name,directory,rows,counts", [
    ("sst2", "SST-2", 872, {0: 428, 1: 444}),
    ("cola", "CoLA", 1043, None),
    ("mrpc", "MRPC", 408, {1: 279, 0: 129}),
    ("rte", "RTE", 277, {0: 146, 1: 131}),
    ("stsb", "STS-B", 1500, None),
])
def test_glue_dev_files_read_as_published(shared_data, name, directory, rows, counts):
    task = tasks.get_task(name)
    split = tasks.read_split(task, str(shared_data / "glue" / directory / "dev.tsv"), True)
    assert len(split.texts) == rows
    assert all(len(t) == len(task.text_columns) and all(t) for t in split.texts)
    if counts:
        assert {k: split.labels.count(k) for k in counts} == counts
    if task.is_regression:
        assert 0.0 <= min(split.labels) and max(split.labels) <= 5.0


def test_bad_glue_files_name_the_file_and_line(tmp_path):
    task = tasks.get_task("rte")
    bad = tmp_path / "train.tsv"
    bad.write_text("index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n1\tc\td\tmaybe\n")
    with pytest.raises(UserError, match=r"train.tsv line 3: unknown label 'maybe'; expected one "
                                        r"of entailment, not_entailment"):
        tasks.read_split(task, str(bad), True)
    bad.write_text("index\tsentence1\tsentence2\n0\ta\tb\n")
    with pytest.raises(UserError, match=r"train.tsv: no label column 'label' in the header"):
        tasks.read_split(task, str(bad), True)
    bad.write_text("index\tsentence1\tsentence2\tlabel\n0\ta\n")
    with pytest.raises(UserError, match=r"train.tsv line 2: 2 tab-separated fields, expected 4 "
                                        r"as in its header"):
        tasks.read_split(task, str(bad), True)
    # One field too many (a tab inside the first sentence): read by position, the real
    # second sentence was dropped and the run went on (exit 0)
    bad.write_text("index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n"
                   "1\tc, and\tmore\td\tnot_entailment\n")
    with pytest.raises(UserError, match=r"train.tsv line 3: 5 tab-separated fields, expected 4 "
                                        r"as in its header"):
        tasks.read_split(task, str(bad), True)
    cola = tmp_path / "in_domain_train.tsv"  # header-less: CoLA's four fields
    cola.write_text("gj04\t1\t\tThe book fell.\ngj04\t1\t\tThe cat\tslept.\n")
    with pytest.raises(UserError, match=r"in_domain_train.tsv line 2: 5 tab-separated fields, "
                                        r"expected 4$"):
        tasks.read_split(tasks.get_task("cola"), str(cola), True)
    with pytest.raises(UserError, match="config key 'task' is 'sst3'"):
        tasks.get_task("sst3")


@pytest.mark.slow
@pytest.mark.optimized
def test_finetune_learns_sst2_and_keeps_the_best_epoch(shared_data, tmp_path):
    """A randomly initialised tiny BERT on 4,000 SST-2 sentences beats the majority
    class on dev; the best epoch is saved and predicts the test set in GLUE's format."""
    from pretrainx.finetune import loop
    cfg = ft_config(shared_data, epochs=2, **{"data.max_train_examples": 4000,
                                               "data.max_eval_examples": 0,
                                               "global_batch_size": 32})
    cfg.data.tokenizer = tiny_bert_config().data.tokenizer
    cfg.model = tiny_bert_config().model
    out = loop.train(cfg, str(tmp_path), devices=jax.devices()[:1])
    accuracies = [h["accuracy"] for h in out["history"]]
    assert out["best"]["accuracy"] == max(accuracies)
    assert out["best"]["accuracy"] > 0.60, accuracies  # majority class: 0.509
    lines = (tmp_path / "predictions" / "SST-2.tsv").read_text().splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == 1822
    assert {ln.split("\t")[1] for ln in lines[1:]} <= {"0", "1"}
    saved = interop.load(str(tmp_path))
    assert saved.head == "classify" and saved.labels == ("0", "1") and saved.task == "sst2"


@pytest.mark.parametrize("holdout", [0, 32])
def test_a_stopped_finetune_resumes_to_the_same_result(shared_data, tmp_path, holdout):
    """Stopped mid-epoch after an epoch was scored (as a signal stops it: a checkpoint
    at that step), the same call resumes there: the best epoch, the saved parameters
    and finetune.json are those of a run never stopped, chosen by dev or by held-out
    rows; a finished run leaves no checkpoints behind, and a checkpoint of another
    configuration is refused in one line."""
    from pretrainx.finetune import loop
    cfg = ft_config(shared_data, epochs=3, **{"data.max_train_examples": 64 + holdout,
                                               "data.holdout_examples": holdout})
    cfg.data.tokenizer = tiny_bert_config().data.tokenizer
    cfg.model = tiny_bert_config().model
    whole = loop.train(cfg, str(tmp_path / "whole"), devices=jax.devices()[:1])
    part = loop.train(cfg, str(tmp_path / "part"), devices=jax.devices()[:1], stop_at=6)
    assert not part["complete"] and part["step"] == 6 and len(part["history"]) == 1
    assert (tmp_path / "part" / "checkpoints" / "6").is_dir()
    changed = ft_config(shared_data, epochs=3, **{"data.max_train_examples": 64 + holdout,
                                                   "data.holdout_examples": holdout,
                                                   "optimizer.learning_rate": 5e-4})
    changed.data.tokenizer, changed.model = cfg.data.tokenizer, cfg.model
    with pytest.raises(UserError, match="another fine-tuning run .*optimizer.learning_rate"):
        loop.train(changed, str(tmp_path / "part"), devices=jax.devices()[:1])
    resumed = loop.train(cfg, str(tmp_path / "part"), devices=jax.devices()[:1])
    assert resumed["complete"] and resumed["best"] == whole["best"]
    assert resumed["history"] == whole["history"]
    assert not (tmp_path / "part" / "checkpoints").exists()
    assert ((tmp_path / "part" / "finetune.json").read_text()
            == (tmp_path / "whole" / "finetune.json").read_text())
    mine, theirs = interop.load(str(tmp_path / "part")), interop.load(str(tmp_path / "whole"))
    for a, b in zip(jax.tree_util.tree_leaves(mine.params), jax.tree_util.tree_leaves(theirs.params)):
        np.testing.assert_array_equal(a, b)


def test_early_stopping_ends_after_its_patience_and_keeps_the_best(shared_data, tmp_path):
    """early_stopping_epochs=1: an epoch that does not beat the best ends the run there
    (a rate of 1e-9 leaves dev's score where the first epoch put it); the run is
    complete, its best epoch the first, and a negative patience is refused."""
    from pretrainx.finetune import loop
    cfg = ft_config(shared_data, epochs=4, early_stopping_epochs=1,
                    **{"optimizer.learning_rate": 1e-9})
    cfg.data.tokenizer = tiny_bert_config().data.tokenizer
    cfg.model = tiny_bert_config().model
    out = loop.train(cfg, str(tmp_path), devices=jax.devices()[:1])
    assert out["complete"] and [h["epoch"] for h in out["history"]] == [1, 2]
    assert out["best"]["epoch"] == 1 and out["step"] == 8
    assert not (tmp_path / "checkpoints").exists() and (tmp_path / "finetune.json").is_file()
    cfg.early_stopping_epochs = -1
    with pytest.raises(UserError, match="early_stopping_epochs=-1 must be an integer >= 0"):
        loop.train(cfg, str(tmp_path / "bad"), devices=jax.devices()[:1])


@pytest.mark.slow
def test_holdout_rows_leave_training_and_choose_the_epoch(shared_data, tmp_path):
    """data.holdout_examples keeps the last N training rows read out of training; they,
    not dev, choose the best epoch, and dev is reported at that epoch."""
    from pretrainx.data.tokenizers import load_tokenizer
    from pretrainx.finetune import loop, task_data
    tokenizer = load_tokenizer(tiny_bert_config().data.tokenizer)
    for task, rows, held in (("sst2", 96, 32), ("conll2003", 60, 20)):
        cfg = ft_config(shared_data, task=task, **{"data.max_train_examples": rows})
        whole = task_data.build(cfg, tokenizer)
        cfg.data.holdout_examples = held
        split = task_data.build(cfg, tokenizer)
        assert whole.holdout is None and len(split.train["weight"]) == rows - held
        for key, array in split.train.items():  # the first rows train, the last are held
            np.testing.assert_array_equal(array, whole.train[key][:rows - held])
        np.testing.assert_array_equal(split.holdout.arrays["input_ids"],
                                      whole.train["input_ids"][rows - held:])
        cfg.data.holdout_examples = rows
        with pytest.raises(UserError, match=f"holdout_examples={rows} leaves no training rows"):
            task_data.build(cfg, tokenizer)
    cfg = ft_config(shared_data, epochs=3, **{"data.max_train_examples": 96,
                                               "data.holdout_examples": 32})
    cfg.data.tokenizer = tiny_bert_config().data.tokenizer
    cfg.model = tiny_bert_config().model
    out = loop.train(cfg, str(tmp_path), devices=jax.devices()[:1])
    chooser = [h["holdout_accuracy"] for h in out["history"]]
    best = out["history"][int(np.argmax(chooser))]
    assert out["best"]["epoch"] == best["epoch"] and out["best"]["main"] == max(chooser)
    assert out["best"]["dev_main"] == best["accuracy"]
    squad = ft_config(shared_data, task="squad", **{"data.holdout_examples": 8,
                                                     "data.squad_dir": SQUAD})
    with pytest.raises(UserError, match="holdout_examples is for GLUE and CoNLL-2003"):
        task_data.build(squad, tokenizer)


@pytest.mark.parametrize("method", ["lora"] + [pytest.param(m, marks=pytest.mark.slow)
                                               for m in ("adapter", "prefix", "prompt")])
def test_peft_trains_only_its_parameters(shared_data, pretrained_workdir, tmp_path, method):
    """The base stays bit-identical, the new parameters (and the head) move, and only
    they have optimizer state (AdamW: two moments per trainable value)."""
    from pretrainx.finetune import loop
    cfg = ft_config(shared_data, init_from=pretrained_workdir, **{
        "peft.method": method, "peft.lora_targets": "query,value,wi",
        "peft.num_virtual_tokens": 4, "peft.adapter_size": 8})
    out = loop.train(cfg, str(tmp_path), devices=jax.devices()[:1])
    assert out["optimizer_state_size"] == 2 * out["trainable_params"]
    assert out["trainable_params"] < 0.1 * out["params"]
    pretrained = interop.load(pretrained_workdir)
    tuned = interop.load(str(tmp_path)).params
    initial = _initial_params(pretrained.model, cfg)
    frozen, moved = 0, 0
    for path, value in jax.tree_util.tree_leaves_with_path(tuned):
        names = [p.key for p in path]
        original = _lookup(pretrained.params, names)
        if original is None:  # added by the method, or the head: trained from its init
            assert not np.array_equal(value, _lookup(initial, names)), names
            moved += 1
        elif not (method == "adapter" and names[-2].endswith("norm")):  # Houlsby train LNs
            assert np.asarray(value).tobytes() == np.asarray(original).tobytes(), names
            frozen += 1
    assert frozen > 20 and moved >= 3  # the head, and at least one new tensor


def _lookup(tree, names):
    for n in names:
        if not isinstance(tree, dict) or n not in tree:
            return None
        tree = tree[n]
    return tree


def _initial_params(model_cfg, cfg):
    """The fine-tuning model's parameters as the run initialised them (same seed)."""
    from flax import linen as nn
    from pretrainx.models import peft as peft_lib
    from pretrainx.families.bert import model as bert
    model = bert.BertForFineTuning(model_cfg, "classify", 2, peft_lib.from_config(cfg.peft))
    batch = {k: np.zeros((1, cfg.seq_len), np.int32)
             for k in ("input_ids", "token_type_ids", "attention_mask")}
    key = jax.random.key(cfg.seed)
    return jax.device_get(nn.unbox(model.init({"params": key, "dropout": key}, batch,
                                              deterministic=True))["params"])


def test_bad_finetune_config_is_refused(shared_data):
    from pretrainx.finetune import config as ft
    with pytest.raises(UserError, match="peft.lora_targets='query,gate'"):
        ft.validate(ft_config(shared_data, **{"peft.method": "lora",
                                              "peft.lora_targets": "query,gate"}))
    with pytest.raises(UserError, match="config key 'peft.method' is 'ia3'"):
        ft.validate(ft_config(shared_data, **{"peft.method": "ia3"}))
    # A random-init baseline of another family takes that family's model keys, not BERT's
    import ml_collections
    from pretrainx import models
    modern = ft_config(shared_data)
    modern.model = ml_collections.ConfigDict(models.family("modernbert").default_config())
    ft.validate(modern)
    modern.model.hidden_dropout_prob = 0.1  # a BERT key ModernBERT does not have
    with pytest.raises(UserError, match="unknown config key 'model.hidden_dropout_prob'"):
        ft.validate(modern)
    modern.model = ml_collections.ConfigDict({"family": "xlnet"})
    with pytest.raises(UserError, match="config key 'model.family' is 'xlnet'"):
        ft.validate(modern)


def test_a_config_json_that_does_not_fit_its_checkpoint_is_named(pretrained_workdir,
                                                                 tmp_path, capsys):
    """A workdir whose config.json says another width than its checkpoint holds: the
    model fine-tuning starts from is the checkpoint's (its stored config), and the key
    that disagrees is named (it failed on the shapes, or built the edited model)."""
    import shutil
    from pretrainx import interop
    copy = tmp_path / "w"
    shutil.copytree(pretrained_workdir, copy)
    config = json.loads((copy / "config.json").read_text())
    config["model"]["mlp_dim"] = 96
    (copy / "config.json").write_text(json.dumps(config))
    capsys.readouterr()
    loaded = interop.load(str(copy))
    assert "disagrees with checkpoint" in capsys.readouterr().err
    assert loaded.model.mlp_dim == 128
    assert loaded.params["bert"]["layer_0"]["mlp"]["wi"]["bias"].shape == (128,)


def test_conll_files_tags_and_entity_f1(shared_data, tmp_path):
    from pretrainx.finetune import conll
    from pretrainx.data.tokenizers import load_tokenizer
    folder = shared_data / "glue" / "CoNLL-2003"
    counts = {name: len(conll.read(str(folder / name)))
              for name in ("train.txt", "valid.txt", "test.txt")}
    assert counts == {"train.txt": 14041, "valid.txt": 3250, "test.txt": 3453}
    # conlleval's chunks: an I- after O or after another type opens an entity
    assert conll.chunks(["B-PER", "I-PER", "O", "I-LOC", "I-LOC", "B-LOC", "I-ORG"]) == {
        ("PER", 0, 2), ("LOC", 3, 5), ("LOC", 5, 6), ("ORG", 6, 7)}
    got = conll.entity_scores([["B-PER", "I-PER", "O", "B-LOC"]], [["B-PER", "O", "O", "B-LOC"]])
    assert got == {"f1": pytest.approx(0.5), "precision": 0.5, "recall": 0.5}
    # The first sub-token of each word carries its tag: perfect logits decode to gold.
    sentences = conll.read(str(folder / "valid.txt"), limit=200)
    tokenizer = load_tokenizer(tiny_bert_config().data.tokenizer)
    arrays, firsts = conll.encode(sentences, tokenizer, 128)
    perfect = np.eye(len(conll.LABELS))[arrays["label"]]
    tags = conll._tags(perfect, sentences, firsts)
    assert conll.entity_scores([t for _, t in sentences], tags)["f1"] == 1.0
    assert arrays["weight"].sum() == sum(len(w) for w, _ in sentences)
    bad = tmp_path / "train.txt"
    bad.write_text("EU NNP B-NP B-ORG\nrejects VBZ B-VP B-FOOD\n")
    with pytest.raises(UserError, match=r"train.txt line 2: unknown NER tag 'B-FOOD'"):
        conll.read(str(bad))


SQUAD = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures", "squad_alice")


def test_squad_windows_map_answers_back_exactly(tmp_path):
    """Gold start/end logits in every window, at a length that splits each context
    into several overlapping windows, give back every answer (EM 1.0)."""
    from pretrainx.finetune import squad
    from pretrainx.data.tokenizers import load_tokenizer
    examples = squad.read(os.path.join(SQUAD, "dev-v1.1.json"))
    tokenizer = load_tokenizer(tiny_bert_config().data.tokenizer)
    train, _ = squad.features(examples, tokenizer, 48, 16, 16, train=True)
    arrays, meta = squad.features(examples, tokenizer, 48, 16, 16, train=False)
    assert len(meta) > 3 * len(examples)  # several windows each
    length = arrays["input_ids"].shape[1]
    outputs = np.stack([np.eye(length)[train["start"]] * 10, np.eye(length)[train["end"]] * 10],
                       axis=-1)
    answers = squad.predict(examples, meta, outputs, tokenizer, max_answer=30)
    assert squad.evaluate(examples, answers) == {"f1": 1.0, "exact_match": 1.0}
    assert answers["alice-9"] == "late"  # cut from `late!"` as get_final_text does
    # The official normalisation: case, punctuation and articles do not count.
    assert squad.normalize_answer("The  White Rabbit!") == "white rabbit"
    assert squad.f1_score("a white rabbit ran", "White Rabbit") == pytest.approx(0.8)
    bad = tmp_path / "dev-v1.1.json"
    bad.write_text(json.dumps({"data": [{"paragraphs": [{"context": "Alice sat.", "qas": [
        {"id": "x", "question": "Who?", "answers": [{"text": "Bob", "answer_start": 0}]}]}]}]}))
    with pytest.raises(UserError, match=r"qas\[0\]: answer 'Bob' is not at answer_start 0"):
        squad.read(str(bad))


@pytest.mark.slow
def test_squad_finetuning_fits_its_questions(pretrained_workdir, tmp_path):
    """The span head, its loss and the answer decoding train end to end: the 12
    questions it trains on are answered."""
    from pretrainx.finetune import loop
    cfg = finetune_config()
    cfg.update_from_flattened_dict({
        "task": "squad", "init_from": pretrained_workdir, "data.squad_dir": SQUAD,
        "seq_len": 64, "data.doc_stride": 32, "data.max_query_length": 24,
        "global_batch_size": 8, "eval_batch_size": 32, "epochs": 20, "log_every": 1000,
        "optimizer.learning_rate": 3e-3})
    out = loop.train(cfg, str(tmp_path), devices=jax.devices()[:1])
    assert out["best"]["exact_match"] >= 0.75, out["history"]
    answers = json.loads((tmp_path / "predictions" / "squad_dev_predictions.json").read_text())
    assert len(answers) == 12


def test_t5_text_to_text_formats():
    from pretrainx.finetune import text_to_text as t2t
    assert t2t.glue_input("mnli", ("The cat sat.", "A cat sat.")) == (
        "mnli hypothesis: A cat sat. premise: The cat sat.")
    assert t2t.glue_input("sst2", ("a gripping film",)) == "sst2 sentence: a gripping film"
    assert t2t.glue_target("sst2", 1) == "positive" and t2t.glue_target("stsb", 3.73) == "3.8"
    assert t2t.read_label("rte", "not_entailment") == 1 and t2t.read_label("rte", "maybe") is None
    assert t2t.read_label("stsb", "2.4") == 2.4


@pytest.mark.slow
def test_t5_finetunes_text_to_text(shared_data, pretrained_t5_workdir, tmp_path):
    """A T5 learns to answer SST-2 with its label words: on all of dev it beats the
    majority class (0.509; 0.647 measured), every greedy output reads back as a label,
    and the submission file has words turned into labels."""
    from pretrainx.finetune import loop
    cfg = ft_config(shared_data, init_from=pretrained_t5_workdir, epochs=2, **{
        "data.max_train_examples": 4000, "data.max_eval_examples": 0, "global_batch_size": 32})
    out = loop.train(cfg, str(tmp_path), devices=jax.devices()[:1])
    from pretrainx.finetune import text_to_text as t2t
    from pretrainx.data.tokenizers import load_tokenizer
    from pretrainx.models import decoding
    from pretrainx.families.t5 import model as t5
    tuned = interop.load(str(tmp_path))
    assert tuned.family == "t5" and tuned.head == "seq2seq"
    tokenizer = load_tokenizer(tuned.tokenizer)
    data = t2t.build(cfg, tokenizer)
    dev = data.dev[0].arrays
    generated = decoding.encoder_decoder(t5.T5(tuned.model), tuned.params,
                                         dev["encoder_input_tokens"], dev["encoder_segment_ids"],
                                         data.train["decoder_target_tokens"].shape[1])
    words = [t2t.decode(tokenizer, g) for g in np.asarray(generated)]
    assert all(t2t.read_label("sst2", w) is not None for w in words), words
    assert data.dev[0].score(np.asarray(generated))["accuracy"] == out["best"]["accuracy"]
    assert out["best"]["accuracy"] > 0.60, out["history"]
    lines = (tmp_path / "predictions" / "SST-2.tsv").read_text().splitlines()
    assert len(lines) == 1822 and {ln.split("\t")[1] for ln in lines[1:]} <= {"0", "1"}


@pytest.mark.slow
def test_init_from_an_earlier_checkpoint_of_a_run(tmp_path):
    """init_from=WORKDIR/checkpoints/STEP takes that step's parameters, not the latest
    (a learning curve fine-tunes from several); a step the run lacks is named."""
    from pretrainx.train import loop
    workdir = tmp_path / "run"
    loop.train(tiny_bert_config(total_steps=2, checkpoint_every=1, keep_checkpoints=2),
               str(workdir), devices=jax.devices()[:1])
    latest, first, last = (interop.load(str(p)) for p in (
        workdir, workdir / "checkpoints" / "1", workdir / "checkpoints" / "2"))
    flat = lambda tree: jax.tree_util.tree_leaves(tree)
    assert all(np.array_equal(a, b) for a, b in zip(flat(latest.params), flat(last.params)))
    assert not all(np.array_equal(a, b) for a, b in zip(flat(first.params), flat(last.params)))
    assert first.source.endswith("checkpoints/1") and last.source.endswith("checkpoints/2")
    with pytest.raises(UserError, match=r"holds no checkpoint at step 7 \(it holds \[1, 2\]\)"):
        interop.load(str(workdir / "checkpoints" / "7"))
