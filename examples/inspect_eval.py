"""An Inspect eval whose samples run in provider-sdk sandboxes, offline.

The solver asks the model (Inspect's ``mockllm/model``, answering offline), then
counts the words of the sample's text with ``wc`` inside the sample's sandbox, through
``sandbox()``; the scorer checks the count. Each sample gets a sandbox of its own,
killed when the sample ends.

The one field that picks the backend is ``provider`` (``local``, ``docker``, ``e2b``,
``cube``, ``daytona``); unset, it is ``PSDK_PROVIDER``, then ``psdk.toml``, then
``local``. Each provider reads its own settings (``E2B_API_KEY``, ...). Run it with
Inspect's command line::

    inspect eval examples/inspect_eval.py -T provider=docker

or as a script, which prints one JSON object with the scores::

    python examples/inspect_eval.py --provider docker
"""

from __future__ import annotations

import argparse
import json
import tempfile

from inspect_ai import Task, eval, task
from inspect_ai.dataset import Sample
from inspect_ai.model import ChatMessage, GenerateConfig, ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import match
from inspect_ai.solver import Generate, Solver, TaskState, solver
from inspect_ai.util import sandbox
from provider_sdk_inspect import PsdkConfig

TEXTS = {
    "one two three": "3",
    "the quick brown fox jumps over the lazy dog": "9",
    "sandboxes": "1",
}


def mock_answer(input: list[ChatMessage], tools: object, tool_choice: object,
                config: GenerateConfig) -> ModelOutput:
    """The mock model's turn. Its usage is given, so Inspect counts no tokens (which
    would fetch a tokenizer over the network)."""
    output = ModelOutput.from_content(model="mockllm", content="Let the sandbox count.")
    output.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
    return output


@solver
def count_words_in_sandbox() -> Solver:
    """Ask the model, then let the sandbox count: the answer is ``wc -w``'s."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        state = await generate(state)
        box = sandbox()
        await box.write_file("input.txt", state.input_text)
        result = await box.exec(["wc", "-w", "input.txt"])
        if not result.success:
            raise RuntimeError(f"wc failed: {result.stderr}")
        state.output.completion = result.stdout.split()[0]
        return state

    return solve


@task
def word_count(provider: str | None = None) -> Task:
    """Count words in a sandbox; ``provider`` picks the backend."""
    return Task(
        dataset=[Sample(input=text, target=count) for text, count in TEXTS.items()],
        solver=count_words_in_sandbox(),
        scorer=match(),
        model=get_model("mockllm/model", custom_outputs=mock_answer),
        sandbox=("psdk", PsdkConfig(provider=provider)),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--provider", help="the provider (default: PSDK_PROVIDER, ...)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as logs:
        [log] = eval(word_count(args.provider), log_dir=logs, display="none")
    assert log.results is not None
    scores = {m: v.value for s in log.results.scores for m, v in s.metrics.items()}
    print(json.dumps({"provider": args.provider, "status": log.status,
                      "samples": log.results.completed_samples, "scores": scores}))


if __name__ == "__main__":
    main()
