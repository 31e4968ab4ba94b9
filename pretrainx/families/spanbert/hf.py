"""SpanBERT in HF's layout: a BERT directory (HF has no SpanBERT class), so reading one
gives family bert (its model_type is bert) and nothing reads by this adapter."""

import dataclasses

import pretrainx.families.bert.hf as hf_bert

ADAPTER = dataclasses.replace(
    hf_bert.ADAPTER, name="spanbert", model_type="",
    caveat=lambda pretrained: "SpanBERT's span boundary head (sbo_*) has no place in HF's "
    "BertForMaskedLM and is not written; the encoder and MLM head are")
