"""Fixtures shared by the training tests: a small BPE and a token stream of real code."""

import jax
import pytest

from jaxdec import corpus
from jaxdec.train.tokenizer import train_bpe

VOCAB = 512


@pytest.fixture(autouse=True)
def _standard_promotion():
  """optax's update rules mix Python floats and int32 step counts, which strict promotion
  rejects; our own code stays strict everywhere else."""
  with jax.numpy_dtype_promotion("standard"):
    yield


@pytest.fixture(scope="session")
def tokenizer():
  texts, _ = corpus.read_texts(corpus.stdlib_split("validation")[:40])
  return train_bpe(texts, VOCAB)


@pytest.fixture(scope="session")
def stream(tokenizer):
  texts, _ = corpus.read_texts(corpus.stdlib_split("validation"))
  return corpus.encode_documents(texts, tokenizer)
