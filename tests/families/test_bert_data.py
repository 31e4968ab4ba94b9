"""BERT data: corpus reading, NSP pairs and MLM masking on real text."""

import gzip
import importlib
import re
import statistics
from pathlib import Path

import numpy as np
import pytest

from pretrainx.data.sources import read_documents
from pretrainx.data.text import detect_format
from pretrainx.errors import UserError
from pretrainx.objectives.mlm import mask_tokens, mlm_loss_and_metrics
from pretrainx.objectives.nsp import create_pair_examples, nsp_loss_and_metrics

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
CORPUS = DATA / "corpus"
VOCAB = DATA / "tokenizers" / "bert-base-uncased" / "vocab.txt"
SAMPLE = CORPUS / "misc" / "bert_sample_text.txt"
GUTENBERG = CORPUS / "gutenberg"
PRIDE = GUTENBERG / "pg1342_pride_and_prejudice.txt"
HOLMES = GUTENBERG / "pg1661_adventures_of_sherlock_holmes.txt"

pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason=f"shared data not at {DATA}")


# --- tokenizer: the real one if it exists, else a minimal WordPiece ----------

class _StandInWordPiece:
    """Lower-case, split punctuation, greedy longest-match over vocab.txt."""

    def __init__(self, path):
        pieces = path.read_text(encoding="utf-8").splitlines()
        self.vocab = {p: i for i, p in enumerate(pieces)}
        self.vocab_size = len(pieces)
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (
            self.vocab[p] for p in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"))
        self._start = np.array([not p.startswith("##") for p in pieces])

    def encode(self, text):
        ids = []
        for word in re.findall(r"\w+|[^\w\s]", text.lower()):
            start, out = 0, []
            while start < len(word):
                end = len(word)
                while end > start and (("##" if start else "") + word[start:end]) not in self.vocab:
                    end -= 1
                if end == start:
                    out = [self.unk_id]
                    break
                out.append(self.vocab[("##" if start else "") + word[start:end]])
                start = end
            ids.extend(out)
        return ids

    def special_ids(self):
        return np.array([self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id])

    def word_start_mask(self, ids):
        return self._start[np.asarray(ids)]


@pytest.fixture(scope="module")
def tokenizer():
    try:
        module = importlib.import_module("pretrainx.data.tokenizers")
        return module.load_tokenizer(str(VOCAB))
    except (ImportError, AttributeError):
        return _StandInWordPiece(VOCAB)


@pytest.fixture(scope="module")
def books(tokenizer):
    """Pride and Prejudice + Sherlock Holmes as tokenized documents."""
    documents, _ = read_documents([str(PRIDE), str(HOLMES)])
    return [[np.asarray(tokenizer.encode(s), np.int32) for s in doc] for doc in documents]


# --- read_documents ----------------------------------------------------------

def _blank_line_groups(path):
    text = path.read_text(encoding="utf-8")
    return [g for g in re.split(r"\n\s*\n", text) if g.strip()]


def test_sample_text_is_sentence_format_with_blank_line_documents():
    assert detect_format(SAMPLE.read_text(encoding="utf-8")) == "sentences"
    docs, stats = read_documents(str(SAMPLE))
    groups = _blank_line_groups(SAMPLE)
    assert len(docs) == stats["documents"] == len(groups) == 3
    assert [len(d) for d in docs] == [len(g.strip().split("\n")) for g in groups]
    assert docs[0][1] == "Text should be one-sentence-per-line, with empty lines between documents."
    assert stats == {"files": 1, "records": 0, "replaced_chars": 0, "skipped_lines": 0,
                     "truncated_files": 0, "documents": 3, "sentences": 31}


@pytest.mark.parametrize("book", sorted(GUTENBERG.glob("*.txt")), ids=lambda p: p.stem)
def test_gutenberg_books_are_free_text(book):
    assert detect_format(book.read_text(encoding="utf-8-sig")) == "text"


def test_gutenberg_sentences_stay_inside_paragraphs():
    docs, stats = read_documents(str(PRIDE))
    sentences = [s for d in docs for s in d]
    # Paragraphs of the raw file, whitespace-normalised; sentences must appear
    # in order, each inside a single paragraph.
    raw = PRIDE.read_text(encoding="utf-8")
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", raw) if p.strip()]
    k, pos = 0, 0
    for s in sentences:
        while True:
            found = paragraphs[k].find(s, pos)
            if found >= 0:
                pos = found + len(s)
                break
            k, pos = k + 1, 0
            assert k < len(paragraphs), f"sentence not inside one paragraph: {s!r}"
    assert stats["sentences"] == len(sentences)
    # 61 chapters, each closing a document.
    assert 61 <= len(docs) <= 120
    assert not any(s.upper().startswith("CHAPTER") for s in sentences)
    assert not any(s.endswith(("Mr.", "Mrs.", "Dr.")) for s in sentences)
    assert sum("Mr. Darcy" in s for s in sentences) > 200
    assert 40 < statistics.median(len(s) for s in sentences) < 200
    opener = re.compile(r"^[\"'“‘(\[_]*[A-Z0-9]")
    assert sum(bool(opener.match(s)) for s in sentences) > 0.95 * len(sentences)


def test_gutenberg_boilerplate_dropped():
    docs, _ = read_documents([str(GUTENBERG / "pg2701_moby_dick.txt"),
                              str(CORPUS / "misc" / "botchan.txt")])
    text = "\n".join(s for d in docs for s in d)
    assert "START OF THE PROJECT GUTENBERG" not in text
    assert "FULL LICENSE" not in text
    assert "Call me Ishmael." in text
    assert "\r" not in text and "\ufeff" not in text


def test_gzip_round_trip_and_comma_patterns(tmp_path):
    gz = tmp_path / "sample.txt.gz"
    gz.write_bytes(gzip.compress(SAMPLE.read_bytes()))
    plain, _ = read_documents(str(SAMPLE))
    packed, stats = read_documents(str(tmp_path / "*.gz"))
    assert packed == plain and stats["files"] == 1
    both, stats = read_documents(f"{gz},{SAMPLE}")
    assert both == plain + plain and stats["files"] == 2


def test_runs_in_one_process_share_tokenized_files_until_a_file_changes(tmp_path):
    """A second Corpus over the same unchanged files and tokenizer files reuses the first's
    tokenized documents (a phase, an evaluation, a benchmark's branch); a rewritten file,
    other read options or another tokenizer are read again, and shared ids are read-only."""
    from ml_collections import ConfigDict

    from pretrainx.data import corpus
    from pretrainx.data.tokenizers import load_tokenizer
    text = tmp_path / "a.txt"
    text.write_bytes(SAMPLE.read_bytes())
    data = dict(format="auto", text_field="text", skip_bad_lines=False, tfds_data_dir="",
                tfds_reader="data_source", eval_split_percent=0, prepared_dir="")
    cfg = ConfigDict({"data": data})

    def docs(config=cfg, lower_case=True):
        return corpus.Corpus(config, load_tokenizer(str(VOCAB), lower_case)).documents(str(text))

    first = docs()
    assert docs() is first and docs(lower_case=False) is not first
    with pytest.raises(ValueError, match="read-only"):
        first[0][0][0] = 0
    assert docs(ConfigDict({"data": {**data, "format": "text"}})) is not first
    text.write_bytes(SAMPLE.read_bytes().replace(b"the", b"a"))
    again = docs()
    assert again is not first and sum(s.size for d in again for s in d) != sum(
        s.size for d in first for s in d)


def test_bad_inputs_raise_user_error_naming_the_path(tmp_path):
    missing = str(tmp_path / "nothing-*.txt")
    with pytest.raises(UserError, match="nothing-"):
        read_documents(missing)
    empty = tmp_path / "empty.txt"
    empty.write_text("\n \n")
    with pytest.raises(UserError, match="no text in .*empty.txt"):
        read_documents(str(empty))
    with pytest.raises(UserError, match=re.escape(str(tmp_path))):
        read_documents(str(tmp_path))
    truncated = tmp_path / "cut.txt.gz"
    truncated.write_bytes(gzip.compress(SAMPLE.read_bytes())[:200])
    with pytest.raises(UserError, match="cut.txt.gz"):
        read_documents(str(truncated))
    with pytest.raises(UserError, match="fmt|format"):
        read_documents(str(SAMPLE), fmt="xml")


def test_invalid_utf8_is_replaced_and_counted(tmp_path):
    lines = SAMPLE.read_bytes().split(b"\n")
    # Two invalid bytes in line 5, plus a genuine U+FFFD that must not count.
    lines[4] = lines[4][:10] + b"\xff" + lines[4][10:20] + b"\xc3" + lines[4][20:]
    lines[5] = lines[5] + " \ufffd".encode()
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\r\n".join(lines))
    docs, stats = read_documents(str(bad))
    assert stats["replaced_chars"] == 2
    assert sum(s.count("\ufffd") for d in docs for s in d) == 3
    assert len(docs) == 3


# --- NSP -----------------------------------------------------------------------

MAX_LEN = 128


def _pairs(books, short_seq_prob, seed=0, max_len=MAX_LEN):
    return create_pair_examples(books, max_len, short_seq_prob, np.random.default_rng(seed),
                                cls_id=101, sep_id=102)


def _segments(example):
    ids, types = example["input_ids"], example["token_type_ids"]
    n_a = int((types == 0).sum()) - 2
    return ids[1:n_a + 1], ids[n_a + 2:-1]


def _is_slice(part, whole):
    """True when part is a contiguous run of whole (truncation keeps runs)."""
    if len(part) == 0:
        return False
    starts = np.flatnonzero(whole[:len(whole) - len(part) + 1] == part[0])
    return any(np.array_equal(whole[s:s + len(part)], part) for s in starts)


def test_nsp_pairs_on_real_text(books):
    examples = _pairs(books, 0.1)
    assert len(examples) > 2000
    labels = np.array([e["next_sentence_label"] for e in examples])
    for e in examples:
        ids, types = e["input_ids"], e["token_type_ids"]
        assert ids.dtype == types.dtype == np.int32 and len(ids) <= MAX_LEN
        n_a = int((types == 0).sum()) - 2
        assert ids[0] == 101 and ids[n_a + 1] == 102 and ids[-1] == 102
        assert np.all(types[:n_a + 2] == 0) and np.all(types[n_a + 2:] == 1)
        assert np.sum(ids == 102) == 2 and np.sum(ids == 101) == 1
        a, b = _segments(e)
        a_doc, a_start, a_end = e["a_span"]
        b_doc, b_start, b_end = e["b_span"]
        assert e["doc_index"] == a_doc
        assert _is_slice(a, np.concatenate(books[a_doc][a_start:a_end]))
        assert _is_slice(b, np.concatenate(books[b_doc][b_start:b_end]))
        if e["next_sentence_label"] == 0:
            assert b_doc == a_doc and b_start == a_end
        else:
            assert b_doc != a_doc
    # The paper's 50% IsNext, with the recipe's short_seq_prob of 0.1.
    assert abs(np.mean(labels == 0) - 0.5) < 0.03


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_nsp_label_balance_across_seeds(books, seed):
    labels = np.array([e["next_sentence_label"] for e in _pairs(books, 0.1, seed)])
    assert abs(np.mean(labels == 0) - 0.5) < 0.03


def _visibly_short_fraction(examples, books):
    """Among IsNext pairs that stop before their document's end, the fraction
    below max length: a full target (max_len - 3) always fills those to max_len,
    so only a short target leaves them short."""
    mid = [e for e in examples
           if e["next_sentence_label"] == 0 and e["b_span"][2] < len(books[e["doc_index"]])]
    return np.mean([len(e["input_ids"]) < MAX_LEN for e in mid])


def test_short_seq_prob_controls_short_sequences(books):
    assert _visibly_short_fraction(_pairs(books, 0.0), books) == 0.0
    frac = np.mean([_visibly_short_fraction(_pairs(books, 0.1, seed), books) for seed in range(4)])
    assert 0.05 < frac < 0.13  # 10% drawn short, a few of which still fill up
    assert _visibly_short_fraction(_pairs(books, 1.0), books) > 0.8


def test_nsp_deterministic_and_empty_documents(books):
    a, b, c = _pairs(books[:20], 0.1, seed=3), _pairs(books[:20], 0.1, seed=3), _pairs(books[:20], 0.1, seed=4)
    same = lambda x, y: len(x) == len(y) and all(
        np.array_equal(p["input_ids"], q["input_ids"]) and p["a_span"] == q["a_span"]
        and p["b_span"] == q["b_span"] for p, q in zip(x, y))
    assert same(a, b) and not same(a, c)
    # Empty documents are skipped but keep their caller-side indices.
    with_empty = [[]] + books[:3]
    assert {e["doc_index"] for e in _pairs(with_empty, 0.0)} <= {1, 2, 3}
    with pytest.raises(UserError, match="no document long enough"):
        _pairs([[], [np.zeros(0, np.int32)]], 0.1)


# --- MLM masking -----------------------------------------------------------------

def _padded_batch(books, tokenizer, seq_len, repeats):
    examples = _pairs(books, 0.1, seed=1, max_len=seq_len)
    out = []
    for _ in range(repeats):
        for e in examples:
            ids = np.full(seq_len, tokenizer.pad_id, np.int32)
            ids[:len(e["input_ids"])] = e["input_ids"]
            out.append(ids)
    return out


@pytest.mark.parametrize("seq_len,max_pred,repeats", [(128, 20, 1), (512, 80, 6)])
def test_masking_statistics(books, tokenizer, seq_len, max_pred, repeats):
    rng = np.random.default_rng(0)
    special = tokenizer.special_ids()
    sequences = _padded_batch(books, tokenizer, seq_len, repeats)
    assert len(sequences) > 2500
    chosen = n_cand = n_mask = n_random = n_kept = 0
    for ids in sequences:
        out = mask_tokens(ids, rng, vocab_size=tokenizer.vocab_size, mask_id=tokenizer.mask_id,
                          special_ids=special, max_predictions=max_pred, mask_prob=0.15)
        w = out["masked_lm_weights"]
        n = int(w.sum())
        pos = out["masked_lm_positions"][:n]
        assert np.all(w[:n] == 1) and np.all(w[n:] == 0)
        assert np.all(out["masked_lm_positions"][n:] == 0) and np.all(out["masked_lm_ids"][n:] == 0)
        assert np.all(np.diff(pos) > 0)
        assert not np.isin(ids[pos], special).any()
        np.testing.assert_array_equal(out["masked_lm_ids"][:n], ids[pos])
        unmasked = np.ones(seq_len, bool)
        unmasked[pos] = False
        np.testing.assert_array_equal(out["input_ids"][unmasked], ids[unmasked])
        new = out["input_ids"][pos]
        assert not np.isin(new[new != tokenizer.mask_id], special).any()
        candidates = int((~np.isin(ids, special)).sum())
        # Stochastic rounding: floor or ceil of 15%, so the mean rate is 15% at any length.
        expected = candidates * 0.15
        assert n in {min(max_pred, max(1, int(np.floor(expected)))),
                     min(max_pred, max(1, int(np.ceil(expected))))}
        if np.ceil(expected) <= max_pred:  # where the cap does not bind
            chosen += n
            n_cand += candidates
        n_mask += int((new == tokenizer.mask_id).sum())
        n_random += int(((new != tokenizer.mask_id) & (new != ids[pos])).sum())
        n_kept += int((new == ids[pos]).sum())
    assert n_cand > 0.9 * sum(int((~np.isin(s, special)).sum()) for s in sequences)
    assert abs(chosen / n_cand - 0.15) < 0.01
    total = n_mask + n_random + n_kept
    # A random draw equals the original with p ~ 1/30517, so "kept" is
    # 0.1 + 0.1/30517: far inside the tolerance.
    assert abs(n_mask / total - 0.8) < 0.02
    assert abs(n_random / total - 0.1) < 0.02
    assert abs(n_kept / total - 0.1) < 0.02


def test_whole_word_masking_masks_whole_words(books, tokenizer):
    rng = np.random.default_rng(0)
    special = tokenizer.special_ids()
    n_multi = 0
    for ids in _padded_batch(books, tokenizer, 128, 1)[:1500]:
        starts = tokenizer.word_start_mask(ids)
        out = mask_tokens(ids, rng, vocab_size=tokenizer.vocab_size, mask_id=tokenizer.mask_id,
                          special_ids=special, max_predictions=20, word_starts=starts,
                          mask_prob=0.15)
        n = int(out["masked_lm_weights"].sum())
        candidates = ~np.isin(ids, special)
        assert 1 <= n <= min(20, max(1, int(np.ceil(candidates.sum() * 0.15))))
        masked = np.zeros(len(ids), bool)
        masked[out["masked_lm_positions"][:n]] = True
        assert not (masked & ~candidates).any()
        # A word: a candidate word start followed by candidate continuations.
        word = np.cumsum(starts | ~candidates | ~np.roll(candidates, 1))
        for w in np.unique(word[masked]):
            members = (word == w) & candidates
            assert masked[members].all()
            n_multi += members.sum() > 1
    assert n_multi > 50  # multi-piece words really were masked


def test_mask_tokens_edge_cases():
    rng = np.random.default_rng(0)
    special = np.array([0, 100, 101, 102, 103])
    only_special = np.array([101, 102, 0, 0], np.int32)
    out = mask_tokens(only_special, rng, vocab_size=30522, mask_id=103, special_ids=special,
                      max_predictions=3, mask_prob=0.15)
    np.testing.assert_array_equal(out["input_ids"], only_special)
    assert out["masked_lm_weights"].sum() == 0
    one = np.array([101, 2023, 102, 0], np.int32)
    out = mask_tokens(one, rng, vocab_size=30522, mask_id=103, special_ids=special, max_predictions=3,
                      mask_prob=0.15)
    assert out["masked_lm_positions"].tolist() == [1, 0, 0] and out["masked_lm_ids"][0] == 2023


# --- losses --------------------------------------------------------------------

def test_mlm_loss_uniform_logits():
    vocab = 7
    logits = np.zeros((2, 3, vocab), np.float32)
    ids = np.array([[0, 3, 5], [0, 6, 2]], np.int32)
    weights = np.array([[1, 1, 0], [1, 0, 0]], np.float32)
    logits[1, 1, 6] = 100.0  # zero weight: must not matter
    out = mlm_loss_and_metrics(logits, ids, weights)
    np.testing.assert_allclose(out["mlm_loss_sum"], 3 * np.log(vocab), rtol=1e-6)
    assert float(out["mlm_weight_sum"]) == 3.0
    assert float(out["mlm_correct_sum"]) == 2.0  # argmax of a uniform row is id 0
    # bf16 logits: log_softmax still in float32.
    import jax.numpy as jnp
    out16 = mlm_loss_and_metrics(jnp.asarray(logits, jnp.bfloat16), ids, weights)
    assert out16["mlm_loss_sum"].dtype == jnp.float32
    np.testing.assert_allclose(out16["mlm_loss_sum"], 3 * np.log(vocab), rtol=1e-6)


def test_nsp_loss_hand_checked():
    logits = np.array([[0.0, 0.0], [np.log(3.0), 0.0], [0.0, 5.0]], np.float32)
    labels = np.array([1, 0, 1])
    out = nsp_loss_and_metrics(logits, labels)
    expected = np.log(2) + np.log(4 / 3) + np.log1p(np.exp(-5.0))
    np.testing.assert_allclose(out["nsp_loss_sum"], expected, rtol=1e-5)
    assert float(out["nsp_correct_sum"]) == 2.0  # row 0 is a tie, argmax 0 != label 1
    assert float(out["nsp_count"]) == 3.0
    weighted = nsp_loss_and_metrics(logits, labels, weights=np.array([1.0, 1.0, 0.0]))
    np.testing.assert_allclose(weighted["nsp_loss_sum"], np.log(2) + np.log(4 / 3), rtol=1e-5)


def test_unk_is_masked_like_any_word_and_cls_sep_never():
    """create_pretraining_data.py skips only [CLS] and [SEP] when it chooses what to
    mask; an [UNK] in the text is a candidate like any word (BERT, ALBERT, ELECTRA)."""
    from conftest import tiny_bert_config
    from pretrainx import config as config_lib, objectives
    from pretrainx.data.tokenizers import load_tokenizer
    cfg = tiny_bert_config(seq_len=32, **{"data.max_predictions_per_seq": 5})
    tok = load_tokenizer(cfg.data.tokenizer)
    objective = objectives.build(cfg, tok)
    transform = objective.transform(config_lib.phases(cfg)[0], train=True)
    ids = np.array([tok.cls_id] + [tok.unk_id] * 14 + [tok.sep_id] + [100] * 15 + [tok.sep_id],
                   np.int32)
    example = {"input_ids": ids, "token_type_ids": np.array([0] * 16 + [1] * 16, np.int32),
               "next_sentence_label": 0}
    chosen = []
    for seed in range(50):
        row = transform(example, np.random.default_rng(seed))
        chosen += list(row["masked_lm_ids"][row["masked_lm_weights"] > 0])
    assert chosen.count(tok.unk_id) > 50 * 5 * 0.3  # about half the candidates are [UNK]
    assert tok.cls_id not in chosen and tok.sep_id not in chosen
