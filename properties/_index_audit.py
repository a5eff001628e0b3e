"""The store's own check after every step: no orphan, missing or wrong index entry.

The machines compare what the contract lets a caller see (records, lists,
artifacts) with the model. A store can keep every answer right and still leak:
an expired artifact's bytes kept after its quota entry went (``load_artifact``
refuses it by its expiry anyway), a released claim's index entry left behind.
The mutation run found such bugs surviving. :class:`IndexAudit` adds one
invariant to a machine: :func:`storage.admin.check` (which derives every index
entry from the records alone, apart from the kernel's writes) finds nothing on
a kernel store. :class:`RetentionGapsMachine` is the retention machine with it.
"""

from __future__ import annotations

from hypothesis.stateful import invariant

from storage import KernelStore
from storage.admin import check

from ._factories import StoreFactory
from ._harness import ContractMachine, build_for
from ._retention import RetentionMachine


class IndexAudit(ContractMachine):
    """Mixin: after every step, the store check of a kernel store finds nothing."""

    @invariant()
    def the_store_check_finds_nothing(self) -> None:
        store = self.store
        if not isinstance(store, KernelStore):
            return  # a user's own store: only what the contract shows is checked
        report = check(store)
        type(self).stats.invariants += 1
        if not report.ok:
            found = "; ".join(f.describe() for f in report.findings[:5])
            raise self.violation(f"the store check found {len(report.findings)}: {found}")


class RetentionGapsMachine(IndexAudit, RetentionMachine):
    """The retention machine with the index audit."""


def retention_gaps_machine(factory: StoreFactory) -> type[RetentionGapsMachine]:
    """The retention-gaps machine bound to ``factory`` (use ``.TestCase`` under pytest)."""
    return build_for(RetentionGapsMachine, factory)
