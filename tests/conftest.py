"""Shared test helpers. The suite's hypothesis profile: fast by default, BLOCKCLI_SLOW=1 for more examples."""

import os
from pathlib import Path

from hypothesis import HealthCheck, settings

settings.register_profile("fast", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("slow", max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("slow" if os.environ.get("BLOCKCLI_SLOW") else "fast")

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))
