"""XLM-R from HuggingFace and back: its SentencePiece model in fairseq's ids, an
XLMRobertaForMaskedLM folder as transformers writes one, and the multilingual recipe
(our [PAD]-first SentencePiece ids at RoBERTa's position offset) exported as XLM-R.

Logits within 1e-4 of transformers' on real multilingual text, padded in a batch;
tokenizer ids equal to transformers' on real paragraphs of eight languages.
"""

import json
import re

import jax
import numpy as np
import pytest

from conftest import REPO, load_config, override
from pretrainx import interop
from pretrainx.data.sentencepiece_tokenizer import FairseqSentencePiece
from pretrainx.data.tokenizers import load_tokenizer
from pretrainx.errors import UserError
from pretrainx.interop import hf

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
spm = pytest.importorskip("sentencepiece")

MULTI = REPO.parent / "shared" / "data" / "corpus" / "multilingual"
LANGUAGES = ("de", "es", "it", "ru", "cs", "pt", "zh")
pytestmark = pytest.mark.skipif(not MULTI.exists(), reason="shared data not available")


def _paragraphs(per_language=40) -> list:
    """Real paragraphs of seven languages. Runs of one repeated character ("====") are
    left out: on them SentencePiece and the tokenizers library break a tie between two
    equally scored splits differently, for transformers' own tokenizer.json too."""
    out = []
    for lang in LANGUAGES:
        text = (MULTI / f"fortunes.{lang}.txt").read_text(encoding="utf-8")
        kept = [p for p in text.split("\n\n") if p.strip() and not re.search(r"(.)\1{3}", p)]
        out += kept[:per_language]
    return out


@pytest.fixture(scope="module")
def xlmr_spm(tmp_path_factory):
    """A 2,000-piece unigram model in XLM-R's layout (<unk> <s> </s> at 0-2, no pad
    piece), trained on the multilingual corpus."""
    prefix = tmp_path_factory.mktemp("spm") / "xlmr"
    spm.SentencePieceTrainer.train(
        input=",".join(str(MULTI / f"fortunes.{lang}.txt") for lang in LANGUAGES),
        model_prefix=str(prefix), vocab_size=2000, input_sentence_size=20000,
        shuffle_input_sentence=False, character_coverage=0.9995, minloglevel=2)
    return str(prefix) + ".model"


def _hf_folder(spm_file, folder, seed=0):
    """A tiny XLMRobertaForMaskedLM and its tokenizer, saved by transformers."""
    folder.mkdir()
    (folder / "sentencepiece.bpe.model").write_bytes(open(spm_file, "rb").read())
    tok = transformers.XLMRobertaTokenizer.from_pretrained(str(folder))
    torch.manual_seed(seed)
    config = transformers.XLMRobertaConfig(
        vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=66, pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    model = transformers.XLMRobertaForMaskedLM(config).eval()
    model.save_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    return model, tok


def _logits(model, rows):
    with torch.no_grad():
        return model(input_ids=torch.tensor(rows["input_ids"]),
                     attention_mask=torch.tensor(rows["attention_mask"])).logits.numpy()


def test_xlmr_sentencepiece_ids_are_huggingface_ids(xlmr_spm, tmp_path):
    """fairseq's layout over XLM-R's model: <s> <pad> </s> <unk> first, pieces shifted
    by one, <mask> last, exactly as transformers' XLMRobertaTokenizer gives them."""
    (tmp_path / "sentencepiece.bpe.model").write_bytes(open(xlmr_spm, "rb").read())
    theirs = transformers.XLMRobertaTokenizer.from_pretrained(str(tmp_path))
    ours = load_tokenizer(str(tmp_path / "sentencepiece.bpe.model"), layout="fairseq")
    assert isinstance(ours, FairseqSentencePiece) and ours.vocab_size == len(theirs) == 2002
    assert (ours.cls_id, ours.pad_id, ours.sep_id, ours.unk_id, ours.mask_id) == (
        theirs.cls_token_id, theirs.pad_token_id, theirs.sep_token_id, theirs.unk_token_id,
        theirs.mask_token_id)
    for paragraph in _paragraphs():
        assert ours.encode(paragraph) == theirs(paragraph, add_special_tokens=False)["input_ids"]
    line = next(p for p in _paragraphs() if "ä" in p).split("\n")[0].strip()
    assert ours.decode(ours.encode(line)) == line
    with pytest.raises(UserError, match="has no pad piece"):  # without RoBERTa's layout
        load_tokenizer(xlmr_spm)


def test_an_xlmr_folder_imports_and_exports_with_huggingface_logits(xlmr_spm, tmp_path):
    """An XLMRobertaForMaskedLM folder reads into family roberta (positions from
    <pad> + 1 = 2); pretrainx.load gives its logits; the export is XLM-R again, with the
    tokenizer files transformers reads in the same ids."""
    import pretrainx
    theirs, tok = _hf_folder(xlmr_spm, tmp_path / "hf")
    back = interop.load(str(tmp_path / "hf"))
    assert (back.family, back.head, back.model.position_offset) == ("roberta", "mlm", 2)
    model = pretrainx.load(str(tmp_path / "hf"))
    texts = _paragraphs(1)[:3]
    with pytest.raises(UserError, match="longer than the 64 positions"):
        model(texts=[texts[0] * 3])
    ours = model(texts=[t[:80] for t in texts])
    mask = ours["attention_mask"].astype(bool)
    assert [model.ids(t[:80]) for t in texts[:1]] == [tok(texts[0][:80])["input_ids"]]
    diff = np.abs(ours["logits"] - _logits(theirs, ours))[mask]
    assert diff.max() <= 1e-4
    written = hf.save(back, str(tmp_path / "out"))
    assert {"sentencepiece.bpe.model", "tokenizer.json"} <= set(written)
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert (config["model_type"], config["architectures"]) == ("xlm-roberta",
                                                               ["XLMRobertaForMaskedLM"])
    again = transformers.AutoModelForMaskedLM.from_pretrained(str(tmp_path / "out")).eval()
    assert np.abs(_logits(again, ours) - _logits(theirs, ours))[mask].max() == 0
    auto = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "out"))
    for paragraph in _paragraphs(5):
        assert auto(paragraph)["input_ids"] == tok(paragraph)["input_ids"]


