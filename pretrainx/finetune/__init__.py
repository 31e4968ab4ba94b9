"""Fine-tuning a pretrained model on a task: GLUE classification and regression,
CoNLL tagging, SQuAD spans, text-to-text tasks and contrastive sentence embeddings,
with LoRA and other PEFT, early stopping and scores as the papers report them. It reads
models through interop; `pretrainx.main` sends a fine-tuning config here."""
