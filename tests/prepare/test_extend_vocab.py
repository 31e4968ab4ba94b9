"""python -m pretrainx.extend_vocab: domain words appended to a WordPiece vocabulary,
their rows the mean of the rows of the pieces they were split into, every old row and
old tokenisation untouched, the output an HF folder transformers and init_from load."""

import collections
import json

import numpy as np
import pytest

from conftest import REPO
from pretrainx import interop
from pretrainx.prepare import extend_vocab
from pretrainx.data.wordpiece import WordPieceTokenizer
from pretrainx.errors import UserError

DATA = REPO.parent / "shared" / "data"
FRANKENSTEIN = DATA / "corpus" / "gutenberg" / "pg84_frankenstein.txt"
BERT_VOCAB = DATA / "tokenizers" / "bert-base-uncased" / "vocab.txt"
pytestmark = pytest.mark.skipif(not FRANKENSTEIN.exists(), reason="shared data not available")
transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def bert_folder(tmp_path_factory):
    """A tiny BertForPreTraining over bert-base-uncased's own vocabulary, saved by
    transformers as a released BERT is (what BioBERT and SciBERT started from)."""
    folder = tmp_path_factory.mktemp("bert")
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=64,
                                     max_position_embeddings=64)
    transformers.BertForPreTraining(config).save_pretrained(folder)
    transformers.BertTokenizer.from_pretrained(str(BERT_VOCAB.parent)).save_pretrained(folder)
    return str(folder)


def _table(pretrained):
    return np.asarray(pretrained.params["bert"]["token_embed"]["embedding"])


def test_domain_words_get_rows_that_average_their_old_pieces(bert_folder, tmp_path):
    import pretrainx
    result = extend_vocab.extend(bert_folder, str(tmp_path / "out"),
                                 corpus=str(FRANKENSTEIN), new_words=40, min_count=3)
    old, new = interop.load(bert_folder), interop.load(str(tmp_path / "out"))
    before = WordPieceTokenizer(old.tokenizer, lower_case=old.lower_case)
    after = WordPieceTokenizer(new.tokenizer, lower_case=new.lower_case)
    words = json.loads((tmp_path / "out" / "extend_vocab.json").read_text())["words"]
    assert result["words_added"] == len(words) == 40
    assert after.vocab_size == new.model.vocab_size == before.vocab_size + 40
    assert after.pieces() == before.pieces() + words
    # the most frequent words of the book that the old vocabulary split
    counts = collections.Counter(
        w for line in FRANKENSTEIN.open(encoding="utf-8") for w in before.words(line))
    split = sorted((w for w in counts if counts[w] >= 3 and len(before.word_ids(w)) > 1),
                   key=lambda w: (-counts[w], w))
    assert words == split[:40]
    table, old_table = _table(new), _table(old)
    assert table[:before.vocab_size].tobytes() == old_table[:before.vocab_size].tobytes()
    for i, word in enumerate(words):
        assert after.word_ids(word) == (before.vocab_size + i,)
        mean = old_table[list(before.word_ids(word))].mean(0)
        assert np.allclose(table[before.vocab_size + i], mean, atol=1e-7)
    # a sentence WordPiece reads as before gets the same logits over the old vocabulary
    lines = FRANKENSTEIN.read_text(encoding="utf-8").splitlines()[2000:]
    sentence = next(line.strip() for line in lines
                    if len(line.split()) > 8 and before.encode(line) == after.encode(line))
    theirs = pretrainx.load(bert_folder)(texts=[sentence])["logits"]
    ours = pretrainx.load(str(tmp_path / "out"))(texts=[sentence])["logits"]
    assert np.abs(ours[..., :before.vocab_size] - theirs[..., :before.vocab_size]).max() < 1e-5


def test_an_extended_folder_loads_in_transformers_with_the_new_ids(bert_folder, tmp_path):
    (tmp_path / "words.txt").write_text("Clerval\nIngolstadt\n", encoding="utf-8")
    extend_vocab.extend(bert_folder, str(tmp_path / "out"),
                        words_file=str(tmp_path / "words.txt"))
    tok = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "out"))
    size = len(WordPieceTokenizer(interop.load(bert_folder).tokenizer).pieces())
    assert tok("Clerval and Ingolstadt")["input_ids"][1:-1] == [size, tok.vocab["and"], size + 1]
    model = transformers.AutoModelForPreTraining.from_pretrained(str(tmp_path / "out"))
    assert model.config.vocab_size == size + 2
    decoder = model.cls.predictions.decoder.weight.detach().numpy()
    assert np.array_equal(decoder, model.bert.embeddings.word_embeddings.weight.detach().numpy())


def test_what_cannot_be_extended_is_refused_in_one_line(bert_folder, tmp_path):
    words = tmp_path / "words.txt"
    words.write_text("the\n", encoding="utf-8")
    with pytest.raises(UserError, match="'the' is one piece of the vocabulary already"):
        extend_vocab.extend(bert_folder, str(tmp_path / "a"), words_file=str(words))
    with pytest.raises(UserError, match="names no files"):
        extend_vocab.extend(bert_folder, str(tmp_path / "b"), corpus="/nonexistent/*.txt")
    spm = interop.load(bert_folder)
    spm.tokenizer = str(REPO / "pretrainx" / "assets" / "spm_4k.model")
    with pytest.raises(UserError, match="is not a WordPiece vocab.txt"):
        import unittest.mock
        with unittest.mock.patch.object(interop, "load", lambda path: spm):
            extend_vocab.extend("a_run", str(tmp_path / "c"), corpus=str(FRANKENSTEIN))
    assert not any((tmp_path / d).exists() for d in "abc")
