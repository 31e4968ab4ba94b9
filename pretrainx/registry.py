"""One entry per model family, registered by its `families/<name>/spec.py`.

A family's `Family` entry carries every trait generic code may ask of it: its model's
(defaults, fine-tuning, sampling), its objectives', its HF adapter's and the other
checkpoint layouts it reads. The first lookup imports every `families/*/spec.py`, so a
new family is found without an edit anywhere else. Generic code asks an entry for a
trait; it never compares a name. The objectives, adapters and formats are read through
`View`s of the one table, so each floor asks for what it knows by its own name.
"""

import dataclasses
import importlib
import pathlib
from typing import Callable

from pretrainx.errors import UserError


PLUGINS = "pretrainx.families"  # where every family's spec.py is


@dataclasses.dataclass(frozen=True)
class Family:
    """A model family (config key `model.family`) and all it brings."""
    name: str
    default_config: Callable  # () -> the family's model.* keys, the paper's values
    # (model_cfg, head, num_labels, peft) -> the module that fine-tuning trains; None:
    # this family does not fine-tune
    finetune_model: Callable | None = None
    # fine-tuning by generating label words: "never" (heads only), "always" (T5) or
    # "optional" (BART: heads, or words with the fine-tuning key text_to_text)
    text_to_text: str = "never"
    # a text-to-text pair's ids: "eos" (T5: text </s>, the decoder starts at 0) or
    # "bos_eos" (BART: <s> text </s> on both sides, the decoder starts at </s>)
    text_framing: str = "eos"
    # (model_cfg, params, tokens, segment_ids, length, eos_id, pad_id, num_beams) ->
    # [batch, length] ids the decoder writes: text-to-text predictions
    generate: Callable | None = None
    peft: bool = False  # takes LoRA, adapters, prefix and prompt tuning
    max_positions: str = ""  # the model key that bounds a fine-tuning length
    # (model_cfg) -> the model with a key-value cache that `python -m pretrainx.generate`
    # samples from (sampling.py); None: this family is not sampled token by token
    causal_sampling: Callable | None = None
    # (model_cfg) -> the decoder (batch of inputs, segment_ids, positions -> {"logits"}),
    # the forward a distillation's teacher runs; None: the family cannot teach next tokens
    next_token_network: Callable | None = None
    # (model_cfg) -> whether this model is the family's decoder, sampled token by token
    # (a family of encoders and decoders, ModernBERT's, answers per model)
    is_causal: Callable = lambda model_cfg: True
    # a sampled decoder's rows: "pieces" (GPT-2's documents, each ended by its
    # end-of-text), "bos" (the pieces after the tokenizer's start token where it has
    # one apart from its end token: Gemma's <bos>) or "cls" (the encoder's [CLS] text
    # [SEP], ModernBERT's decoder): a prompt starts with [CLS] and a sample stops at [SEP]
    sample_framing: str = "pieces"
    # (model_cfg, head) -> the pretraining model whose "mlm_logits" fill [MASK]
    # (notebook.fill_mask; head: the checkpoint's, pretrain or mlm); None: it has none
    fill_mask: Callable | None = None
    # the ids this family gives a byte-level vocabulary (data.bpe.LAYOUTS; "": the file's)
    tokenizer_layout: str = ""
    # (model_cfg, params, batch of input_ids, token_type_ids, attention_mask) ->
    # {"hidden_states", "logits"} at every position: what pretrainx.load runs; None:
    # this family's checkpoints are not run that way yet
    outputs: Callable | None = None
    objectives: tuple = ()  # objectives.Entry, one per config `objective` it trains
    # the family this one extends (its model keys, objective or adapters start from that
    # family's): the only other family its modules import, with that one's base in turn
    base: str = ""
    hf: tuple = ()  # interop.hf.Adapter: how HF holds its models (none: HF has none)
    # how a sentence embedding reads the last hidden states, as the family's fine-tuning
    # pools: "cls" (the first token's) or "mean" (of the real tokens), or (model_cfg) ->
    # one of them; its HF exports carry sentence-transformers' files. None: the family is
    # not a sentence encoder (decoders, seq2seq), its exports carry none.
    sentence_pooling: str | Callable | None = None
    formats: tuple = ()  # interop.Format: other projects' checkpoint layouts it reads
    # (Pretrained, output folder) -> the files written: `python -m pretrainx.export` in the
    # family's own format instead of an HF directory (word vectors); None: HF's
    export: Callable | None = None


