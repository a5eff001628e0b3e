"""The catalogue of the mutation run: realistic one-line bugs in the kernel and the actors.

Each :class:`Mutant` names a file, an exact snippet of today's code that must
occur there exactly once, its replacement (the bug) and what the bug means. The
snippets span a few lines where one line alone is not unique; the bug itself is
always one small edit (a comparison, a constant, a dropped check or write, a
wrong argument). ``equivalent`` names a mutant that changes no behaviour any
caller can observe (it is left out of the score when it survives, and the reason
is printed); ``machines`` lists the property machines most likely to kill it, run
first.

Other branches rewrite the delivery code in parallel: a mutant whose snippet no
longer occurs is reported as *stale* and must be refreshed, never silently
skipped (``tests/properties/test_mutation_catalogue.py`` checks every snippet).
"""

from __future__ import annotations

from dataclasses import dataclass

KERNEL = "storage/_kernel.py"
DELIVERY = "actors/_delivery.py"
ATTEMPT = "actors/_attempt.py"

STORE_MACHINES = ("fencing", "replay", "delivery", "retention")
"""The store machines, in their default order (each over the kernel)."""
GAP_MACHINES = ("fencing-gaps", "delivery-gaps", "retention-gaps")
"""Machines added where the mutation run found gaps (see properties._mutation_worker)."""


@dataclass(frozen=True)
class Mutant:
    """One planted bug: ``original`` (exactly once in ``path``) becomes ``replacement``."""

    id: str
    path: str
    original: str
    replacement: str
    description: str
    machines: tuple[str, ...] = ()
    """The machines to run first (the rest of the file's machines follow)."""
    equivalent: str | None = None
    """Why the mutant changes no observable behaviour, when it does not."""


def _k(
    id: str,
    original: str,
    replacement: str,
    description: str,
    *machines: str,
    equivalent: str | None = None,
) -> Mutant:
    return Mutant(id, KERNEL, original, replacement, description, machines, equivalent)


_LINK_LESS_ONLY = (
    "unreachable in stores this version writes: every run-linked claim has its L entry, "
    "so the run's own terminal commit settles it and an expired claim never outlives a "
    "failed, cancelled or completed consumer; only claims of a store written before the "
    "L index reach this branch, and tests/storage/test_kernel_internals.py's link-less "
    "tests kill the mutant there"
)


_NO_LIVE_LEASE_WHEN_FENCED = (
    "unreachable while store time never goes back: fencing needs every non-terminal "
    "attempt's lease expired, acceptance and take-over are refused once fenced, and an "
    "expired lease never revives, so the owner check refuses (StaleFence) before this "
    "fence check is reached"
)


