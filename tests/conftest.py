"""Shared pytest set-up: Hypothesis profiles come from ``HYPOTHESIS_PROFILE``."""

from __future__ import annotations

import os

from properties import load_profile

load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