def samples(family: Family, model_cfg) -> bool:
    """Whether `model_cfg` is a decoder that python -m pretrainx.generate samples token by
    token (a GPT-2, an Ettin decoder)."""
    return family.causal_sampling is not None and bool(family.is_causal(model_cfg))


def text_ids(family: Family, tokenizer, pieces: list) -> list:
    """A text's ids as the family's models saw text in training: a decoder family's
    `sample_framing` (its bidirectional form too: it was trained on the same rows),
    text </s> for T5, [CLS] text [SEP] for an encoder (BART: <s> text </s>)."""
    if family.causal_sampling is not None and family.sample_framing == "pieces":
        return list(pieces)
    if family.causal_sampling is not None and family.sample_framing == "bos":
        own = tokenizer.cls_id >= 0 and tokenizer.cls_id != tokenizer.sep_id
        return ([tokenizer.cls_id] if own else []) + list(pieces)
    if family.text_to_text == "always" and family.text_framing == "eos":  # T5
        return list(pieces) + [tokenizer.sep_id]
    return [tokenizer.cls_id] + list(pieces) + [tokenizer.sep_id]


def sentence_pooling(family: Family, model_cfg) -> str | None:
    """The family's sentence pooling for this model ("cls", "mean"), or None."""
    how = family.sentence_pooling
    return how(model_cfg) if callable(how) else how


class Registry:
    """Named entries (anything with a `name`), filled by the modules that define them."""

    def __init__(self, what: str, package: str = PLUGINS, module: str = "spec"):
        self.package, self.module, self.what = package, module, what
        self._entries, self._found = {}, False

    def register(self, entry):
        """Add `entry`; returns it, so a module can keep it."""
        if entry.name in self._entries and self._entries[entry.name] is not entry:
            raise ValueError(f"{self.what} {entry.name!r} is registered twice")
        self._entries[entry.name] = entry
        return entry

    def _discover(self):
        if not self._found:
            self._found = True
            package = importlib.import_module(self.package)
            for folder in package.__path__:  # a family's folder needs no __init__.py
                for path in sorted(pathlib.Path(folder).glob(f"*/{self.module}.py")):
                    importlib.import_module(
                        f"{self.package}.{path.parent.name}.{path.stem}")

    def find(self, name):
        """The entry called `name`, or None."""
        self._discover()
        return self._entries.get(name)

    def get(self, name, key: str):
        """The entry called `name`; a UserError naming the config `key` and the known
        names if there is none."""
        entry = self.find(name)
        if entry is None:
            raise UserError(f"config key '{key}' is {name!r}; expected one of "
                            f"{', '.join(self.names())}")
        return entry

    def names(self) -> list:
        return sorted(entry.name for entry in self.entries())

    def entries(self) -> list:
        self._discover()
        return [self._entries[n] for n in sorted(self._entries)]


class View(Registry):
    """The entries one trait of every family holds (its objectives, its HF adapters),
    by their own names: read-only, filled by the families' registration."""

    def __init__(self, what: str, families: Registry, trait: str):
        super().__init__(what)
        self.families, self.trait = families, trait

    def register(self, entry):
        raise TypeError(f"a {self.what} is registered in its family's spec.py")

    def find(self, name):
        return next((e for e in self.entries() if e.name == name), None)

    def entries(self) -> list:
        found = [e for family in self.families.entries() for e in getattr(family, self.trait)]
        return sorted(found, key=lambda e: e.name)


FAMILIES = Registry("model family")
register = FAMILIES.register