_FENCING = (
    _k(
        "K01-owner-expiry-boundary",
        "        if lease.lease_expires_at <= now:\n            raise StaleFence(\n"
        '                "owner lease expired",',
        "        if lease.lease_expires_at < now:\n            raise StaleFence(\n"
        '                "owner lease expired",',
        "an owner whose lease expires exactly now may still write",
        "fencing",
    ),
    _k(
        "K02-owner-skips-generation",
        "            lease.host_instance_id != host_instance_id\n"
        "            or lease.fencing_generation != fencing_generation\n",
        "            lease.host_instance_id != host_instance_id\n",
        "the owner check ignores the fencing generation (a stale generation writes)",
        "fencing",
    ),
    _k(
        "K03-owner-skips-host",
        "            lease.host_instance_id != host_instance_id\n"
        "            or lease.fencing_generation != fencing_generation\n",
        "            lease.fencing_generation != fencing_generation\n",
        "the owner check ignores the host id (another host with the same generation writes)",
        "fencing",
    ),
    _k(
        "K04-fence-check-only-missing-session",
        "        if session is None or session.status == SessionStatus.DELETING:\n"
        "            raise Conflict(\n"
        '                "session is fenced for deletion",',
        "        if session is None:\n            raise Conflict(\n"
        '                "session is fenced for deletion",',
        "writes to an attempt of a session fenced for deletion are not refused",
        "fencing",
    ),
    _k(
        "K05-heartbeat-skips-owner",
        "            self._require_owner(stored, host_instance_id, fencing_generation, now)\n",
        "",
        "heartbeat_attempt renews the lease for any writer (skipped fence check)",
        "fencing",
    ),
    _k(
        "K06-heartbeat-expiry-not-future",
        "attempt_id=attempt_id)\n            if lease_expires_at <= now:",
        "attempt_id=attempt_id)\n            if lease_expires_at < now:",
        "a heartbeat may set a lease that expires exactly now (off by one on the deadline)",
        "fencing",
    ),
    _k(
        "K07-heartbeat-skips-fence",
        "            self._require_not_fenced(txn, stored)\n            new = _replace(\n"
        "                stored,\n                owner_lease=_replace(",
        "            new = _replace(\n"
        "                stored,\n                owner_lease=_replace(",
        "heartbeat_attempt does not check the session's deletion fence",
        "fencing",
        equivalent=_NO_LIVE_LEASE_WHEN_FENCED,
    ),
    _k(
        "K08-heartbeat-on-terminal",
        "(stored, host_instance_id, fencing_generation, now)\n"
        "            if stored.execution_status in _TERMINAL_EXEC:",
        "(stored, host_instance_id, fencing_generation, now)\n"
        "            if stored.execution_status == ExecutionStatus.FAILED:",
        "a heartbeat on a completed or cancelled attempt is accepted",
        "fencing",
    ),
    _k(
        "K09-takeover-at-expiry-boundary",
        "            if lease.lease_expires_at > now:\n                raise StaleFence(\n"
        '                    "current owner lease is live",',
        "            if lease.lease_expires_at >= now:\n                raise StaleFence(\n"
        '                    "current owner lease is live",',
        "take-over is refused when the owner's lease expires exactly now",
        "fencing",
    ),
    _k(
        "K10-takeover-same-generation",
        "            if fencing_generation <= lease.fencing_generation:",
        "            if fencing_generation < lease.fencing_generation:",
        "take-over with the same fencing generation is accepted (off by one)",
        "fencing",
    ),
    _k(
        "K11-takeover-skips-fence",
        "            self._require_not_fenced(txn, stored)\n            new = _replace(\n"
        "                stored,\n                owner_lease=OwnerLease(",
        "            new = _replace(\n"
        "                stored,\n                owner_lease=OwnerLease(",
        "take-over does not check the session's deletion fence",
        "fencing",
        equivalent=(
            "the contract lets a take-over in a fenced session go either way "
            "(take_over_attempt names no fence; the model accepts Ok or Conflict), and every "
            "later write of the new owner is still refused by its own fence check"
        ),
    ),
    _k(
        "K12-takeover-keeps-old-generation",
        "                    fencing_generation=fencing_generation,\n"
        "                    heartbeat_at=now,",
        "                    fencing_generation=lease.fencing_generation,\n"
        "                    heartbeat_at=now,",
        "take-over stores the old fencing generation (the old owner is not fenced out)",
        "fencing",
    ),
    _k(
        "K13-fence-deletion-boundary",
        "                if record.owner_lease.lease_expires_at > now:\n"
        "                    raise Conflict(\n"
        '                        "an attempt of the session holds a live lease",',
        "                if record.owner_lease.lease_expires_at >= now:\n"
        "                    raise Conflict(\n"
        '                        "an attempt of the session holds a live lease",',
        "fencing a session is refused while a lease expires exactly now",
        "fencing",
    ),
    _k(
        "K14-update-execution-skips-fence",
        "            self._require_not_fenced(txn, stored)\n"
        "            if record.execution_status in _TERMINAL_EXEC:",
        "            if record.execution_status in _TERMINAL_EXEC:",
        "update_attempt_execution does not check the session's deletion fence",
        "fencing",
        equivalent=_NO_LIVE_LEASE_WHEN_FENCED,
    ),
)

