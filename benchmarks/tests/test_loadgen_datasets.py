"""Datasets and arrival processes: seeded, reproducible, exact lengths, explicit range ratio."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from benchmarks.loadgen import (
    arrival_offsets, length_draws, prompts_file_dataset, random_dataset, scheduled_rate, sharegpt_dataset,
    text_calibration_fit,
)


def test_it_draws_exactly_l_for_range_ratio_zero() -> None:
    assert length_draws(n=50, length=1024, range_ratio=0.0, rng=random.Random(1)) == [1024] * 50


def test_it_draws_uniformly_within_l_times_one_plus_minus_r() -> None:
    draws = length_draws(n=20_000, length=1000, range_ratio=0.25, rng=random.Random(3))
    assert min(draws) == 750 and max(draws) == 1250
    assert sum(draws) / len(draws) == pytest.approx(1000, rel=0.01)


def test_it_rejects_a_range_ratio_outside_zero_one() -> None:
    with pytest.raises(ValueError):
        length_draws(n=1, length=10, range_ratio=1.5, rng=random.Random())


def test_it_builds_token_id_prompts_of_exact_length_reproducibly() -> None:
    a = random_dataset(num=10, input_len=64, output_len=32, seed=7)
    b = random_dataset(num=10, input_len=64, output_len=32, seed=7)
    assert [s.prompt for s in a] == [s.prompt for s in b]
    assert all(isinstance(s.prompt, list) and len(s.prompt) == 64 and s.input_len == 64 for s in a)
    assert random_dataset(num=1, input_len=64, output_len=32, seed=8)[0].prompt != a[0].prompt


def test_it_sizes_text_prompts_from_a_calibration() -> None:
    cal = text_calibration_fit([(64, 70), (512, 518)])
    assert (cal.overhead, cal.per_word) == pytest.approx((6.0, 1.0))
    specs = random_dataset(num=3, input_len=100, output_len=8, token_ids=False, calibration=cal, chat=True)
    assert all(len(str(s.prompt).split()) == 94 for s in specs)
    assert specs[0].messages == [{"role": "user", "content": specs[0].prompt}]


def test_it_reads_a_prompts_file_in_lines_and_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "p.txt"
    path.write_text('first prompt\n\n{"prompt": "second"}\n{"messages": [{"role": "user", "content": "third"}]}\n')
    specs = prompts_file_dataset(path=path, output_len=16, num=4, count_tokens=lambda s: len(s.split()))
    assert [s.prompt for s in specs] == ["first prompt", "second", "third", "first prompt"]
    assert specs[0].input_len == 2 and specs[2].messages == [{"role": "user", "content": "third"}]


def test_a_prompts_file_line_ends_at_newline_only(tmp_path: Path) -> None:
    # U+2028 and U+0085 may stand unescaped in a JSON string (json.dumps(..., ensure_ascii=False));
    # str.splitlines() would cut those lines in two
    path = tmp_path / "p.jsonl"
    lines = [json.dumps({"prompt": "a\u2028b"}, ensure_ascii=False), json.dumps({"prompt": "c\x85d"}, ensure_ascii=False),
             "plain\u2028text"]
    path.write_bytes(("\r\n".join(lines) + "\r\n").encode("utf-8"))
    specs = prompts_file_dataset(path=path, output_len=4)
    assert [s.prompt for s in specs] == ["a\u2028b", "c\x85d", "plain\u2028text"]


def test_it_reads_sharegpt_conversations(tmp_path: Path) -> None:
    path = tmp_path / "sg.json"
    path.write_text(json.dumps([
        {"conversations": [{"from": "human", "value": "hi there"}, {"from": "gpt", "value": "a b c d e f"}]},
        {"conversations": [{"from": "human", "value": "lonely"}]},
    ]))
    specs = sharegpt_dataset(path=path)
    assert len(specs) == 1
    assert (specs[0].prompt, specs[0].output_len) == ("hi there", 6)


def test_it_schedules_poisson_arrivals_at_the_requested_rate() -> None:
    offsets = arrival_offsets(n=20_001, rate=50.0, seed=2)
    assert offsets[0] == 0.0
    assert scheduled_rate(offsets) == pytest.approx(50.0, rel=0.03)
    assert offsets == arrival_offsets(n=20_001, rate=50.0, seed=2)


def test_it_makes_gamma_arrivals_burstier_below_one() -> None:
    import statistics
    steady = arrival_offsets(n=5001, rate=10.0, burstiness=1e6, seed=1)
    bursty = arrival_offsets(n=5001, rate=10.0, burstiness=0.2, seed=1)
    gaps = [b - a for a, b in zip(bursty, bursty[1:])]
    assert statistics.pstdev(gaps) / statistics.mean(gaps) == pytest.approx(5 ** 0.5, rel=0.1)
    assert steady[-1] == pytest.approx(500.0, rel=0.001)
