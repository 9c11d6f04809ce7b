"""Version-step adapters: pooling."""

from __future__ import annotations
