"""The documents' examples are the tested ones: every ```python block of every
document below is executed; every ```cpp block is either one of the
functions tests/cpp/session/api_example.cc compiles and runs (Bazel's api_example_test)
or a complete program, which tests/python/install/test_install.py builds against the
installed package exactly as printed and runs."""

import glob
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

# Every document with examples. A document not listed here that has a
# ```python or ```cpp block fails test_every_document_with_examples_is_listed.
DOCUMENTS = [
    "README.md",
    "FAQ.md",
    "CHANGELOG.md",
    "python_shim/README.md",
    "python_shim/MODULES.md",
    "python_shim/DISTRIBUTED.md",
    "formulas/README.md",
    "formulas/CONVENTIONS.md",
    "formulas/TRAINING.md",
    "reports/README.md",
    "torchscan_dispatch/README.md",
    "torchscan_dispatch/ATTACH.md",
    "tools/README.md",
    "third_party/README.md",
]
# Build outputs, environments and packages: not the repository's documents.
SKIPPED_DIRS = {".git", ".venv", "dist", "build", "node_modules", "__pycache__"}
# The names of api_example.cc's marked examples.
CPP_EXAMPLES = ("example ", "server example ", "memory example ")


def blocks(doc: str, lang: str, root: str = ROOT):
    with open(os.path.join(root, doc)) as f:
        return re.findall(rf"^```{lang}\n(.*?)^```", f.read(), flags=re.S | re.M)


def cpp_programs():
    """(document, source) of every complete C++ program the documents print."""
    return [(doc, b) for doc in DOCUMENTS for b in blocks(doc, "cpp") if "int main(" in b]


def installed_spelling(source: str) -> str:
    # tools/install.sh installs torchscan_dispatch/x.h and formulas/x.h as
    # <torchscan/x.h>; the documents show the installed spelling.
    return re.sub(r'#include "(?:torchscan_dispatch|formulas)/([a-z_]+\.h)"', r"#include <torchscan/\1>", source)


def _api_examples():
    with open(os.path.join(ROOT, "tests", "cpp", "session", "api_example.cc")) as f:
        source = f.read()
    out = {}
    for name in CPP_EXAMPLES:
        begin, end = f"// --- README {name}begins ---\n", f"// --- README {name}ends ---"
        assert begin in source and end in source, f"api_example.cc lost its marker {begin.strip()}"
        out[name] = installed_spelling(source.split(begin)[1].split(end)[0]).strip()
    return out


@pytest.mark.parametrize("doc", [doc for doc in DOCUMENTS if blocks(doc, "python")])
def test_python_examples_run(doc):
    for code in blocks(doc, "python"):
        exec(compile(code, doc, "exec"), {})


def test_the_readme_has_a_python_example_and_a_cpp_program():
    assert blocks("README.md", "python"), "the README has no Python example"
    assert [doc for doc, _ in cpp_programs()].count("README.md") == 1


def unlisted_documents(root: str):
    """Documents under root with Python or C++ examples that DOCUMENTS lacks."""
    unlisted = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in SKIPPED_DIRS and not d.startswith("bazel-")]
        for name in filenames:
            doc = os.path.relpath(os.path.join(dirpath, name), root)
            if name.endswith(".md") and doc not in DOCUMENTS and (
                    blocks(doc, "python", root) or blocks(doc, "cpp", root)):
                unlisted.append(doc)
    return sorted(unlisted)


def test_every_document_with_examples_is_listed():
    assert unlisted_documents(ROOT) == [], "documents with examples that no test runs: add them to DOCUMENTS"


def test_the_listing_check_finds_an_unlisted_document(tmp_path):
    # A document with a Python block outside DOCUMENTS is found; one without
    # examples, and one under a build output directory, are not.
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "GUIDE.md").write_text("Text.\n\n```python\nprint(1)\n```\n")
    (tmp_path / "docs" / "NOTES.md").write_text("```sh\nls\n```\n")
    (tmp_path / "bazel-out").mkdir()
    (tmp_path / "bazel-out" / "README.md").write_text("```cpp\nint x;\n```\n")
    assert unlisted_documents(str(tmp_path)) == ["docs/GUIDE.md"]


def test_cpp_examples_are_the_tested_ones():
    examples = _api_examples()
    shown = set()
    for doc in DOCUMENTS:
        for block in blocks(doc, "cpp"):
            if "int main(" in block:
                continue  # a program: test_install.py builds and runs it
            matches = [name for name, text in examples.items() if block.strip() == text]
            assert matches, f"{doc}: a C++ block that is neither a tested example nor a program:\n{block}"
            shown.update(matches)
    # Every tested function is shown somewhere, so the check above has something to check.
    assert shown == set(CPP_EXAMPLES)


def _anchors(doc: str):
    # GitHub's heading ids: lower case, punctuation other than - and _ dropped,
    # spaces to hyphens, a repeated heading numbered -1, -2, ...
    seen, out = {}, set()
    with open(os.path.join(ROOT, doc)) as f:
        text = re.sub(r"^```.*?^```", "", f.read(), flags=re.S | re.M)
    for title in re.findall(r"^#{1,6} +(.+?) *$", text, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def test_links_between_documents_resolve():
    broken = []
    for doc in DOCUMENTS:
        with open(os.path.join(ROOT, doc)) as f:
            text = re.sub(r"^```.*?^```", "", f.read(), flags=re.S | re.M)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # an external address
            path, _, anchor = target.partition("#")
            resolved = os.path.normpath(os.path.join(os.path.dirname(doc), path)) if path else doc
            if not os.path.exists(os.path.join(ROOT, resolved)):
                broken.append(f"{doc}: {target} (no {resolved})")
            elif anchor and (not resolved.endswith(".md") or anchor not in _anchors(resolved)):
                broken.append(f"{doc}: {target} (no heading #{anchor} in {resolved})")
    assert broken == []


def test_test_files_the_documents_name_exist():
    # A test named as the evidence for a claim must be where the document says.
    missing = []
    for doc in DOCUMENTS:
        with open(os.path.join(ROOT, doc)) as f:
            named = re.findall(r"tests/python/[\w/*]+\.py", f.read())
        missing += [f"{doc}: {path}" for path in named if not glob.glob(os.path.join(ROOT, path))]
    assert missing == []
