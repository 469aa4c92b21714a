"""Training: the corpus, the tokenizer, objectives and the NNX + optax trainer."""
