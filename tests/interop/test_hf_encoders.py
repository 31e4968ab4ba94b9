"""RoBERTa, ALBERT, SpanBERT and ELECTRA out to HuggingFace and back.

Each family's model (random weights, as its objective builds it) is read as its
objective's `as_pretrained` reads a finished run, written with `hf.save`, loaded by
transformers' PyTorch class, and must give the same logits on real sentences (padded
in a batch) within 1e-4; reading the directory back gives the same tensors bit for bit.
"""

import jax
import numpy as np
import pytest
from flax import linen as nn

from conftest import ALICE, REPO, SENTENCES, load_config, override, sentence_batch
from pretrainx import interop, objectives
from pretrainx.data.tokenizers import load_tokenizer
from pretrainx.errors import UserError
from pretrainx.interop import hf
from pretrainx.families.bert import model as bert
from pretrainx.families.electra import model as electra

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SPM = str(REPO / "pretrainx" / "assets" / "spm_4k.model")
TINY = dict(num_layers=2, hidden_size=64, num_heads=4, mlp_dim=128, dropout_rate=0.0,
            attention_dropout_rate=0.0, dtype="float32")


def _cfg(recipe, tokenizer, **model):
    c = load_config(recipe)
    c.model.update(**TINY, **model)
    return override(c, {"data.tokenizer": tokenizer, "data.train_files": ALICE})


def _batch(tokenizer, pairs=False):
    return sentence_batch(tokenizer, pairs=pairs)


def _init(cfg, batch, tokenizer):
    """The objective's model with random weights, read as a finished run of it is."""
    objective = objectives.build(cfg, tokenizer)
    params = jax.jit(objective.model.init)(jax.random.key(0), batch)["params"]
    params = interop.unstack_layers(jax.tree_util.tree_map(
        lambda x: np.asarray(x, np.float32), jax.device_get(nn.unbox(params))))
    model, converted, head = objectives.OBJECTIVES.get(cfg.objective, "objective").as_pretrained(
        cfg.model, params)
    pretrained = interop.Pretrained(model=model, params=converted, tokenizer=cfg.data.tokenizer,
                                    lower_case=cfg.data.lower_case, head=head, source="test")
    return objective.model, params, pretrained


def _torch(batch, types=True):
    keys = ("input_ids", "attention_mask") + (("token_type_ids",) if types else ())
    return {k: torch.tensor(batch[k], dtype=torch.long) for k in keys}


def _same_tensors(a, b, skip=()):
    flat_a = {jax.tree_util.keystr(p): x for p, x in jax.tree_util.tree_leaves_with_path(a)}
    flat_b = {jax.tree_util.keystr(p): x for p, x in jax.tree_util.tree_leaves_with_path(b)}
    kept = {k for k in flat_a if not any(s in k for s in skip)}
    assert kept == set(flat_b)
    for key in kept:
        assert np.asarray(flat_a[key]).tobytes() == np.asarray(flat_b[key]).tobytes(), key


def _close(ours, theirs, mask=None):
    diff = np.abs(np.asarray(ours) - np.asarray(theirs))
    assert (diff[mask] if mask is not None else diff).max() <= 1e-4


def test_roberta_masked_lm(shared_data, tmp_path):
    """RobertaForMaskedLM: positions from <pad> + 1 = 2, one token type, exact GeLU; the
    exported vocab.json holds fairseq's layout of GPT-2's pieces, so HF's tokenizer
    gives the ids the model trained on."""
    vocab = str(shared_data / "tokenizers" / "gpt2")
    cfg = _cfg("roberta_base.py", vocab, max_position_embeddings=130)
    tokenizer = load_tokenizer(vocab, layout="fairseq")
    batch = _batch(tokenizer)
    model, params, pretrained = _init(cfg, batch, tokenizer)
    assert pretrained.head == "mlm"
    hf.save(pretrained, str(tmp_path))
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path)
    for s in SENTENCES:
        assert hf_tokenizer(s)["input_ids"] == [0] + tokenizer.encode(s) + [2]
    assert hf_tokenizer.mask_token_id == tokenizer.mask_id == 50264
    theirs = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path).eval()
    assert type(theirs).__name__ == "RobertaForMaskedLM"
    with torch.no_grad():
        logits = theirs(**_torch(batch, types=False)).logits.numpy()
    mine = jax.jit(model.apply)({"params": params}, batch)["mlm_logits"]
    _close(mine, logits, batch["attention_mask"].astype(bool))
    back = interop.load(str(tmp_path))
    assert (back.family, back.head, back.model.position_offset) == ("roberta", "mlm", 2)
    _same_tensors(pretrained.params, back.params)


