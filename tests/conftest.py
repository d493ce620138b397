"""Plugins for the whole test tree.

pytest accepts ``pytest_plugins`` only in a top-level conftest, so the contract suite's
plugin (capability skips, strict known failures, the end-of-run sweep) is loaded here
for ``tests/contract/``; it leaves tests outside contract classes alone. ``pytester``
serves the suite's own meta-tests in ``tests/contract_meta/``. ``leaks`` fails the run
when its tests leave a sandbox, a container, an image, a volume or a cgroup behind.
"""

pytest_plugins = ["pytester", "provider_sdk_contract.plugin", "leaks"]
