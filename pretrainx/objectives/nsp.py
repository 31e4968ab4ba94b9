"""Next-sentence prediction: sentence pairs and the NSP loss.

``create_pair_examples`` reproduces ``create_instances_from_document`` of
google-research/bert ``create_pretraining_data.py`` (one pass over the
documents, no dupe_factor, no shuffling: a pipeline does those), with a
``np.random.Generator`` as the only source of randomness. Labels follow BERT:
0 = IsNext, 1 = random next.
"""

import jax
import jax.numpy as jnp
import numpy as np

from pretrainx.errors import UserError

IS_NEXT = 0
RANDOM_NEXT = 1


def truncate_lengths(len_a, len_b, max_num_tokens):
    """Tokens to drop from (a, b): always trim the longer one (b on ties).

    Returns the sequence of trims as a bool array (True = trim a), in the
    order ``truncate_seq_pair`` would make them.
    """
    trims = []
    while len_a + len_b > max_num_tokens:
        if len_a > len_b:
            len_a -= 1
            trims.append(True)
        else:
            len_b -= 1
            trims.append(False)
    return np.asarray(trims, dtype=bool)


def truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng):
    """Trim the longer segment one token at a time, front or back with p=0.5.

    Only the number of front/back trims per segment matters for the result,
    so the coin flips are drawn in one call.
    """
    trims = truncate_lengths(len(tokens_a), len(tokens_b), max_num_tokens)
    if not trims.size:
        return tokens_a, tokens_b
    front = rng.random(trims.size) < 0.5
    return (_trim(tokens_a, trims & front, trims & ~front),
            _trim(tokens_b, ~trims & front, ~trims & ~front))


def _trim(tokens, front, back):
    n_front, n_back = int(front.sum()), int(back.sum())
    return tokens[n_front:len(tokens) - n_back]


def concat(sentences):
    if not sentences:
        return np.zeros((0,), np.int32)
    return np.concatenate(sentences).astype(np.int32, copy=False)


def pack_pair(tokens_a, tokens_b, cls_id, sep_id):
    """[CLS] A [SEP] B [SEP] and segment ids (0 up to the first SEP, then 1)."""
    n_a, n_b = len(tokens_a), len(tokens_b)
    input_ids = np.empty(n_a + n_b + 3, np.int32)
    input_ids[0] = cls_id
    input_ids[1:n_a + 1] = tokens_a
    input_ids[n_a + 1] = sep_id
    input_ids[n_a + 2:-1] = tokens_b
    input_ids[-1] = sep_id
    token_type_ids = np.zeros_like(input_ids)
    token_type_ids[n_a + 2:] = 1
    return input_ids, token_type_ids


def nonempty(documents):
    """Drop empty sentences/documents, keeping original (doc, sentence) indices."""
    docs = []
    for doc_index, document in enumerate(documents):
        kept = [(j, np.asarray(s, np.int32)) for j, s in enumerate(document) if len(s)]
        if kept:
            docs.append((doc_index, [j for j, _ in kept], [s for _, s in kept]))
    return docs


def span(doc, start, end):
    """(original doc index, first sentence, one past last sentence)."""
    doc_index, sentence_ids, _ = doc
    return (doc_index, sentence_ids[start], sentence_ids[end - 1] + 1)


def target_lengths(rng, short_seq_prob: float, max_num_tokens: int):
    """() -> the next pair's target length: a random one in [2, max_num_tokens] with
    probability short_seq_prob, else max_num_tokens. Drawn per pair, as the paper says
    ("10% of the time"); the original draws it once per document, which skews NSP
    labels on corpora of short documents."""
    def draw():
        if rng.random() < short_seq_prob:
            return int(rng.integers(2, max_num_tokens + 1))
        return max_num_tokens
    return draw