_TERMINAL = (
    _k(
        "K15-replay-ignores-fingerprint",
        "stored.terminal_fingerprint == fingerprint\n                ):",
        "stored.terminal_fingerprint != ''\n                ):",
        "any commit on a terminal attempt is answered as an exact replay",
        "replay",
    ),
    _k(
        "K16-commit-skips-owner",
        "            self._require_owner(stored, lease.host_instance_id, "
        "lease.fencing_generation, now)\n            self._require_not_fenced(txn, stored)\n"
        "            _check(",
        "            self._require_not_fenced(txn, stored)\n            _check(",
        "commit_terminal does not check the writer's lease (skipped fence check)",
        "fencing",
        "replay",
    ),
    _k(
        "K17-commit-skips-fence",
        "lease.fencing_generation, now)\n            self._require_not_fenced(txn, stored)\n"
        "            _check(\n                EXECUTION,",
        "lease.fencing_generation, now)\n            _check(\n                EXECUTION,",
        "commit_terminal does not check the session's deletion fence",
        "fencing",
        equivalent=_NO_LIVE_LEASE_WHEN_FENCED,
    ),
    _k(
        "K18-commit-keeps-agent-index",
        "            self._leave_active(txn, new, pending=handed_to is None)\n"
        "            self._emit_terminal(txn, new, now, started=_starts(stored, commit))\n",
        "            self._emit_terminal(txn, new, now, started=_starts(stored, commit))\n",
        "a terminal commit leaves the attempt in the active index (missing index move)",
        "fencing",
    ),
    _k(
        "K19-leave-active-keeps-live-entry",
        '        if txn.get(_IX, agent_key) == aid.encode("utf-8"):\n'
        "            txn.delete(_IX, agent_key)",
        '        if txn.get(_IX, agent_key) == aid.encode("utf-8"):\n'
        "            txn.get(_IX, agent_key)",
        "a terminal attempt keeps its agent's live entry (missing index delete)",
        "fencing",
    ),
    _k(
        "K20-commit-drops-fingerprint",
        "new = _replace(record, owner_lease=stored.owner_lease, terminal_fingerprint=fingerprint)",
        "new = _replace(record, owner_lease=stored.owner_lease, "
        "terminal_fingerprint=record.terminal_fingerprint)",
        "the stored terminal record keeps the caller's fingerprint (None), not the computed one",
        "replay",
    ),
    _k(
        "K21-retention-deadline-boundary",
        "    if deadline is None or deadline <= now:",
        "    if deadline is None or deadline < now:",
        "a terminal commit whose retention deadline is exactly now is accepted",
        "replay",
    ),
    _k(
        "K22-artifact-single-limit-boundary",
        "        if artifact.size_bytes > limits.max_single_bytes:",
        "        if artifact.size_bytes >= limits.max_single_bytes:",
        "an artifact of exactly the per-artifact limit is refused (off by one)",
        "retention",
    ),
    _k(
        "K23-artifact-quota-boundary",
        "        if retained + artifact.size_bytes > limits.max_retained_bytes:",
        "        if retained + artifact.size_bytes >= limits.max_retained_bytes:",
        "the namespace quota refuses an artifact that fills it exactly (off by one)",
        "retention",
    ),
    _k(
        "K24-quota-counts-expired-artifacts",
        '        start = quota + codec.time_key(now) + b"\\x01"',
        "        start = quota",
        "the namespace quota also counts artifacts already past their expiry",
        "retention",
    ),
    _k(
        "K25-expire-keeps-artifact",
        '                txn.delete("artifacts", ak)\n                txn.delete(\n',
        "                txn.delete(\n",
        "retention expiry drops the quota entry but keeps the artifact's bytes (missing delete)",
        "retention",
        "replay",
    ),
)

