"""HuggingFace interop: our BERT out to `transformers` and back, and HF BERTs in.

Parity is checked against transformers' PyTorch models (the surest reference) on
real sentences, padded in a batch; the tests skip when torch/transformers are absent.
"""

import json
import os
import sys

import jax
import numpy as np
import pytest

from cli_fork import run_module
from conftest import REPO, SENTENCES, SHARED_DATA, sentence_batch, xla_flags
from pretrainx import interop
from pretrainx.data.tokenizers import load_tokenizer
from pretrainx.errors import UserError
from pretrainx.families.bert import model as bert

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

def _batch(tokenizer, pairs=False):
    return sentence_batch(tokenizer, pairs=pairs, second=0, pad_id=0)


def _torch_inputs(batch):
    return {k: torch.tensor(batch[k], dtype=torch.long)
            for k in ("input_ids", "token_type_ids", "attention_mask")}


def _export(workdir, output):
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=xla_flags())
    result = run_module("pretrainx.trained.export", [f"--workdir={workdir}", f"--output={output}"],
                        cwd=REPO, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    return result


def test_pretraining_export_matches_transformers_and_round_trips(pretrained_workdir, tmp_path):
    out = tmp_path / "hf"
    _export(pretrained_workdir, out)
    ours = interop.load(pretrained_workdir)
    tokenizer = load_tokenizer(ours.tokenizer)
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    for s in SENTENCES:  # the exported tokenizer gives our ids
        assert hf_tokenizer(s)["input_ids"] == [tokenizer.cls_id] + tokenizer.encode(s) + [
            tokenizer.sep_id]
    batch = _batch(tokenizer, pairs=True)
    mine = jax.jit(bert.BertForPreTraining(ours.model).apply)({"params": ours.params}, batch)
    model = transformers.AutoModelForPreTraining.from_pretrained(out).eval()
    with torch.no_grad():
        theirs = model(**_torch_inputs(batch))
    real = batch["attention_mask"].astype(bool)
    diff = np.abs(np.asarray(mine["mlm_logits"]) - theirs.prediction_logits.numpy())[real]
    assert diff.max() <= 1e-4
    assert np.abs(np.asarray(mine["nsp_logits"]) - theirs.seq_relationship_logits.numpy()
                  ).max() <= 1e-4
    back = interop.load(str(out))  # ours -> HF -> ours is exact
    assert back.head == "pretrain"
    for (path, a), (_, b) in zip(jax.tree_util.tree_leaves_with_path(ours.params),
                                 jax.tree_util.tree_leaves_with_path(back.params)):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes(), path
    assert jax.tree_util.tree_structure(ours.params) == jax.tree_util.tree_structure(back.params)


@pytest.mark.slow
def test_lora_finetuned_export_is_merged_and_matches(shared_data, pretrained_workdir, tmp_path):
    from pretrainx.finetune import loop
    from pretrainx.finetune.config import finetune_config
    from pretrainx.models import peft as peft_lib
    cfg = finetune_config()
    cfg.update_from_flattened_dict({
        "init_from": pretrained_workdir, "data.glue_dir": str(shared_data / "glue"),
        "task": "stsb", "seq_len": 64, "global_batch_size": 16, "epochs": 1,
        "data.max_train_examples": 64, "data.max_eval_examples": 64,
        "optimizer.learning_rate": 1e-2, "peft.method": "lora", "peft.lora_targets": "query,out,wo"})
    loop.train(cfg, str(tmp_path / "ft"), devices=jax.devices()[:1])
    _export(tmp_path / "ft", tmp_path / "hf")
    tuned = interop.load(str(tmp_path / "ft"))
    spec = peft_lib.from_config(cfg.peft)
    tokenizer = load_tokenizer(tuned.tokenizer)
    batch = _batch(tokenizer, pairs=True)
    mine = bert.BertForFineTuning(tuned.model, "classify", 1, spec).apply(
        {"params": tuned.params}, batch)["logits"]
    hf_config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert hf_config["problem_type"] == "regression" and hf_config["num_labels"] == 1
    model = transformers.AutoModelForSequenceClassification.from_pretrained(
        tmp_path / "hf").eval()
    with torch.no_grad():
        theirs = model(**_torch_inputs(batch)).logits.numpy()
    assert np.abs(np.asarray(mine) - theirs).max() <= 1e-4


@pytest.mark.parametrize("safe,shard", [(True, None), (False, None), (True, "2MB")],
                         ids=["safetensors", "pytorch_bin", "sharded_safetensors"])
def test_import_from_transformers(shared_data, tmp_path, safe, shard):
    """An HF BertForSequenceClassification (exact-erf GELU, as bert-base-uncased) gives
    the same logits in our model after import."""
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=30522, hidden_size=64, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=128,
                                     num_labels=3, hidden_act="gelu")
    model = transformers.BertForSequenceClassification(config).eval()
    model.save_pretrained(tmp_path, safe_serialization=safe,
                          **({"max_shard_size": shard} if shard else {}))
    assert (tmp_path / "model.safetensors.index.json").exists() == bool(shard)
    vocab = shared_data / "tokenizers" / "bert-base-uncased" / "vocab.txt"
    transformers.BertTokenizer(str(vocab)).save_pretrained(tmp_path)
    loaded = interop.load(str(tmp_path))
    assert loaded.head == "classify" and loaded.model.hidden_act == "gelu"
    tokenizer = load_tokenizer(loaded.tokenizer, lower_case=loaded.lower_case)
    batch = _batch(tokenizer, pairs=True)
    mine = bert.BertForFineTuning(loaded.model, "classify", 3).apply(
        {"params": loaded.params}, batch)["logits"]
    with torch.no_grad():
        theirs = model(**_torch_inputs(batch)).logits.numpy()
    assert np.abs(np.asarray(mine) - theirs).max() <= 1e-4


