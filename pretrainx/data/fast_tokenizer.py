"""A `tokenizer.json` alone (what transformers' fast tokenizers save, and all that
ModernBERT's release ships), read with HF's `tokenizers` library: its normaliser,
pre-tokeniser and model (BPE, WordPiece or Unigram) exactly as transformers runs them.

The special ids are found by the names the families use ([CLS]/<s>, [SEP]/</s>,
[PAD]/<pad>, [MASK]/<mask>, [UNK]/<unk>; GPT-2's <|endoftext|> for all of them; Gemma's
<bos>/<eos>, which mmBERT uses as [CLS]/[SEP]), and
the word starts by the model's marks: byte-level BPE's "Ġ", SentencePiece's "▁",
WordPiece's pieces that do not start with "##".
"""

import json
import os

import numpy as np

from pretrainx.data.tokenizer_base import SP_WORD_START, Tokenizer
from pretrainx.errors import UserError

_NAMES = {"cls_id": ("[CLS]", "<s>", "<|endoftext|>", "<bos>"),
          "sep_id": ("[SEP]", "</s>", "<|endoftext|>", "<eos>"),
          "pad_id": ("[PAD]", "<pad>", "<|endoftext|>"),
          "unk_id": ("[UNK]", "<unk>", "<|endoftext|>"),
          "mask_id": ("[MASK]", "<mask>")}


# transformers' names of the special tokens (tokenizer_config.json and
# special_tokens_map.json), each with the one to use where it is not given
_CONFIG_KEYS = {"cls_id": ("cls_token", "bos_token"), "sep_id": ("sep_token", "eos_token"),
                "pad_id": ("pad_token",), "unk_id": ("unk_token",), "mask_id": ("mask_token",)}


def _configured_specials(folder: str) -> dict:
    """{attribute: token} as the folder's tokenizer_config.json (or special_tokens_map.json)
    names them: what transformers uses, where a vocabulary holds two candidates (a
    SentencePiece model's own [PAD] beside the <pad> a tokenizer class added)."""
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        try:
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                config = json.load(f)
        except (OSError, ValueError):
            continue
        out = {}
        for attr, keys in _CONFIG_KEYS.items():
            token = next((config[k] for k in keys if config.get(k)), None)
            token = token.get("content") if isinstance(token, dict) else token
            if isinstance(token, str):
                out[attr] = token
        if out:
            return out
    return {}


class FastTokenizer(Tokenizer):
    def __init__(self, path: str):
        try:
            import tokenizers
        except ImportError:
            raise UserError(f"{path} is read with HF's tokenizers library: pip install "
                            "tokenizers") from None
        self.path = path
        try:
            self._tok = tokenizers.Tokenizer.from_file(path)
            spec = json.loads(self._tok.to_str())
        except Exception as e:  # the library's errors are plain Exceptions
            raise UserError(f"cannot read {path}: {str(e).splitlines()[0][:200]}") from None
        vocab = self._tok.get_vocab(with_added_tokens=True)
        self.vocab_size = max(vocab.values()) + 1
        configured = _configured_specials(os.path.dirname(path))
        for attr, names in _NAMES.items():
            found = [vocab[n] for n in (configured.get(attr, ""), *names) if n in vocab]
            setattr(self, attr, found[0] if found else -1)
        if min(self.cls_id, self.sep_id, self.pad_id) < 0:
            raise UserError(f"{path} has none of the start, end or padding tokens pretrainx "
                            f"knows ({', '.join(_NAMES['cls_id'] + _NAMES['sep_id'])})")
        if self.unk_id < 0:
            self.unk_id = self.pad_id
        named = {getattr(self, a) for a in _NAMES} | {
            t["id"] for t in spec.get("added_tokens", []) if t.get("special")}
        self._special = np.array(sorted(named - {-1}), np.int32)
        # byte-level BPE spells a word's space into its token (" the"): corpus.tokenize
        # then joins a document's sentences with one; SentencePiece's marks need not
        self.spaces_are_tokens = "ByteLevel" in json.dumps(spec.get("pre_tokenizer"))
        self._word_start = self._starts(vocab, spec.get("model", {}).get("type"))

    def _starts(self, vocab: dict, kind: str) -> np.ndarray:
        starts = np.zeros(self.vocab_size, bool)
        for piece, i in vocab.items():
            if kind == "WordPiece":
                starts[i] = not piece.startswith("##")
            else:  # byte-level BPE marks a space with Ġ, SentencePiece with ▁
                starts[i] = piece.startswith(("\u0120", SP_WORD_START)) or not piece[:1].isalnum()
        return starts

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids) -> str:
        return self._tok.decode(self._id_list(ids), skip_special_tokens=True)

    def id_to_piece(self, i: int) -> str:
        piece = self._tok.id_to_token(int(i))
        if piece is None:
            raise UserError(f"token id {i} out of range [0, {self.vocab_size}) for {self.path}")
        return piece
