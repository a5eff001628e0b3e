"""What ``diagnostics.get`` and ``catalog.list`` say about delegation, before any session."""

from __future__ import annotations

import pytest
from host_helpers import Client, memory_service

pytestmark = pytest.mark.timeout(60)

PARENT_AND_CHILD = """
[profiles.default]
model_id = "test:echo"
subagents = ["research"]

[profiles.research]
model_id = "test:echo"
subagents = ["research"]   # ignored: this profile runs as a child

[profiles.plain]
model_id = "test:echo"

[subagents.research]
profile = "research"
description = "Collect facts"
"""

NO_SUBAGENTS = '[profiles.default]\nmodel_id = "test:echo"\n'


async def test_diagnostics_says_async_before_the_first_session() -> None:
    service = memory_service(PARENT_AND_CHILD)
    await service.start()
    try:
        info = await Client(service.dispatcher()).result("diagnostics.get")
        assert info["delegation"] == "async"
        assert info["supervisors"] == []
    finally:
        await service.close()


async def test_diagnostics_says_disabled_when_no_parent_has_subagents() -> None:
    service = memory_service(NO_SUBAGENTS)
    await service.start()
    try:
        info = await Client(service.dispatcher()).result("diagnostics.get")
        assert info["delegation"] == "disabled"
    finally:
        await service.close()


async def test_catalog_says_disabled_for_child_profiles() -> None:
    service = memory_service(PARENT_AND_CHILD)
    await service.start()
    try:
        catalog = await Client(service.dispatcher()).result("catalog.list")
        profiles = {p["name"]: p for p in catalog["profiles"]}
        assert profiles["default"]["delegation"] == "async"
        assert profiles["research"]["child"] is True
        assert profiles["research"]["delegation"] == "disabled"
        assert profiles["plain"]["delegation"] == "disabled"
    finally:
        await service.close()