_ACCEPT = (
    _k(
        "K26-accept-expired-lease-boundary",
        "            if record.owner_lease.lease_expires_at <= now:\n"
        "                raise Conflict(\n"
        '                    "acceptance lease already expired",',
        "            if record.owner_lease.lease_expires_at < now:\n"
        "                raise Conflict(\n"
        '                    "acceptance lease already expired",',
        "an acceptance whose lease expires exactly now is accepted",
        "fencing",
    ),
    _k(
        "K27-accept-checks-wrong-agent-key",
        "            holder = txn.get(_IX, agent_key)",
        "            holder = txn.get(_IX, codec.agent_key(ns, sess, record.attempt_id))",
        "the one-active-attempt-per-agent check looks up the wrong key (swapped argument)",
        "fencing",
    ),
    _k(
        "K28-accept-allows-claimed",
        "    if record.delivery_status != DeliveryStatus.UNDELIVERED:\n"
        '        problems.append("delivery_status")\n',
        "",
        "acceptance validation lets a record arrive already claimed",
        "fencing",
    ),
    _k(
        "K29-accept-allows-generation-0",
        "    if not lease.host_instance_id or lease.fencing_generation <= 0:",
        "    if not lease.host_instance_id or lease.fencing_generation < 0:",
        "acceptance validation lets fencing generation 0 through (off by one)",
        "fencing",
    ),
    _k(
        "K29b-accept-allows-cancellation-reason",
        '        "cancellation_reason",\n        "delivery_claim",\n',
        '        "delivery_claim",\n',
        "acceptance validation lets a record arrive with a cancellation reason",
        "fencing-gaps",
    ),
    _k(
        "K29c-accept-allows-continuation-run",
        '        "terminal_at",\n        "continuation_run_id",\n',
        '        "terminal_at",\n',
        "acceptance validation lets a record arrive naming a continuation run",
        "fencing-gaps",
    ),
)

