"""Continued pretraining of a released checkpoint, one family at a time: an HF folder in
the layout transformers writes for the family's releases (its config keys, tokenizer
files and safetensors names, built here with transformers' own classes at tiny size)
continues given only init_from, a corpus and a step count (and, for the test's speed,
a small batch; configs/continue_mlm.py with the family's objective, GPT-2 and T5 with
their own recipes), evaluates before its first step and after its last, exports, and loads back
in transformers holding the continued weights. BERT's and XLM-R's are in
tests/interop/test_interop.py and tests/families/test_xlmr.py; DistilBERT needs a teacher and ELECTRA a
generator beside its discriminator, so neither is here."""

import json

import jax
import numpy as np
import pytest

from conftest import SHARED_DATA, load_config

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
BOOKS = ",".join(str(p) for p in sorted((SHARED_DATA / "corpus" / "gutenberg").glob("*.txt"))[:2])
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not SHARED_DATA.exists(), reason="shared data not available")]


@pytest.mark.parametrize("family,recipe", [
    ("roberta", "continue_mlm.py:roberta"), ("modernbert", "continue_mlm.py:modernbert"),
    ("deberta", "continue_mlm.py:deberta_mlm"), ("albert", "continue_mlm.py:albert"),
    ("gpt2", "gpt2.py"), ("t5", "t5.py"), ("bart", "continue_mlm.py:bart")])
def test_a_released_folder_continues_and_exports(family, recipe, tmp_path):
    from pretrainx import interop, pretrain
    from test_interop import _tiny_hf, _tiny_seq2seq
    torch.manual_seed(0)
    if family == "modernbert":
        theirs = _modernbert_release(tmp_path / "hf")
    elif family in ("t5", "bart"):
        theirs = _tiny_seq2seq(family, tmp_path / "hf")
    else:
        theirs, files = _tiny_hf(family, tie=True)
        theirs.save_pretrained(tmp_path / "hf")
        for name, source in files.items():
            (tmp_path / "hf" / name).write_bytes(open(source, "rb").read())
    cfg = load_config(*recipe.split(":"))
    cfg.init_from = str(tmp_path / "hf")
    cfg.data.train_files = BOOKS
    cfg.total_steps, cfg.eval_steps = 2, 1
    cfg.global_batch_size, cfg.seq_len = 8, 64
    if "max_predictions_per_seq" in cfg.data:
        cfg.data.max_predictions_per_seq = 20  # the recipe's follows its own length, 128
    if "phase2" in cfg:
        cfg.phase2.fraction = 0.0  # one length
    cfg.data.eval_split_percent = 10.0  # 1% of two books is not one batch
    pretrain.train(cfg, str(tmp_path / "w"), devices=jax.devices()[:1])
    records = [json.loads(line) for line in (tmp_path / "w" / "metrics.jsonl").open()]
    evals = [r["step"] for r in records if r.get("split") == "eval"]
    assert evals[0] == 0 and evals[-1] == 2  # before and after
    continued = interop.load(str(tmp_path / "w"))
    assert continued.family == family and continued.tokenizer.startswith(str(tmp_path / "hf"))
    interop.hf.save(continued, str(tmp_path / "out"))
    again = type(theirs).from_pretrained(str(tmp_path / "out")).eval()
    table = again.get_input_embeddings().weight.detach().numpy()
    released = theirs.get_input_embeddings().weight.detach().numpy()
    ours = np.asarray(_word_table(continued.params))
    assert table.shape == released.shape and np.array_equal(table, ours)
    assert not np.array_equal(table, released)


