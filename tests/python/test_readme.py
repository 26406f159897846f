"""The README's examples run: every ```python block is executed, and the C++
block is the example that tests/cpp/api_example.cc compiles and runs."""

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _blocks(lang: str):
    with open(os.path.join(ROOT, "README.md")) as f:
        return re.findall(rf"```{lang}\n(.*?)```", f.read(), flags=re.S)


def test_python_examples_run():
    blocks = _blocks("python")
    assert blocks, "the README has no Python example"
    for code in blocks:
        exec(compile(code, "README.md", "exec"), {})


def test_cpp_examples_are_the_tested_ones():
    with open(os.path.join(ROOT, "tests", "cpp", "api_example.cc")) as f:
        source = f.read()

    def example(name):
        return source.split(f"// --- README {name}begins ---\n")[1].split(f"// --- README {name}ends ---")[0]

    blocks = [b.strip() for b in _blocks("cpp")]
    assert blocks == [example("example ").strip(), example("server example ").strip(),
                      example("memory example ").strip()]
