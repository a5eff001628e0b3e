"""Consumer runs that complete, fail, are cancelled or die with their host.

The delivery machine's consumer rules alone, so that under the ``ci`` profile
they run well over a thousand times per store: a parent turn claims a result
for its run, an explicit run takes everything waiting
(``claim_pending_for_run``), a continuation run is admitted for a result; each
then completes, fails, is cancelled or loses its admission lease (its host
died: time passes the lease and the claims' deadlines, the reconciler runs).
The invariant is the whole-store comparison plus the consumer invariant of the
harness: a delivered result names exactly one consumer run, which completed; a
claim never outlives its run's terminal commit; a result no completed run
consumed is still offered. ``Stats.consumer_deaths`` counts the deaths of
consumer runs that held results.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._delivery import DeliveryMachine
from ._factories import StoreFactory
from ._harness import build_for

CONSUMER_RULES = frozenset(
    {
        "new_result",
        "explicit_run_consumes_pending",
        "consumer_dies_holding_the_claim",
        "consumer_ends_holding_the_claim",
        "continuation_run_ends",
        "acquire_an_undelivered_result",
        "acquire_an_admitted_result_again",
        "time_passes",
        "expire_retention",
    }
)
"""The delivery machine's rules this machine keeps; the others stay helpers only."""


def _helper(rule: Callable[..., Any]) -> Callable[..., Any]:
    """``rule`` as a plain method: callable by the kept rules, never drawn as a step."""

    def plain(self: DeliveryMachine, *args: Any, **kwargs: Any) -> Any:
        return rule(self, *args, **kwargs)

    plain.__name__ = rule.__name__
    plain.__doc__ = rule.__doc__
    return plain


class ConsumerMachine(DeliveryMachine):
    """Only the consumer-run rules of :class:`~properties.DeliveryMachine`; the three
    that end consumer runs are listed twice (Hypothesis draws among the rules alike, so
    this doubles their weight)."""

    explicit_run_consumes_pending_again = DeliveryMachine.explicit_run_consumes_pending
    consumer_dies_holding_the_claim_again = DeliveryMachine.consumer_dies_holding_the_claim
    continuation_run_ends_again = DeliveryMachine.continuation_run_ends


for _name in dir(DeliveryMachine):
    _member = getattr(DeliveryMachine, _name)
    if getattr(_member, "hypothesis_stateful_rule", None) is not None and (
        _name not in CONSUMER_RULES and not _name.endswith("_again")
    ):
        setattr(ConsumerMachine, _name, _helper(_member))


def consumer_machine(factory: StoreFactory) -> type[ConsumerMachine]:
    """The consumer machine bound to ``factory`` (use ``.TestCase`` under pytest)."""
    return build_for(ConsumerMachine, factory)
