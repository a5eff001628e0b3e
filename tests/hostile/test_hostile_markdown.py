"""Hostile subagent files: each one a typed SubagentSpecError (or a valid spec), and a
directory full of them still loads its good agent and a host on it still serves."""

from __future__ import annotations

from pathlib import Path

import pytest

from properties.reliability._hostile import (
    MARKDOWN_CASES,
    MarkdownCase,
    check_markdown,
    check_markdown_directory,
)


@pytest.mark.parametrize("case", MARKDOWN_CASES, ids=[case.name for case in MARKDOWN_CASES])
def test_a_hostile_subagent_file_is_a_located_spec_error(case: MarkdownCase) -> None:
    assert check_markdown(case) == []


def test_a_directory_of_hostile_files_loads_the_good_ones_and_a_host_on_it_serves(
    tmp_path: Path,
) -> None:
    assert check_markdown_directory(tmp_path) == []


def test_a_wrong_expectation_is_reported_not_raised() -> None:
    wrong = MarkdownCase("expects the wrong key", "---\nname: a\n---\n", "missing", 2, "name")

    assert check_markdown(wrong) == [
        "markdown[expects the wrong key]: key 'description', expected 'name'"
    ]