def test_unsupported_or_broken_hf_directories_are_named(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(
        {"model_type": "gpt_neox", "architectures": ["GPTNeoXForCausalLM"]}))
    with pytest.raises(UserError, match=r"config.json: unsupported architecture "
                                        r"GPTNeoXForCausalLM \(model_type 'gpt_neox'\)"):
        interop.load(str(tmp_path))
    config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=64)
    transformers.BertModel(config).save_pretrained(tmp_path)
    hf = json.loads((tmp_path / "config.json").read_text())
    hf["num_hidden_layers"] = 2
    (tmp_path / "config.json").write_text(json.dumps(hf))
    with pytest.raises(UserError, match=r"no tensor bert.encoder.layer.1.attention.self.query"):
        interop.load(str(tmp_path))
    with pytest.raises(UserError, match="is neither a pretrainx workdir"):
        interop.load(str(tmp_path / ".."))


def test_t5_export_matches_transformers_and_round_trips(pretrained_t5_workdir, tmp_path):
    from pretrainx.families.t5 import model as t5
    out = tmp_path / "hf"
    _export(pretrained_t5_workdir, out)
    ours = interop.load(pretrained_t5_workdir)
    tokenizer = load_tokenizer(ours.tokenizer)
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    for s in SENTENCES:
        assert hf_tokenizer(s)["input_ids"] == tokenizer.encode(s) + [tokenizer.sep_id]
    assert hf_tokenizer.convert_tokens_to_ids("<extra_id_0>") == ours.num_sentinels + (
        tokenizer.vocab_size - 1)  # T5's sentinels count down from the last id
    enc = [tokenizer.encode(s) + [tokenizer.sep_id] for s in SENTENCES]
    dec = [[0] + tokenizer.encode(s.split(",")[0])[:8] for s in SENTENCES]
    pad = lambda rows: np.array([r + [0] * (max(map(len, rows)) - len(r)) for r in rows])
    enc, dec = pad(enc), pad(dec)
    batch = {"encoder_input_tokens": enc, "encoder_segment_ids": (enc > 0).astype(np.int32),
             "decoder_input_tokens": dec, "decoder_segment_ids": np.ones_like(dec)}
    mine = np.asarray(jax.jit(t5.T5(ours.model).apply)({"params": ours.params}, batch)["logits"])
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(out).eval()
    with torch.no_grad():
        theirs = model(input_ids=torch.tensor(enc), attention_mask=torch.tensor(enc > 0),
                       decoder_input_ids=torch.tensor(dec)).logits.numpy()
    assert np.abs(mine - theirs).max() <= 1e-4
    # Greedy decoding: ours (fine-tuning's predictions, the notebook's samples) writes
    # what transformers' generate writes, up to each row's EOS.
    from pretrainx.models import decoding
    length = 12
    ours_out = np.asarray(decoding.encoder_decoder(
        t5.T5(ours.model), ours.params, enc, (enc > 0).astype(np.int32), length))
    with torch.no_grad():
        hf_out = model.generate(input_ids=torch.tensor(enc), attention_mask=torch.tensor(enc > 0),
                                max_new_tokens=length, do_sample=False, num_beams=1).numpy()
    eos = tokenizer.sep_id
    for a, b in zip(ours_out.tolist(), hf_out[:, 1:].tolist()):  # HF's row starts at id 0
        a = a[:a.index(eos) + 1] if eos in a else a
        assert b[:len(a)] == a, (a, b)
    back = interop.load(str(out))
    assert back.family == "t5" and back.num_sentinels == ours.num_sentinels
    for (path, a), (_, b) in zip(jax.tree_util.tree_leaves_with_path(ours.params),
                                 jax.tree_util.tree_leaves_with_path(back.params)):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes(), path


