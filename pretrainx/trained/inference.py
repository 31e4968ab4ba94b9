"""Run a stored model: `pretrainx.load(path)` reads a pretraining workdir, a fine-tuning
workdir or an HF directory (interop.load) and returns a `Model` that maps texts or
token ids to the last layer's hidden states and the vocabulary logits at every
position, as the family's entry computes them (registry.Family.outputs).

    model = pretrainx.load("workdir/quickstart")
    out = model(["The Hatter was the first to break the silence."])
    out["hidden_states"].shape, out["logits"].shape   # [1, length, 64], [1, length, 4096]
    model.embed(["A sentence.", "Another one."]).shape  # [2, 64]: sentence embeddings

A contrastive fine-tuning's model (an embed_* head) is a sentence embedder: `embed`
gives its unit vectors (at a Matryoshka width with `dim`); it has no vocabulary head.
"""

import dataclasses
import functools

import jax
import ml_collections
import numpy as np

from pretrainx import interop, models, registry
from pretrainx.data.tokenizers import load_tokenizer
from pretrainx.errors import UserError
from pretrainx.models import peft as peft_lib

# checkpoints whose vocabulary head it runs (seq2seq: T5's and BART's decoder)
RUNS_HEADS = ("pretrain", "mlm", "causal_lm", "seq2seq")
EMBED_PREFIX = "embed_"  # a contrastive fine-tuning's sentence embedder: embed() only
POOLINGS = ("cls", "mean", "last")


def embedder_of(head: str) -> bool:
    return head.startswith(EMBED_PREFIX)


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
        if embedder_of(self.pretrained.head):
            raise UserError(f"{self.pretrained.source} is a sentence embedder (its "
                            f"{self.pretrained.head} head, no vocabulary head): embed(texts) "
                            "gives its vectors")
        input_ids, mask, width = self._batch(texts, ids)
        out = self._outputs(self.pretrained.params, {
            "input_ids": input_ids, "attention_mask": mask,
            "token_type_ids": np.zeros_like(input_ids)})
        return {"input_ids": input_ids[:, :width], "attention_mask": mask[:, :width],
                **{k: np.asarray(v, np.float32)[:, :width] for k, v in out.items()}}

    def _batch(self, texts, ids) -> tuple:
        """(input_ids, attention_mask) right-padded to a bucket, and the longest row."""
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
        return input_ids, mask, width

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

    def embed(self, texts, pooling: str | None = None, dim: int = 0) -> np.ndarray:
        """[rows, hidden] sentence embeddings of texts: the last hidden states pooled as
        the family pools for fine-tuning (registry.Family.sentence_pooling) or as
        `pooling` says ("cls", "mean", "last"), which is what SentenceTransformer
        computes from this model's HF export. A contrastive fine-tuning's model (an
        embed_* head: its pooling unless `pooling` says another) gives unit vectors, as
        it was trained to compare them and as its export's Normalize module does; `dim`
        keeps the first `dim` values (a Matryoshka width; SentenceTransformer's
        truncate_dim, after the normalisation)."""
        head = self.pretrained.head
        family_pooling = (head[len(EMBED_PREFIX):] if embedder_of(head) else
                          registry.sentence_pooling(self.family, self.pretrained.model))
        if family_pooling is None:
            raise UserError(f"{self.pretrained.family} is not a sentence encoder: its "
                            "models give no sentence embeddings")
        pooling = pooling or family_pooling
        if pooling not in POOLINGS:
            raise UserError(f"pooling {pooling!r}: expected cls, mean or last")
        if embedder_of(head):
            input_ids, mask, _ = self._batch(texts, None)
            vectors = np.asarray(self._embedder(pooling)(self.pretrained.params, {
                "input_ids": input_ids, "attention_mask": mask,
                "token_type_ids": np.zeros_like(input_ids)}), np.float32)
            vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=-1, keepdims=True),
                                           1e-12)
        else:
            vectors = self._pooled(texts, pooling)
        width = vectors.shape[-1]
        if dim and not 0 < dim <= width:
            raise UserError(f"dim={dim}: a width of the model's {width}-wide embeddings "
                            "(a Matryoshka width it was trained at)")
        return vectors[:, :dim] if dim else vectors

    def _pooled(self, texts, pooling: str) -> np.ndarray:
        out = self(texts=texts)
        if pooling == "cls":
            return out["hidden_states"][:, 0]
        if pooling == "last":  # rows are right-padded
            last = np.maximum(out["attention_mask"].sum(axis=1) - 1, 0)
            return out["hidden_states"][np.arange(len(last)), last]
        mask = out["attention_mask"][..., None].astype(np.float32)
        return (out["hidden_states"] * mask).sum(1) / np.maximum(mask.sum(1), 1e-9)

    def _embedder(self, pooling: str):
        """The fine-tuning model of the embed_<pooling> head (pooling has no parameters:
        each head reads the same ones), compiled once a pooling."""
        if pooling not in self._embedders:
            self._embedders[pooling] = self._compiled_embedder(pooling)
        return self._embedders[pooling]

    @functools.cached_property
    def _embedders(self) -> dict:
        return {}

    def _compiled_embedder(self, pooling: str):
        p = self.pretrained
        tuning = peft_lib.from_config(ml_collections.ConfigDict(p.peft)) if p.peft else None
        model = self.family.finetune_model(p.model, EMBED_PREFIX + pooling, 0,
                                           tuning or peft_lib.Peft())
        return jax.jit(lambda params, batch: model.apply({"params": params}, batch)["logits"])


def load(path: str) -> Model:
    """The model stored at `path`, ready to run (see the module docstring)."""
    pretrained = interop.load(path)
    family = models.family(pretrained.family)
    if family.outputs is None:
        able = [f.name for f in models.FAMILIES.entries() if f.outputs]
        raise UserError(f"{path} is a {pretrained.family} model; pretrainx.load runs "
                        f"{', '.join(able)} models so far")
    if pretrained.head not in RUNS_HEADS and not embedder_of(pretrained.head):
        raise UserError(f"{path} holds a fine-tuned {pretrained.head!r} head; pretrainx.load "
                        "runs pretrained models (their MLM or language-model head) and "
                        "sentence embedders")
    tokenizer = load_tokenizer(pretrained.tokenizer, lower_case=pretrained.lower_case,
                               layout=family.tokenizer_layout)
    return Model(pretrained, tokenizer)
