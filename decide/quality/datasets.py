"""The shared public sets (`LABEL text` a line) as labelled JSONL, with a chosen question wording.

    python -m decide.quality.datasets trec /work/shared/data/TREC.train.all --wording 0 --split dev -o trec-dev.jsonl
    python -m decide.quality.datasets all /work/shared/data -o build/eval    # every task, wording and split

The dev split is carved out of the given file: a seeded permutation, its first `--dev-size`
examples are `dev`, the rest `train` (same seed, same carve). Wordings are generic questions a
user might ask, several per task, to check that a method holds across wordings.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

TREC_OPTIONS = [
    ("description", "a definition, description, manner or reason"),
    ("entity", "a thing: an object, animal, color, event, product, term, ..."),
    ("abbreviation", "an abbreviation or what one stands for"),
    ("human", "a person, group or organization"),
    ("location", "a place: city, country, mountain, ..."),
    ("number", "a number: count, date, amount, distance, ..."),
]
SENTIMENT_LEVELS = [
    ["very negative", "negative", "neutral", "positive", "very positive"],
    ["terrible", "bad", "mixed", "good", "excellent"],
    ["1", "2", "3", "4", "5"],
]

WORDINGS: dict[str, list[dict]] = {
    "trec": [
        {
            "type": "choice",
            "instructions": "What kind of answer does this question ask for?",
            "criteria": dict(TREC_OPTIONS),
        },
        {
            "type": "choice",
            "instructions": "Classify the question by the type of its expected answer.",
            "criteria": dict(TREC_OPTIONS),
        },
        {
            "type": "choice",
            "instructions": "Which category best describes what the question is asking about?",
            "criteria": {k: None for k, _ in TREC_OPTIONS},
        },
    ],
    "sst2": [
        {"type": "noul", "instructions": "Is this review positive?"},
        {"type": "noul", "instructions": "Does the writer like the movie?"},
        {
            "type": "noul",
            "instructions": "The sentiment of this text is positive.",
            "criteria": {"true": "positive", "false": "negative"},
        },
    ],
    "sst5": [
        {"type": "score", "instructions": "How positive is this review?", "criteria": SENTIMENT_LEVELS[0]},
        {"type": "score", "instructions": "Rate the sentiment of this text.", "criteria": SENTIMENT_LEVELS[1]},
        {
            "type": "score",
            "instructions": "How much did the reviewer like the film, from 1 to 5?",
            "criteria": SENTIMENT_LEVELS[2],
        },
    ],
}
QUESTION_ID = {"trec": "answer_type", "sst2": "positive", "sst5": "sentiment"}
SOURCES = {"trec": "TREC.train.all", "sst2": "stsa.binary.train", "sst5": "stsa.fine.train"}
TRAIN_LIMIT = 1000


def read_lines(path: Path) -> list[tuple[int, str]]:
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:  # TREC's file is Latin-1
        text = raw.decode("latin-1")
    rows = []
    for line in text.splitlines():
        label, _, text = line.strip().partition(" ")
        if text:
            rows.append((int(label), text))
    return rows


def carve(rows: list, split: str, dev_size: int, seed: int) -> list:
    order = np.random.default_rng(seed).permutation(len(rows))
    picked = order[:dev_size] if split == "dev" else order[dev_size:]
    return [rows[i] for i in picked]


def record(task: str, wording: int, label: int, text: str) -> dict:
    question = WORDINGS[task][wording]
    if task == "trec":
        value = TREC_OPTIONS[label][0]
    elif task == "sst2":
        value = bool(label)
    else:
        value = label
    qid = QUESTION_ID[task]
    return {"state": text, "questions": {qid: question}, "labels": {qid: value}}


def write_jsonl(rows: list, task: str, wording: int, output: Path | None) -> None:
    lines = [json.dumps(record(task, wording, y, x), ensure_ascii=False) for y, x in rows]
    text = "\n".join(lines) + "\n"
    if output:
        output.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)


def write_all(data: Path, out: Path, dev_size: int, seed: int) -> None:
    """Every task x wording x split: TASK-wW-dev.jsonl and TASK-wW-train.jsonl (the first TRAIN_LIMIT)."""
    out.mkdir(parents=True, exist_ok=True)
    for task, source in SOURCES.items():
        rows = read_lines(data / source)
        for wording in range(len(WORDINGS[task])):
            for split in ("dev", "train"):
                picked = carve(rows, split, dev_size, seed)[: dev_size if split == "dev" else TRAIN_LIMIT]
                write_jsonl(picked, task, wording, out / f"{task}-w{wording}-{split}.jsonl")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("task", choices=[*sorted(WORDINGS), "all"])
    parser.add_argument("source", type=Path, help="a `LABEL text` file of /work/shared/data (for all: the folder)")
    parser.add_argument("--wording", type=int, default=0, help="which question wording (0, 1, 2)")
    parser.add_argument("--split", choices=("dev", "train"), default="dev")
    parser.add_argument("--dev-size", type=int, default=200, help="examples carved out as dev")
    parser.add_argument("--limit", type=int, default=None, help="keep the first N of the split")
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("-o", "--output", type=Path, default=None, help="JSONL file (default: stdout); all: a folder")
    args = parser.parse_args(argv)
    if args.task == "all":
        write_all(args.source, args.output or Path("build/eval"), args.dev_size, args.seed)
        return 0
    if not 0 <= args.wording < len(WORDINGS[args.task]):
        parser.error(f"--wording must be 0..{len(WORDINGS[args.task]) - 1} for {args.task}")
    rows = carve(read_lines(args.source), args.split, args.dev_size, args.seed)[: args.limit]
    write_jsonl(rows, args.task, args.wording, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
