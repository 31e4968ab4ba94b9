"""Tokenizers: BERT parity, special ids, whole-word table, SentencePiece training and CLI."""

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pretrainx.data.tokenizers import (
    SentencePieceTokenizer,
    WordPieceTokenizer,
    load_tokenizer,
    train_sentencepiece,
)
from pretrainx.errors import UserError

REPO = Path(__file__).resolve().parents[2]
DATA = REPO.parent / "shared" / "data"
BERT_VOCAB = DATA / "tokenizers" / "bert-base-uncased" / "vocab.txt"
CORPUS = DATA / "corpus"
ALICE = CORPUS / "gutenberg" / "pg11_alice_in_wonderland.txt"

needs_data = pytest.mark.skipif(not BERT_VOCAB.exists(), reason="shared data not available")


def _lines(path: Path, limit=None) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [line for line in itertools.islice(f, limit) if line.strip()]


@pytest.fixture(scope="module")
def bert():
    return load_tokenizer(str(BERT_VOCAB))


@pytest.fixture(scope="module")
def hf_bert():
    os.environ["HF_HUB_OFFLINE"] = "1"
    transformers = pytest.importorskip("transformers")
    # from the folder: transformers 5 ignores a vocab_file argument (every id was [UNK])
    return transformers.BertTokenizerFast.from_pretrained(str(BERT_VOCAB.parent),
                                                          do_lower_case=True)


_CORPUS_FILES = sorted(str(p.relative_to(CORPUS)) for p in CORPUS.rglob("*") if p.is_file()) \
    if CORPUS.is_dir() else ["absent"]


@needs_data
@pytest.mark.parametrize("relpath", _CORPUS_FILES)
def test_wordpiece_matches_huggingface(bert, hf_bert, relpath):
    """Every line of every file of the shared corpus (115k lines): identical ids."""
    lines = _lines(CORPUS / relpath)
    expected = hf_bert(lines, add_special_tokens=False)["input_ids"]
    for line, want in zip(lines, expected):
        assert bert.encode(line) == want, line


@needs_data
def test_wordpiece_edge_cases_match_huggingface(bert, hf_bert):
    texts = ["Ça va? Ÿes—«naïve» café…", "ΟΔΟΣ Σ", "中文字abc", "x" * 101, "tab\there\x00\ufffd\u200bz",
             "$5+^3`~@", "  ", ""]
    for text in texts:
        assert bert.encode(text) == hf_bert(text, add_special_tokens=False)["input_ids"], text


@needs_data
def test_bert_special_ids(bert):
    assert isinstance(bert, WordPieceTokenizer)
    assert (bert.pad_id, bert.unk_id, bert.cls_id, bert.sep_id, bert.mask_id) == (0, 100, 101, 102, 103)
    np.testing.assert_array_equal(bert.special_ids(), [0, 100, 101, 102, 103])
    assert bert.special_ids().dtype == np.int32
    assert bert.vocab_size == 30522
    assert load_tokenizer(str(BERT_VOCAB.parent)).path == str(BERT_VOCAB)


def test_vocab_missing_mask_is_user_error(tmp_path):
    vocab = tmp_path / "my_vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n##s\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"my_vocab\.txt.*\[MASK\]"):
        load_tokenizer(str(vocab))


def test_bad_paths_are_user_errors(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(UserError, match="empty.txt"):
        load_tokenizer(str(empty))
    with pytest.raises(UserError, match="missing.model"):
        load_tokenizer(str(tmp_path / "missing.model"))
    with pytest.raises(UserError, match="no vocab.txt"):
        load_tokenizer(str(_empty_dir(tmp_path)))
    garbage = tmp_path / "garbage.model"
    garbage.write_bytes(b"not a model")
    with pytest.raises(UserError, match="garbage.model"):
        load_tokenizer(str(garbage))


def _empty_dir(tmp_path: Path) -> Path:
    d = tmp_path / "nothing_here"
    d.mkdir()
    return d


@needs_data
def test_word_start_mask(bert):
    ids = bert.encode("The unaffable dog")
    assert [bert.id_to_piece(i) for i in ids] == ["the", "una", "##ffa", "##ble", "dog"]
    ids = np.array([[bert.cls_id] + ids + [bert.sep_id, bert.pad_id]])
    mask = bert.word_start_mask(ids)
    assert mask.dtype == bool and mask.shape == ids.shape
    assert mask.tolist() == [[True, True, True, False, False, True, True, True]]
    with pytest.raises(UserError, match="-1"):
        bert.word_start_mask(np.array([-1]))


@needs_data
def test_wordpiece_decode(bert):
    ids = bert.encode("The unaffable dog, barked!")
    assert bert.decode(ids + [bert.pad_id] * 3) == "the unaffable dog , barked !"


@pytest.fixture(scope="module")
def alice_model(tmp_path_factory):
    if not ALICE.exists():
        pytest.skip("shared data not available")
    out = tmp_path_factory.mktemp("spm") / "a" / "spiece"
    return train_sentencepiece([str(ALICE)], str(out), vocab_size=1000)


def test_sentencepiece_ids_and_round_trip(alice_model):
    assert alice_model.endswith("spiece.model")
    assert Path(alice_model[: -len(".model")] + ".vocab").exists()
    tok = load_tokenizer(alice_model)
    assert isinstance(tok, SentencePieceTokenizer)
    assert tok.vocab_size == 1000
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 1, 2, 3, 4)
    np.testing.assert_array_equal(tok.special_ids(), [0, 1, 2, 3, 4])
    text = "alice was beginning to get very tired of sitting by her sister on the bank."
    ids = tok.encode(text)
    assert tok.decode(ids + [tok.pad_id]) == text
    assert tok.encode("Alice WAS") == tok.encode("alice was")  # nmt_nfkc_cf lower-cases
    starts = tok.word_start_mask(np.array(ids))
    assert starts.sum() == len(text.split())
    assert tok.word_start_mask(np.array([0, 1, 2, 3, 4])).all()


