"""OpenTelemetry spans of a parent that delegates once, printed from an in-memory exporter.

Run: ``python examples/adapters/opentelemetry_spans.py``
(needs ``pip install '.[opentelemetry]' opentelemetry-sdk``).
"""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from subagents import AgentBuilder, SubagentCapabilityInheritancePolicy, SubagentConfig, TestModel
from subagents.adapters.opentelemetry import OpenTelemetryHook

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))

child = AgentBuilder(TestModel.with_text("facts")).name("research").build()
parent = (
    AgentBuilder(
        TestModel.with_tool_calls([("delegate", {"name": "research", "prompt": "go"})], then="done")
    )
    .name("lead")
    .hook(OpenTelemetryHook(provider))
    .subagent(
        SubagentConfig("research", child).with_capability_inheritance(
            SubagentCapabilityInheritancePolicy(hooks=True)  # the child's spans too
        )
    )
    .build()
)
parent.run_sync("plan")
spans = exporter.get_finished_spans()
names = {span.context.span_id: span.name for span in spans}
for span in sorted(spans, key=lambda s: s.start_time or 0):
    parent_name = names.get(span.parent.span_id) if span.parent else None
    print(f"{span.name:<28} <- {parent_name}")
