"""A ``ProviderSandbox`` on each provider, as langchain-tests' sandbox suite expects it.

The vendor suite (``SandboxIntegrationTests``) runs against one backend per class.
Vendor providers run against their emulators, started by the fixture modules of
``tests/e2b`` and ``tests/daytona``, backed by the local provider; Docker runs where an
engine answers. Without what a provider needs, its tests skip saying why, except under
CI (``CI=true``), where that is a failure.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from provider_sdk_deepagents import ProviderSandbox

# The suite runs `python -c ...`; the sandboxes' images have `python3`. The suite's
# sandboxes get a `python` beside it, on a PATH entry of their own.
SUITE_BIN = "/tmp/.deepagents-suite-bin"
SUITE_PATH = f"{SUITE_BIN}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


SUITE_IMAGE = "psdk-deepagents-suite:bookworm"
"""The Docker template the suite runs on: the Docker provider's base image with a
``python3``, which deepagents' server-side scripts (edit, grep, glob) need."""


def suite_image() -> str:
    """:data:`SUITE_IMAGE`, built once (without network) from the base image and this
    machine's Debian ``/usr/bin/python3``: the base image is Debian 12 too."""
    import docker
    import docker.errors
    from provider_sdk_docker import DEFAULT_TEMPLATE

    client = docker.from_env()
    try:
        client.images.get(SUITE_IMAGE)
        return SUITE_IMAGE
    except docker.errors.ImageNotFound:
        pass
    exe = Path(os.path.realpath("/usr/bin/python3"))
    stdlib = Path(subprocess.run(
        [str(exe), "-c", "import sysconfig; print(sysconfig.get_paths()['stdlib'])"],
        capture_output=True, text=True, check=True).stdout.strip())
    libs = [line.split("=>")[1].split("(")[0].strip()
            for line in subprocess.run(["ldd", str(exe)], capture_output=True, text=True,
                                       check=True).stdout.splitlines() if "=>" in line]
    present = client.containers.run(
        DEFAULT_TEMPLATE, ["sh", "-c", 'for f in "$@"; do [ -e "$f" ] && echo "$f"; done',
                           "sh", *libs], network_mode="none", remove=True).decode().split()
    with tempfile.TemporaryDirectory() as context:
        root = Path(context, "root")
        # Each file at its real path: the base image's /lib and /bin are links to /usr.
        files = {str(exe.parent / "python3"): str(exe)}
        for lib in libs:
            if lib not in present:
                real_dir = os.path.realpath(os.path.dirname(lib))
                files[os.path.join(real_dir, os.path.basename(lib))] = lib
        for target, source in files.items():
            path = root / target.lstrip("/")
            path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(os.path.realpath(source), path)
        shutil.copytree(stdlib, root / str(stdlib).lstrip("/"), ignore=shutil.ignore_patterns(
            "site-packages", "dist-packages", "test", "tests", "idlelib", "tkinter",
            "ensurepip", "__pycache__"))
        Path(context, "Dockerfile").write_text(
            f"FROM {DEFAULT_TEMPLATE}\nCOPY root/ /\n")
        client.images.build(path=context, tag=SUITE_IMAGE, network_mode="none", rm=True)
    return SUITE_IMAGE


@contextlib.contextmanager
def suite_backend(provider: str, options: Mapping[str, Any],
                  **spec_fields: Any) -> Iterator[ProviderSandbox]:
    """A backend on ``provider`` as the vendor suite expects its sandbox: ``python``
    on the PATH, ``glob`` paths relative to the search root. Deleted (the sandbox
    killed) at the end."""
    backend = ProviderSandbox.create(provider=provider, provider_options=options,
                                     glob_paths="relative", env={"PATH": SUITE_PATH},
                                     **spec_fields)
    try:
        made = backend.execute(f'mkdir -p {SUITE_BIN} && '
                               f'ln -sf "$(command -v python3)" {SUITE_BIN}/python')
        assert made.exit_code == 0, made.output
        yield backend
    finally:
        backend.delete()
