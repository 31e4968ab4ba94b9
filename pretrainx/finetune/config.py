"""The keys of a fine-tuning config and their checks (`objective = "finetune"`).

Defaults are BERT's GLUE recipe (Devlin et al. 2019, run_classifier.py): batch 32,
3 epochs, AdamW at 2e-5 with 10% linear warmup and linear decay to 0, weight decay
0.01, dropout 0.1, length 128. The model's shape comes from `init_from` (a
pretraining or fine-tuning workdir, or a HuggingFace directory); `model.*` only
matters without it (a randomly initialised baseline).
"""

import ml_collections

from pretrainx import config as config_lib, models
from pretrainx.errors import UserError
from pretrainx.finetune import contrastive, task_data
from pretrainx.models import peft as peft_lib
from pretrainx.train import optim

# the encoder a run without init_from builds at random (its model keys are the defaults)
DEFAULT_FAMILY = "bert"
OBJECTIVE = "finetune"  # what a fine-tuning config's `objective` key says


def is_finetuning(cfg) -> bool:
    return cfg.get("objective") == OBJECTIVE


def finetune_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.objective = OBJECTIVE
    c.task = "sst2"  # cola sst2 mrpc qqp stsb mnli qnli rte wnli | conll2003 | squad |
    #                  contrastive (a sentence embedder: data.pairs_file, data.pooling)
    c.init_from = ""  # pretraining/fine-tuning workdir or HF directory; "" = random init
    c.seed = 0
    c.epochs = 3
    c.global_batch_size = 32
    c.seq_len = 128
    c.log_every = 100
    c.eval_batch_size = 64
    c.max_skipped_steps = 10
    # > 0: stop once this many epochs in a row have not beaten the best one (the score
    # that chooses: dev's, or the held-out rows'); the best epoch is kept as always
    c.early_stopping_epochs = 0
    # the best epoch's test predictions (GLUE's submission files, CoNLL's test F1); a
    # comparison or a probe, which report dev, leaves them out
    c.predict_test = True
    # BART: generate label words as T5 does (True) instead of its classification head;
    # T5 always does, encoder families never do
    c.text_to_text = False

    c.mesh = ml_collections.ConfigDict({"data": -1, "fsdp": 1, "tensor": 1})
    c.sharding_rules = config_lib.DEFAULT_SHARDING_RULES

    # BERT's: AdamW at 2e-5 (the paper searches 5e-5, 3e-5, 2e-5), linear decay after a
    # warmup over the first 10% of the steps
    c.optimizer = config_lib.optimizer_config(2e-5, "bert_linear")
    c.optimizer.warmup_fraction = 0.1
    # ULMFiT (Howard and Ruder 2018) and ELECTRA / DeBERTa fine-tuning: a layer's rate is
    # the head's times layer_lr_decay^(layers above it); embeddings lowest. 1: off.
    c.optimizer.layer_lr_decay = 1.0
    # ULMFiT's gradual unfreezing: epoch 1 trains the head, each later epoch one more
    # layer from the top (the embeddings last); frozen parameters stay bit-identical.
    c.optimizer.gradual_unfreezing = False
    # True: the embeddings (depth 0 for finetune/layerwise.py: token, position and type
    # tables, their norm; static word vectors) keep their pretrained values
    c.optimizer.freeze_embeddings = False

    c.data = ml_collections.ConfigDict()
    c.data.glue_dir = ""  # the folder holding SST-2/, CoLA/, ... as GLUE ships them
    c.data.conll_dir = ""  # train.txt/valid.txt/test.txt; default: glue_dir/CoNLL-2003
    c.data.squad_dir = ""  # train-v1.1.json and dev-v1.1.json
    c.data.doc_stride = 128  # SQuAD: tokens between the starts of a context's windows
    c.data.max_query_length = 64  # SQuAD: question tokens kept
    c.data.max_answer_length = 30  # SQuAD: longest answer predicted, in tokens
    c.data.target_length = 0  # T5: target tokens (0: the longest training target + eos)
    c.data.mode_token = ""  # text to text: every input starts with it (UL2's "[NLU]", ...)
    c.data.tokenizer = ""  # default: the one init_from names
    c.data.lower_case = True
    c.data.max_train_examples = 0  # > 0: the first N training rows (a slice, for demos)
    c.data.max_eval_examples = 0
    # > 0: the last N of the training rows read are not trained on; they are scored
    # after every epoch and choose the best one (dev is reported there, not chosen on)
    c.data.holdout_examples = 0
    # task contrastive (finetune/contrastive.py): TSV / JSONL / Parquet rows of an anchor,
    # a positive and optionally a hard negative ("" = STS-B's train pairs scored >= 4);
    # each text pooled (mean | cls), InfoNCE over the batch at temperature (learned from
    # that start with learn_temperature, as CLIP)
    c.data.pairs_file = ""
    c.data.pair_fields = "anchor,positive"
    c.data.pooling = "mean"  # mean | cls | last (the last real token: a causal decoder's)
    c.data.temperature = 0.05
    c.data.learn_temperature = False
    # unsupervised SimCSE (Gao et al. 2021): each text of pair_fields' first column is
    # its own positive, the two views differing by dropout at this rate (the model's
    # dropout keys are set to it for the run; SimCSE's 0.1)
    c.data.simcse = False
    c.data.simcse_dropout = 0.1
    # Matryoshka representation learning (Kusupati et al. 2022; EmbeddingGemma's
    # 768,512,256,128): InfoNCE also on each prefix of the embedding this wide, the
    # losses summed with weight 1 as sentence-transformers' MatryoshkaLoss; "" = off
    c.data.matryoshka_dims = ""
    # embedding distillation: every text's embedding by this model (a workdir or HF folder,
    # pooled as it pools: pretrainx.load(...).embed), matched by the student's with
    # distill_loss (cosine: 1 - cos; mse: the mean squared difference), distill_weight
    # times it added to InfoNCE; "" = off
    c.data.teacher = ""
    c.data.distill_loss = "cosine"
    c.data.distill_weight = 1.0

    c.peft = ml_collections.ConfigDict()
    c.peft.method = "none"  # none | lora | adapter | prefix | prompt
    c.peft.lora_rank = 8
    c.peft.lora_alpha = 16.0
    c.peft.lora_dropout = 0.1
    c.peft.lora_targets = "query,value"  # of query, key, value, out, wi, wo
    c.peft.adapter_size = 64  # Houlsby bottleneck
    c.peft.num_virtual_tokens = 20  # prompt tokens, or prefix length per layer

    # Used only without init_from: the shape of a randomly initialised encoder.
    c.model = models.family(DEFAULT_FAMILY).default_config()
    return c


