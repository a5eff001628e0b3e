"""``python -m properties.mutation``: score what the property machines alone catch.

A mutation run over ``storage/_kernel.py``, ``actors/_delivery.py`` and
``actors/_attempt.py``: every mutant of the catalogue (realistic one-line
bugs) is applied to a temporary copy of the tree, the property machines that
exercise the file run on it under the ``ci`` Hypothesis profile, and the run
prints a table, the score and every survivor::

    nice python -m properties.mutation [--profile ci] [--only ID] [--jobs N] [--json]

See :mod:`properties._mutation` for the verdicts and the score.
"""

from __future__ import annotations

import sys

from ._mutation import Options, Verdict, main, run_mutants, score
from ._mutation_catalogue import CATALOGUE, Mutant

__all__ = ["CATALOGUE", "Mutant", "Options", "Verdict", "main", "run_mutants", "score"]

if __name__ == "__main__":
    sys.exit(main())
