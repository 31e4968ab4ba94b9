"""ELMo's character alphabet: what the data pipeline writes and the model embeds.

Characters are UTF-8 bytes between begin-of-word and end-of-word markers, padded
to `max_chars` (50) as bilm-tf's UnicodeCharsVocabulary does; the sentence markers
have characters of their own. It sits below both `data` and `models`, which share it.
"""

import numpy as np

MAX_CHARS = 50
# Character ids: bytes 0-255, then the markers; 261 rows in the char embedding.
BOS_CHAR, EOS_CHAR, BOW_CHAR, EOW_CHAR, PAD_CHAR = 256, 257, 258, 259, 260
NUM_CHARS = 261


def char_ids(word: str, max_chars: int = MAX_CHARS) -> np.ndarray:
    special = {"<S>": [BOS_CHAR], "</S>": [EOS_CHAR]}.get(word)
    body = special or list(word.encode("utf-8", "replace")[:max_chars - 2])
    out = np.full(max_chars, PAD_CHAR, np.int32)
    out[0] = BOW_CHAR
    out[1:1 + len(body)] = body
    out[1 + len(body)] = EOW_CHAR
    return out
