"""Plugins for the whole test tree.

pytest accepts ``pytest_plugins`` only in a top-level conftest, so the contract suite's
plugin (capability skips, strict known failures, the end-of-run sweep) is loaded here
for ``tests/contract/``; it leaves tests outside contract classes alone. ``pytester``
serves the suite's own meta-tests in ``tests/contract_meta/``.
"""

pytest_plugins = ["pytester", "provider_sdk_contract.plugin"]
