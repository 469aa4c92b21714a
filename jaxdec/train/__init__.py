"""Training: the corpus, the tokenizer, objectives, trainable parts (`trainable.Trainable`: whole
models, heads and drafters over a frozen target) and the NNX + optax trainer."""