def test_the_multilingual_recipe_exports_as_xlmr_huggingface(tmp_path):
    """The multilingual recipe's model (our [PAD]=0 SentencePiece ids, RoBERTa's position
    offset 2) is written as XLMRobertaForMaskedLM: its position table shifted to HF's
    numbering from <pad> + 1 = 1, its vocabulary as tokenizer.json in our ids. The
    recipe's export used to be refused."""
    import pretrainx
    from test_hf_encoders import TINY, _init
    cfg = load_config("multilingual_quickstart.py")
    cfg.model.update(**TINY, max_position_embeddings=66)
    cfg = override(cfg, {"seq_len": 64})
    tokenizer = load_tokenizer(cfg.data.tokenizer, layout="fairseq")
    assert (tokenizer.pad_id, cfg.model.position_offset) == (0, 2)
    texts = [t[:150] for t in _paragraphs(1)]
    rows = [[tokenizer.cls_id] + tokenizer.encode(t)[:40] + [tokenizer.sep_id] for t in texts]
    length = max(map(len, rows))
    batch = {"input_ids": np.zeros((len(rows), length), np.int32),
             "token_type_ids": np.zeros((len(rows), length), np.int32),
             "attention_mask": np.zeros((len(rows), length), np.int32),
             "masked_lm_positions": np.tile(np.arange(length, dtype=np.int32), (len(rows), 1))}
    for i, ids in enumerate(rows):
        batch["input_ids"][i, :len(ids)], batch["attention_mask"][i, :len(ids)] = ids, 1
    model, params, pretrained = _init(cfg, batch, tokenizer)
    written = hf.save(pretrained, str(tmp_path / "out"))
    assert "tokenizer.json" in written and "sentencepiece.bpe.model" not in written
    theirs = transformers.AutoModelForMaskedLM.from_pretrained(str(tmp_path / "out")).eval()
    assert type(theirs).__name__ == "XLMRobertaForMaskedLM"
    assert theirs.config.max_position_embeddings == 65
    mine = np.asarray(jax.jit(model.apply)({"params": params}, batch)["mlm_logits"])
    mask = batch["attention_mask"].astype(bool)
    assert np.abs(mine - _logits(theirs, batch))[mask].max() <= 1e-4
    auto = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "out"))
    for paragraph in _paragraphs(10):
        assert auto(paragraph)["input_ids"] == (
            [tokenizer.cls_id] + tokenizer.encode(paragraph) + [tokenizer.sep_id])
    again = pretrainx.load(str(tmp_path / "out"))(ids=rows[:1])["logits"][0, :len(rows[0])]
    assert np.abs(again - mine[0, :len(rows[0])]).max() <= 1e-4


