"""T5's text-to-text form of the tasks (Raffel et al. 2020, appendix D): inputs
prefixed with the task's name and field names, labels as words, STS-B scores as
strings rounded to 0.2, SQuAD as "question: ... context: ..." -> the answer.
Predictions are decoded greedily and read back into labels; a string that is no
label counts as wrong, as in the paper.
"""

import numpy as np

from pretrainx.errors import UserError
from pretrainx.finetune import glue, scores, squad
from pretrainx.finetune.task import EvalSet, TaskData
from pretrainx.objectives import ul2

# (field name, text column index) in the order T5 writes them.
FIELDS = {
    "cola": (("sentence", 0),), "sst2": (("sentence", 0),),
    "mrpc": (("sentence1", 0), ("sentence2", 1)), "qqp": (("question1", 0), ("question2", 1)),
    "stsb": (("sentence1", 0), ("sentence2", 1)),
    "mnli": (("hypothesis", 1), ("premise", 0)), "qnli": (("question", 0), ("sentence", 1)),
    "rte": (("sentence1", 0), ("sentence2", 1)), "wnli": (("sentence1", 0), ("sentence2", 1)),
}
# Label words in the order of glue.TASKS[...].labels.
WORDS = {
    "cola": ("unacceptable", "acceptable"), "sst2": ("negative", "positive"),
    "mrpc": ("not_equivalent", "equivalent"), "qqp": ("not_duplicate", "duplicate"),
    "mnli": ("contradiction", "entailment", "neutral"),
    "qnli": ("entailment", "not_entailment"), "rte": ("entailment", "not_entailment"),
    "wnli": ("not_entailment", "entailment"),
}
INPUTS = ("encoder_input_tokens", "encoder_segment_ids")


def glue_input(task: str, texts) -> str:
    return task + "".join(f" {name}: {texts[i]}" for name, i in FIELDS[task])


def glue_target(task: str, label) -> str:
    if task == "stsb":
        return f"{round(float(label) * 5) / 5:.1f}"
    return WORDS[task][int(label)]


def read_label(task: str, text: str):
    """The label a generated string names; None when it names none."""
    text = text.strip()
    if task == "stsb":
        try:
            return float(text)
        except ValueError:
            return None
    words = WORDS[task]
    return words.index(text) if text in words else None


def encode_pairs(inputs, targets, tokenizer, seq_len: int, target_len: int,
                 framing: str = "eos", lead=()) -> dict:
    """Encoder inputs cut to seq_len, targets padded to target_len, decoder inputs
    shifted right. framing "eos": text </s> on both sides, the decoder starting at 0, as
    T5's feature converter lays them out; "bos_eos": <s> text </s> on both sides, the
    decoder starting at </s>, as BART's fine-tuning does. `lead`: ids every input starts
    with (after <s>): UL2's mode token."""
    n = len(inputs)
    enc = np.zeros((n, seq_len), np.int32)
    enc_real = np.zeros((n, seq_len), np.int32)  # from lengths: BART's <s> is id 0
    dec = np.zeros((n, target_len), np.int32)
    real = np.zeros((n, target_len), np.int32)
    eos = tokenizer.sep_id
    bos = [tokenizer.cls_id] if framing == "bos_eos" else []

    def frame(text, size, head):
        return head + tokenizer.encode(text)[:size - 1 - len(head)] + [eos]

    for row, (source, target) in enumerate(zip(inputs, targets)):
        ids = frame(source, seq_len, bos + list(lead))
        enc[row, :len(ids)] = ids
        enc_real[row, :len(ids)] = 1
        t = frame(target, target_len, bos)
        dec[row, :len(t)] = t
        real[row, :len(t)] = 1
    start = eos if framing == "bos_eos" else 0
    dec_in = np.concatenate([np.full((n, 1), start, np.int32), dec[:, :-1]], axis=1)
    return {"encoder_input_tokens": enc, "encoder_segment_ids": enc_real,
            "decoder_target_tokens": dec, "decoder_input_tokens": dec_in,
            "decoder_segment_ids": real.astype(np.int32),
            "decoder_loss_weights": real.astype(np.float32), "weight": np.ones(n, np.float32)}


