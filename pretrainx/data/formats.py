"""How a decoded text file becomes documents, by `data.format`: each format registered
beside its reader, so a new one is a reader and one `register_format` line.

A reader takes (path, text, text_field, skip_bad_lines, stats) and returns documents
(lists of sentence strings). Under "auto" a file whose name ends with one of a
format's `suffixes` (before .gz) is read as that format, and any other by the text's
own look (sentences a line, or running text). JSONL, Parquet, Arrow and TFDS records
are read by data/sources.py before any format applies."""

from pretrainx.data import task_text
from pretrainx.data import text as text_lib
from pretrainx.errors import UserError


class TextFormat:
    def __init__(self, read, suffixes=()):
        self.read, self.suffixes = read, tuple(suffixes)


TEXT_FORMATS = {}


def register_format(name: str, read, suffixes=()):
    TEXT_FORMATS[name] = TextFormat(read, suffixes)


def _prose(kind):
    def read(path, text, text_field, skip_bad_lines, stats):
        text = text_lib.strip_gutenberg(text)
        chosen = text_lib.detect_format(text) if kind == "auto" else kind
        return (text_lib.sentence_documents(text) if chosen == "sentences"
                else text_lib.text_documents(text))
    return read


register_format("auto", _prose("auto"))
register_format("sentences", _prose("sentences"))
register_format("text", _prose("text"))
register_format("tsv", task_text.tsv_documents, suffixes=(".tsv",))
register_format("conll", lambda path, text, field, skip, stats: task_text.conll_documents(
    path, text))


def check_format(fmt) -> None:
    """data.format names a registered format (one line naming the choices)."""
    if fmt not in TEXT_FORMATS:
        raise UserError(f"config key 'data.format' is {fmt!r}; expected one of "
                        f"{', '.join(TEXT_FORMATS)}")