_DELIVERY = (
    _k(
        "K30-claim-live-boundary",
        "                if old.deadline > now:",
        "                if old.deadline >= now:",
        "a claim whose deadline is exactly now still blocks other consumers",
        "delivery",
    ),
    _k(
        "K31-claim-deadline-not-future",
        "            if claim.deadline <= now:\n"
        '                raise Conflict("claim deadline is not in the future", '
        "attempt_id=attempt_id)\n"
        "            self._require_live_consumer(txn, record, claim, now)",
        "            if claim.deadline < now:\n"
        '                raise Conflict("claim deadline is not in the future", '
        "attempt_id=attempt_id)\n"
        "            self._require_live_consumer(txn, record, claim, now)",
        "a claim may be taken with a deadline of exactly now",
        "delivery",
    ),
    _k(
        "K32-run-live-at-lease-expiry",
        "    return lease is None or lease.lease_expires_at > now",
        "    return lease is None or lease.lease_expires_at >= now",
        "a consumer run whose admission lease expires exactly now counts as live",
        "delivery",
    ),
    _k(
        "K33-dead-consumer-not-suppressed",
        "        suppress = run.run_id if run is not None and run.status in _DEAD_CONSUMER "
        "else None",
        "        suppress = None",
        "releasing a failed/cancelled consumer's claim drops the suppression run id",
        "delivery",
        equivalent=_LINK_LESS_ONLY,
    ),
    _k(
        "K34-completed-consumer-wrong-status",
        "        if run is not None and run.status == RunStatus.COMPLETED:",
        "        if run is not None and run.status == RunStatus.CANCELLED:",
        "an expired claim is acknowledged for a cancelled consumer, released for a completed one",
        "delivery",
        equivalent=_LINK_LESS_ONLY,
    ),
    _k(
        "K35-release-keeps-claim-index",
        "        if record.delivery_claim is not None:\n"
        "            self._drop_claim_entries(txn, record, record.delivery_claim)\n"
        "        self._put_attempt(txn, new)\n"
        "        self._emit_attempt(\n            txn,\n"
        '            new,\n            "attempt.released",',
        "        self._put_attempt(txn, new)\n"
        "        self._emit_attempt(\n            txn,\n"
        '            new,\n            "attempt.released",',
        "releasing a claim leaves its claim index entry (missing index delete)",
        "delivery",
    ),
    _k(
        "K36-deliver-keeps-claim-index",
        "        if claim is not None:\n            self._drop_claim_entries(txn, record, claim)",
        "        if claim is None:\n            self._drop_claim_entries(txn, record, claim)",
        "acknowledging leaves the claim index entry (inverted condition)",
        "delivery",
    ),
    _k(
        "K37-delivered-flag-stays-undelivered",
        "            txn.put(_IX, retained, codec.DELIVERED)",
        "            txn.put(_IX, retained, codec.UNDELIVERED)",
        "a delivered result stays flagged undelivered in its retention entry (still listed)",
        "delivery",
    ),
    _k(
        "K38-terminated-release-any-run",
        "                if claim.continuation_run_id != release.run_id:",
        "                if claim.continuation_run_id is None:",
        "ConsumerTerminated from another run releases (and suppresses) the claim",
        "delivery",
    ),
    _k(
        "K39-terminated-release-not-suppressed",
        "                suppress = release.run_id\n",
        "                suppress = None\n",
        "ConsumerTerminated releases without recording the suppression run id",
        "delivery",
    ),
    Mutant(
        "K40-terminated-suppress-by-claim-run",
        KERNEL,
        "                suppress = release.run_id\n",
        "                suppress = claim.continuation_run_id\n",
        "ConsumerTerminated suppresses by the claim's run id instead of the release's",
        ("delivery",),
        equivalent=(
            "the line before refuses the release unless claim.continuation_run_id == "
            "release.run_id, so both name the same run"
        ),
    ),
    _k(
        "K41-ack-under-another-claim",
        "            if claim.claim_id != claim_id:\n                raise DeliveryClaimed(\n"
        '                    "another consumer holds the claim",\n'
        "                    attempt_id=attempt_id,\n"
        "                    claim_id=claim.claim_id,\n                )\n"
        "            if claim.continuation_run_id is not None:",
        "            if not claim.claim_id:\n                raise DeliveryClaimed(\n"
        '                    "another consumer holds the claim",\n'
        "                    attempt_id=attempt_id,\n"
        "                    claim_id=claim.claim_id,\n                )\n"
        "            if claim.continuation_run_id is not None:",
        "acknowledge_delivery accepts any claim id (skipped claim check)",
        "delivery",
    ),
    _k(
        "K42-explicit-claim-refused-when-suppressed",
        "            if automatic:\n                refusal = self._automatic_refusal(txn, record)",
        "            if not automatic:\n"
        "                refusal = self._automatic_refusal(txn, record)",
        "the suppression refuses explicit claims and lets automatic ones through (inverted)",
        "delivery",
    ),
    _k(
        "K43-continuation-ignores-suppression",
        "            if record.automatic_continuation_suppressed_by_run_id is not None:\n"
        "                raise Conflict(\n"
        '                    "automatic continuation is suppressed",\n'
        "                    attempt_id=attempt_id,",
        "            if record.automatic_continuation_suppressed_by_run_id == run.run_id:\n"
        "                raise Conflict(\n"
        '                    "automatic continuation is suppressed",\n'
        "                    attempt_id=attempt_id,",
        "a continuation run is admitted for a result whose automatic continuation is suppressed",
        "delivery",
    ),
    _k(
        "K44-continuation-stale-head-passes",
        "                head is None or head.run_id != request.expected_head_run_id",
        "                head is not None and head.run_id != request.expected_head_run_id",
        "a continuation expecting a head is admitted on a session with no run at all",
        "delivery",
    ),
    _k(
        "K45-continuation-ignores-live-run",
        "            live = self._live_head(txn, session_id, now)",
        "            live = None",
        "a continuation run is admitted while another run of the session is live",
        "delivery",
    ),
    _k(
        "K46-admit-run-ignores-live-run",
        "            live = self._live_head(txn, run.session_id, now)",
        "            live = None",
        "admit_run admits a second live run in a session",
        "delivery",
    ),
    _k(
        "K47-renew-expired-admission",
        "            if lease.lease_expires_at <= now:\n                raise StaleFence(\n"
        '                    "admission lease expired",',
        "            if lease.lease_expires_at < now:\n                raise StaleFence(\n"
        '                    "admission lease expired",',
        "an admission lease that expires exactly now can still be renewed",
        "delivery",
    ),
    _k(
        "K48-run-sequence-not-incremented",
        "        seq = 1 if head is None else head.sequence_no + 1",
        "        seq = 1 if head is None else head.sequence_no",
        "a new run reuses its predecessor's sequence number (overwrites the order index)",
        "delivery",
    ),
)

