"""AgentContext, AgentContextHandle and the Dependencies container."""

from __future__ import annotations

from subagents import (
    AgentContext,
    AgentContextHandle,
    AgentEvent,
    Dependencies,
    RunId,
)


class Base:
    pass


class Derived(Base):
    pass


def test_dependencies_are_keyed_by_type_and_satisfy_base_lookups() -> None:
    dependencies = Dependencies()
    derived = Derived()
    dependencies.insert(derived)
    dependencies.insert("text")

    assert dependencies.get(Derived) is derived
    assert dependencies.get(Base) is derived
    assert dependencies.get(str) == "text"
    assert dependencies.get(int) is None
    assert Base in dependencies and int not in dependencies


def test_a_dependency_copy_shares_values_but_not_insertions() -> None:
    original = Dependencies()
    shared = Base()
    original.insert(shared)

    copy = original.copy()
    copy.insert(7)

    assert copy.get(Base) is shared
    assert original.get(int) is None
    assert len(original) == 1 and len(copy) == 2


def test_a_context_copy_is_independent() -> None:
    context = AgentContext(metadata={"k": 1})
    context.events.publish(AgentEvent(kind="a"))
    context.usage.requests = 2

    copy = context.copy()
    copy.metadata["k"] = 2
    copy.events.publish(AgentEvent(kind="b"))
    copy.usage.requests = 5
    copy.dependencies.insert(1)

    assert context.metadata == {"k": 1}
    assert len(context.events) == 1
    assert context.usage.requests == 2
    assert context.dependency(int) is None


def test_a_subagent_context_pushes_the_stack_and_links_the_parent_run() -> None:
    parent = AgentContext(run_id=RunId("parent"), metadata={"app": "x"})
    parent.dependencies.insert(Base())

    child = parent.subagent_context("research", "research-1")
    grandchild = child.subagent_context("helper", "helper-1")

    assert parent.subagent_stack == []
    assert child.subagent_stack == ["research"]
    assert grandchild.subagent_stack == ["research", "helper"]
    assert child.parent_run_id == RunId("parent")
    assert (child.agent_id, child.agent_name) == ("research-1", "research")
    assert child.metadata["app"] == "x"
    assert child.dependency(Base) is parent.dependency(Base)
    assert child.usage.requests == 0 and len(child.events) == 0


def test_a_handle_points_at_the_live_context() -> None:
    live = AgentContext()
    handle = AgentContextHandle(live)

    handle.context.metadata["seen"] = True
    snapshot = handle.snapshot()
    snapshot.metadata["seen"] = False
    replacement = AgentContext()
    handle.replace(replacement)

    assert live.metadata == {"seen": True}
    assert handle.context is replacement