def _google_variables(cfg, rng):
    """Variables named and shaped as a google-research/bert pretraining checkpoint
    (plus Adam slots and global_step, which an import must skip)."""
    h, m, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    shapes = {"bert/embeddings/word_embeddings": (v, h),
              "bert/embeddings/token_type_embeddings": (2, h),
              "bert/embeddings/position_embeddings": (cfg["max_position_embeddings"], h),
              "bert/embeddings/LayerNorm/gamma": (h,), "bert/embeddings/LayerNorm/beta": (h,),
              "bert/pooler/dense/kernel": (h, h), "bert/pooler/dense/bias": (h,),
              "cls/predictions/transform/dense/kernel": (h, h),
              "cls/predictions/transform/dense/bias": (h,),
              "cls/predictions/transform/LayerNorm/gamma": (h,),
              "cls/predictions/transform/LayerNorm/beta": (h,),
              "cls/predictions/output_bias": (v,),
              "cls/seq_relationship/output_weights": (2, h),
              "cls/seq_relationship/output_bias": (2,)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"bert/encoder/layer_{i}/"
        for name in ("query", "key", "value"):
            shapes[p + f"attention/self/{name}/kernel"] = (h, h)
            shapes[p + f"attention/self/{name}/bias"] = (h,)
        shapes.update({p + "attention/output/dense/kernel": (h, h),
                       p + "attention/output/dense/bias": (h,),
                       p + "attention/output/LayerNorm/gamma": (h,),
                       p + "attention/output/LayerNorm/beta": (h,),
                       p + "intermediate/dense/kernel": (h, m), p + "intermediate/dense/bias": (m,),
                       p + "output/dense/kernel": (m, h), p + "output/dense/bias": (h,),
                       p + "output/LayerNorm/gamma": (h,), p + "output/LayerNorm/beta": (h,)})
    variables = {k: rng.normal(0, 0.1, s).astype(np.float32) for k, s in shapes.items()}
    variables.update({k + "/adam_m": np.zeros_like(a) for k, a in list(variables.items())[:3]})
    variables["global_step"] = np.int64(1000)
    return variables


def test_google_tf_checkpoint_imports_as_transformers_reads_it(shared_data, tmp_path,
                                                               monkeypatch):
    """TensorFlow is not installed here: a stand-in `tensorflow.train` serves the
    variables to both our importer and transformers' own TF loader, and the two
    models agree."""
    import types
    cfg = {"vocab_size": 30522, "hidden_size": 64, "num_hidden_layers": 2,
           "num_attention_heads": 4, "intermediate_size": 128, "hidden_act": "gelu",
           "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
           "max_position_embeddings": 128, "type_vocab_size": 2, "initializer_range": 0.02}
    variables = _google_variables(cfg, np.random.default_rng(0))
    import importlib.machinery
    fake = types.ModuleType("tensorflow")
    fake.__spec__ = importlib.machinery.ModuleSpec("tensorflow", None)
    fake.train = types.SimpleNamespace(
        list_variables=lambda prefix: [(k, np.shape(a)) for k, a in variables.items()],
        load_variable=lambda prefix, name: variables[name])
    monkeypatch.setitem(sys.modules, "tensorflow", fake)
    folder = tmp_path / "uncased_L-2_H-64_A-4"
    folder.mkdir()
    (folder / "bert_config.json").write_text(json.dumps(cfg))
    (folder / "vocab.txt").write_bytes(
        (shared_data / "tokenizers" / "bert-base-uncased" / "vocab.txt").read_bytes())
    loaded = interop.load(str(folder))
    assert loaded.head == "pretrain" and loaded.model.hidden_act == "gelu_tanh"
    assert loaded.lower_case
    # transformers 5 removed its TF reader: there the import is checked without it
    if hasattr(transformers.models.bert.modeling_bert, "load_tf_weights_in_bert"):
        # google-research/bert's gelu is the tanh form: HF calls it gelu_new
        reference = transformers.BertForPreTraining(transformers.BertConfig(
            **dict(cfg, hidden_act="gelu_new"))).eval()
        transformers.models.bert.modeling_bert.load_tf_weights_in_bert(
            reference, None, str(folder / "bert_model.ckpt"))
        batch = _batch(load_tokenizer(loaded.tokenizer), pairs=True)
        mine = jax.jit(bert.BertForPreTraining(loaded.model).apply)({"params": loaded.params},
                                                                    batch)
        with torch.no_grad():
            theirs = reference(**_torch_inputs(batch))
        real = batch["attention_mask"].astype(bool)
        assert np.abs(np.asarray(mine["mlm_logits"]) - theirs.prediction_logits.numpy())[
            real].max() <= 1e-4
        assert np.abs(np.asarray(mine["nsp_logits"]) - theirs.seq_relationship_logits.numpy()
                      ).max() <= 1e-4
    monkeypatch.delitem(sys.modules, "tensorflow")
    monkeypatch.setattr("builtins.__import__", _no_tensorflow(__import__))
    with pytest.raises(UserError, match="reading it needs TensorFlow"):
        interop.load(str(folder))


def _no_tensorflow(real_import):
    def guarded(name, *args, **kwargs):
        if name == "tensorflow":
            raise ImportError("No module named 'tensorflow'")
        return real_import(name, *args, **kwargs)
    return guarded


@pytest.mark.slow
def test_gpt2_export_matches_transformers_and_round_trips(shared_data, tmp_path):
    from pretrainx.families.gpt2 import model as gpt2
    from pretrainx.train import loop
    from test_gpt2 import tiny_gpt2_config
    vocab = str(shared_data / "tokenizers" / "gpt2")
    loop.train(tiny_gpt2_config(vocab, total_steps=2, checkpoint_every=2),
               str(tmp_path / "w"), devices=jax.devices()[:1])
    _export(tmp_path / "w", tmp_path / "hf")
    ours = interop.load(str(tmp_path / "w"))
    tokenizer = load_tokenizer(ours.tokenizer)
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    rows = [tokenizer.encode(s) for s in SENTENCES]
    for s, ids in zip(SENTENCES, rows):
        assert hf_tokenizer(s)["input_ids"] == ids
    padded = hf_tokenizer(SENTENCES, padding=True)  # it had no pad token: this raised
    assert padded["input_ids"][2][-1] == tokenizer.eot_id == hf_tokenizer.pad_token_id
    length = max(map(len, rows))
    ids = np.array([r + [tokenizer.eot_id] * (length - len(r)) for r in rows])
    mask = np.array([[1] * len(r) + [0] * (length - len(r)) for r in rows])
    batch = {"inputs": ids, "segment_ids": mask, "positions": np.tile(np.arange(length),
                                                                      (len(rows), 1))}
    mine = np.asarray(jax.jit(gpt2.GPT2(ours.model).apply)({"params": ours.params},
                                                           batch)["logits"])
    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    with torch.no_grad():
        theirs = model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)
                       ).logits.numpy()
    assert np.abs(mine - theirs)[mask.astype(bool)].max() <= 1e-4
    back = interop.load(str(tmp_path / "hf"))
    assert back.family == "gpt2"
    assert jax.tree_util.tree_structure(back.params) == jax.tree_util.tree_structure(ours.params)
    for a, b in zip(jax.tree_util.tree_leaves(ours.params), jax.tree_util.tree_leaves(back.params)):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()


