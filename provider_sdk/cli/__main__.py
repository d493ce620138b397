"""``python -m provider_sdk.cli``: the same as ``psdk``."""

from provider_sdk.cli import main

raise SystemExit(main())