def test_sentencepiece_training_is_deterministic(alice_model, tmp_path):
    again = train_sentencepiece([str(ALICE)], str(tmp_path / "b" / "other"), vocab_size=1000)
    assert Path(again).read_bytes() == Path(alice_model).read_bytes()


def test_sentencepiece_training_bad_input(tmp_path):
    blank = tmp_path / "blank.txt"
    blank.write_text("\n  \n", encoding="utf-8")
    with pytest.raises(UserError, match="blank.txt"):
        train_sentencepiece([str(blank)], str(tmp_path / "m"), vocab_size=100)
    with pytest.raises(UserError, match="nope.txt"):
        train_sentencepiece([str(tmp_path / "nope.txt")], str(tmp_path / "m"), vocab_size=100)


def _cli(*args, stdin=""):
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "pretrainx.tokenizer", *args], input=stdin,
                          capture_output=True, text=True, encoding="utf-8", env=env, timeout=60)


def test_cli_encode_decode_round_trip(alice_model):
    line = "the queen said: off with her head!"
    enc = _cli("encode", f"--tokenizer={alice_model}", stdin=line + "\n\n")
    assert enc.returncode == 0, enc.stderr
    ids_line, empty_line = enc.stdout.splitlines()
    assert [int(i) for i in ids_line.split()] == load_tokenizer(alice_model).encode(line)
    assert empty_line == ""
    dec = _cli("decode", f"--tokenizer={os.path.dirname(alice_model)}", stdin=enc.stdout)
    assert dec.returncode == 0, dec.stderr
    assert dec.stdout.splitlines() == [line, ""]


def test_cli_user_errors(tmp_path):
    res = _cli("train", f"--input={tmp_path}/none*.txt", "--vocab_size=100", f"--output={tmp_path}/")
    assert res.returncode == 2
    assert res.stderr.strip() == f"error: --input glob matches no files: {tmp_path}/none*.txt"
    res = _cli("decode", f"--tokenizer={tmp_path}/absent.model", stdin="1 2\n")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.startswith("error: ") and "absent.model" in res.stderr


def test_cli_train_into_directory(tmp_path):
    if not ALICE.exists():
        pytest.skip("shared data not available")
    out = tmp_path / "tok"
    res = _cli("train", f"--input={ALICE}", "--vocab_size=500", "--model_type=bpe", f"--output={out}/")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == str(out / "spiece.model")
    assert (out / "spiece.vocab").exists()
    assert load_tokenizer(str(out)).vocab_size == 500


def _tokenizer_json_alone(kind: str, folder: Path):
    """A fast tokenizer saved by transformers, then every file but tokenizer.json
    removed (ModernBERT's release ships only that); returns transformers' tokenizer."""
    transformers = pytest.importorskip("transformers")
    gpt2 = DATA / "tokenizers" / "gpt2"
    made = {
        # from the folders: transformers 5 ignores vocab_file / merges_file arguments
        "wordpiece": lambda: transformers.BertTokenizerFast.from_pretrained(
            str(BERT_VOCAB.parent)),
        "byte-level": lambda: transformers.GPT2TokenizerFast.from_pretrained(str(gpt2)),
        "unigram": lambda: transformers.AlbertTokenizerFast(  # the model's own pieces
            vocab_file=str(REPO / "pretrainx" / "assets" / "spm_4k.model"), pad_token="[PAD]",
            unk_token="[UNK]"),
    }[kind]()
    made.save_pretrained(folder)
    for path in folder.iterdir():
        if path.name != "tokenizer.json":
            path.unlink()
    return made


