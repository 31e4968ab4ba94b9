"""ELMo's word vocabulary and character ids (Peters et al. 2018, bilm-tf).

ELMo reads words through their characters, so any word gets a representation;
only the output softmax needs a closed vocabulary. A `.words` file lists one word
per line, most frequent first (bilm-tf's vocabulary format); <pad> <S> </S> <UNK>
take ids 0-3. Every word of the file is an input (its characters are known); the
first `model.vocab_size` ids are the softmax's, and rarer words are predicted as
<UNK>. A word that is in no file is read as <UNK>'s characters.

Characters are UTF-8 bytes between begin-of-word and end-of-word markers, padded
to `max_chars` (50) as bilm-tf's UnicodeCharsVocabulary does; the sentence markers
have characters of their own.
"""

import collections
import os
import re

import numpy as np

from pretrainx.data.charset import PAD_CHAR, char_ids
from pretrainx.data.tokenizer_base import Tokenizer
from pretrainx.errors import UserError

SPECIALS = ("<pad>", "<S>", "</S>", "<UNK>")
# Words, numbers (with inner . , : ' -) and single punctuation marks, as in
# tokenized news text: "Mr. Darcy's" -> "Mr", ".", "Darcy's".
_WORD = re.compile(r"\w+(?:[.,:'’\-]\w+)*|[^\w\s]", re.UNICODE)


def split_words(text: str) -> list:
    return _WORD.findall(text)


class WordTokenizer(Tokenizer):
    """Words <-> ids, and the char-id table of every word in the file."""
    softmax_may_be_smaller = True  # the model predicts the first model.vocab_size words

    def __init__(self, path: str):
        try:
            with open(path, encoding="utf-8") as f:
                listed = [line.rstrip("\n") for line in f if line.strip()]
        except (OSError, UnicodeDecodeError) as e:
            raise UserError(f"cannot read word vocabulary {path}: {e}") from None
        words = list(SPECIALS) + [w for w in listed if w not in SPECIALS]
        if len(words) == len(SPECIALS):
            raise UserError(f"word vocabulary {path} lists no words")
        self.path = path
        self.words = words
        self.ids = {w: i for i, w in enumerate(words)}
        self.vocab_size = len(words)
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = 0, 1, 2, 3
        self.cls_id, self.sep_id, self.mask_id = self.bos_id, self.eos_id, -1
        self.chars = np.stack([char_ids(w) for w in words])  # [vocab, MAX_CHARS]
        self.chars[self.pad_id] = PAD_CHAR
        self._special = np.array([0, 1, 2, 3], np.int32)
        self._word_start = np.ones(self.vocab_size, bool)

    def encode(self, text: str) -> list:
        return [self.ids.get(w, self.unk_id) for w in split_words(text)]

    def decode(self, ids) -> str:
        return " ".join(self.words[i] for i in self._id_list(ids))

    def id_to_piece(self, i: int) -> str:
        return self.words[i]


def build_vocab(files, output: str, min_count: int = 1, max_words: int | None = None) -> int:
    """Count the words of text files and write them, most frequent first (ties in
    first-seen order); returns how many words were written."""
    counts = collections.Counter()
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                counts.update(split_words(line))
    words = [w for w, c in counts.most_common() if c >= min_count and w not in SPECIALS]
    words = words[:max_words] if max_words else words
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    with open(output, "w", encoding="utf-8") as f:
        f.write("\n".join(list(SPECIALS) + words) + "\n")
    return len(words)
