"""``psdk template build|ls|rm``: templates from Dockerfiles, on any provider that
builds them (``templates.build``).

``build`` reads and checks the Dockerfile first: what the provider's builder cannot do
is reported, every line of it, before anything is built. Progress is drawn with rich on
a terminal (the step, a bar of steps, bytes pushed) and is plain lines otherwise (CI
logs); the template's id alone goes to stdout.
"""

from __future__ import annotations

import argparse
import functools
from pathlib import Path
from typing import Any

import anyio

from provider_sdk import config
from provider_sdk.capabilities import Capability
from provider_sdk.cli.console import CliError, Console, dump_json, table, to_json
from provider_sdk.models import Template
from provider_sdk.templates import from_dockerfile

__all__ = ["cmd_template"]


async def cmd_template(args: argparse.Namespace, console: Console) -> int:
    """Build, list or remove templates."""
    options: dict[str, Any] = {}
    if getattr(args, "registry", None):
        options["registry"] = args.registry
    async with config.open_provider(config.provider_name(args.provider), **options) as provider:
        provider.require(Capability.TEMPLATES_BUILD)
        if args.action == "build":
            spec = await anyio.to_thread.run_sync(functools.partial(
                from_dockerfile, args.path, context=args.context, name=args.name,
                cpu=args.cpu, memory_mb=args.memory_mb, start_cmd=args.start_cmd,
                ready_cmd=args.ready_cmd))
            problems = provider.check_template(spec)
            if problems:
                where = Path(args.path)
                if await anyio.Path(where).is_dir():
                    where /= "Dockerfile"
                for problem in problems:
                    console.note(f"{where}: {problem}")
                raise CliError(f"the {provider.name} builder cannot build {spec.name!r} "
                               f"({len(problems)} problem{'s' if len(problems) > 1 else ''})")
            built: list[str] = []

            def progress(line: str) -> None:
                built.append(line)
                status.line(line)

            with console.build_status(spec.name, f"building {spec.name} on {provider.name}") \
                    as status:
                template = await provider.build_template(spec, force=args.force,
                                                         on_progress=progress)
            console.out(dump_json(template) if args.json else template.id)
            console.done(f"built template {template.id} on {provider.name}" if built else
                         f"template {template.id} on {provider.name} is up to date (unchanged)")
        elif args.action == "ls":
            _print(await provider.list_templates(), console, json_output=args.json)
        else:
            for template_id in args.ids:
                await provider.delete_template(template_id)
                console.done(f"removed template {template_id} on {provider.name}")
            if args.json:
                console.out(dump_json(args.ids))
    return 0


def _print(templates: list[Template], console: Console, *, json_output: bool) -> None:
    if json_output:
        console.out(dump_json([to_json(t) for t in templates]))
        return
    rows = [[t.id, t.name or "-", (t.content_hash or "-")[:12],
             t.created_at.strftime("%Y-%m-%d %H:%M") if t.created_at else "-"]
            for t in templates]
    for line in table(["ID", "NAME", "CONTENT", "CREATED"], rows):
        console.out(line)