def _modernbert_release(folder):
    """ModernBERT as released: tokenizer.json alone, a byte-level BPE with BERT's
    special tokens added after its pieces (GPT-2's pieces stand in for OLMo's)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    gpt2 = SHARED_DATA / "tokenizers" / "gpt2"
    tok = Tokenizer(models.BPE.from_file(str(gpt2 / "vocab.json"), str(gpt2 / "merges.txt")))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"])
    ids = {t: tok.token_to_id(t) for t in ("[CLS]", "[SEP]", "[PAD]")}
    model = transformers.ModernBertForMaskedLM(transformers.ModernBertConfig(
        vocab_size=50265, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=64, global_attn_every_n_layers=1, pad_token_id=ids["[PAD]"],
        cls_token_id=ids["[CLS]"], sep_token_id=ids["[SEP]"], bos_token_id=ids["[CLS]"],
        eos_token_id=ids["[SEP]"])).eval()
    model.save_pretrained(folder)
    tok.save(str(folder / "tokenizer.json"))
    return model


def _word_table(params: dict):
    """The word table, wherever the family keeps it (the one embedding leaf under
    token_embed, tok_embed or T5's shared table)."""
    found = [leaf for path, leaf in jax.tree_util.tree_leaves_with_path(params)
             if any(f"['{name}']" in jax.tree_util.keystr(path)
                    for name in ("token_embed", "tok_embed", "tok_embeddings", "shared", "wte"))]
    assert len(found) == 1, [jax.tree_util.keystr(p) for p, _ in
                             jax.tree_util.tree_leaves_with_path(params)][:20]
    return found[0]


def _discriminator_release(family: str, folder):
    """A released discriminator alone (google/electra-small-discriminator's
    ElectraForPreTraining; DeBERTa-v3's DebertaV2Model), with its tokenizer files."""
    from test_interop import SPM
    small = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                 intermediate_size=64)
    if family == "electra":
        model = transformers.ElectraForPreTraining(transformers.ElectraConfig(
            vocab_size=30522, embedding_size=16, **small)).eval()
        files = {f.name: f for f in (SHARED_DATA / "tokenizers" / "bert-base-uncased").iterdir()}
    else:
        model = transformers.DebertaV2Model(transformers.DebertaV2Config(
            vocab_size=4096, relative_attention=True, position_buckets=8,
            max_relative_positions=32, pos_att_type=["p2c", "c2p"], position_biased_input=False,
            norm_rel_ebd="layer_norm", share_att_key=True, **small)).eval()
        files = {"spm.model": SPM}
    model.save_pretrained(folder)
    for name, source in files.items():
        (folder / name).write_bytes(open(source, "rb").read())
    return model


@pytest.mark.parametrize("family,objective", [("electra", "electra"),
                                              ("deberta", "deberta_rtd")])
def test_a_released_discriminator_continues_from_its_own_weights(family, objective, tmp_path):
    """Replaced-token detection from a released discriminator: its encoder is what the
    run starts from (after one step at warmup's rate 0 the export holds the released
    tensors) and only the generator starts fresh. The run keeps the embeddings apart
    (ELECTRA) or as E_G + E_delta (DeBERTa-v3), so the import is laid out as the run's
    tree; before, only the discriminator's head found its place and the encoder
    restarted from random weights."""
    from pretrainx import interop, pretrain
    torch.manual_seed(0)
    released = _discriminator_release(family, tmp_path / "hf")
    cfg = load_config("continue_mlm.py", objective)
    cfg.init_from = str(tmp_path / "hf")
    cfg.data.train_files = BOOKS
    cfg.total_steps, cfg.eval_steps, cfg.eval_every = 1, 1, 1
    cfg.global_batch_size, cfg.seq_len = 8, 64
    cfg.data.max_predictions_per_seq = 20
    cfg.data.eval_split_percent = 10.0
    pretrain.train(cfg, str(tmp_path / "w"), devices=jax.devices()[:1])
    interop.hf.save(interop.load(str(tmp_path / "w")), str(tmp_path / "out"))
    again = type(released).from_pretrained(str(tmp_path / "out")).eval()
    theirs, ours = released.state_dict(), again.state_dict()
    body = [k for k in theirs if k.startswith(("electra.", "embeddings.", "encoder."))]
    assert len(body) > 20
    for name in body:
        assert np.allclose(ours[name].numpy(), theirs[name].numpy(), rtol=0, atol=1e-6), name
