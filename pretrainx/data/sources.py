"""Read raw text corpora into documents: lists of sentence strings.

Two layouts are understood:

* ``"sentences"``: the google-research/bert ``create_pretraining_data.py``
  layout, one sentence per line and a blank line between documents.
* ``"text"``: free prose such as Project Gutenberg books, hard-wrapped with
  blank lines between paragraphs. Paragraph lines are joined, split into
  sentences with a regex, and runs of paragraphs become documents that close
  at a chapter heading, at ``MAX_DOC_SENTENCES`` sentences, or at end of file.

Next-sentence prediction draws IsNext pairs from within a document and random
pairs from other documents, so document boundaries matter as much as sentences.
"""

import glob
import gzip
import json
import os
import re
import statistics
import sys
import zlib

from pretrainx.errors import UserError

FORMATS = ("auto", "sentences", "text")
MAX_DOC_SENTENCES = 200

_REPLACEMENT = "\ufffd"
_GLOB_CHARS = re.compile(r"[*?\[]")

# Sentence end: terminal punctuation, optional closing quotes/brackets/italic
# underscores, whitespace, then something that can open a sentence.
_BOUNDARY = re.compile(r"[.!?]+[\"'”’)\]_]*\s+(?=[\"'“‘(\[_]*[A-Z0-9])")
_WORD_BEFORE_DOT = re.compile(r"([A-Za-z][A-Za-z.]*)\.$")
_ABBREVIATIONS = frozenset(
    "mr mrs ms mssrs messrs dr st jr sr prof rev gen col capt lt sgt mt no vs "
    "etc e.g i.e cf hon esq mme mlle mm co inc ltd vol ch fig viz".split())

_NUMBER_WORDS = (
    "one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|"
    "first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|last")
_HEADING_KEYWORD = re.compile(
    r"^(?:(?i:chapter|book|part|volume)\s+(?:\d+|[IVXLCDMivxlcdm]+\b|[A-Z]{2,}\b|"
    r"(?i:(?:the\s+)?(?:" + _NUMBER_WORDS + r"))\b)|(?:CHAPTER|BOOK|PART|VOLUME)\b)")
_ROMAN_LINE = re.compile(r"^[IVXLCDM]+\.?$")
_MAX_HEADING_CHARS = 100
_MAX_CAPS_HEADING_CHARS = 60
_ILLUSTRATION = re.compile(r"^\[Illustration", re.IGNORECASE)

_PG_START = re.compile(r"^\*\*\* ?START OF.*$", re.MULTILINE | re.IGNORECASE)
_PG_END = re.compile(r"^\*\*\* ?END OF", re.MULTILINE | re.IGNORECASE)
_SENTENCE_END = re.compile(r"[.!?][\"'”’)\]_]*$")


def expand_patterns(patterns):
    """Comma-separated string or list of globs -> sorted, de-duplicated files."""
    if isinstance(patterns, str):
        patterns = patterns.split(",")
    patterns = [p.strip() for p in patterns if p and p.strip()]
    if not patterns:
        raise UserError("no input files given")
    files = []
    for pattern in patterns:
        pattern = os.path.expanduser(pattern)
        if _GLOB_CHARS.search(pattern):
            matches = sorted(glob.glob(pattern))
        else:
            matches = [pattern] if os.path.exists(pattern) else []
        if not matches:
            raise UserError(f"no file matches {pattern!r}")
        for path in matches:
            if os.path.isdir(path):
                raise UserError(f"{path!r} is a directory, expected text files")
            if path not in files:
                files.append(path)
    return files


def decode_text(raw):
    """Bytes -> (text, replaced_chars): lossy UTF-8, no BOM, LF line ends.

    Replaced characters are counted so that a corpus in the wrong encoding
    shows up in the stats instead of silently turning into U+FFFD soup.
    """
    text = raw.decode("utf-8", errors="replace")
    replaced = text.count(_REPLACEMENT) - raw.count(_REPLACEMENT.encode("utf-8"))
    if text.startswith("\ufeff"):
        text = text[1:]
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text, replaced


def _gunzip(data):
    """(bytes, error): every byte that decompresses, and why the rest did not."""
    out = []
    while data:
        stream = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            out.append(stream.decompress(data))
        except zlib.error as e:
            return b"".join(out), str(e)
        if not stream.eof:
            out.append(stream.flush())
            return b"".join(out), "compressed data ends before the end-of-stream marker"
        data = stream.unused_data.lstrip(b"\0")  # the next member of a concatenated file
    return b"".join(out), None