@pytest.mark.slow
def test_continued_pretraining_starts_from_an_hf_directory(pretrained_workdir, tmp_path):
    """init_from in a pretraining config: the run starts from the imported weights
    (after one step at warmup's learning rate 0 they are unchanged, bit for bit)."""
    from conftest import PRETRAINED_DEPTH, tiny_bert_config
    from pretrainx import pretrain
    _export(pretrained_workdir, tmp_path / "hf")
    cfg = tiny_bert_config(total_steps=1, checkpoint_every=1, init_from=str(tmp_path / "hf"),
                           **PRETRAINED_DEPTH)
    pretrain.train(cfg, str(tmp_path / "w"), devices=jax.devices()[:1])
    start, after = interop.load(str(tmp_path / "hf")), interop.load(str(tmp_path / "w"))
    for (path, a), (_, b) in zip(jax.tree_util.tree_leaves_with_path(start.params),
                                 jax.tree_util.tree_leaves_with_path(after.params)):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes(), path
    wrong = tiny_bert_config(total_steps=1, init_from=str(tmp_path / "hf"),
                             **PRETRAINED_DEPTH, **{"model.mlp_dim": 96})
    with pytest.raises(UserError, match=r"model.mlp_dim=96 contradicts init_from .*hf, whose "
                                        r"model has mlp_dim=128"):
        pretrain.train(wrong, str(tmp_path / "w2"), devices=jax.devices()[:1])
    assert not (tmp_path / "w2").exists()  # refused before anything was built or written


def test_continued_pretraining_takes_the_folders_model_untied_head_included(tmp_path):
    """A recipe that leaves the model keys at BERT's defaults continues from an HF BERT
    of another shape, exact GeLU and an untied output layer: every one comes from the
    folder, and the untied layer is trained on, not dropped (after one step at warmup's
    learning rate 0 it is the folder's, bit for bit)."""
    from conftest import tiny_bert_config
    from pretrainx import pretrain
    torch.manual_seed(0)
    theirs, files = _tiny_hf("bert", tie=False)
    theirs.save_pretrained(tmp_path / "hf")
    for name, source in files.items():
        (tmp_path / "hf" / name).write_bytes(open(source, "rb").read())
    cfg = tiny_bert_config(total_steps=1, checkpoint_every=1, init_from=str(tmp_path / "hf"))
    for key, value in bert.default_config().items():
        cfg.model[key] = value
    cfg.model.dtype = "float32"
    pretrain.train(cfg, str(tmp_path / "w"), devices=jax.devices()[:1])
    after = interop.load(str(tmp_path / "w"))
    m = after.model
    assert (m.num_layers, m.hidden_size, m.mlp_dim, m.hidden_act, m.tie_output) == (
        1, 32, 64, "gelu", False)
    decoder = theirs.cls.predictions.decoder.weight.detach().numpy()
    assert np.asarray(after.params["output"]["kernel"]).tobytes() == decoder.T.tobytes()


@pytest.mark.slow
def test_the_continuation_recipe_needs_only_a_folder_a_corpus_and_a_step_count(
        shared_data, tmp_path):
    """configs/continue_mlm.py with init_from (an HF BERT whose shapes, activation and
    untied output layer differ from the recipe's), a corpus and a step count (and, for
    this small corpus and the suite's time, a larger held-out share and smaller batches
    and evaluations): the keys and the tokenizer come from the folder, the imported
    model is evaluated before the first step, the export loads in transformers with
    the continued weights."""
    from conftest import load_config
    from pretrainx import pretrain
    torch.manual_seed(0)
    theirs, files = _tiny_hf("bert", tie=False)
    theirs.save_pretrained(tmp_path / "hf")
    for name, source in files.items():
        (tmp_path / "hf" / name).write_bytes(open(source, "rb").read())
    cfg = load_config("continue_mlm.py", "bert")
    cfg.init_from = str(tmp_path / "hf")
    cfg.data.train_files = ",".join(str(p) for p in sorted(
        (shared_data / "corpus" / "gutenberg").glob("*.txt"))[:4])
    cfg.total_steps = 2
    cfg.data.eval_split_percent = 10.0  # 1% of four books is not one batch of 256 rows
    # fewer rows than the recipe's 256 x 50 for each evaluation, for the suite's time
    # (these keys are the recipe's, not the folder's: 32 s -> 14 s alone)
    cfg.global_batch_size, cfg.eval_steps = 32, 2
    pretrain.train(cfg, str(tmp_path / "w"), devices=jax.devices()[:1])
    records = [json.loads(line) for line in (tmp_path / "w" / "metrics.jsonl").open()]
    evals = [r["step"] for r in records if r.get("split") == "eval"]
    assert evals[0] == 0 and evals[-1] == 2  # before and after
    _export(tmp_path / "w", tmp_path / "out")
    again = transformers.BertForMaskedLM.from_pretrained(tmp_path / "out").eval()
    continued = interop.load(str(tmp_path / "w"))
    assert continued.model.tie_output is False and continued.model.hidden_act == "gelu"
    assert np.array_equal(again.cls.predictions.decoder.weight.detach().numpy(),
                          np.asarray(continued.params["output"]["kernel"]).T)
    assert not np.array_equal(again.cls.predictions.decoder.weight.detach().numpy(),
                              theirs.cls.predictions.decoder.weight.detach().numpy())


