"""GLUE's official metrics, as the GLUE server (and sklearn/scipy) compute them."""

import numpy as np


def accuracy(labels, predictions) -> float:
    return float(np.mean(np.asarray(labels) == np.asarray(predictions)))


def f1(labels, predictions, positive: int = 1) -> float:
    """Binary F1 of the positive class (MRPC, QQP); 0 when nothing is predicted or true."""
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    tp = np.sum((predictions == positive) & (labels == positive))
    fp = np.sum((predictions == positive) & (labels != positive))
    fn = np.sum((predictions != positive) & (labels == positive))
    return float(2 * tp / (2 * tp + fp + fn)) if tp else 0.0


def matthews_corr(labels, predictions) -> float:
    """Matthews correlation of two binary labelings (CoLA); 0 when either is constant."""
    y, p = np.asarray(labels) == 1, np.asarray(predictions) == 1
    tp, tn = float(np.sum(y & p)), float(np.sum(~y & ~p))
    fp, fn = float(np.sum(~y & p)), float(np.sum(y & ~p))
    denominator = np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return float((tp * tn - fp * fn) / denominator) if denominator else 0.0


def pearson(labels, predictions) -> float:
    from scipy import stats  # here: scipy.stats costs every command 0.4 s of import
    return float(stats.pearsonr(labels, predictions)[0])


def spearman(labels, predictions) -> float:
    from scipy import stats
    return float(stats.spearmanr(labels, predictions)[0])


METRICS = {"accuracy": accuracy, "f1": f1, "matthews_corr": matthews_corr,
           "pearson": pearson, "spearman": spearman}


def score(metric_names, labels, predictions) -> dict:
    """{metric: value} plus `score`, their mean (GLUE's per-task number)."""
    out = {name: METRICS[name](labels, predictions) for name in metric_names}
    out["score"] = float(np.mean(list(out.values())))
    return out
