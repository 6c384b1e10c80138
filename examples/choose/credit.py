"""A credit-limit pricing model: LightGBM on synthetic applicant data (nothing is downloaded).

    python examples/choose/credit.py --out out/choose/credit

writes ``credit.pkl`` (a fitted ``LGBMRegressor``: 12 features -> a credit limit) and ``credit.csv`` (held-out
applicants, one row each, header = feature names), the SOURCE and ``--data`` of
``servelab select out/choose/credit/credit.pkl --data out/choose/credit/credit.csv --sla-p99-ms 50 --min-throughput 1000``.
The published SLA for this use is P99 < 50 ms at > 1,000 requests/s.
"""

from __future__ import annotations

import argparse
import csv
import pickle
from pathlib import Path

import numpy as np

FEATURES = (
    "income_k", "debt_k", "age", "tenure_years", "utilisation", "delinquencies", "open_accounts",
    "inquiries_6m", "months_since_default", "employment_years", "housing_cost_k", "savings_k",
)  # fmt: skip
SEED = 0


def applicants(n: int, seed: int = SEED) -> np.ndarray:
    """``n`` synthetic applicants, float32 [n, 12], with realistic ranges and correlations."""
    rng = np.random.default_rng(seed)
    income = rng.lognormal(3.9, 0.5, n)
    debt = income * rng.uniform(0.0, 1.2, n)
    age = rng.integers(19, 80, n).astype(float)
    tenure = np.minimum(age - 18, rng.exponential(6.0, n))
    util = rng.beta(2, 5, n)
    delinq = rng.poisson(0.3, n).astype(float)
    accounts = rng.integers(1, 15, n).astype(float)
    inquiries = rng.poisson(1.0, n).astype(float)
    since_default = np.where(delinq > 0, rng.integers(1, 120, n), 240).astype(float)
    employment = np.minimum(age - 18, rng.exponential(8.0, n))
    housing = income * rng.uniform(0.1, 0.4, n)
    savings = income * rng.exponential(0.5, n)
    cols = (income, debt, age, tenure, util, delinq, accounts, inquiries, since_default, employment, housing, savings)
    return np.stack(cols, axis=1).astype(np.float32)


def credit_limit(x: np.ndarray, seed: int = SEED) -> np.ndarray:
    """The 'true' limit the model learns (currency units), with noise."""
    rng = np.random.default_rng(seed + 1)
    income, debt, _, tenure, util, delinq, _, inquiries, _, employment, housing, savings = x.T
    score = 0.35 * income - 0.25 * debt + 1.5 * tenure - 20 * util - 8 * delinq - 2 * inquiries
    score += 0.8 * employment - 0.3 * housing + 0.1 * savings
    return np.clip(5_000 + 400 * score + rng.normal(0, 1_500, len(x)), 500, 150_000).astype(np.float32)


def build(out: Path, train_rows: int = 20_000, data_rows: int = 5_000, trees: int = 200) -> tuple[Path, Path]:
    import lightgbm as lgb

    out.mkdir(parents=True, exist_ok=True)
    x = applicants(train_rows)
    model = lgb.LGBMRegressor(n_estimators=trees, num_leaves=31, learning_rate=0.05, verbose=-1, random_state=SEED)
    model.fit(x, credit_limit(x))
    model_path = out / "credit.pkl"
    with model_path.open("wb") as f:
        pickle.dump(model, f)
    data_path = out / "credit.csv"
    with data_path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(FEATURES)
        writer.writerows(applicants(data_rows, seed=SEED + 7).tolist())
    return model_path, data_path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out/choose/credit"))
    parser.add_argument("--trees", type=int, default=200)
    args = parser.parse_args()
    model, data = build(args.out, trees=args.trees)
    print(f"model: {model}\ndata: {data}")


if __name__ == "__main__":
    main()