def test_export_writes_what_an_adapter_returns_whatever_its_memory_order(
        pretrained_workdir, tmp_path, monkeypatch):
    """An adapter may hand back transposed views (torch's [out, in] of our [in, out]);
    safetensors writes an array's buffer as it lies, so hf.save must write them C-ordered
    or the file holds the tensor scrambled (found by the dry-run family of issue 19)."""
    from safetensors.numpy import load_file
    from pretrainx.interop import hf
    kernel = np.arange(12, dtype=np.float32).reshape(3, 4)
    real = hf.ADAPTERS.find("bert")
    fake = hf.Adapter(name="bert", model_type="bert", read=real.read,
                      write=lambda pretrained, params, tok: ({"w": kernel.T}, {"model_type": "bert"}),
                      write_tokenizer=lambda pretrained, tok, output: [])
    monkeypatch.setattr(hf, "adapter_for", lambda pretrained: fake)
    hf.save(interop.load(pretrained_workdir), str(tmp_path / "out"))
    written = load_file(str(tmp_path / "out" / "model.safetensors"))["w"]
    assert not kernel.T.flags.c_contiguous
    assert np.array_equal(written, kernel.T)


SPM = str(REPO / "pretrainx" / "assets" / "spm_4k.model")


def _tiny_hf(family: str, tie: bool):
    """A tiny transformers model of `family` with its output layer tied or not, and the
    tokenizer files its import reads (real vocabularies: BERT's, GPT-2's, a 4k
    SentencePiece model)."""
    bert_like = dict(vocab_size=30522, hidden_size=32, num_hidden_layers=1,
                     num_attention_heads=2, intermediate_size=64, tie_word_embeddings=tie)
    byte_level = dict(bert_like, vocab_size=50265)
    pieces = dict(bert_like, vocab_size=4096)
    made = {
        "bert": lambda: transformers.BertForMaskedLM(transformers.BertConfig(**bert_like)),
        "roberta": lambda: transformers.RobertaForMaskedLM(transformers.RobertaConfig(
            **byte_level, max_position_embeddings=130, pad_token_id=1)),
        "distilbert": lambda: transformers.DistilBertForMaskedLM(transformers.DistilBertConfig(
            vocab_size=30522, dim=32, n_layers=1, n_heads=2, hidden_dim=64,
            tie_word_embeddings=tie)),
        "modernbert": lambda: transformers.ModernBertForMaskedLM(transformers.ModernBertConfig(
            **byte_level, pad_token_id=1, global_attn_every_n_layers=1)),
        "albert": lambda: transformers.AlbertForMaskedLM(transformers.AlbertConfig(
            **pieces, embedding_size=16)),
        "deberta": lambda: transformers.DebertaV2ForMaskedLM(transformers.DebertaV2Config(
            **pieces, relative_attention=True, position_buckets=8, max_relative_positions=32,
            pos_att_type=["p2c", "c2p"], position_biased_input=False, norm_rel_ebd="layer_norm",
            share_att_key=True)),
        "electra": lambda: transformers.ElectraForMaskedLM(transformers.ElectraConfig(
            **bert_like, embedding_size=32)),
        "gpt2": lambda: transformers.GPT2LMHeadModel(transformers.GPT2Config(
            vocab_size=50257, n_embd=32, n_layer=1, n_head=2, n_positions=64,
            tie_word_embeddings=tie)),
    }
    if family in ("albert", "deberta"):
        return made[family]().eval(), {"spiece.model" if family == "albert" else "spm.model": SPM}
    source = SHARED_DATA / "tokenizers" / (
        "bert-base-uncased" if family in ("bert", "distilbert", "electra") else "gpt2")
    return made[family]().eval(), {f.name: str(f) for f in source.iterdir()}


def _our_logits(folder, ids):
    """Our model's vocabulary logits [1, len(ids), vocab] for one row of real tokens,
    through the public API (pretrainx.load)."""
    import pretrainx
    return pretrainx.load(str(folder))(ids=[ids])["logits"]


@pytest.mark.parametrize("family", ["bert", "roberta", "distilbert", "modernbert", "albert",
                                    "deberta", "gpt2"])