def _read_bytes(path, allow_truncated=False):
    """(bytes, truncated). A gzip file cut short keeps what was read when allowed."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise UserError(f"cannot read {path!r}: {e}") from None
    if not path.endswith(".gz"):
        return data, False
    if not data.startswith(b"\x1f\x8b"):
        raise UserError(f"cannot read {path!r}: not a gzip file")
    text, error = _gunzip(data)
    if error is None:
        return text, False
    if not allow_truncated or not text:
        raise UserError(f"cannot read {path!r}: gzip stream broken after {len(text)} bytes "
                        f"({error}); set data.skip_bad_lines=True to keep the part before")
    return text, True


def strip_gutenberg(text):
    """Drop Project Gutenberg header/licence around the *** START/END OF lines."""
    start = _PG_START.search(text)
    if start:
        text = text[start.end():]
    end = _PG_END.search(text)
    if end:
        text = text[:end.start()]
    return text


def detect_format(text):
    """Guess "sentences" or "text" from the non-blank lines.

    Rule: "sentences" when the median line is longer than 100 characters
    (nobody hard-wraps that wide) or at least half the lines end in sentence
    punctuation; otherwise "text". Hard-wrapped books have ~70 character lines
    of which only 15-35% happen to end a sentence.
    """
    lines = [line.strip() for line in text.split("\n")]
    lines = [line for line in lines if line]
    if not lines:
        return "sentences"
    if statistics.median(len(line) for line in lines) > 100:
        return "sentences"
    ending = sum(1 for line in lines if _SENTENCE_END.search(line))
    return "sentences" if ending >= 0.5 * len(lines) else "text"


def split_sentences(paragraph):
    """Regex sentence splitter for one paragraph of prose.

    Splits after . ! ? (plus closing quotes/brackets) followed by whitespace
    and an uppercase letter, digit or opening quote, except after common
    abbreviations (Mr. Dr. St. etc.) and single capital initials (J. Smith).
    """
    sentences = []
    start = 0
    for m in _BOUNDARY.finditer(paragraph):
        head = paragraph[start:m.start() + 1]
        if paragraph[m.start()] == "." and _is_abbreviation(head):
            continue
        sentences.append(paragraph[start:m.end()].strip())
        start = m.end()
    sentences.append(paragraph[start:].strip())
    return [s for s in sentences if s]


def _is_abbreviation(text_to_dot):
    """True when text ending in '.' ends with an abbreviation or an initial."""
    m = _WORD_BEFORE_DOT.search(text_to_dot)
    if not m:
        return False
    word = m.group(1)
    if len(word) == 1 and word.isupper():
        return True
    return word.lower() in _ABBREVIATIONS


def is_heading(paragraph):
    """Chapter/part headings, roman numeral lines and short all-caps lines."""
    if len(paragraph) > _MAX_HEADING_CHARS:
        return False
    if _HEADING_KEYWORD.match(paragraph) or _ROMAN_LINE.match(paragraph):
        return True
    letters = [c for c in paragraph if c.isalpha()]
    return (len(paragraph) <= _MAX_CAPS_HEADING_CHARS and len(letters) >= 2
            and paragraph.upper() == paragraph)


def _is_heading_line(line):
    return len(line) <= _MAX_HEADING_CHARS and bool(
        _HEADING_KEYWORD.match(line) or _ROMAN_LINE.match(line))


def _split_block(lines):
    """Cut heading lines out of a block; files without blank lines need it.

    A short block (<= 3 lines) starting with a heading is a wrapped heading
    and stays whole.
    """
    if len(lines) <= 3 and _is_heading_line(lines[0]):
        return [lines]
    out, current = [], []
    for line in lines:
        if _is_heading_line(line):
            if current:
                out.append(current)
            out.append([line])
            current = []
        else:
            current.append(line)
    if current:
        out.append(current)
    return out


def paragraphs(text):
    """Blank-line separated blocks, each joined into one whitespace-normalised line."""
    out = []
    for block in re.split(r"\n[ \t\f\v]*\n", text):
        lines = [line.strip() for line in block.split("\n")]
        lines = [line for line in lines if line]
        if not lines:
            continue
        for part in _split_block(lines):
            out.append(" ".join(" ".join(part).split()))
    return out


def text_documents(text, max_sentences=MAX_DOC_SENTENCES):
    """Free prose -> documents of sentences, closed at headings or size."""
    documents, current = [], []
    for paragraph in paragraphs(text):
        if _ILLUSTRATION.match(paragraph):
            continue
        if is_heading(paragraph):
            if current:
                documents.append(current)
            current = []
            continue
        current.extend(split_sentences(paragraph))
        while len(current) >= max_sentences:
            documents.append(current[:max_sentences])
            current = current[max_sentences:]
    if current:
        documents.append(current)
    return documents


# No sentence runs this long: such a line is a paragraph, or a whole text saved
# without line breaks, and is split into sentences.
LONG_LINE = 2000


def sentence_documents(text):
    """One sentence per line, blank line between documents."""
    documents, current = [], []
    for line in text.split("\n"):
        line = line.strip()
        if len(line) > LONG_LINE:
            current.extend(split_sentences(line))
        elif line:
            current.append(line)
        elif current:
            documents.append(current)
            current = []
    if current:
        documents.append(current)
    return documents


def record_document(text, max_sentences=MAX_DOC_SENTENCES):
    """One record of a JSONL or TFDS corpus (a web page, an article) -> documents.

    Such records keep paragraphs on lines of their own, so every line is split
    into sentences; a record longer than `max_sentences` becomes several.
    """
    sentences = []
    for line in text.replace("\r\n", "\n").split("\n"):
        line = " ".join(line.split())
        if line:
            sentences.extend(split_sentences(line))
    return [sentences[i:i + max_sentences] for i in range(0, len(sentences), max_sentences)]


class Unit:
    """A piece of a source that one worker reads on its own: a file, or a range of
    a TFDS split's records. Units are listed in a fixed order, so documents are too."""

    def __init__(self, kind, path, start=0, stop=None):
        self.kind, self.path, self.start, self.stop = kind, path, start, stop

    def __repr__(self):
        if self.kind == "tfds":
            return f"{self.path}[{self.start}:{self.stop}]"
        return self.path