@pytest.mark.parametrize("shared", [True, False], ids=["shared_layers", "layer_per_group"])
def test_albert_for_pretraining(tmp_path, shared):
    """AlbertForPreTraining: factorised embeddings, one layer group shared by every layer
    (or one group a layer), MLM through the E-wide table and the sentence-order head."""
    cfg = _cfg("albert_base.py", SPM, embedding_size=32, vocab_size=4096, share_layers=shared)
    tokenizer = load_tokenizer(SPM)
    batch = _batch(tokenizer, pairs=True)
    model, params, pretrained = _init(cfg, batch, tokenizer)
    hf.save(pretrained, str(tmp_path))
    theirs = transformers.AutoModelForPreTraining.from_pretrained(tmp_path).eval()
    assert type(theirs).__name__ == "AlbertForPreTraining"
    assert theirs.config.num_hidden_groups == (1 if shared else 2)
    with torch.no_grad():
        out = theirs(**_torch(batch))
    mine = jax.jit(model.apply)({"params": params}, batch)
    _close(mine["mlm_logits"], out.prediction_logits.numpy(),
           batch["attention_mask"].astype(bool))
    _close(mine["nsp_logits"], out.sop_logits.numpy())
    back = interop.load(str(tmp_path))
    assert (back.family, back.head, back.model.share_layers) == ("albert", "pretrain", shared)
    _same_tensors(pretrained.params, back.params)


def test_spanbert_exports_as_bert_masked_lm_without_its_sbo_head(tmp_path):
    cfg = _cfg("spanbert_base.py", SPM, vocab_size=4096)
    tokenizer = load_tokenizer(SPM)
    batch = _batch(tokenizer)
    rows, width = batch["input_ids"].shape
    batch.update(sbo_left=np.zeros((rows, width), np.int32),
                 sbo_right=np.ones((rows, width), np.int32),
                 sbo_offset=np.zeros((rows, width), np.int32))
    model, params, pretrained = _init(cfg, batch, tokenizer)
    assert "SBO" in hf.caveat(pretrained) or "span boundary" in hf.caveat(pretrained)
    hf.save(pretrained, str(tmp_path))
    theirs = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path).eval()
    assert type(theirs).__name__ == "BertForMaskedLM"
    with torch.no_grad():
        logits = theirs(**_torch(batch)).logits.numpy()
    _close(jax.jit(model.apply)({"params": params}, batch)["mlm_logits"], logits,
           batch["attention_mask"].astype(bool))
    back = interop.load(str(tmp_path))
    assert (back.family, back.head) == ("bert", "mlm")
    _same_tensors(pretrained.params, back.params, skip=("sbo_",))


def _electra_batch(tokenizer):
    batch = _batch(tokenizer, pairs=True)
    batch["masked_lm_ids"] = batch["input_ids"]
    batch["masked_lm_weights"] = np.zeros(batch["input_ids"].shape, np.float32)  # no swaps
    return batch


@pytest.mark.slow
def test_electra_discriminator_and_generator(tmp_path):
    """ElectraForPreTraining gives our discriminator's logits and OUTPUT/generator's
    ElectraForMaskedLM our generator's (exact GeLU here: HF's generator head has no
    other), both on the same unreplaced input; E (32) narrower than both networks."""
    cfg = _cfg("electra_small.py", SPM, embedding_size=32, vocab_size=4096, hidden_act="gelu")
    tokenizer = load_tokenizer(SPM)
    batch = _electra_batch(tokenizer)
    model, params, pretrained = _init(cfg, batch, tokenizer)
    assert hf.caveat(pretrained) == ""
    written = hf.save(pretrained, str(tmp_path))
    assert "generator/model.safetensors" in written
    mine = jax.jit(model.apply)({"params": params}, batch)
    assert (np.asarray(mine["disc_input_ids"]) == batch["input_ids"]).all()
    real = batch["attention_mask"].astype(bool)
    disc = transformers.ElectraForPreTraining.from_pretrained(tmp_path).eval()
    gen = transformers.ElectraForMaskedLM.from_pretrained(tmp_path / "generator").eval()
    assert gen.config.hidden_size == electra.generator_config(cfg.model).hidden_size == 16
    with torch.no_grad():
        _close(mine["disc_logits"], disc(**_torch(batch)).logits.numpy(), real)
        _close(mine["mlm_logits"], gen(**_torch(batch)).logits.numpy(), real)
    back = interop.load(str(tmp_path))
    assert (back.family, back.head) == ("electra", "pretrain")
    assert back.model.generator_size == cfg.model.generator_size
    _same_tensors(pretrained.params, back.params)
    # Fine-tuning reads the discriminator under "bert", as BertForFineTuning names it.
    encoder = bert.BertEncoder(back.model)
    x = encoder.apply({"params": back.params["bert"]}, batch["input_ids"],
                      batch["token_type_ids"], batch["attention_mask"], True)
    with torch.no_grad():
        hidden = disc.electra(**_torch(batch)).last_hidden_state.numpy()
    _close(x, hidden, real)
    # pretrainx.load: the discriminator's states and the generator's vocabulary logits
    import pretrainx
    row = [int(i) for i in batch["input_ids"][0][real[0]]]
    got = pretrainx.load(str(tmp_path))(ids=[row])
    with torch.no_grad():
        ids = torch.tensor([row])
        _close(got["hidden_states"], disc.electra(input_ids=ids).last_hidden_state.numpy())
        _close(got["logits"], gen(input_ids=ids).logits.numpy())


