"""``events.subscribe`` with ``after_seq`` replays the whole backlog, however long
(more than the 10,000 events one replay page may hold), then goes live: no gap."""

from __future__ import annotations

from typing import Any

from host_helpers import CONFIG, Client, memory_service

from subagents._host import Connection
from subagents._host._methods import HostEvent

BACKLOG = 10_250


def seqs(pushed: list[dict[str, Any]]) -> list[int]:
    events: list[HostEvent] = [frame["params"]["event"] for frame in pushed]
    return [event.seq for event in events]


async def test_a_backlog_over_ten_thousand_events_is_replayed_whole_then_live() -> None:
    service = memory_service(CONFIG)
    await service.start()
    try:
        await Client(service.dispatcher()).result("session.create", {"session_id": "s1"})
        for n in range(BACKLOG):
            service.emit("s1", "test.filler", None, {"n": n})
        last = service.events.last_seq("s1")
        assert last > 10_000
        pushed: list[dict[str, Any]] = []
        client = Client(service.dispatcher(), Connection(transport="test", push=pushed.append))
        result = await client.result("events.subscribe", {"session_id": "s1", "after_seq": 3})
        assert result["next_seq"] == last
        assert seqs(pushed) == list(range(4, last + 1))  # every backlog event, in order
        service.emit("s1", "test.live", None, {})
        assert seqs(pushed)[-1] == last + 1  # then live, right after the backlog
    finally:
        await service.close()


async def test_a_subscriber_cut_while_it_replays_gets_no_listener() -> None:
    service = memory_service(CONFIG)
    await service.start()
    try:
        await Client(service.dispatcher()).result("session.create", {"session_id": "s1"})
        for n in range(2_000):
            service.emit("s1", "test.filler", None, {"n": n})
        conn = Connection(transport="test")
        pushed: list[dict[str, Any]] = []

        def cut_after_600(frame: dict[str, Any]) -> None:
            pushed.append(frame)
            if len(pushed) == 600:  # the transport's buffer is full: it drops the subscription
                sub_id = frame["params"]["subscription_id"]
                service.remove_listener(sub_id)
                conn.subscriptions.discard(sub_id)

        conn.push = cut_after_600
        await Client(service.dispatcher(), conn).result(
            "events.subscribe", {"session_id": "s1", "after_seq": 0}
        )
        assert len(pushed) == 600  # the replay stopped at the cut (no wasted pages)
        assert len(service._subscriptions) == 0
    finally:
        await service.close()
