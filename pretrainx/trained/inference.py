"""Run a stored model: `pretrainx.load(path)` reads a pretraining workdir, a fine-tuning
workdir or an HF directory (interop.load) and returns a `Model` that maps texts or
token ids to the last layer's hidden states and the vocabulary logits at every
position, as the family's entry computes them (registry.Family.outputs).

    model = pretrainx.load("workdir/quickstart")
    out = model(["The Hatter was the first to break the silence."])
    out["hidden_states"].shape, out["logits"].shape   # [1, length, 64], [1, length, 4096]
    model.embed(["A sentence.", "Another one."]).shape  # [2, 64]: sentence embeddings
"""

import dataclasses
import functools

import jax
import numpy as np

from pretrainx import interop, models, registry
from pretrainx.data.tokenizers import load_tokenizer
from pretrainx.errors import UserError

# checkpoints whose vocabulary head it runs (seq2seq: T5's and BART's decoder)
RUNS_HEADS = ("pretrain", "mlm", "causal_lm", "seq2seq")


@dataclasses.dataclass
class Model:
    pretrained: interop.Pretrained
    tokenizer: object  # data.tokenizers: the ids the model was trained with

    @property
    def family(self):
        return models.family(self.pretrained.family)

    def ids(self, text: str) -> list:
        """A text's ids as the model saw text in training: [CLS] text [SEP] for an
        encoder (BART: <s> text </s>), text </s> for T5, the pieces alone for GPT-2
        (ModernBERT's decoder was trained on its encoder's framing)."""
        return registry.text_ids(self.family, self.tokenizer,
                                 [int(i) for i in self.tokenizer.encode(text)])

    def __call__(self, texts=None, ids=None) -> dict:
        """Texts (framed by `ids`) or rows of ids, right-padded into one batch ->
        {"input_ids", "attention_mask" (1: a real token), "hidden_states" [rows, length,
        hidden], "logits" [rows, length, vocab]} as numpy arrays."""
        rows = [list(r) for r in ids] if ids is not None else [self.ids(t) for t in texts]
        if not rows or not all(rows):
            raise UserError("pretrainx.load's model needs at least one non-empty row")
        width = max(len(r) for r in rows)
        limit = self._max_tokens()
        if limit and width > limit:  # a lookup past the position table reads a wrong row
            raise UserError(f"a row of {width} tokens is longer than the {limit} positions "
                            f"{self.pretrained.source} was built for")
        padded = self._bucket(width)
        input_ids = np.full((len(rows), padded), self.tokenizer.pad_id, np.int32)
        mask = np.zeros((len(rows), padded), np.int32)
        for i, row in enumerate(rows):
            input_ids[i, :len(row)], mask[i, :len(row)] = row, 1
        batch = {"input_ids": input_ids, "attention_mask": mask,
                 "token_type_ids": np.zeros_like(input_ids)}
        out = self._outputs(self.pretrained.params, batch)
        return {"input_ids": input_ids[:, :width], "attention_mask": mask[:, :width],
                **{k: np.asarray(v, np.float32)[:, :width] for k, v in out.items()}}

    @functools.cached_property
    def _outputs(self):
        """The family's outputs as one compiled program per batch shape (run eagerly,
        each op of each layer would compile alone, on every call's new shapes)."""
        family, cfg = self.family, self.pretrained.model
        return jax.jit(lambda params, batch: family.outputs(cfg, params, batch))

    def _max_tokens(self) -> int:
        """Tokens a row may hold (0: the family has no position table)."""
        key, cfg = self.family.max_positions, self.pretrained.model
        if not key or key not in cfg:
            return 0
        return int(cfg[key]) - int(cfg.get("position_offset", 0))

    def _bucket(self, width: int) -> int:
        """The width rows are run at: a multiple of 16 within the model's positions, so
        that one compiled program serves every length of a bucket (padding is masked;
        the outputs are cut back to `width`)."""
        padded = -(-width // 16) * 16
        limit = self._max_tokens()
        return max(min(padded, limit) if limit else padded, width)

    def embed(self, texts, pooling: str | None = None) -> np.ndarray:
        """[rows, hidden] sentence embeddings of texts: the last hidden states pooled as
        the family pools for fine-tuning (registry.Family.sentence_pooling) or as a
        contrastive fine-tuning pooled (its embed_* head), which is what
        SentenceTransformer computes from this model's HF export, or as `pooling` says
        ("cls", "mean", "last")."""
        head = self.pretrained.head
        family_pooling = (head[len("embed_"):] if head.startswith("embed_") else
                          registry.sentence_pooling(self.family, self.pretrained.model))
        if family_pooling is None:
            raise UserError(f"{self.pretrained.family} is not a sentence encoder: its "
                            "models give no sentence embeddings")
        pooling = pooling or family_pooling
        if pooling not in ("cls", "mean", "last"):
            raise UserError(f"pooling {pooling!r}: expected cls, mean or last")
        out = self(texts=texts)
        if pooling == "cls":
            return out["hidden_states"][:, 0]
        if pooling == "last":  # rows are right-padded
            last = np.maximum(out["attention_mask"].sum(axis=1) - 1, 0)
            return out["hidden_states"][np.arange(len(last)), last]
        mask = out["attention_mask"][..., None].astype(np.float32)
        return (out["hidden_states"] * mask).sum(1) / np.maximum(mask.sum(1), 1e-9)


def load(path: str) -> Model:
    """The model stored at `path`, ready to run (see the module docstring)."""
    pretrained = interop.load(path)
    family = models.family(pretrained.family)
    if family.outputs is None:
        able = [f.name for f in models.FAMILIES.entries() if f.outputs]
        raise UserError(f"{path} is a {pretrained.family} model; pretrainx.load runs "
                        f"{', '.join(able)} models so far")
    if pretrained.head not in RUNS_HEADS:
        raise UserError(f"{path} holds a fine-tuned {pretrained.head!r} head; pretrainx.load "
                        "runs pretrained models (their MLM or language-model head) so far")
    tokenizer = load_tokenizer(pretrained.tokenizer, lower_case=pretrained.lower_case,
                               layout=family.tokenizer_layout)
    return Model(pretrained, tokenizer)
