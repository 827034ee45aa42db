"""How fast a user script's text lines become metric records, beside the
built-in trainer's JSON lines, in one process (the console's metric reader
on a cluster reads every pod's log this way).

256 ranks' lines, round-robin, in the common formats with torchrun's
``[rankN]:`` prefix, go through ``RankedText`` (prefix, rank, text parse);
the same number of schema-1 JSON lines go through ``parse_metric_lines``.
We print lines/s for each, their ratio, and the slowest 1,000-line batch
(what one monitor tick would wait). Target: >= 50,000 text lines/s, so the
monitor keeps its figures (benchmarks/monitor_ingest.py) on user code.

    .venv/bin/python benchmarks/text_metrics.py [--lines 500000] [--ranks 256] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from host import calibration  # noqa: E402

from torchdeck.backends.events import parse_metric_lines  # noqa: E402
from torchdeck.trainer.textmetrics import RankedText  # noqa: E402

FORMATS = (
    "epoch {e} step {s}/100000 loss: {l:.4f} 1234 samples/s",
    "Epoch: [{e}][{s}/391]  Time  0.412 ( 0.430)  Loss {l:.4e} ({l:.4e})  Acc@1  41.41 ( 38.20)",
    "| epoch {e:3d} | {s:5d}/ 2983 batches | lr 5.00 | ms/batch 12.3 | loss {l:5.2f} | ppl 1234.5",
    "{{'loss': {l:.4f}, 'learning_rate': 4.9e-05, 'epoch': {e}.0}}",
    "[{e}, {s:5d}] loss: {l:.3f}",
    "INFO 2026-11-23 rendezvous complete, nothing to read here",
)


def lines(count: int, ranks: int) -> tuple[list[tuple[int, bytes]], list[bytes]]:
    text, js = [], []
    for i in range(count):
        rank, step = i % ranks, i // ranks + 1
        fmt = FORMATS[i % len(FORMATS)]
        body = fmt.format(e=1 + step // 1000, s=step, l=2.0 / (1 + step * 0.001))
        text.append((rank // 8, f"[rank{rank}]:{body}".encode()))
        record = {"schema": 1, "event": "step", "rank": rank, "time": 1.0 + i, "epoch": 1, "step": step,
                  "loss": 2.0 / step, "samples_per_s": 1234.0}  # fmt: skip
        js.append(json.dumps(record).encode())
    return text, js


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lines", type=int, default=500_000)
    p.add_argument("--ranks", type=int, default=256)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    text, js = lines(args.lines, args.ranks)
    reader = RankedText(nproc_per_node=8, world_size=args.ranks, program="train.py")
    worst, records = 0.0, 0
    t0 = time.perf_counter()
    for start in range(0, len(text), 1000):
        b0 = time.perf_counter()
        for node, raw in text[start : start + 1000]:
            records += len(reader.read(node, raw, 0.0)[2])
        worst = max(worst, time.perf_counter() - b0)
    text_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    events = sum(len(parse_metric_lines(js[i : i + 1000])) for i in range(0, len(js), 1000))
    json_s = time.perf_counter() - t0
    result = {
        "lines": args.lines,
        "ranks": args.ranks,
        "text_lines_per_s": round(args.lines / text_s),
        "text_records": records,
        "json_lines_per_s": round(args.lines / json_s),
        "json_events": events,
        "text_vs_json": round(json_s / text_s, 3),
        "worst_1000_line_batch_ms": round(worst * 1000, 2),
    }
    result["host"] = calibration()
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:28s} {value}")
        print("target: text_lines_per_s >= 50000:", "met" if result["text_lines_per_s"] >= 50_000 else "NOT met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