def _is_jsonl(path):
    name = path[:-3] if path.endswith(".gz") else path
    return name.endswith((".jsonl", ".json"))


def new_stats():
    """Counters of what reading a source met (see read_documents)."""
    return {"files": 0, "records": 0, "replaced_chars": 0, "skipped_lines": 0,
            "truncated_files": 0, "documents": 0, "sentences": 0}


def add_stats(total, more):
    for key, value in more.items():
        total[key] += value
    return total


def _file_documents(path, fmt, text_field, skip_bad_lines, stats):
    raw, truncated = _read_bytes(path, allow_truncated=skip_bad_lines)
    if truncated:
        stats["truncated_files"] += 1
        print(f"warning: {path}: gzip stream truncated; kept the {len(raw)} bytes before the break",
              file=sys.stderr, flush=True)
    if b"\x00" in raw[:1 << 16]:
        raise UserError(f"{path!r} looks binary (NUL bytes), not text")
    text, replaced = decode_text(raw)
    stats["files"] += 1
    stats["replaced_chars"] += replaced
    if _is_jsonl(path):
        return _jsonl_documents(path, text, text_field, skip_bad_lines, stats,
                                last_line_cut=truncated)
    text = strip_gutenberg(text)
    file_fmt = detect_format(text) if fmt == "auto" else fmt
    if file_fmt == "sentences":
        return sentence_documents(text)
    return text_documents(text)


def _jsonl_documents(path, text, field, skip_bad_lines, stats, last_line_cut=False):
    documents = []
    lines = text.split("\n")
    if last_line_cut and lines:
        lines.pop()  # the line the break cut through
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            value = record[field]
            if not isinstance(value, str):
                raise TypeError(f"field {field!r} is {type(value).__name__}, not a string")
        except (ValueError, KeyError, TypeError) as e:
            if isinstance(e, KeyError):
                why = f"no field {field!r} (data.text_field)"
            elif isinstance(e, ValueError):
                why = f"not JSON ({e})"
            else:
                why = str(e)
            if not skip_bad_lines:
                raise UserError(f"{path}:{lineno}: {why}; set data.skip_bad_lines=True "
                                "to skip and count such lines") from None
            stats["skipped_lines"] += 1
            continue
        stats["records"] += 1
        documents.extend(record_document(value))
    return documents


