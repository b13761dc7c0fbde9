"""Answer extraction on recorded model answers and on the awkward cases."""
import pytest

from harness.loop.extract import Extraction, extract, fenced_blocks, strip_reasoning

from conftest import CANDIDATES, SEEDS

MODELNEW = "import torch.nn as nn\n\nclass ModelNew(nn.Module):\n    pass\n"


def seed(name: str) -> str:
    return next(SEEDS.glob(f"{name}_*.txt")).read_text()


def test_seed_000_takes_the_last_block_not_the_quoted_prompt_code():
    found = extract(seed("000"))
    assert found.status is Extraction.OK and found.blocks == 2
    assert "class ModelNew" in found.code and "def run():" not in found.code


@pytest.mark.parametrize("name", ["001", "002", "003"])
def test_seeds_with_reasoning_yield_the_final_block(name):
    found = extract(seed(name))
    assert found.status is Extraction.OK
    assert found.code.startswith("import torch") and "load_inline" in found.code
    assert "</think>" not in found.code and not found.truncated


def test_seed_004_has_no_code():
    found = extract(seed("004"))
    assert found.status is Extraction.NO_CODE and found.code is None
    assert "no fenced Python code block" in found.message


def test_code_inside_reasoning_does_not_count():
    answer = f"<think>draft:\n```python\n{MODELNEW}```\n</think>\nI will not answer."
    assert extract(answer).status is Extraction.NO_CODE


def test_reasoning_opened_by_the_template_ends_at_a_lone_close_tag():
    answer = f"thinking...\n```python\n{MODELNEW}```\nmore thought</think>\n```python\n{MODELNEW}# final\n```"
    found = extract(answer)
    assert found.status is Extraction.OK and found.code.endswith("# final\n")
    assert strip_reasoning("a</think>b</think> done") == "done"


def test_reasoning_that_never_ends_is_reported_as_such():
    found = extract("<think>let me consider the kernel", cut_off=True)
    assert found.status is Extraction.UNFINISHED_REASONING
    assert "never closed" in found.message and "token limit" in found.message


def test_blocks_without_modelnew_are_a_distinct_case():
    answer = "```python\nmodel_new = ModelNew()\n```\n```python\nprint(1)\n```"
    found = extract(answer)
    assert found.status is Extraction.NO_MODELNEW and found.blocks == 2
    assert "2 Python code block(s)" in found.message and "none defines `ModelNew`" in found.message


def test_last_defining_block_wins_and_other_languages_are_ignored():
    answer = (f"```python\n{MODELNEW}# first\n```\n```py\n{MODELNEW}# second\n```\n"
              "```cpp\nclass ModelNew {};\n```\n```python\nprint('usage')\n```")
    assert extract(answer).code.endswith("# second\n")


def test_untagged_and_tilde_fences_count_as_python():
    assert extract(f"~~~\n{MODELNEW}~~~").status is Extraction.OK
    assert extract(f"```\n{MODELNEW}```").status is Extraction.OK


def test_assignment_defines_modelnew():
    assert extract("```python\nModelNew = Other\n```").status is Extraction.OK


def test_an_unclosed_final_block_is_taken_and_flagged():
    found = extract(f"Here it is:\n```python\n{MODELNEW}")
    assert found.status is Extraction.OK and found.truncated


def test_longer_fences_hold_shorter_ones():
    blocks = fenced_blocks("````python\nx = '''\n```\n'''\n````")
    assert blocks == [("python", "x = '''\n```\n'''", True)]


def test_the_approach_is_not_cut_at_a_heading_colon():
    from harness.loop.extract import approach

    block = "\n\n```python\nx = 1\n```\n"
    assert approach("Approach:\n\nOne pass per row with Welford. Then scale." + block, "x = 1", 80) == \
        "One pass per row with Welford."
    assert approach("**Approach:** fuse mean and variance into one pass." + block, "x = 1", 80) == \
        "fuse mean and variance into one pass."
    assert approach("I keep a row loop: each row is read once. Then more." + block, "x = 1", 80) == \
        "I keep a row loop: each row is read once."


def test_a_file_without_prose_is_summed_up_by_its_docstring_or_first_comment_never_by_its_code():
    from harness.loop.extract import approach

    cpp = (CANDIDATES / "cpp_layernorm.py").read_text()  # a comment, then a C++ source closed by a line of quotes
    assert approach(cpp, cpp, 200) == "LayerNorm as a C++ extension (CPU), built by load_inline at import."
    documented = '"""Row-wise softmax in one pass.\n\nDetails."""\nimport torch\n# a comment\n'
    assert approach(documented, documented, 200) == "Row-wise softmax in one pass."
    broken = "# Tiled GEMM, 128x128 blocks.\ndef f(:\n"
    assert approach(broken, broken, 200) == "Tiled GEMM, 128x128 blocks."
