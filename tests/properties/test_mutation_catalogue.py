"""The mutation catalogue matches today's code, and the driver classifies mutants right.

The mutation run itself (``python -m properties.mutation``) takes minutes and
is not part of CI; these checks are: every mutant's snippet occurs exactly once
in its file (a rewrite elsewhere makes it stale, and this names it), and the
driver calls an obvious bug killed and a no-op edit survived, on a copy of the
tree, never touching the checkout.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from properties._mutation import Options, default_root, machines_for, occurrences, run_mutant
from properties._mutation_catalogue import (
    CATALOGUE,
    KERNEL,
    MACHINES_BY_PATH,
    Mutant,
)
from properties.mutation import main

ROOT = Path(__file__).resolve().parent.parent.parent


def test_the_driver_mutates_this_checkout() -> None:
    assert default_root() == ROOT


@pytest.mark.parametrize("mutant", CATALOGUE, ids=lambda m: m.id)
def test_every_snippet_occurs_exactly_once(mutant: Mutant) -> None:
    found = occurrences(ROOT, mutant)
    assert found == 1, (
        f"{mutant.id}: its snippet occurs {found} times in {mutant.path}; "
        "refresh the entry in properties/_mutation_catalogue.py"
    )
    assert mutant.replacement != mutant.original
    assert mutant.path in MACHINES_BY_PATH


def test_the_catalogue_is_large_and_its_ids_are_unique() -> None:
    ids = [m.id for m in CATALOGUE]
    assert len(ids) == len(set(ids))
    assert len(CATALOGUE) >= 37
    assert {m.path for m in CATALOGUE} == set(MACHINES_BY_PATH)


def test_a_mutant_s_own_machines_run_first() -> None:
    mutant = next(m for m in CATALOGUE if m.machines == ("delivery",) and m.path == KERNEL)
    assert machines_for(mutant)[0] == "delivery"
    assert sorted(machines_for(mutant)) == sorted(MACHINES_BY_PATH[KERNEL])


FAST = Options(root=ROOT, examples=30, timeout=120.0)
"""A smoke budget: enough for an obvious bug, quick for a survivor."""


def test_an_obvious_bug_is_killed_and_the_checkout_is_untouched() -> None:
    before = (ROOT / KERNEL).read_text(encoding="utf-8")
    obvious = Mutant(
        "T-heartbeat-skips-owner",
        KERNEL,
        "            self._require_owner(stored, host_instance_id, fencing_generation, now)\n",
        "",
        "any writer renews the lease",
        ("fencing",),
    )
    verdict = run_mutant(obvious, _only_fencing(obvious))
    assert verdict.status == "killed", verdict
    assert verdict.by.startswith("fencing x memory"), verdict.by
    assert (ROOT / KERNEL).read_text(encoding="utf-8") == before


def test_an_identity_edit_survives() -> None:
    snippet = "            if fencing_generation <= lease.fencing_generation:"
    identity = Mutant("T-identity", KERNEL, snippet, snippet, "no change", ("fencing",))
    verdict = run_mutant(identity, _only_fencing(identity))
    assert verdict.status == "survived", verdict


def test_a_snippet_that_moved_is_reported_stale() -> None:
    gone = Mutant("T-gone", KERNEL, "this text is not in the kernel", "x", "stale on purpose")
    verdict = run_mutant(gone, FAST)
    assert verdict.status == "stale"
    assert "occurs 0 times" in verdict.by
    assert not verdict.scored


def test_python_m_properties_mutation_lists_and_scores_as_json() -> None:
    out = io.StringIO()
    assert main(["--list"], out=out) == 0
    assert out.getvalue().count("\n") == len(CATALOGUE)
    out = io.StringIO()
    code = main(["--only", "K05", "--json", "--no-baseline", "--examples", "30"], out=out)
    payload = json.loads(out.getvalue())
    assert code == 0, payload
    assert [v["status"] for v in payload["verdicts"]] == ["killed"]
    assert payload["score"] == 1.0


def _only_fencing(mutant: Mutant) -> Options:
    # Only the fencing machine (the mutants above are about it): keeps the test quick.
    assert machines_for(mutant)[0] == "fencing"
    return Options(root=ROOT, examples=FAST.examples, timeout=FAST.timeout, machine_limit=1)
