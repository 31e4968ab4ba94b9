"""Extractive QA on SQuAD v1.1 files: features as run_squad.py builds them, answers
scored with the official exact match and F1.

A context is split on whitespace into words; each word into sub-tokens. A question
and context longer than `seq_len` become several windows `doc_stride` tokens
apart; in training a window that does not hold the answer points at [CLS]. At
prediction time each example takes the best (start + end logit) span of at most
`max_answer_length` tokens over its windows, counting a token only in the window
where it has the most context on both sides, and answers with the original words.
"""

import collections
import json
import os
import re
import string

import numpy as np

from pretrainx.errors import UserError
from pretrainx.finetune.task import EvalSet, TaskData

METRICS = ("f1", "exact_match")


def _is_space(ch: str) -> bool:
    return ch in " \t\r\n" or ord(ch) == 0x202F


def read(path: str, limit: int = 0) -> list:
    """[{id, question, context, answers: [(text, start)]}] of a SQuAD JSON file."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise UserError(f"SQuAD file not found: {path}") from None
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read SQuAD file {path}: {e}") from None
    examples = []
    try:
        for a, article in enumerate(data["data"]):
            for p, paragraph in enumerate(article["paragraphs"]):
                context = paragraph["context"]
                for q, qa in enumerate(paragraph["qas"]):
                    where = f"data[{a}].paragraphs[{p}].qas[{q}]"
                    answers = [(ans["text"], int(ans["answer_start"])) for ans in qa["answers"]]
                    for text, start in answers:
                        if context[start:start + len(text)] != text:
                            raise UserError(f"{path}: {where}: answer {text!r} is not at "
                                            f"answer_start {start} of its context")
                    examples.append({"id": qa["id"], "question": qa["question"],
                                     "context": context, "answers": answers})
                    if limit and len(examples) >= limit:
                        return examples
    except (KeyError, TypeError) as e:
        raise UserError(f"{path}: not SQuAD v1.1 JSON (missing or malformed {e})") from None
    if not examples:
        raise UserError(f"SQuAD file {path} has no questions")
    return examples


def _words(context: str):
    """Whitespace words and the word index of every character."""
    words, char_to_word, new_word = [], [], True
    for ch in context:
        if _is_space(ch):
            new_word = True
        else:
            if new_word:
                words.append(ch)
            else:
                words[-1] += ch
            new_word = False
        char_to_word.append(len(words) - 1)
    return words, char_to_word


def features(examples, tokenizer, seq_len: int, doc_stride: int, max_query: int,
             train: bool):
    """Model arrays of every window, and what maps a window back to its example."""
    rows, meta = collections.defaultdict(list), []
    for index, ex in enumerate(examples):
        words, char_to_word = _words(ex["context"])
        query = tokenizer.encode(ex["question"])[:max_query]
        sub, sub_to_word, word_to_sub = [], [], []
        for w, word in enumerate(words):
            word_to_sub.append(len(sub))
            pieces = tokenizer.encode(word) or [tokenizer.unk_id]
            sub += pieces
            sub_to_word += [w] * len(pieces)
        start_sub = end_sub = None
        if train and ex["answers"]:
            text, start = ex["answers"][0]
            first, last = char_to_word[start], char_to_word[start + len(text) - 1]
            start_sub = word_to_sub[first]
            end_sub = (word_to_sub[last + 1] - 1) if last + 1 < len(words) else len(sub) - 1
            start_sub, end_sub = _improve_span(sub, start_sub, end_sub, tokenizer.encode(text))
        room = seq_len - len(query) - 3
        if room <= 0:
            raise UserError(f"seq_len={seq_len} leaves no room for the context after a "
                            f"{len(query)}-token question (data.max_query_length)")
        windows, offset = [], 0
        while True:
            length = min(len(sub) - offset, room)
            windows.append((offset, length))
            if offset + length >= len(sub):
                break
            offset += min(length, doc_stride)
        for w_index, (offset, length) in enumerate(windows):
            tokens = [tokenizer.cls_id] + query + [tokenizer.sep_id]
            context_start = len(tokens)
            tokens += sub[offset:offset + length] + [tokenizer.sep_id]
            ids = np.full(seq_len, tokenizer.pad_id, np.int32)
            ids[:len(tokens)] = tokens
            types = np.zeros(seq_len, np.int32)
            types[context_start:len(tokens)] = 1
            mask = np.zeros(seq_len, np.int32)
            mask[:len(tokens)] = 1
            s = e = 0
            if start_sub is not None and offset <= start_sub and end_sub < offset + length:
                s, e = start_sub - offset + context_start, end_sub - offset + context_start
            for key, value in (("input_ids", ids), ("token_type_ids", types),
                               ("attention_mask", mask), ("start", s), ("end", e),
                               ("weight", 1.0)):
                rows[key].append(value)
            token_to_word, max_context = {}, {}
            for i in range(length):
                position = context_start + i
                token_to_word[position] = sub_to_word[offset + i]
                max_context[position] = _has_max_context(windows, w_index, offset + i)
            meta.append({"example": index, "token_to_word": token_to_word,
                         "max_context": max_context, "ids": tokens})
    arrays = {k: np.asarray(v, np.float32 if k == "weight" else np.int32)
              for k, v in rows.items()}
    return arrays, meta


def _improve_span(sub, start: int, end: int, answer_ids) -> tuple:
    """The tightest sub-token span inside the answer's words that spells the answer
    (run_squad's _improve_answer_span): `bank,` -> `bank` for the answer "bank"."""
    for new_start in range(start, end + 1):
        for new_end in range(end, new_start - 1, -1):
            if sub[new_start:new_end + 1] == answer_ids:
                return new_start, new_end
    return start, end


def _has_max_context(windows, current: int, position: int) -> bool:
    """run_squad's rule: a token scores in the window where min(left, right) context
    (plus a small bonus for longer windows) is largest."""
    best, best_index = None, None
    for index, (start, length) in enumerate(windows):
        end = start + length - 1
        if position < start or position > end:
            continue
        score = min(position - start, end - position) + 0.01 * length
        if best is None or score > best:
            best, best_index = score, index
    return best_index == current


def predict(examples, meta, outputs, tokenizer, max_answer: int, n_best: int = 20) -> dict:
    """{question id: answer text} from the [windows, seq_len, 2] start/end logits."""
    best = {}
    for feature, logits in zip(meta, outputs):
        ex = examples[feature["example"]]
        start_logits, end_logits = logits[:, 0], logits[:, 1]
        starts = np.argsort(-start_logits)[:n_best]
        ends = np.argsort(-end_logits)[:n_best]
        for s in starts:
            if s not in feature["token_to_word"] or not feature["max_context"].get(s, False):
                continue
            for e in ends:
                if e not in feature["token_to_word"] or e < s or e - s + 1 > max_answer:
                    continue
                score = start_logits[s] + end_logits[e]
                if ex["id"] not in best or score > best[ex["id"]][0]:
                    best[ex["id"]] = (score, feature, int(s), int(e))
    answers = {}
    for ex in examples:
        answers[ex["id"]] = ""
        if ex["id"] in best:
            _, feature, s, e = best[ex["id"]]
            words = _words(ex["context"])[0]
            text = " ".join(words[feature["token_to_word"][s]:feature["token_to_word"][e] + 1])
            answers[ex["id"]] = _trim(text, tokenizer.decode(feature["ids"][s:e + 1]))
    return answers


def _trim(original: str, decoded: str) -> str:
    """The part of the original words that the predicted sub-tokens spell (run_squad's
    get_final_text): a span ending inside `late!"` answers `late`."""
    decoded = " ".join(decoded.split())
    at = original.lower().find(decoded.lower()) if decoded else -1
    if at < 0 or len(original.lower()) != len(original):
        return original
    return original[at:at + len(decoded)]


def normalize_answer(s: str) -> str:
    """The official evaluation's: lower case, no punctuation, no articles, single spaces."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def f1_score(prediction: str, truth: str) -> float:
    pred, gold = normalize_answer(prediction).split(), normalize_answer(truth).split()
    common = collections.Counter(pred) & collections.Counter(gold)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(gold)
    return 2 * precision * recall / (precision + recall)


def evaluate(examples, answers: dict) -> dict:
    """Exact match and F1, each the max over an example's gold answers, in [0, 1]."""
    em = f1 = 0.0
    for ex in examples:
        truths = [text for text, _ in ex["answers"]]
        prediction = answers.get(ex["id"], "")
        em += max(float(normalize_answer(prediction) == normalize_answer(t)) for t in truths)
        f1 += max(f1_score(prediction, t) for t in truths)
    return {"f1": f1 / len(examples), "exact_match": em / len(examples)}


def build(cfg, tokenizer):
    d = cfg.data
    folder = os.path.expanduser(d.squad_dir)
    train_examples = read(os.path.join(folder, "train-v1.1.json"), d.max_train_examples)
    train, _ = features(train_examples, tokenizer, cfg.seq_len, d.doc_stride,
                        d.max_query_length, train=True)
    dev_examples = read(os.path.join(folder, "dev-v1.1.json"), d.max_eval_examples)
    dev_arrays, meta = features(dev_examples, tokenizer, cfg.seq_len, d.doc_stride,
                                d.max_query_length, train=False)
    answers = lambda out: predict(dev_examples, meta, out, tokenizer, d.max_answer_length)

    def write(workdir, out):
        folder_out = os.path.join(workdir, "predictions")
        os.makedirs(folder_out, exist_ok=True)
        path = os.path.join(folder_out, "squad_dev_predictions.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(answers(out), f, indent=1, ensure_ascii=False)
        return path

    dev = EvalSet("", dev_arrays, lambda out: evaluate(dev_examples, answers(out)))
    predictions = EvalSet("dev", dev_arrays, None, write)
    return TaskData("span", (), METRICS, train, [dev], [predictions])
