"""An objective assembled from parts it is given, in place of mixins that read
attributes a subclass had to set.

`Assembled(cfg, tokenizer, model, corpus, data=..., losses=...)` answers the
Objective and Inspection protocols (contract.py) by handing each member to its part:
`data` (examples_from_documents, transform, example_batch, describe, and --stats /
--show: batch_stats, summarize_stats, show) and `losses` (loss_sums, normalizers,
loss, metrics, eval_metrics). A family's objective builds its parts from the config
and passes them in; where it differs from a part, it defines the member itself.
"""


class Assembled:
    token_features = ("input_ids",)  # batch keys whose elements are tokens (--stats)

    def __init__(self, cfg, tokenizer, model, corpus, *, data=None, losses=None):
        self.cfg, self.tokenizer, self.model, self.corpus = cfg, tokenizer, model, corpus
        self.data, self.losses = data, losses

    # ---- data: the objective's examples, rows and batches -------------------------
    def examples(self, files, phase, train: bool) -> list:
        return self.corpus.examples(self, files, phase, train)

    def examples_from_documents(self, docs, phase, train: bool, group: int = 0) -> list:
        return self.data.examples_from_documents(docs, phase, train, group)

    def transform(self, phase, train: bool):
        return self.data.transform(phase, train)

    def example_batch(self, batch_size: int, phase) -> dict:
        return self.data.example_batch(batch_size, phase)

    def describe(self, phase) -> dict:
        return self.data.describe(phase)

    # ---- inspection: python -m pretrainx.data --stats / --show ----------------------
    def batch_stats(self, batch) -> dict:
        return self.data.batch_stats(batch)

    def summarize_stats(self, totals, phase) -> dict:
        return self.data.summarize_stats(totals, phase)

    def show(self, batch, count: int) -> list:
        return self.data.show(batch, count)

    # ---- loss -------------------------------------------------------------------------
    def loss_sums(self, outputs, batch) -> dict:
        return self.losses.loss_sums(outputs, batch)

    def normalizers(self, batch) -> dict:
        return self.losses.normalizers(batch)

    def loss(self, sums, norms):
        return self.losses.loss(sums, norms)

    def metrics(self, sums, norms) -> dict:
        return self.losses.metrics(sums, norms)

    def eval_metrics(self, totals) -> dict:
        return self.losses.eval_metrics(totals)
