"""T5 span corruption on numpy token arrays, with T5's arithmetic.

Follows the definitions of t5.data.preprocessors (random_spans_helper,
random_spans_noise_mask, noise_span_to_unique_sentinel): the number of noise
tokens and of spans is fixed by the length, span lengths come from a random
segmentation, every example starts with a non-noise span and ends with a noise
span, and each span is replaced by one sentinel, counted down from the top of
the vocabulary.
"""

import numpy as np

from pretrainx.errors import UserError


def _lengths_after_corruption(tokens_length, noise_density, mean_noise_span_length):
    num_noise = int(round(tokens_length * noise_density))
    num_spans = int(round(num_noise / mean_noise_span_length))
    # + one sentinel per span, + EOS
    return tokens_length - num_noise + num_spans + 1, num_noise + num_spans + 1


def random_spans_helper(inputs_length: int, noise_density: float,
                        mean_noise_span_length: float) -> tuple[int, int]:
    """(raw tokens per example, targets length) so inputs come out at exactly
    `inputs_length` after corruption and EOS: 512 -> (568, 114), 128 -> (141, 29)."""
    if inputs_length < 2:
        raise UserError(f"inputs length {inputs_length} is too short for span corruption")
    tokens_length = inputs_length - 1
    while _lengths_after_corruption(tokens_length + 1, noise_density,
                                    mean_noise_span_length)[0] <= inputs_length:
        tokens_length += 1
    _, targets_length = _lengths_after_corruption(tokens_length, noise_density,
                                                  mean_noise_span_length)
    return tokens_length, targets_length


def noise_counts(length: int, noise_density: float, mean_noise_span_length: float):
    """(noise tokens, noise spans) of an example of `length` raw tokens, as T5 fixes them."""
    length = max(length, 2)
    num_noise = min(max(int(round(length * noise_density)), 1), length - 1)
    num_spans = max(int(round(num_noise / mean_noise_span_length)), 1)
    return num_noise, num_spans


def corrupted_lengths(length: int, noise_density: float, mean_noise_span_length: float):
    """(inputs, targets) lengths, EOS included, of an example of `length` raw tokens.
    Known before the random draw, which is what lets packing be planned ahead."""
    if length < 2:  # T5 draws on two tokens and keeps the first: no noise
        return length + 1, length + 1
    num_noise, num_spans = noise_counts(length, noise_density, mean_noise_span_length)
    return length - num_noise + num_spans + 1, num_noise + num_spans + 1


def _random_segmentation(num_items: int, num_segments: int, rng) -> np.ndarray:
    """Lengths of `num_segments` non-empty parts of `num_items`, uniformly at random."""
    first_in_segment = np.zeros(num_items, np.int64)
    first_in_segment[1:] = rng.permutation(np.arange(num_items - 1) < num_segments - 1)
    segment_id = np.cumsum(first_in_segment)
    return np.bincount(segment_id, minlength=num_segments)


def random_spans_noise_mask(length: int, noise_density: float, mean_noise_span_length: float,
                            rng) -> np.ndarray:
    """Boolean [length]: True on noise. Spans alternate non-noise, noise, ..., noise."""
    orig_length = length
    length = max(length, 2)
    num_noise, num_spans = noise_counts(length, noise_density, mean_noise_span_length)
    noise_lengths = _random_segmentation(num_noise, num_spans, rng)
    nonnoise_lengths = _random_segmentation(length - num_noise, num_spans, rng)
    interleaved = np.stack([nonnoise_lengths, noise_lengths], axis=1).reshape(-1)
    span_starts = np.cumsum(interleaved)[:-1]
    start_indicator = np.zeros(length, np.int64)
    start_indicator[span_starts] = 1
    span_number = np.cumsum(start_indicator)
    return (span_number % 2 == 1)[:orig_length]


def sentinel_ids(vocab_size: int, count: int) -> np.ndarray:
    """T5's sentinels: <extra_id_0> is the last id of the vocabulary, then downwards."""
    return vocab_size - 1 - np.arange(count)


def replace_spans_with_sentinels(tokens: np.ndarray, spans: np.ndarray,
                                 sentinels: np.ndarray) -> np.ndarray:
    """Each run of True in `spans` becomes the next sentinel; the rest is kept."""
    starts = spans & ~np.concatenate([[False], spans[:-1]])
    span_index = np.cumsum(starts) - 1
    if starts.sum() > len(sentinels):
        raise UserError(f"{int(starts.sum())} noise spans but only {len(sentinels)} sentinel "
                        "ids; raise data.num_sentinels")
    out = np.where(starts, sentinels[np.maximum(span_index, 0)], tokens)
    return out[~spans | starts]


def span_corrupt(tokens: np.ndarray, rng, *, noise_density: float,
                 mean_noise_span_length: float, sentinels: np.ndarray, eos_id: int):
    """(inputs, targets), each ending in EOS, from raw tokens."""
    noise = random_spans_noise_mask(tokens.size, noise_density, mean_noise_span_length, rng)
    inputs = replace_spans_with_sentinels(tokens, noise, sentinels)
    targets = replace_spans_with_sentinels(tokens, ~noise, sentinels)
    eos = np.asarray([eos_id], tokens.dtype)
    return np.concatenate([inputs, eos]), np.concatenate([targets, eos])