def test_an_xlmr_folder_whose_sentencepiece_model_has_a_pad_piece_reads_transformers_ids(
        tmp_path):
    """A SentencePiece model trained with a pad piece, wrapped by XLMRobertaTokenizer and
    saved with its tokenizer.json: transformers shifts every piece by one (its own <pad>
    is not fairseq's 1). The import reads tokenizer.json's ids, not the model's raw ones
    (which put every word one embedding row off, silently), and the export keeps the
    folder's pad id, positions and logits."""
    import pretrainx
    prefix = tmp_path / "padded"
    spm.SentencePieceTrainer.train(
        input=",".join(str(MULTI / f"fortunes.{lang}.txt") for lang in LANGUAGES),
        model_prefix=str(prefix), vocab_size=2000, input_sentence_size=20000,
        shuffle_input_sentence=False, character_coverage=0.9995, minloglevel=2, pad_id=3)
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "sentencepiece.bpe.model").write_bytes((tmp_path / "padded.model").read_bytes())
    fast = getattr(transformers, "XLMRobertaTokenizerFast", transformers.XLMRobertaTokenizer)
    tok = fast.from_pretrained(str(folder))
    torch.manual_seed(0)
    theirs = transformers.XLMRobertaForMaskedLM(transformers.XLMRobertaConfig(
        vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=70, pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)).eval()
    theirs.save_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    back = interop.load(str(folder))
    assert back.tokenizer == str(folder / "tokenizer.json")
    model = pretrainx.load(str(folder))
    texts = [t[:80] for t in _paragraphs(1)[:3]]
    for text in texts:
        assert model.ids(text) == tok(text)["input_ids"]
    ours = model(texts=texts)
    mask = ours["attention_mask"].astype(bool)
    assert np.abs(ours["logits"] - _logits(theirs, ours))[mask].max() <= 1e-4
    hf.save(back, str(tmp_path / "out"))
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert (config["pad_token_id"], config["max_position_embeddings"]) == (
        tok.pad_token_id, 70)
    again = transformers.AutoModelForMaskedLM.from_pretrained(str(tmp_path / "out")).eval()
    assert np.abs(_logits(again, ours) - _logits(theirs, ours))[mask].max() == 0
    auto = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "out"))
    for paragraph in _paragraphs(5):
        assert auto(paragraph)["input_ids"] == tok(paragraph)["input_ids"]


@pytest.mark.slow
def test_an_xlmr_folder_continues_pretraining_and_exports_as_xlmr(xlmr_spm, tmp_path):
    """configs/continue_mlm.py:roberta with only init_from (an XLM-R folder), a corpus and
    a step count: the tokenizer (fairseq's ids over sentencepiece.bpe.model) and the
    model come from the folder, the run evaluates before its first step and after its
    last, and the export loads in transformers with the continued weights."""
    import jax
    from conftest import load_config
    from pretrainx import pretrain
    theirs, _ = _hf_folder(xlmr_spm, tmp_path / "hf")
    cfg = load_config("continue_mlm.py", "roberta")
    cfg.init_from = str(tmp_path / "hf")
    cfg.data.train_files = ",".join(str(MULTI / f"fortunes.{lang}.txt") for lang in LANGUAGES[:3])
    cfg.total_steps = 2
    cfg.global_batch_size, cfg.seq_len = 16, 64
    cfg.data.eval_split_percent = 5.0
    pretrain.train(cfg, str(tmp_path / "w"), devices=jax.devices()[:1])
    records = [json.loads(line) for line in (tmp_path / "w" / "metrics.jsonl").open()]
    evals = [r["step"] for r in records if r.get("split") == "eval"]
    assert evals[0] == 0 and evals[-1] == 2  # before and after
    continued = interop.load(str(tmp_path / "w"))
    assert continued.tokenizer.endswith("sentencepiece.bpe.model")
    hf.save(continued, str(tmp_path / "out"))
    again = transformers.AutoModelForMaskedLM.from_pretrained(str(tmp_path / "out")).eval()
    assert type(again).__name__ == "XLMRobertaForMaskedLM"
    word_table = again.roberta.embeddings.word_embeddings.weight.detach().numpy()
    ours = np.asarray(continued.params["bert"]["token_embed"]["embedding"])
    assert np.array_equal(word_table, ours)
    assert not np.array_equal(word_table,
                              theirs.roberta.embeddings.word_embeddings.weight.detach().numpy())