_MAINTENANCE = (
    _k(
        "K49-reconcile-at-expiry-boundary",
        "                if record.owner_lease.lease_expires_at > now:\n"
        "                    continue  # a live",
        "                if record.owner_lease.lease_expires_at >= now:\n"
        "                    continue  # a live",
        "reconcile leaves an attempt whose lease expires exactly now",
        "fencing",
    ),
    _k(
        "K50-reconcile-claims-boundary",
        "                if deadline_key <= now_key:",
        "                if deadline_key < now_key:",
        "reconcile leaves a claim whose deadline is exactly now",
        "delivery",
    ),
    _k(
        "K51-lost-result-expires-at-once",
        "            retention_expires_at=now + self.retention_seconds,",
        "            retention_expires_at=now,",
        "the result synthesized for a lost attempt gets no retention time",
        "fencing",
        "replay",
    ),
    _k(
        "K52-expiry-drops-undelivered",
        "                if flag == codec.UNDELIVERED:",
        "                if flag == codec.DELIVERED:",
        "retention expiry forgets undelivered results (wrong flag): they vanish from pending",
        "replay",
        "delivery",
    ),
    _k(
        "K54-terminal-drops-hand-over",
        "            return self._deliver(txn, new, handed_to, now)\n",
        "            self._put_attempt(txn, new)\n            return new\n",
        "a terminal commit that names a waiting consumer leaves the result undelivered "
        "(the consumer holds a result the store would deliver again)",
        "delivery",
    ),
    _k(
        "K53-due-boundary",
        "            if taken >= limit or deadline_key > now_key:",
        "            if taken >= limit or deadline_key >= now_key:",
        "retention expiry skips results whose deadline is exactly now",
        "retention",
        "replay",
    ),
)

KERNEL_MUTANTS: tuple[Mutant, ...] = (
    *_FENCING,
    *_TERMINAL,
    *_ACCEPT,
    *_DELIVERY,
    *_MAINTENANCE,
)


def _d(id: str, original: str, replacement: str, description: str) -> Mutant:
    return Mutant(id, DELIVERY, original, replacement, description, ("supervisor",))


