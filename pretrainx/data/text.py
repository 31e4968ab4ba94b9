"""Plain text into documents: lists of sentence strings.

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

import re
import statistics

MAX_DOC_SENTENCES = 200

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
