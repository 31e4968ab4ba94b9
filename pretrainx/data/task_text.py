"""A labelled task's own text as pretraining documents (ULMFiT's stage 2, Gururangan et
al.'s task-adaptive pretraining): the text columns of a GLUE TSV, the sentences of a
CoNLL-2003 file. Labels are never read."""

from pretrainx.data import text as text_lib
from pretrainx.errors import UserError


def _columns(path: str, header: list, field: str) -> list:
    """Indices of `field`'s comma-separated columns: names in the header, or 0-based
    numbers for a file without one (CoLA's sentence is column 3)."""
    wanted = [f.strip() for f in field.split(",") if f.strip()]
    if wanted and all(f.isdigit() for f in wanted):
        return [int(f) for f in wanted]
    missing = [f for f in wanted if f not in header]
    if not wanted or missing:
        raise UserError(f"{path} has no column {', '.join(missing or [field])!r} "
                        f"(data.text_field); its header has {header}")
    return [header.index(f) for f in wanted]


def tsv_documents(path: str, text: str, field: str, skip_bad_lines: bool, stats) -> list:
    """One document a row: the sentences of its `field` columns, in column order (an
    MRPC pair stays together). Named columns read the first line as the header."""
    lines = [line for line in text.split("\n") if line.strip()]
    if not lines:
        return []
    named = not all(f.strip().isdigit() for f in field.split(",") if f.strip())
    header = lines[0].split("\t") if named else []
    columns = _columns(path, header, field)
    documents = []
    for lineno, line in enumerate(lines[1:] if named else lines, 2 if named else 1):
        cells = line.split("\t")
        if max(columns) >= len(cells):
            if not skip_bad_lines:
                raise UserError(f"{path}:{lineno}: {len(cells)} columns, column {max(columns)} "
                                "wanted (data.text_field); set data.skip_bad_lines=True to "
                                "skip and count such lines")
            stats["skipped_lines"] += 1
            continue
        stats["records"] += 1
        sentences = []
        for c in columns:
            sentences.extend(text_lib.split_sentences(" ".join(cells[c].split())))
        if sentences:
            documents.append(sentences)
    return documents


def conll_documents(path: str, text: str) -> list:
    """CoNLL-2003: a token a line (its first column), a blank line after each sentence,
    -DOCSTART- between the Reuters articles that are the documents."""
    documents, current, tokens = [], [], []

    def close_sentence():
        if tokens:
            current.append(" ".join(tokens))
            tokens.clear()

    for line in text.split("\n"):
        cells = line.split()
        if not cells:
            close_sentence()
        elif cells[0] == "-DOCSTART-":
            close_sentence()
            if current:
                documents.append(list(current))
                current.clear()
        else:
            tokens.append(cells[0])
    close_sentence()
    if current:
        documents.append(current)
    if not documents:
        raise UserError(f"{path} has no CoNLL sentences (data.format=conll: a token a line, "
                        "blank lines between sentences)")
    return documents
