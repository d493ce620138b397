"""The guide's minimal provider (``examples/minimal_provider.py``), named by where it is
importable rather than by an entry point, passes every contract test it does not skip
for a capability it does not declare: the shape a new provider copies is a working one."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from engines import require_bwrap
from provider_sdk_contract import ProviderContract

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NAME = "minimal_provider:MinimalProvider"
# Importable before the suite reads the class's capabilities, at collection.
if str(EXAMPLES) not in sys.path:
    sys.path.append(str(EXAMPLES))


class TestMinimalContract(ProviderContract):
    provider_name = NAME

    def provider_options(self, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
        require_bwrap()
        return {"home": str(tmp_path_factory.mktemp("psdk-minimal"))}
