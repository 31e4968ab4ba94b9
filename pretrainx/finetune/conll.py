"""CoNLL-2003 English NER: the original `token POS chunk NER` files, entity-level F1.

As in the BERT paper, each word's first sub-token carries its tag and the others
are not scored; words past `seq_len` are predicted O. Entities are scored as
conlleval does: a chunk is a maximal B-X I-X ... run (an I-X after O or after
another type also opens one), and precision/recall/F1 are micro-averaged over
exact (sentence, type, start, end) matches.
"""

import os

import numpy as np

from pretrainx.errors import UserError
from pretrainx.finetune.task import EvalSet, TaskData, split_holdout

LABELS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC")
METRICS = ("f1", "precision", "recall")


def read(path: str, limit: int = 0) -> list:
    """[(words, tags)] of a CoNLL-2003 file; `limit` > 0 keeps that many sentences."""
    label_ids = set(LABELS)
    sentences, words, tags = [], [], []
    try:
        f = open(path, encoding="utf-8")
    except OSError as e:
        raise UserError(f"cannot read CoNLL file {path}: {e.strerror or e}") from None
    with f:
        for line_no, line in enumerate(f, start=1):
            fields = line.split()
            if not fields or fields[0] == "-DOCSTART-":
                if words:
                    sentences.append((words, tags))
                    words, tags = [], []
                    if limit and len(sentences) >= limit:
                        break
                continue
            if len(fields) < 2:
                raise UserError(f"{path} line {line_no}: expected 'token POS chunk NER', got "
                                f"{line.strip()!r}")
            if fields[-1] not in label_ids:
                raise UserError(f"{path} line {line_no}: unknown NER tag {fields[-1]!r}; "
                                f"expected one of {', '.join(LABELS)}")
            words.append(fields[0])
            tags.append(fields[-1])
    if words and not (limit and len(sentences) >= limit):
        sentences.append((words, tags))
    if not sentences:
        raise UserError(f"CoNLL file {path} has no sentences")
    return sentences


def chunks(tags) -> set:
    """{(type, start, end)} entities of one tag sequence (end exclusive)."""
    out, kind, start = set(), None, 0
    for i, tag in enumerate(list(tags) + ["O"]):
        prefix, _, this = tag.partition("-")
        opens = prefix == "B" or (prefix == "I" and this != kind)
        if kind is not None and (prefix == "O" or opens):
            out.add((kind, start, i))
            kind = None
        if opens:
            kind, start = this, i
    return out


def entity_scores(gold_sequences, predicted_sequences) -> dict:
    gold = {(s,) + c for s, tags in enumerate(gold_sequences) for c in chunks(tags)}
    pred = {(s,) + c for s, tags in enumerate(predicted_sequences) for c in chunks(tags)}
    hit = len(gold & pred)
    precision = hit / len(pred) if pred else 0.0
    recall = hit / len(gold) if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if hit else 0.0
    return {"f1": f1, "precision": precision, "recall": recall}


def encode(sentences, tokenizer, seq_len: int):
    """Arrays for the model, and each sentence's first-sub-token positions."""
    n = len(sentences)
    ids = np.full((n, seq_len), tokenizer.pad_id, np.int32)
    labels = np.zeros((n, seq_len), np.int32)
    weight = np.zeros((n, seq_len), np.float32)
    mask = np.zeros((n, seq_len), np.int32)
    firsts = []
    index = {t: i for i, t in enumerate(LABELS)}
    for row, (words, tags) in enumerate(sentences):
        tokens, starts = [tokenizer.cls_id], []
        for word, tag in zip(words, tags):
            pieces = tokenizer.encode(word) or [tokenizer.unk_id]
            if len(tokens) + len(pieces) > seq_len - 1:
                break
            starts.append(len(tokens))
            labels[row, len(tokens)] = index[tag]
            weight[row, len(tokens)] = 1.0
            tokens += pieces
        tokens.append(tokenizer.sep_id)
        ids[row, :len(tokens)] = tokens
        mask[row, :len(tokens)] = 1
        firsts.append(starts)
    arrays = {"input_ids": ids, "token_type_ids": np.zeros_like(ids), "attention_mask": mask,
              "label": labels, "weight": weight}
    return arrays, firsts


def _tags(outputs, sentences, firsts):
    """Predicted tags per word (O for words cut off by seq_len)."""
    best = outputs.argmax(-1)
    out = []
    for row, ((words, _), starts) in enumerate(zip(sentences, firsts)):
        tags = [LABELS[best[row, p]] for p in starts]
        out.append(tags + ["O"] * (len(words) - len(tags)))
    return out


def build(cfg, tokenizer):
    folder = cfg.data.conll_dir or os.path.join(cfg.data.glue_dir, "CoNLL-2003")
    path = lambda name: os.path.join(os.path.expanduser(folder), name)
    kept, held = split_holdout(read(path("train.txt"), cfg.data.max_train_examples),
                               cfg.data.holdout_examples, path("train.txt"))
    train, _ = encode(kept, tokenizer, cfg.seq_len)

    def evaluation(name, file_name, limit, sentences=None):
        sentences = sentences or read(path(file_name), limit)
        arrays, firsts = encode(sentences, tokenizer, cfg.seq_len)
        gold = [tags for _, tags in sentences]
        score = lambda out: entity_scores(gold, _tags(out, sentences, firsts))
        write = lambda workdir, out: _write(workdir, sentences, _tags(out, sentences, firsts))
        return EvalSet(name, arrays, score, write if name == "test" else None)

    dev = [evaluation("", "valid.txt", cfg.data.max_eval_examples)]
    test = [evaluation("test", "test.txt", cfg.data.max_eval_examples)] if os.path.isfile(
        path("test.txt")) else []
    holdout = evaluation("holdout", "train.txt", 0, held) if held else None
    return TaskData("tokens", LABELS, METRICS, train, dev, test, holdout=holdout)


def _write(workdir, sentences, predicted) -> str:
    """conlleval's input: `word gold predicted` per line, a blank line between sentences."""
    folder = os.path.join(workdir, "predictions")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "conll2003_test.txt")
    with open(path, "w", encoding="utf-8") as f:
        for (words, gold), tags in zip(sentences, predicted):
            for word, g, p in zip(words, gold, tags):
                f.write(f"{word} {g} {p}\n")
            f.write("\n")
    return path
