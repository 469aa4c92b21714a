"""The long-context prompt set (Prefilling-dLLM's testbed): deterministic, within the budget, and
each continuation is the text that really follows its prompt in the file it cuts."""

import jaxdec
from jaxdec.corpus import long_context_prompts, read_texts, stdlib_split


def test_prompts_fit_and_continue_their_files():
  tokenizer = jaxdec.load_tokenizer("zoo:pycode-ar")
  tasks = long_context_prompts(tokenizer, 3, 2048, continuation_tokens=32)
  assert tasks == long_context_prompts(tokenizer, 3, 2048, continuation_tokens=32)
  assert len({tuple(p[:200]) for p, _ in tasks}) == 3  # Each starts at another file.
  for prompt, continuation in tasks:
    assert 1900 <= len(prompt) <= 2048 and len(continuation) == 32
    assert prompt[0] == tokenizer.bos_id
    text = tokenizer.decode(prompt[1:])
    assert text.endswith("\n") and text.startswith("# file: ")
    last_file = text.rsplit("# file: ", 1)[1].split("\n", 1)[0]
    files = [f for f in stdlib_split("validation") if f.relpath.endswith("/" + last_file)
             or f.relpath == last_file]
    source = read_texts(files)[0][0]
    cut = text.rsplit("# file: ", 1)[1].split("\n", 1)[1]
    assert source.startswith(cut + tokenizer.decode(continuation)[:20])
