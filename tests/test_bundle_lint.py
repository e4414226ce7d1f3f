"""``mcp-registry lint DIR`` (offline: no server, no database) and the bundle file JSON Schema that
editors use (``docs/bundle.schema.json``, generated from the parser's models)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft202012Validator

from registry.catalog.bundle_schema import schema_text
from registry.cli import main
from registry.paths import seed_data_dir

REPO = Path(__file__).resolve().parent.parent
COMMITTED_SCHEMA = REPO / "docs" / "bundle.schema.json"
SEED_FILES = sorted(seed_data_dir().glob("*/*/*.yaml"))

PROMPT = """\
name: greet
arguments:
- name: who
  required: true
template: "Hello {{ who }}"
"""
TOOL = """\
name: add
inputSchema:
  type: object
  properties:
    a: {type: number}
  required: [a]
webhook:
  url: https://hooks.example.com/add
  headers:
    Authorization: ${env:ADD_HOOK_TOKEN}
"""


def _bundle(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def _lint(folder: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["lint", str(folder)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_seed_bundles_are_clean(capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("demo", "conformance"):
        code, out, err = _lint(seed_data_dir() / name, capsys)
        assert (code, err) == (0, ""), err
        assert "no problems" in out


def test_secret_references_need_no_environment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _bundle(tmp_path, {"prompts/greet.yaml": PROMPT, "tools/add.yaml": TOOL})
    code, out, err = _lint(folder, capsys)
    assert (code, err) == (0, ""), err
    assert "2 files, no problems" in out


def test_every_problem_is_named_with_its_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _bundle(
        tmp_path,
        {
            "prompts/greet.yaml": PROMPT,
            # line 2: an unclosed expression
            "prompts/broken.yaml": "name: broken\ntemplate: 'Hello {{ who'\n",
            # line 3: a variable the prompt does not declare
            "prompts/undeclared.yaml": "name: undeclared\ndescription: x\ntemplate: 'Hi {{ nobody }}'\n",
            # not a JSON Schema type: named at its inputSchema (line 2)
            "tools/bad-schema.yaml": TOOL.replace("name: add", "name: bad-schema").replace(
                "type: number", "type: nope"
            ),
            "resources/a.yaml": "name: a\nuri: info://same\ntext: one\n",
            "resources/b.yaml": "name: b\nuri: info://same\ntext: two\n",
        },
    )
    code, out, err = _lint(folder, capsys)
    assert code == 1, out
    lines = err.splitlines()
    assert any(line.startswith(f"{folder}/prompts/broken.yaml:2: template: ") for line in lines), err
    assert any(line.startswith(f"{folder}/prompts/undeclared.yaml:3: template: ") for line in lines), err
    assert any(line.startswith(f"{folder}/tools/bad-schema.yaml:2: inputSchema: ") for line in lines), err
    assert any(
        line.startswith(f"{folder}/resources/b.yaml:2: uri: ") and "also the URI of" in line for line in lines
    ), err
    assert "greet.yaml" not in err
    assert lines[-1] == "4 problems in 4 of 6 files"


def test_stored_samples_are_tried(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prompt = (
        "name: deploy\n"
        "arguments:\n"
        "- name: env\n"
        "  enum: [prod, dev]\n"
        "  required: true\n"
        "samples:\n"
        "- env: prod\n"
        "- env: moon\n"
        "template: 'Deploy to {{ env }}'\n"
    )
    tool = TOOL.replace("  required: [a]\n", "  required: [a]\n  examples:\n  - a: 1\n  - a: one\n")
    folder = _bundle(tmp_path, {"prompts/deploy.yaml": prompt, "tools/add.yaml": tool})
    code, _out, err = _lint(folder, capsys)
    assert code == 1
    assert f"{folder}/prompts/deploy.yaml:6: samples: Rendering fails: sample 2:" in err, err
    assert f"{folder}/tools/add.yaml:9: inputSchema.examples.1: example 2 does not match the inputSchema" in err, err
    assert "sample 1" not in err


def test_a_folder_that_is_no_bundle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = _lint(tmp_path / "missing", capsys)
    assert code == 1
    assert "does not exist" in err
    code, _out, err = _lint(tmp_path, capsys)
    assert code == 1
    assert "holds no prompts/, resources/ or tools/ YAML files" in err


# ------------------------------------------------------------------ the JSON Schema


def test_the_committed_schema_is_the_generated_one() -> None:
    """Regenerate with ``python -m registry.catalog.bundle_schema > docs/bundle.schema.json``."""
    assert COMMITTED_SCHEMA.read_text(encoding="utf-8") == schema_text()


def test_every_seed_file_validates_against_the_schema() -> None:
    schema = json.loads(COMMITTED_SCHEMA.read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    validator = Draft202012Validator(schema)
    assert len(SEED_FILES) > 20
    for path in SEED_FILES:
        errors = [error.message for error in validator.iter_errors(yaml.safe_load(path.read_text()))]
        assert not errors, f"{path}: {errors}"


@pytest.mark.parametrize(
    "document",
    [
        {"name": "greet", "template": "Hi", "temlpate_typo": "x"},  # an unknown field
        {"name": "greet", "template": "Hi", "messages": [{"role": "user", "content": {"type": "text", "text": "x"}}]},
        {"name": "no spaces allowed", "template": "Hi"},
        {"name": "hook", "webhook": {"url": "https://x.example", "method": "GET"}},
        {"name": "res", "uri": "info://x", "text": "t", "blob": 3},
    ],
)
def test_a_broken_file_fails_the_schema(document: dict[str, object]) -> None:
    validator = Draft202012Validator(json.loads(COMMITTED_SCHEMA.read_text(encoding="utf-8")))
    assert list(validator.iter_errors(document))


def test_a_key_given_twice_is_refused_with_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """YAML keeps the last of two equal keys silently: a reviewer would read one description and the
    catalog would get the other. Both of the reader's YAML paths (libyaml, and the alias-refusing one a
    ``*`` in the text selects) refuse it, nested mappings too."""
    twice = PROMPT + "description: what reviewers read\ndescription: what would be served\n"
    nested = PROMPT.replace("  required: true", "  required: true\n  required: false") + "# a * in a comment\n"
    folder = _bundle(
        tmp_path / "b", {"prompts/greet.yaml": twice, "prompts/other.yaml": nested.replace("greet", "other")}
    )
    code, _out, err = _lint(folder, capsys)
    assert code == 1
    assert "prompts/greet.yaml:7: not valid YAML: the key 'description' appears twice" in err, err
    assert "prompts/other.yaml:5: not valid YAML: the key 'required' appears twice" in err, err