def test_what_an_hf_class_cannot_hold_is_refused_in_one_line(shared_data, tmp_path):
    cfg = _cfg("electra_small.py", SPM, embedding_size=32, vocab_size=4096)
    tokenizer = load_tokenizer(SPM)
    _, _, pretrained = _init(cfg, _electra_batch(tokenizer), tokenizer)
    assert "exact GeLU" in hf.caveat(pretrained)  # gelu_tanh, BERT's
    pretrained.head = "classify"
    with pytest.raises(UserError, match="ElectraForSequenceClassification applies GeLU"):
        hf.save(pretrained, str(tmp_path / "classify"))
    assert not (tmp_path / "classify").exists()


def test_a_roberta_at_another_position_offset_exports_its_table_shifted(shared_data, tmp_path):
    """HF's RoBERTa reads the p-th token's position row at <pad> + 1 + p = 2 + p; a model
    trained at offset 0 is written with two unread rows before its table, so
    transformers computes its logits (this export used to be refused)."""
    vocab = str(shared_data / "tokenizers" / "gpt2")
    cfg = _cfg("roberta_base.py", vocab, max_position_embeddings=130, position_offset=0)
    tokenizer = load_tokenizer(vocab, layout="fairseq")
    batch = _batch(tokenizer)
    model, params, pretrained = _init(cfg, batch, tokenizer)
    hf.save(pretrained, str(tmp_path / "roberta"))
    theirs = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "roberta").eval()
    assert theirs.config.max_position_embeddings == 132
    with torch.no_grad():
        logits = theirs(**_torch(batch, types=False)).logits.numpy()
    mine = jax.jit(model.apply)({"params": params}, batch)["mlm_logits"]
    _close(mine, logits, batch["attention_mask"].astype(bool))


def test_a_bert_with_factorised_embeddings_is_refused(tmp_path):
    """E != H in family bert: HF's BertModel cannot hold it (ALBERT and ELECTRA can)."""
    cfg = load_config("electra_small.py").model
    cfg.family = "bert"
    with pytest.raises(UserError, match="factorised embeddings"):
        hf.save(interop.Pretrained(model=cfg, params={}, tokenizer="", lower_case=True,
                                   head="encoder", source="e"), str(tmp_path / "hf"))
    assert not (tmp_path / "hf").exists()


@pytest.mark.parametrize("recipe,model", [
    ("bert_base.py", {}), ("albert_base.py", dict(embedding_size=32)),
    ("electra_small.py", dict(embedding_size=32)), ("deberta_mlm.py", {}),
    ("modernbert_base.py", {})], ids=["bert", "albert", "electra", "deberta", "modernbert"])
def test_a_sentencepiece_export_gives_huggingface_tokenizer_our_ids(recipe, model, tmp_path):
    """A run on a SentencePiece vocabulary exports a tokenizer that transformers'
    AutoTokenizer reads in the run's ids, framed [CLS] text [SEP], on real paragraphs:
    a tokenizer.json of the model (transformers 5 builds tokenizers from it) under the
    class that reads it as it is (not ALBERT's for a BERT: transformers 5's BERT,
    ELECTRA and DeBERTa-v2 classes rebuild their own pipeline and gave other ids)."""
    import json
    cfg = _cfg(recipe, SPM, vocab_size=4096, **model)
    tokenizer = load_tokenizer(SPM)
    batch = _electra_batch(tokenizer) if recipe.startswith("electra") else _batch(tokenizer)
    _, _, pretrained = _init(cfg, batch, tokenizer)
    written = hf.save(pretrained, str(tmp_path / "out"))
    assert "tokenizer.json" in written
    config = json.loads((tmp_path / "out" / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == (
        "AlbertTokenizer" if pretrained.family == "albert" else "PreTrainedTokenizerFast")
    theirs = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "out"))
    text = open(ALICE, encoding="utf-8").read()[5000:20000]
    for paragraph in [p for p in text.split("\n\n") if p.strip()][:30]:
        assert theirs(paragraph)["input_ids"] == (
            [tokenizer.cls_id] + tokenizer.encode(paragraph) + [tokenizer.sep_id])
    assert theirs.mask_token_id == tokenizer.mask_id and theirs.pad_token_id == tokenizer.pad_id