def test_untied_output_layers_import_and_export_as_untied(tmp_path, family):
    """An HF model whose output layer is not its word table (tie_word_embeddings=false)
    imports with that layer (model.tie_output=False) and computes transformers' logits
    on real text; its export is untied again and transformers reads the same logits.
    (It imported with the head silently replaced by the table: |diff| 2.2-2.5.)"""
    torch.manual_seed(0)
    theirs, files = _tiny_hf(family, tie=False)
    folder = tmp_path / "hf"
    theirs.save_pretrained(folder)
    for name, source in files.items():
        (folder / name).write_bytes(open(source, "rb").read())
    pretrained = interop.load(str(folder))
    assert pretrained.model.tie_output is False
    tokenizer = load_tokenizer(SPM) if family in ("albert", "deberta") else load_tokenizer(
        pretrained.tokenizer, layout="fairseq" if family in ("roberta", "modernbert") else "")
    ids = tokenizer.encode(SENTENCES[1])[:40]
    if family != "gpt2":
        ids = [tokenizer.cls_id] + ids + [tokenizer.sep_id]
    with torch.no_grad():
        reference = theirs(input_ids=torch.tensor([ids])).logits.numpy()
    tied_table = theirs.get_input_embeddings().weight.detach().numpy()
    assert not np.allclose(theirs.get_output_embeddings().weight.detach().numpy(), tied_table)
    assert np.abs(_our_logits(folder, ids) - reference).max() <= 1e-4
    out = tmp_path / "out"
    interop.hf.save(pretrained, str(out))
    assert json.loads((out / "config.json").read_text())["tie_word_embeddings"] is False
    again = type(theirs).from_pretrained(out).eval()
    with torch.no_grad():
        assert np.abs(again(input_ids=torch.tensor([ids])).logits.numpy() - reference).max() <= 1e-5


@pytest.mark.parametrize("family", ["bert", "roberta", "modernbert", "deberta", "gpt2", "electra"])
def test_load_gives_transformers_hidden_states_and_logits(tmp_path, family):
    """pretrainx.load on an HF folder: the last hidden states and the vocabulary logits
    at every position are transformers' (its base model's last_hidden_state and its
    LM head) on real text, two rows padded to one batch."""
    import pretrainx
    torch.manual_seed(0)
    theirs, files = _tiny_hf(family, tie=True)
    theirs.save_pretrained(tmp_path)
    for name, source in files.items():
        (tmp_path / name).write_bytes(open(source, "rb").read())
    model = pretrainx.load(str(tmp_path))
    ours = model(texts=SENTENCES[:2])
    if family in ("bert", "gpt2"):  # texts framed as transformers frames them
        tok = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
        assert model.ids(SENTENCES[0]) == tok(SENTENCES[0])["input_ids"]
    for row, ids in enumerate(ours["input_ids"]):
        real = ids[ours["attention_mask"][row] > 0]
        with torch.no_grad():
            got = theirs(input_ids=torch.tensor([real]), output_hidden_states=True)
            hidden = theirs.base_model(input_ids=torch.tensor([real])).last_hidden_state
        n = len(real)
        assert np.abs(ours["hidden_states"][row, :n] - hidden.numpy()[0]).max() <= 1e-4
        assert np.abs(ours["logits"][row, :n] - got.logits.numpy()[0]).max() <= 1e-4


def _tiny_seq2seq(family: str, folder):
    """A tiny T5 1.1 (untied, spiece.model, extra ids in tokenizer_config.json) or BART
    (a fairseq-layout vocab.json of GPT-2's pieces) saved by transformers."""
    if family == "t5":
        model = transformers.T5ForConditionalGeneration(transformers.T5Config(
            vocab_size=4100, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2,
            feed_forward_proj="gated-gelu", tie_word_embeddings=False,
            decoder_start_token_id=0)).eval()
        model.save_pretrained(folder)
        (folder / "spiece.model").write_bytes(
            (REPO / "pretrainx" / "assets" / "spm_t5_4k.model").read_bytes())
        (folder / "tokenizer_config.json").write_text(json.dumps(
            {"tokenizer_class": "T5Tokenizer", "extra_ids": 4}))
        return model
    model = transformers.BartForConditionalGeneration(transformers.BartConfig(
        vocab_size=50265, d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
        decoder_ffn_dim=64, max_position_embeddings=130)).eval()
    model.save_pretrained(folder)
    # a BART release's vocab.json: fairseq's <s> <pad> </s> <unk> first, <mask> last
    from pretrainx.data import bpe
    gpt2 = SHARED_DATA / "tokenizers" / "gpt2"
    layout = bpe.roberta_ids(bpe.ByteLevelBPETokenizer(*bpe.files_in(str(gpt2))))
    (folder / "vocab.json").write_text(json.dumps(bpe.vocab_json(layout)), encoding="utf-8")
    (folder / "merges.txt").write_bytes((gpt2 / "merges.txt").read_bytes())
    return model


