from psdk_fixtures import anyio_backend, clean_config, psdk, unconfigured_structlog

__all__ = ["anyio_backend", "clean_config", "psdk", "unconfigured_structlog"]
