"""Tasks by name: GLUE's nine, CoNLL-2003 NER, SQuAD and contrastive (a sentence
embedder), each built by its module into
a `TaskData` (finetune/task.py); a text-to-text model (T5, BART asked to) gets the text
form."""

from pretrainx.errors import UserError
from pretrainx.finetune import conll, contrastive, glue, squad, text_to_text
from pretrainx.finetune.task import TaskData


def task_names() -> list:
    return list(glue.TASKS) + ["conll2003", "squad", "contrastive"]


def build(cfg, tokenizer, as_text: bool = False, framing: str = "eos",
          frame=None, width: int = 0) -> TaskData:
    """The TaskData of `cfg.task` from its files under data.glue_dir / data.squad_dir,
    in T5's text-to-text form when `as_text` (ids framed as `framing` says); `frame`:
    a decoder's text framing for the contrastive task (registry.text_ids)."""
    name = cfg.task
    if as_text and name == "contrastive":
        raise UserError("task contrastive trains an encoder's embeddings; a text-to-text "
                        "model has none to pool (fine-tune an encoder)")
    if cfg.data.holdout_examples and (as_text or name == "squad"):
        raise UserError(f"data.holdout_examples is for GLUE and CoNLL-2003 with a task head; "
                        f"{'text-to-text' if as_text else 'SQuAD'} fine-tuning chooses on dev")
    if as_text:
        return text_to_text.build(cfg, tokenizer, framing)
    if name == "conll2003":
        return conll.build(cfg, tokenizer)
    if name == "squad":
        return squad.build(cfg, tokenizer)
    if name == "contrastive":
        return contrastive.build(cfg, tokenizer, frame, width)
    return glue.build(glue.get_task(name), cfg, tokenizer)


def check_name(name: str) -> None:
    if name not in task_names():
        raise UserError(f"config key 'task' is {name!r}; known: {', '.join(task_names())}")