@pytest.mark.parametrize("family", ["t5", "bart"])
def test_load_gives_transformers_encoder_states_and_decoder_logits(tmp_path, family):
    """pretrainx.load on a T5 or BART folder: the encoder's last states, and the decoder's
    logits as it reads the row shifted right from its start token, are transformers'
    (labels=input_ids), on real text, two rows padded to one batch."""
    import pretrainx
    torch.manual_seed(0)
    theirs = _tiny_seq2seq(family, tmp_path)
    model = pretrainx.load(str(tmp_path))
    ours = model(texts=SENTENCES[:2])
    tok = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    assert model.ids(SENTENCES[0]) == tok(SENTENCES[0])["input_ids"]
    for row, ids in enumerate(ours["input_ids"]):
        real = torch.tensor([ids[ours["attention_mask"][row] > 0]])
        start = theirs.config.decoder_start_token_id
        shifted = torch.cat([torch.full_like(real[:, :1], start), real[:, :-1]], dim=1)
        with torch.no_grad():
            hidden = theirs.get_encoder()(input_ids=real).last_hidden_state.numpy()[0]
            logits = theirs(input_ids=real, decoder_input_ids=shifted).logits.numpy()[0]
        n = real.shape[1]
        assert np.abs(ours["hidden_states"][row, :n] - hidden).max() <= 1e-4
        assert np.abs(ours["logits"][row, :n] - logits).max() <= 1e-4


def test_an_untied_spanbert_exports_its_own_output_layer(tmp_path):
    """SpanBERT exports as a BERT directory: an untied SpanBERT writes its own output
    layer, not the word table under tie_word_embeddings=false (its adapter listed no
    tied pair, so the table's copy was written and transformers computed other logits)."""
    import dataclasses
    torch.manual_seed(0)
    theirs, files = _tiny_hf("bert", tie=False)
    folder = tmp_path / "hf"
    theirs.save_pretrained(folder)
    for name, source in files.items():
        (folder / name).write_bytes(open(source, "rb").read())
    pretrained = interop.load(str(folder))
    model = pretrained.model.copy_and_resolve_references()
    model.family = "spanbert"
    span = dataclasses.replace(pretrained, model=model)
    ids = load_tokenizer(pretrained.tokenizer).encode(SENTENCES[1])[:40]
    with torch.no_grad():
        reference = theirs(input_ids=torch.tensor([ids])).logits.numpy()
    out = tmp_path / "out"
    interop.hf.save(span, str(out))
    again = type(theirs).from_pretrained(out).eval()
    with torch.no_grad():
        assert np.abs(again(input_ids=torch.tensor([ids])).logits.numpy() - reference).max() <= 1e-5


def test_a_folder_with_only_a_tokenizer_json_imports(tmp_path):
    """ModernBERT's release ships its tokenizer as tokenizer.json alone (a byte-level
    BPE with [CLS] [SEP] [PAD] [MASK] [UNK] added): the import reads it, and its ids
    and special ids are transformers' on real text."""
    torch.manual_seed(0)
    theirs, files = _tiny_hf("modernbert", tie=True)
    theirs.save_pretrained(tmp_path)
    fast = transformers.GPT2TokenizerFast(vocab_file=files["vocab.json"],
                                          merges_file=files["merges.txt"])
    fast.add_special_tokens({"cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                             "mask_token": "[MASK]", "unk_token": "[UNK]"})
    fast.save_pretrained(tmp_path)
    for name in ("vocab.json", "merges.txt"):  # transformers 5 writes tokenizer.json alone
        (tmp_path / name).unlink(missing_ok=True)
    pretrained = interop.load(str(tmp_path))
    assert pretrained.tokenizer == str(tmp_path / "tokenizer.json")
    ours = load_tokenizer(pretrained.tokenizer, layout="fairseq")
    assert [ours.cls_id, ours.sep_id, ours.pad_id, ours.mask_id] == fast.convert_tokens_to_ids(
        ["[CLS]", "[SEP]", "[PAD]", "[MASK]"])
    for sentence in SENTENCES:
        assert ours.encode(sentence) == fast(sentence, add_special_tokens=False)["input_ids"]
    # and its export carries the tokenizer.json on (it was written as spiece.model under
    # AlbertTokenizer, which nothing reads)
    written = interop.hf.save(pretrained, str(tmp_path / "out"))
    assert "tokenizer.json" in written and "spiece.model" not in written
    again = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "out"))
    for sentence in SENTENCES:
        assert again(sentence, add_special_tokens=False)["input_ids"] == ours.encode(sentence)
    assert again.convert_tokens_to_ids(["[CLS]", "[SEP]", "[PAD]"]) == [
        ours.cls_id, ours.sep_id, ours.pad_id]