def _document_examples(docs, k, max_seq_length, short_seq_prob, rng, cls_id, sep_id):
    """create_instances_from_document for docs[k]; see the module docstring."""
    doc = docs[k]
    sentences = doc[2]
    max_num_tokens = max_seq_length - 3
    draw_target = target_lengths(rng, short_seq_prob, max_num_tokens)
    target_seq_length = draw_target()
    examples = []
    chunk_start, current_length = 0, 0
    i = 0
    while i < len(sentences):
        current_length += len(sentences[i])
        if i == len(sentences) - 1 or current_length >= target_seq_length:
            is_random_next = rng.random() < 0.5
            if not is_random_next and i == chunk_start and i + 1 < len(sentences):
                # IsNext for a one-sentence chunk: B is the following sentence (the
                # original forces a random B here, which pulls IsNext below 50%).
                i += 1
            chunk = sentences[chunk_start:i + 1]
            a_end = int(rng.integers(1, len(chunk))) if len(chunk) >= 2 else 1
            tokens_a = concat(chunk[:a_end])
            a_span = span(doc, chunk_start, chunk_start + a_end)
            if len(chunk) == 1 or is_random_next:
                label = RANDOM_NEXT
                target_b_length = target_seq_length - len(tokens_a)
                for _ in range(10):
                    r = int(rng.integers(0, len(docs)))
                    if r != k:
                        break
                other = docs[r][2]
                b_start = int(rng.integers(0, len(other)))
                b_end, b_length = b_start, 0
                while b_end < len(other):
                    b_length += len(other[b_end])
                    b_end += 1
                    if b_length >= target_b_length:
                        break
                tokens_b = concat(other[b_start:b_end])
                b_span = span(docs[r], b_start, b_end)
                # Put the unused sentences of the chunk back.
                i -= len(chunk) - a_end
            else:
                label = IS_NEXT
                tokens_b = concat(chunk[a_end:])
                b_span = span(doc, chunk_start + a_end, chunk_start + len(chunk))
            tokens_a, tokens_b = truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
            input_ids, token_type_ids = pack_pair(tokens_a, tokens_b, cls_id, sep_id)
            examples.append({
                "input_ids": input_ids,
                "token_type_ids": token_type_ids,
                "next_sentence_label": np.int32(label),
                "doc_index": doc[0],
                "a_span": a_span,
                "b_span": b_span,
            })
            chunk_start, current_length = i + 1, 0
            target_seq_length = draw_target()
        i += 1
    return examples


def create_pair_examples(documents, max_seq_length, short_seq_prob, rng, cls_id, sep_id):
    """BERT NSP pairs from tokenized documents (lists of int id arrays).

    Each example has ``input_ids`` and ``token_type_ids`` (int32, unpadded,
    at most ``max_seq_length``), ``next_sentence_label`` (0 IsNext, 1 random),
    and provenance: ``doc_index`` plus ``a_span``/``b_span`` = (doc, start,
    end) sentence ranges in the caller's indices, end exclusive. Empty
    sentences and documents are skipped, as the original does on reading.
    """
    if max_seq_length < 5:
        raise UserError(f"max_seq_length={max_seq_length} is too small for a "
                        "sentence pair; need at least 5")
    if not 0.0 <= short_seq_prob <= 1.0:
        raise UserError(f"short_seq_prob={short_seq_prob} must be in [0, 1]")
    docs = nonempty(documents)
    examples = []
    for k in range(len(docs)):
        examples.extend(_document_examples(
            docs, k, max_seq_length, short_seq_prob, rng, cls_id, sep_id))
    if not examples:
        raise UserError(f"no document long enough to make a sentence pair "
                        f"({len(documents)} documents, all empty)")
    return examples


def nsp_loss_and_metrics(logits, labels, weights=None):
    """Sums (not means) of NSP cross-entropy and accuracy, in float32.

    Sums let callers normalise once over a global batch or micro-batches.
    ``weights`` (optional, [batch]) masks out padding examples.
    """
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    labels = labels.astype(jnp.int32)
    if weights is None:
        weights = jnp.ones(labels.shape, jnp.float32)
    weights = weights.astype(jnp.float32)
    nll = -jnp.take_along_axis(logp, labels[..., None], axis=-1)[..., 0]
    correct = (jnp.argmax(logp, axis=-1) == labels).astype(jnp.float32)
    return {
        "nsp_loss_sum": jnp.sum(nll * weights),
        "nsp_correct_sum": jnp.sum(correct * weights),
        "nsp_count": jnp.sum(weights),
    }