DELIVERY_MUTANTS: tuple[Mutant, ...] = (
    _d(
        "D01-callback-acknowledged-before-it-runs",
        "            result = self.build(record, with_delta=True)\n            callback(result)",
        "            result = self.build(record, with_delta=True)\n"
        "            self.acknowledge(attempt_id, claim_id)\n            callback(result)",
        "run_callback acknowledges before the callback ran (ack before check): a raising "
        "callback loses the result",
    ),
    _d(
        "D02-failed-callback-keeps-claim",
        "            self.release(attempt_id, claim_id)\n            return False\n"
        "        self.acknowledge(attempt_id, claim_id)",
        "            return False\n        self.acknowledge(attempt_id, claim_id)",
        "a raising callback's claim is not released (blocks wait/turn until its deadline)",
    ),
    _d(
        "D03-delivery-without-delta",
        "            result = self.build(record, with_delta=True)\n"
        "            if consumer_run_id is not None:",
        "            result = self.build(record, with_delta=False)\n"
        "            if consumer_run_id is not None:",
        "wait/turn deliveries drop the child's context delta and usage",
    ),
    _d(
        "D04-claim-deadline-now",
        "            deadline=self.store.clock.now() + seconds,",
        "            deadline=self.store.clock.now(),",
        "delivery claims are taken with a deadline of now (forgot the claim window)",
    ),
    _d(
        "D05-retries-verdicts-not-faults",
        "    return not isinstance(exc, VERDICTS)",
        "    return isinstance(exc, VERDICTS)",
        "delivery retries the store's verdicts and gives up on transient faults (inverted)",
    ),
    _d(
        "D06-one-try-fewer",
        "    for _ in range(tries - 1):",
        "    for _ in range(tries - 2):",
        "every delivery call gets one try fewer than DELIVERY_RETRIES (off by one)",
    ),
    _d(
        "D07-turn-stops-at-first-claimed",
        "                BackgroundSubagentError.Delivered,\n            ):\n"
        "                continue\n            out.append(result)",
        "                BackgroundSubagentError.Delivered,\n            ):\n"
        "                break\n            out.append(result)",
        "take_pending stops at the first result someone else holds (break for continue)",
    ),
    _d(
        "D08-failed-build-keeps-claim",
        "        except BaseException:\n            self.release(attempt_id, claim_id)\n"
        "            raise",
        "        except BaseException:\n            raise",
        "a delivery whose result could not be built keeps its claim (dropped release)",
    ),
    _d(
        "D09-cancelled-output-shown",
        '        if str(record.execution_status) != "completed":',
        '        if str(record.execution_status) == "failed":',
        "only failed results hide their output (cancelled ones would show theirs)",
    ),
    Mutant(
        "D10-acknowledge-keeps-delta",
        DELIVERY,
        "        self.deltas.pop(attempt_id)\n        self.delivered.append(attempt_id)",
        "        self.delivered.append(attempt_id)",
        "an acknowledged delivery keeps its context delta in memory (missing delete)",
        ("supervisor",),
        equivalent=(
            "memory only: the store refuses any second claim that could hand the delta out "
            "again, and the supervisor pops it when it prunes the delivered entry (_forget)"
        ),
    ),
    Mutant(
        "D11-continuation-claim-deadline-now",
        DELIVERY,
        "            claim_deadline=now + RUN_CLAIM_SECONDS,",
        "            claim_deadline=now,",
        "continuation admissions are requested with a claim deadline of now",
        ("delivery-gaps",),
    ),
    Mutant(
        "D12-continuation-input-ignores-retention",
        DELIVERY,
        "        return continuation_input(visible, content)",
        "        return continuation_input(record, content)",
        "a continuation built past the retention deadline carries the content, not the summary",
        ("delivery-gaps",),
    ),
)


def _a(id: str, original: str, replacement: str, description: str) -> Mutant:
    return Mutant(id, ATTEMPT, original, replacement, description, ("supervisor",))


