from psdk_fixtures import anyio_backend, clean_config, memory, psdk, unconfigured_structlog

__all__ = ["anyio_backend", "clean_config", "memory", "psdk", "unconfigured_structlog"]
