"""``[host] lease_ttl`` has a lower bound: a lease renewed every ``lease_ttl / 3``
must outlast ordinary scheduling delays, or every run loses it."""

from __future__ import annotations

import pytest

from subagents._host import HostConfigError, parse_host_config
from subagents._host._config import MIN_LEASE_TTL

GOOD = '[profiles.default]\nmodel_id = "test:echo"\n'


@pytest.mark.parametrize("ttl", ["1e-6", "0.01", "0.499"])
def test_a_lease_ttl_below_the_bound_is_a_config_error_naming_the_key(ttl: str) -> None:
    with pytest.raises(HostConfigError) as caught:
        parse_host_config(f"[host]\nlease_ttl = {ttl}\n" + GOOD, source="h.toml")
    error = caught.value
    assert error.key == "host.lease_ttl"
    assert str(error).startswith("h.toml: host.lease_ttl: ")
    assert f"at least {MIN_LEASE_TTL:g}" in error.problem
    assert "lease_ttl = 30" in error.fix


def test_the_bound_itself_and_the_defaults_are_accepted() -> None:
    assert MIN_LEASE_TTL >= 0.5
    config = parse_host_config(f"[host]\nlease_ttl = {MIN_LEASE_TTL}\n" + GOOD)
    assert config.host.lease_ttl == MIN_LEASE_TTL
    assert parse_host_config(GOOD).host.lease_ttl == 30.0