ATTEMPT_MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "A01-heartbeat-never-adopts-lease",
        ATTEMPT,
        "            if fresh.lease_expires_at > self.record.owner_lease.lease_expires_at:",
        "            if fresh.lease_expires_at < self.record.owner_lease.lease_expires_at:",
        "a renewed lease is not copied into the actor's record (wrong comparison)",
        ("supervisor",),
        equivalent=(
            "the record's owner_lease is never trusted: update_attempt_execution and "
            "commit_terminal take the stored lease, heartbeats use rt.owner, and ownership "
            "is confirmed from a fresh load"
        ),
    ),
    _a(
        "A02-confirm-owner-skips-generation",
        "            or lease.fencing_generation != rt.owner.fencing_generation\n",
        "",
        "owner confirmation ignores the fencing generation (a taken-over attempt looks ours)",
    ),
    _a(
        "A03-confirm-owner-expiry-boundary",
        "        if lease.lease_expires_at <= rt.store.clock.now():",
        "        if lease.lease_expires_at < rt.store.clock.now():",
        "a lease expiring exactly now is confirmed as still ours (off by one)",
    ),
    _a(
        "A04-quota-fallback-replays-old-commit",
        "                    failure_category=EXECUTION_ERROR,\n                )\n"
        "                self.pending = None\n                return False",
        "                    failure_category=EXECUTION_ERROR,\n                )\n"
        "                return False",
        "after QuotaExceeded the refused commit is replayed instead of the failure",
    ),
    _a(
        "A05-inline-boundary",
        "            if size <= limits.inline_preview_bytes:",
        "            if size < limits.inline_preview_bytes:",
        "an output of exactly the inline limit goes to an artifact (off by one)",
    ),
    _a(
        "A06-artifact-limit-boundary",
        "            elif size > limits.max_artifact_bytes:",
        "            elif size >= limits.max_artifact_bytes:",
        "an output of exactly the artifact limit fails (off by one)",
    ),
    _a(
        "A07-no-retention-time",
        "            retention_expires_at=now + limits.retention,\n            terminal_at=now,",
        "            retention_expires_at=now,\n            terminal_at=now,",
        "the terminal commit asks for no retention time",
    ),
    _a(
        "A08-raising-child-completes",
        "            return _Decision(\n                status=ExecutionStatus.FAILED,\n"
        '                error=f"Background subagent raised',
        "            return _Decision(\n                status=ExecutionStatus.COMPLETED,\n"
        '                error=f"Background subagent raised',
        "a child that raised is recorded as completed (wrong status)",
    ),
    Mutant(
        "A09-cancel-inverted-child-check",
        ATTEMPT,
        "            if not self._child_running:\n"
        "                # No worker: nothing to wait for, terminalize now.",
        "            if self._child_running:\n"
        "                # No worker: nothing to wait for, terminalize now.",
        "cancel terminalizes a running child at once and waits for an idle one (inverted)",
        ("supervisor",),
        equivalent=(
            "unreachable from a parent since the fsync budget: the child launches on Start, "
            "which the supervisor tells before the delegate's reply, so every parent cancel "
            "finds the child launched (or the attempt decided or ended)"
        ),
    ),
    _a(
        "A10-cancel-wrong-category",
        "            failure_category=CANCELLED,",
        "            failure_category=EXECUTION_ERROR,",
        "a cancelled attempt is stored with the execution_error category",
    ),
    _a(
        "A11-commit-rebuilt-each-try",
        "        if self.pending is None:\n            self.pending = self._build_commit(",
        "        if True:\n            self.pending = self._build_commit(",
        "the terminal commit is rebuilt on every try (a lost response is never replayed exactly)",
    ),
    Mutant(
        "A12-terminal-commit-without-path",
        ATTEMPT,
        "            via=self._via(status),\n",
        "            via=(),\n",
        "the terminal commit leaves out the statuses the attempt passed through since the "
        "persisted one (completing an attempt still recorded as accepted)",
        ("supervisor",),
        equivalent=(
            "observable only in the store calls and commits it makes, which no machine "
            "counts: the store refuses the skipped path (IllegalTransition), and the actor, "
            "still the owner, persists the path one status per commit, then the same "
            "outcome; tests/actors/test_fsync_budget.py and test_durable_attempts.py kill it"
        ),
    ),
    _a(
        "A13-heartbeat-error-never-confirmed",
        "        if not isinstance(message.error, RetryableStorage):\n"
        "            self._confirm_owner(message.error)",
        "        if isinstance(message.error, RetryableStorage):\n"
        "            self._confirm_owner(message.error)",
        "a refused heartbeat is not checked for owner loss; a transient one is (inverted)",
    ),
    _a(
        "A14-stopping-child-decided-again",
        "            self._to(COMMITTING)  # the outcome was chosen already\n            return\n",
        "            self._to(COMMITTING)  # the outcome was chosen already\n",
        "a child that ends after the decision is finished a second time (dropped return)",
    ),
    _a(
        "A15-lost-owner-keeps-child",
        "        if child_running:\n            self._abort_task()",
        "        if not child_running:\n            self._abort_task()",
        "an attempt that lost its lease leaves its child running (inverted)",
    ),
)

CATALOGUE: tuple[Mutant, ...] = (*KERNEL_MUTANTS, *DELIVERY_MUTANTS, *ATTEMPT_MUTANTS)
"""Every mutant of the run, in report order."""

MACHINES_BY_PATH: dict[str, tuple[str, ...]] = {
    KERNEL: (*STORE_MACHINES, *GAP_MACHINES, "supervisor"),
    DELIVERY: ("supervisor", "supervisor-gaps", "delivery-gaps"),
    ATTEMPT: ("supervisor", "supervisor-gaps"),
}
"""Which machines exercise each mutated file (the store machines never load actors/)."""
