"""What an objective is: the contract every objective a family's spec lists keeps.

An objective owns its model, how text becomes its examples, and how the model's
outputs become a loss. The train loop, the planner and the data CLI reach a family
only through these members (T5X's BaseModel plays the same part). Objectives are
composed from shared helpers (mlm.py, nsp.py, spans.py, rows.py), never by
subclassing a sibling objective.
"""

import dataclasses
from typing import Callable, Protocol

import ml_collections
from flax import linen as nn


class Objective(Protocol):
    """The training part: what a run needs to build batches, step and report."""

    model: nn.Module  # called as model.apply(params, batch, deterministic=..., rngs=...)
    flops_formula: str  # printed by --describe: how flops_per_token is counted

    def examples(self, files: str, phase, train: bool) -> list:
        """The examples of one source (comma-separated globs or tfds:NAME) at a phase's
        length: built once, deterministic in the seed; a grain source indexes them."""

    def examples_from_documents(self, docs: list, phase, train: bool, group: int = 0) -> list:
        """Examples from tokenized documents (lists of sentence id arrays); `group`
        numbers a shard of documents so that each shard draws its own pairings."""

    def transform(self, phase, train: bool) -> Callable:
        """(example, numpy rng) -> one row of the batch (dict of fixed-shape arrays). The
        rng is keyed by the row's global position: masks are fresh each epoch and the
        same on resume. A transform with `indexed = True` is called (example, rng,
        index), its place in the stream of global batches (MDLM's per-batch rates)."""

    def example_batch(self, batch_size: int, phase) -> dict:
        """Zeros of a batch's shapes and dtypes, for init and compilation."""

    def loss_sums(self, outputs: dict, batch: dict) -> dict:
        """Sums (never means) over a (micro-)batch, so accumulation and sharding
        normalise once over the global batch."""

    def normalizers(self, batch: dict) -> dict:
        """The global batch's denominators (masked positions, examples, tokens)."""

    def loss(self, sums: dict, norms: dict):
        """The scalar the optimizer minimises."""

    def metrics(self, sums: dict, norms: dict) -> dict:
        """Training scalars logged beside the loss."""

    def eval_metrics(self, totals: dict) -> dict:
        """Eval scalars from sums added over eval batches (host floats), with `loss`."""

    def flops_per_token(self, phase) -> float:
        """Training FLOPs per input token: the numerator of MFU."""

    def describe(self, phase) -> dict:
        """Extra --describe fields and the start-of-run phase line (e.g. max predictions)."""

    # Optional: `flops_symbols(phase)`, the values of the symbols `flops_formula` names
    # beyond the model's keys (a generator's width, a target length): --describe prints
    # them, and tests/objectives/test_flops.py evaluates the formula with them against the code.
    # Optional: `frozen`, paths of parameter subtrees that are part of the model but not
    # trained (no gradient step, no optimizer state: a distillation's teacher).


class Inspection(Protocol):
    """The inspection part: `python -m pretrainx.data --stats / --show`."""

    corpus: object  # data.corpus.Corpus: its `stats` say what each source yielded
    token_features: tuple  # batch keys whose elements are tokens (tokens/s of the pipeline)

    def batch_stats(self, batch: dict) -> dict:
        """Integer counts of one host batch; added over batches."""

    def summarize_stats(self, totals: dict, phase) -> dict:
        """The objective's figures (fractions, means) from the added counts."""

    def show(self, batch: dict, count: int) -> list:
        """`count` rows decoded for a person to read."""


# the name of a family's masked next-token objective: `<family>_mntp` (objectives/mntp.py)
MNTP_SUFFIX = "_mntp"


@dataclasses.dataclass(frozen=True)
class Entry:
    """An objective as its family's entry holds it (config key `objective`)."""

    name: str
    build: Callable  # (cfg, tokenizer or None) -> Objective (+ Inspection)
    defaults: Callable[[], ml_collections.ConfigDict]  # every key, the paper's values
    validate: Callable  # (cfg) -> None: the family's checks, after the shared ones
    # How a finished run is read as a model to export, fine-tune or continue from:
    # (model_cfg, params) -> (model_cfg, params, head); None: no such reading.
    as_pretrained: Callable | None = None
    # Models the objective reads besides init_from (a distillation's teacher):
    # (cfg) -> {config key: path}. pretrainx.pretrain loads them through interop and the
    # objective is built with them (build(cfg, tokenizer, imported)); a fresh run's
    # parameters then pass through its `adopt(params, imported)`.
    imports: Callable | None = None
    # as_pretrained's inverse, for a run continued from an export or a release:
    # (pretrained params, the run's fresh params) -> pretrained params in the run's tree;
    # None: as_pretrained keeps the run's tree (ELECTRA and DeBERTa-v3 do not)
    from_pretrained: Callable | None = None
    # model keys the objective itself sets, which init_from never takes from a folder:
    # an encoder continued from its decoder (Ettin's cross-objective runs) stays
    # bidirectional
    own_model_keys: tuple = ()
    # A recipe trained as several runs in turn (MobileBERT's layer-by-layer transfer, each
    # stage with a fresh optimizer): (cfg) -> [(folder under WORKDIR, "" for WORKDIR
    # itself; the stage's config)], each stage started from the one before (init_from);
    # [] or None: one run. pretrainx.pretrain.train runs them.
    stages: Callable | None = None