def _known_keys(cfg) -> set:
    """The fine-tuning keys, with the model keys of the family `model.family` names (a
    randomly initialised ModernBERT has its own model keys, not BERT's)."""
    name = models.family_name(cfg.model)
    family = models.FAMILIES.find(name)
    if family is None:
        raise UserError(f"config key 'model.family' is {name!r}; known: "
                        f"{', '.join(f.name for f in models.FAMILIES.entries())}")
    keys = {k for k in config_lib.flatten(finetune_config()) if not k.startswith("model.")}
    return keys | {f"model.{k}" for k in config_lib.flatten(family.default_config())}


# optimizer keys every run has that fine-tuning's loop does not read yet (a budget, a
# batch ramp, a parameter average): a value set is refused rather than ignored
_PRETRAINING_ONLY = {"budget_hours": 0.0, "batch_ramp": 0.0, "ema_decay": 0.0,
                     "accumulate_to": 1}


def validate(cfg) -> ml_collections.ConfigDict:
    known = _known_keys(cfg)
    groups = {k.rsplit(".", 1)[0] for k in known if "." in k}
    for name in config_lib.flatten(cfg):
        if name not in known and name not in groups:
            raise UserError(f"unknown config key '{name}'")
    task_data.check_name(cfg.task)
    if not isinstance(cfg.early_stopping_epochs, int) or cfg.early_stopping_epochs < 0:
        raise UserError(f"early_stopping_epochs={cfg.early_stopping_epochs!r} must be an "
                        "integer >= 0 (0: train every epoch)")
    config_lib.check_positive(cfg, "epochs", "global_batch_size", "seq_len", "log_every",
                         "eval_batch_size", "max_skipped_steps")
    if cfg.optimizer.learning_rate <= 0:
        raise UserError(f"optimizer.learning_rate={cfg.optimizer.learning_rate} must be positive")
    optim.check_names(cfg.optimizer)
    if not 0.0 < cfg.optimizer.layer_lr_decay <= 1.0:
        raise UserError(f"config key 'optimizer.layer_lr_decay' is "
                        f"{cfg.optimizer.layer_lr_decay}; expected (0, 1] (ELECTRA: 0.8)")
    for key, off in _PRETRAINING_ONLY.items():
        if cfg.optimizer[key] != off:
            raise UserError(f"optimizer.{key}={cfg.optimizer[key]!r} is read by pretraining "
                            f"runs only; a fine-tuning run leaves it at {off}")
    if not 0.0 <= cfg.optimizer.warmup_fraction < 1.0:
        raise UserError(f"optimizer.warmup_fraction={cfg.optimizer.warmup_fraction} must be "
                        "in [0, 1)")
    if cfg.task == "squad":
        if not cfg.data.squad_dir:
            raise UserError("config key 'data.squad_dir' is empty; set it with "
                            "--config.data.squad_dir=DIR (train-v1.1.json, dev-v1.1.json)")
    elif cfg.task == "contrastive":
        config_lib.choice(cfg.data.pooling, "data.pooling", ("mean", "cls", "last"))
        contrastive.matryoshka_dims(cfg.data.matryoshka_dims, None)
        config_lib.choice(cfg.data.distill_loss, "data.distill_loss", ("cosine", "mse"))
        if cfg.data.simcse and not 0.0 < cfg.data.simcse_dropout < 1.0:
            raise UserError(f"data.simcse_dropout={cfg.data.simcse_dropout} must be in (0, 1): "
                            "SimCSE's two views differ only by dropout")
        if not cfg.data.temperature > 0:
            raise UserError(f"data.temperature={cfg.data.temperature} must be positive")
        if not (cfg.data.pairs_file or cfg.data.glue_dir):
            raise UserError("task contrastive reads data.pairs_file, or STS-B's train pairs "
                            "under data.glue_dir: set one")
    elif not (cfg.data.glue_dir or (cfg.task == "conll2003" and cfg.data.conll_dir)):
        raise UserError("config key 'data.glue_dir' is empty; set it with "
                        "--config.data.glue_dir=DIR (the folder with SST-2/, CoLA/, ...)")
    if cfg.data.holdout_examples < 0:
        raise UserError(f"data.holdout_examples={cfg.data.holdout_examples} must be >= 0")
    config_lib.check_positive(cfg, "data.doc_stride", "data.max_query_length",
                         "data.max_answer_length")
    peft_lib.from_config(cfg.peft)
    return cfg
