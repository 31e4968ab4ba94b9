"""Using a trained model: `inference` (pretrainx.load: a workdir or HF folder as a
model that maps texts to hidden states and logits), `embed` (sentence embeddings to
.npz), `generate` and `sampling` (continuations of a causal or encoder-decoder model),
`export` (an HF folder, optionally pushed to the Hub) and `merge` (checkpoint
averaging and model soups)."""
