"""Streaming tokens out of a running decoding loop.

The loops call a trace-time hook each time rows append tokens (`Controls.on_step`); the hook made
here sends them to the host with an ordered `io_callback`, and the host hands each row's new
tokens to the Python callback registered for that call. The callback is looked up by a traced
call id, so one compiled program serves every callback (and concurrent calls), and the loop's
results are the same as without streaming.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from typing import Callable, Iterator

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback

# A stream callback gets the tokens each row appended in one step: a list with one i32 array per
# row (empty for rows that appended nothing).
StreamCallback = Callable[[list[np.ndarray]], None]

# call id -> (callback, the loop rows to deliver, in the caller's order)
_listeners: dict[int, tuple[StreamCallback, np.ndarray]] = {}
_ids = itertools.count(1)
_lock = threading.Lock()


def _deliver(call_id, tokens, count) -> None:
  entry = _listeners.get(int(call_id))
  if entry is None:  # The call was abandoned (an exception on the host side): drop it.
    return
  listener, order = entry
  tokens, count = np.asarray(tokens)[order], np.asarray(count)[order]
  if count.any():
    listener([tokens[row, : count[row]] for row in range(len(order))])


def hook(call_id: jax.Array) -> Callable[[jax.Array, jax.Array], None]:
  """The `Controls.on_step` hook for a traced call id i32[]."""

  def on_step(tokens: jax.Array, count: jax.Array) -> None:
    io_callback(_deliver, None, call_id, tokens.astype(jnp.int32), count.astype(jnp.int32),
                ordered=True)

  return on_step


@contextlib.contextmanager
def listening(callback: StreamCallback | None, rows: int,
              order: np.ndarray | None = None) -> Iterator[np.int32]:
  """Register `callback` for one call of `rows` real rows (a batch padded for a mesh has more;
  the callback never sees those); `order`: the loop rows to deliver, in the caller's order
  (default: the first `rows`; HPD's queries sit at scattered (row, stream) slots). Yields the
  call id to pass to the jitted function."""
  if callback is None:
    yield np.int32(0)
    return
  if not callable(callback):
    raise TypeError(f"stream must be a callable taking one list of token arrays per step (or "
                    f"None), got {type(callback).__name__}")
  with _lock:
    call_id = next(_ids) % (2**31 - 1) or 1
    _listeners[call_id] = (callback, np.arange(rows) if order is None else np.asarray(order))
  try:
    yield np.int32(call_id)
  finally:
    with _lock:
      _listeners.pop(call_id, None)