@pytest.mark.parametrize("family", ["roberta", "gpt2"])
def test_a_byte_level_folder_with_only_a_tokenizer_json_exports(family, tmp_path):
    """transformers 5 saves RoBERTa's and GPT-2's tokenizers as tokenizer.json alone: such
    a folder imports, and its export (which read vocab.json and merges.txt, and ended in
    a TypeError) carries that tokenizer.json on, so transformers reads the same ids and
    computes the same logits."""
    torch.manual_seed(0)
    theirs, files = _tiny_hf(family, tie=True)
    folder = tmp_path / "hf"
    theirs.save_pretrained(folder)
    # from the folder: transformers 5 ignores vocab_file / merges_file arguments
    fast = (transformers.RobertaTokenizerFast if family == "roberta"
            else transformers.GPT2TokenizerFast).from_pretrained(
                os.path.dirname(files["vocab.json"]))
    fast.save_pretrained(folder)
    for name in ("vocab.json", "merges.txt"):
        (folder / name).unlink(missing_ok=True)
    pretrained = interop.load(str(folder))
    assert pretrained.tokenizer == str(folder / "tokenizer.json")
    written = interop.hf.save(pretrained, str(tmp_path / "out"))
    assert "tokenizer.json" in written and "vocab.json" not in written
    again = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "out"))
    for sentence in SENTENCES:
        assert again(sentence)["input_ids"] == fast(sentence)["input_ids"]
    ids = fast(SENTENCES[1])["input_ids"]
    assert len(ids) > 10
    model = type(theirs).from_pretrained(tmp_path / "out").eval()
    with torch.no_grad():
        got = model(input_ids=torch.tensor([ids])).logits.numpy()
        want = theirs(input_ids=torch.tensor([ids])).logits.numpy()
    assert np.abs(got - want).max() <= 1e-5


def test_a_vocabulary_that_disagrees_with_the_folders_tokenizer_json_is_refused(tmp_path):
    """A folder whose vocab.txt, read as its tokenizer_config says, gives other ids than
    its tokenizer.json (what transformers 5 loads) is refused in one line that names
    both; where they agree the family's own file is read."""
    from pretrainx.data import folder_ids
    source = SHARED_DATA / "tokenizers" / "bert-base-uncased"
    transformers.BertTokenizerFast.from_pretrained(str(source), do_lower_case=False,
                                                   ).save_pretrained(tmp_path)
    vocab = str(tmp_path / "vocab.txt")  # transformers 5 writes tokenizer.json alone
    (tmp_path / "vocab.txt").write_bytes((source / "vocab.txt").read_bytes())
    cased, lowered = (load_tokenizer(vocab, lower_case=flag) for flag in (False, True))
    assert folder_ids.agreeing(str(tmp_path), vocab, lambda: cased) == vocab
    with pytest.raises(UserError, match=r"vocab.txt and tokenizer.json give other ids") as e:
        folder_ids.agreeing(str(tmp_path), vocab, lambda: lowered)  # lower-cased: other pieces
    assert "\n" not in str(e.value)


def test_untied_heads_a_family_cannot_hold_are_refused_not_dropped(tmp_path):
    """ELECTRA's generator ties its output layer to the word table here: an untied one
    is refused in one line naming the tensor; the tied one imports."""
    for tie in (True, False):
        torch.manual_seed(0)
        theirs, files = _tiny_hf("electra", tie)
        folder = tmp_path / f"tied_{tie}"
        theirs.save_pretrained(folder)
        for name, source in files.items():
            (folder / name).write_bytes(open(source, "rb").read())
        if tie:
            assert interop.load(str(folder)).params
        else:
            with pytest.raises(UserError, match=r"output layer generator_lm_head.weight is not "
                                                r"tied to the word table"):
                interop.load(str(folder))


def test_an_export_is_whole_or_absent_and_its_files_share_one_mode(pretrained_workdir,
                                                                    tmp_path, monkeypatch):
    """Killed half way (here: the tokenizer files fail after the weights were written),
    an export leaves neither the output folder nor a staging folder; a whole one has
    model.safetensors with the same mode as the other files (it was 0600 among 0644)."""
    import dataclasses
    from pretrainx.interop import hf
    pretrained = interop.load(pretrained_workdir)
    adapter = hf.ADAPTERS.find("bert")

    def killed(*args):
        raise KeyboardInterrupt
    with monkeypatch.context() as patch:
        patch.setattr(hf, "adapter_for", lambda pretrained: dataclasses.replace(
            adapter, write_tokenizer=killed))
        with pytest.raises(KeyboardInterrupt):
            hf.save(pretrained, str(tmp_path / "out"))
    assert os.listdir(tmp_path) == []
    written = hf.save(pretrained, str(tmp_path / "out"))
    modes = {name: (tmp_path / "out" / name).stat().st_mode & 0o777 for name in written}
    assert len(set(modes.values())) == 1, modes
    assert sorted(os.listdir(tmp_path)) == ["out"]


def test_an_edited_config_json_does_not_change_what_a_workdir_exports(pretrained_workdir,
                                                                       tmp_path, capsys):
    """Export (and everything that reads a workdir as a model) builds it from the config
    stored in the checkpoint; WORKDIR/config.json edited to another activation and depth
    is named in a warning, not obeyed (it exported another model, or a KeyError)."""
    import shutil
    workdir = tmp_path / "w"
    shutil.copytree(pretrained_workdir, workdir)
    before = interop.load(str(workdir))
    cfg = json.loads((workdir / "config.json").read_text())
    cfg["model"]["hidden_act"] = "relu"
    cfg["model"]["num_layers"] += 1
    (workdir / "config.json").write_text(json.dumps(cfg))
    capsys.readouterr()
    after = interop.load(str(workdir))
    err = capsys.readouterr().err
    assert "disagrees with checkpoint" in err and "hidden_act" in err and "num_layers" in err
    assert after.model.hidden_act == before.model.hidden_act != "relu"
    assert after.model.num_layers == before.model.num_layers
    for a, b in zip(jax.tree_util.tree_leaves(before.params),
                    jax.tree_util.tree_leaves(after.params)):
        np.testing.assert_array_equal(a, b)
