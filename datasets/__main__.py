"""Regenerate the shipped samples, or make larger ones: ``python -m datasets taxi --train-rows 1000000``."""

from __future__ import annotations

import argparse

from datasets import digits, linear, sequences, taxi


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m datasets")
    sub = parser.add_subparsers(dest="what", required=True)
    t = sub.add_parser("taxi", help="synthetic NYC taxi fares (train.parquet, eval.parquet)")
    t.add_argument("--out", default="datasets/taxi")
    t.add_argument("--train-rows", type=int, default=8000)
    t.add_argument("--eval-rows", type=int, default=3000)
    t.add_argument("--seed", type=int, default=0)
    d = sub.add_parser("digits", help="scikit-learn digits (train.parquet, test.parquet)")
    d.add_argument("--out", default="datasets/digits")
    q = sub.add_parser("sequences", help="variable-length sequences, last-step class labels (train, test)")
    q.add_argument("--out", default="datasets/sequences")
    r = sub.add_parser("linear", help="y = Xw + b + noise with known w and b (train, eval, truth.json)")
    r.add_argument("--out", default="datasets/linear")
    r.add_argument("--train-rows", type=int, default=4000)
    r.add_argument("--eval-rows", type=int, default=1000)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--noise-std", type=float, default=linear.NOISE_STD)
    args = parser.parse_args()
    if args.what == "taxi":
        taxi.write(args.out, args.train_rows, args.eval_rows, args.seed)
    elif args.what == "linear":
        linear.write(args.out, args.train_rows, args.eval_rows, args.seed, args.noise_std)
    elif args.what == "sequences":
        sequences.write(args.out)
    else:
        digits.write(args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
