"""merge_statistics: several processes' model_stats rows read as one server's (``--processes``)."""

from __future__ import annotations

from servelab.core.stats import ModelStats, merge_statistics


def _stats(name: str, requests: int, batch: int, ns: int) -> ModelStats:
    s = ModelStats(name, 1)
    for _ in range(requests):
        s.record_request(True, ns)
        s.record_queue(ns // 10)
        s.record_execution(batch, 1, 1, ns, 2)
    return s


def test_rows_of_the_same_version_are_summed_and_batches_matched_by_size() -> None:
    a, b = _stats("m", 3, 1, 1000), _stats("m", 2, 4, 500)
    b.record_request(False, 7)
    a_row, b_row = a.as_dict(), b.as_dict()
    b_row["last_inference"] = a_row["last_inference"] + 5
    [row] = merge_statistics([[a_row], [b_row]])
    assert row["name"] == "m" and row["version"] == "1"
    assert row["inference_count"] == 3 * 1 + 2 * 4 and row["execution_count"] == 5
    assert row["inference_stats"]["success"] == {"count": 5, "ns": 3 * 1000 + 2 * 500}
    assert row["inference_stats"]["fail"] == {"count": 1, "ns": 7}
    assert row["inference_stats"]["queue"] == {"count": 5, "ns": 3 * 100 + 2 * 50}
    assert row["last_inference"] == b_row["last_inference"]  # the latest, not a sum
    assert [(r["batch_size"], r["compute_infer"]["count"]) for r in row["batch_stats"]] == [(1, 3), (4, 2)]


def test_a_row_only_one_process_has_is_kept_and_the_first_process_order_stands() -> None:
    first = [_stats("b", 1, 1, 10).as_dict(), _stats("a", 1, 1, 10).as_dict()]
    second = [_stats("a", 2, 1, 10).as_dict(), _stats("c", 1, 1, 10).as_dict()]
    rows = merge_statistics([first, second])
    assert [r["name"] for r in rows] == ["b", "a", "c"]
    assert [r["inference_count"] for r in rows] == [1, 3, 1]


def test_one_process_is_its_own_figures() -> None:
    row = _stats("m", 2, 2, 40).as_dict()
    assert merge_statistics([[row]]) == [row]