def decode(tokenizer, ids, framing: str = "eos") -> str:
    """The text before the first </s> (and after the leading <s> of BART's framing). Ids
    the tokenizer lacks (T5's sentinels, which the model may write) read as nothing: the
    string is then no label and counts as wrong."""
    ids = list(np.asarray(ids))
    if framing == "bos_eos" and ids and ids[0] == tokenizer.cls_id:
        ids = ids[1:]
    if tokenizer.sep_id in ids:
        ids = ids[:ids.index(tokenizer.sep_id)]
    return tokenizer.decode([i for i in ids if 0 <= i < tokenizer.vocab_size])


def mode_ids(token: str, tokenizer) -> list:
    """data.mode_token's ids ("" -> none), refusing one the vocabulary lacks."""
    return ul2.token_ids(token, tokenizer, "data.mode_token").tolist() if token else []


def build(cfg, tokenizer, framing: str = "eos"):
    name = cfg.task
    lead = mode_ids(cfg.data.mode_token, tokenizer)
    if name == "conll2003":
        raise UserError("task conll2003 fine-tunes BERT encoders; it has no text-to-text "
                        "form here (use a BERT init_from)")
    if name == "squad":
        d = cfg.data
        read = lambda f, limit: squad.read(f"{d.squad_dir}/{f}", limit)
        train_ex, dev_ex = read("train-v1.1.json", d.max_train_examples), read(
            "dev-v1.1.json", d.max_eval_examples)
        source = lambda ex: f"question: {ex['question']} context: {ex['context']}"
        target_len = _target_length(cfg, [ex["answers"][0][0] for ex in train_ex], tokenizer,
                                    framing)
        train = encode_pairs([source(e) for e in train_ex], [e["answers"][0][0] for e in train_ex],
                             tokenizer, cfg.seq_len, target_len, framing, lead)
        dev_arrays = encode_pairs([source(e) for e in dev_ex], [""] * len(dev_ex), tokenizer,
                                  cfg.seq_len, target_len, framing, lead)
        score = lambda out: squad.evaluate(dev_ex, {e["id"]: decode(tokenizer, o, framing)
                                                    for e, o in zip(dev_ex, out)})
        return TaskData("seq2seq", (), squad.METRICS, train, [EvalSet("", dev_arrays, score)],
                        [], INPUTS)
    task = glue.get_task(name)
    files = glue.task_files(task, cfg.data.glue_dir)
    split = glue.read_split(task, files["train"], True, cfg.data.max_train_examples)
    targets = [glue_target(name, y) for y in split.labels]
    target_len = _target_length(cfg, targets, tokenizer, framing)
    train = encode_pairs([glue_input(name, t) for t in split.texts], targets, tokenizer,
                         cfg.seq_len, target_len, framing, lead)

    def labels_of(out):
        found = [read_label(name, decode(tokenizer, o, framing)) for o in out]
        if task.is_regression:
            return np.array([0.0 if v is None else v for v in found])
        return np.array([-1 if v is None else v for v in found])  # -1: never right

    dev = []
    for path in files["dev"]:
        s = glue.read_split(task, path, True, cfg.data.max_eval_examples)
        arrays = encode_pairs([glue_input(name, t) for t in s.texts], [""] * len(s.texts),
                              tokenizer, cfg.seq_len, target_len, framing, lead)
        set_name = "" if len(files["dev"]) == 1 else path.rsplit("/", 1)[-1][4:-4]
        dev.append(EvalSet(set_name, arrays, lambda out, y=s.labels: scores.score(
            task.metrics, y, labels_of(out))))
    test = []
    for path, submission in files["test"]:
        s = glue.read_split(task, path, False)
        arrays = encode_pairs([glue_input(name, t) for t in s.texts], [""] * len(s.texts),
                              tokenizer, cfg.seq_len, target_len, framing, lead)
        write = lambda workdir, out, s=s, sub=submission: glue.write_submission(
            workdir, sub, s.indices, np.maximum(labels_of(out), 0), task)
        test.append(EvalSet(submission, arrays, None, write))
    return TaskData("seq2seq", task.labels, task.metrics, train, dev, test, INPUTS)


def _target_length(cfg, targets, tokenizer, framing) -> int:
    if cfg.data.target_length:
        return cfg.data.target_length
    longest = max(len(tokenizer.encode(t)) for t in targets) + (2 if framing == "bos_eos" else 1)
    return min(longest, 128)