@needs_data
@pytest.mark.parametrize("kind", ["wordpiece", "byte-level", "unigram"])
def test_a_tokenizer_json_alone_gives_transformers_ids(kind, tmp_path):
    """A tokenizer.json alone (read with the tokenizers library) gives the ids
    transformers gives on real text, and the special ids transformers names."""
    theirs = _tokenizer_json_alone(kind, tmp_path)
    ours = load_tokenizer(str(tmp_path))
    assert ours.path.endswith("tokenizer.json") and ours.vocab_size == len(theirs)
    text = ALICE.read_text(encoding="utf-8")[5000:25000]
    for paragraph in [p for p in text.split("\n\n") if p.strip()][:40]:
        assert ours.encode(paragraph) == theirs(paragraph, add_special_tokens=False)["input_ids"]
    assert (ours.cls_id, ours.sep_id, ours.pad_id) == (
        theirs.convert_tokens_to_ids(theirs.cls_token or theirs.bos_token),
        theirs.convert_tokens_to_ids(theirs.sep_token or theirs.eos_token),
        theirs.convert_tokens_to_ids(theirs.pad_token or theirs.eos_token))
    # whole-word masking's table: every word after the first starts one (byte-level BPE
    # marks a word by the space before it, which the first word lacks)
    starts = ours.word_start_mask(np.asarray(ours.encode("the cat sat on the mat")))
    assert starts.sum() == 6 - (kind == "byte-level")
    # only byte-level BPE spells a space into a token: sentences of a document join with one
    assert ours.spaces_are_tokens == (kind == "byte-level")


# Each family's tokenizer class as transformers saves it (5.x: tokenizer.json, beside a
# SentencePiece model where there is one; 4.x's fast classes: the same), with the
# vocabulary it is built from and the id layout the family reads it under
_SAVED = {
    "bert": ("BertTokenizerFast", "bert-base-uncased", None, ""),
    "gpt2": ("GPT2TokenizerFast", "gpt2", None, ""),
    "roberta": ("RobertaTokenizerFast", "roberta", None, "fairseq"),
    "bart": ("BartTokenizerFast", "roberta", None, "fairseq"),
    "albert": ("AlbertTokenizerFast", None, ("spm_4k.model", "spiece.model"), ""),
    "t5": ("T5TokenizerFast", None, ("spm_t5_4k.model", "spiece.model"), ""),
    "deberta": ("DebertaV2TokenizerFast", None, ("spm_4k.model", "spm.model"), ""),
    "xlm-r": ("XLMRobertaTokenizerFast", None, ("spm_multi_8k.model",
                                                "sentencepiece.bpe.model"), "fairseq"),
}


@needs_data
@pytest.mark.parametrize("family", sorted(_SAVED))
def test_every_familys_saved_folder_reads_in_transformers_ids(family, tmp_path):
    """A folder as transformers' save_pretrained writes it for each family's tokenizer
    class is read in the ids transformers gives on real text, accents and other scripts
    included, with its special ids: the family's own file where it agrees with the
    folder's tokenizer.json, tokenizer.json where it does not (an XLM-R model in our
    [PAD]-first layout, which transformers shifts by one; ALBERT, whose tokenizer strips
    accents its SentencePiece model keeps)."""
    transformers = pytest.importorskip("transformers")
    from pretrainx.data import folder_ids
    from pretrainx.interop import hf
    name, vocabulary, model_file, layout = _SAVED[family]
    cls = getattr(transformers, name, None) or getattr(transformers, name[:-len("Fast")])
    if model_file:  # the SentencePiece model under the name the class reads
        source, saved_as = model_file
        (tmp_path / saved_as).write_bytes((REPO / "pretrainx" / "assets" / source).read_bytes())
        theirs = cls.from_pretrained(str(tmp_path))
    elif vocabulary == "roberta":  # GPT-2's files in RoBERTa's ids, as its release has them
        from pretrainx.data import bpe
        gpt2 = DATA / "tokenizers" / "gpt2"
        source = tmp_path / "source"
        source.mkdir()
        roberta = bpe.roberta_ids(load_tokenizer(str(gpt2)))
        (source / "vocab.json").write_text(json.dumps(bpe.vocab_json(roberta)))
        (source / "merges.txt").write_bytes((gpt2 / "merges.txt").read_bytes())
        theirs = cls.from_pretrained(str(source))
    else:  # from the folder: transformers 5 ignores vocab_file / merges_file arguments
        theirs = cls.from_pretrained(str(DATA / "tokenizers" / vocabulary))
    theirs.save_pretrained(str(tmp_path))
    path, lower_case = hf.tokenizer_of(str(tmp_path))
    chosen = folder_ids.agreeing(str(tmp_path), path,
                                 lambda: load_tokenizer(path, lower_case, layout))
    ours = load_tokenizer(chosen, lower_case, layout)
    direct = load_tokenizer(str(tmp_path), lower_case, layout)  # the folder as data.tokenizer
    for line in folder_ids.sample():
        assert ours.encode(line) == theirs(line, add_special_tokens=False)["input_ids"], line
        assert direct.encode(line) == ours.encode(line), line
    for attr, token in (("pad_id", theirs.pad_token), ("mask_id", theirs.mask_token),
                        ("unk_id", theirs.unk_token)):
        if token is not None and getattr(ours, attr) >= 0:
            assert getattr(ours, attr) == theirs.convert_tokens_to_ids(token), attr