def _tfds_documents(unit, data_dir, text_field, reader, skip_bad_lines, stats):
    from pretrainx.data import tfds_source

    documents = []
    for index, record in tfds_source.records(unit.path, data_dir, reader, unit.start, unit.stop):
        split = record.get("sentences") if isinstance(record, dict) else None
        if split is not None and len(split):  # pretrainx_text keeps its files' sentence split
            stats["records"] += 1
            documents.append([s.decode("utf-8", errors="replace") if isinstance(s, bytes) else s
                              for s in split])
            continue
        value = record.get(text_field) if isinstance(record, dict) else None
        if isinstance(value, bytes):
            value = value.decode("utf-8", errors="replace")
        if not isinstance(value, str):
            if not skip_bad_lines:
                raise UserError(f"{unit.path} record {index}: no text field {text_field!r} "
                                f"(data.text_field); it has {sorted(record)}")
            stats["skipped_lines"] += 1
            continue
        stats["records"] += 1
        documents.extend(record_document(value))
    return documents


def list_units(spec, tfds_data_dir="", tfds_reader="data_source", records_per_unit=10_000):
    """The units of one source: `tfds:NAME[@SPLIT]`, or comma-separated globs."""
    if isinstance(spec, str) and spec.strip().startswith("tfds:"):
        from pretrainx.data import tfds_source

        name = spec.strip()
        count = tfds_source.num_records(name, tfds_data_dir, tfds_reader)
        if tfds_reader != "data_source":
            return [Unit("tfds", name, 0, count)]  # a tf.data stream reads in order
        return [Unit("tfds", name, start, min(start + records_per_unit, count))
                for start in range(0, max(count, 1), records_per_unit)]
    return [Unit("file", path) for path in expand_patterns(spec)]


def unit_documents(unit, fmt="auto", text_field="text", skip_bad_lines=False,
                   tfds_data_dir="", tfds_reader="data_source", stats=None):
    """Documents (lists of sentence strings) of one unit; `stats` is added to."""
    stats = new_stats() if stats is None else stats
    if unit.kind == "tfds":
        docs = _tfds_documents(unit, tfds_data_dir, text_field, tfds_reader, skip_bad_lines, stats)
    else:
        docs = _file_documents(unit.path, fmt, text_field, skip_bad_lines, stats)
    stats["documents"] += len(docs)
    stats["sentences"] += sum(len(d) for d in docs)
    return docs


def read_documents(patterns, fmt="auto", *, text_field="text", skip_bad_lines=False,
                   tfds_data_dir="", tfds_reader="data_source"):
    """Read one source into (documents, stats).

    `patterns` is comma-separated globs (or a list) of plain text, .gz, or JSONL
    (.jsonl / .json, optionally .gz, one JSON object a line with the text in
    `text_field`) files, or `tfds:NAME[@SPLIT]`. Each file ends a document. `fmt`
    is "sentences", "text" or "auto" (decided per text file by `detect_format`).
    Stats count files, records, replaced (undecodable) characters, skipped bad
    lines, truncated files, documents and sentences.
    """
    if fmt not in FORMATS:
        raise UserError(f"unknown corpus format {fmt!r}; expected one of {FORMATS}")
    units = list_units(patterns, tfds_data_dir, tfds_reader)
    stats = new_stats()
    documents = []
    for unit in units:
        documents.extend(unit_documents(unit, fmt, text_field, skip_bad_lines, tfds_data_dir,
                                        tfds_reader, stats))
    if not documents:
        raise UserError(f"no text in {', '.join(map(str, units))}")
    return documents, stats


def split_sources(spec):
    """`data.train_files` -> its sources: ';' separates sources mixed by weight."""
    parts = [p.strip() for p in spec.split(";")] if isinstance(spec, str) else [spec]
    parts = [p for p in parts if p]
    if not parts:
        raise UserError("no input files given")
    return parts


def source_weights(spec, weights):
    """Normalised mixing weights of the sources in `spec` (equal when `weights` is empty)."""
    count = len(split_sources(spec))
    if not weights:
        return [1.0 / count] * count
    try:
        values = [float(w) for w in str(weights).split(",")]
    except ValueError:
        raise UserError(f"config key 'data.train_weights' is {weights!r}; expected "
                        "comma-separated numbers") from None
    if len(values) != count:
        raise UserError(f"config key 'data.train_weights' has {len(values)} weights for "
                        f"{count} sources in data.train_files (sources are separated by ';')")
    if any(not v > 0 for v in values):
        raise UserError(f"config key 'data.train_weights' is {weights!r}; weights must be > 0")
    total = sum(values)
    return [v / total for v in values]
