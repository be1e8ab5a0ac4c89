"""The sim engine's profiles, cost formulas and tokenizer (no processes)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from deployments.engines.simcore.profile import ProfileError, profile_load
from deployments.engines.simcore.text import (
    CHAT_TOKENS_PER_MESSAGE,
    CHAT_TOKENS_PRIMING,
    chat_prompt,
    natural_length,
    output_token,
    prompt_digest,
    text_token_count,
)

REPO = Path(__file__).resolve().parents[2]


def test_it_fits_the_seed_single_and_pd_c1_rows_by_formula() -> None:
    prof = profile_load("seed-sm120-fallback")
    prefill_256 = prof.prefill.batch_time_s(256)
    step_1 = prof.decode.step_time_s(1, 384)
    transfer_256 = prof.kv_transfer.fixed_s + prof.kv_transfer.wire_time_s(256)
    assert prefill_256 == pytest.approx(0.696, rel=0.01)  # single-node TTFT
    assert step_1 == pytest.approx(0.094, rel=0.01)  # TPOT at bs = 1
    assert prefill_256 + transfer_256 + step_1 == pytest.approx(0.893, rel=0.01)  # PD c=1 TTFT
    assert 8 * 512 <= prof.decode.kv_capacity_tokens < 16 * 512  # c=8 fits, c=16 retracts
    assert set(prof.derivation) >= {"prefill.max_batch_tokens", "decode.kv_capacity_tokens", "kv_transfer.bytes_per_token"}


def test_it_resolves_extends_for_the_single_node_profile() -> None:
    base = profile_load("seed-sm120-fallback")
    tp4 = profile_load("seed-sm120-fallback-tp4")
    assert tp4.name == "seed-sm120-fallback-tp4"
    assert tp4.prefill == base.prefill and tp4.decode == base.decode
    assert tp4.hardware == "4x sm_120 GPUs, TP4, single server"
    assert list(tp4.derivation) == ["all"]


def test_it_names_the_bad_field_of_a_profile(tmp_path: Path) -> None:
    raw = json.loads((REPO / "deployments/data/sim_profiles/demo-fast.json").read_text())
    raw["decode"]["kv_capacity_tokens"] = 0
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(ProfileError, match="decode.kv_capacity_tokens must be >= 1"):
        profile_load(str(path))
    del raw["decode"]["per_seq_s"]
    path.write_text(json.dumps(raw))
    with pytest.raises(ProfileError, match="decode.per_seq_s is missing"):
        profile_load(str(path))
    with pytest.raises(ProfileError, match="unknown profile 'nope'.*seed-sm120-fallback"):
        profile_load("nope")
    with pytest.raises(ProfileError, match="may hold only"):
        profile_load("..$x")


def test_it_exits_2_on_an_unknown_profile() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "deployments.engines.sim_server", "--role", "single", "--port", "1",
         "--model-name", "m", "--profile", "missing-profile"],
        cwd=REPO, capture_output=True, text=True, timeout=30,
    )
    assert proc.returncode == 2
    assert "unknown profile 'missing-profile'" in proc.stderr


def test_it_counts_tokens_in_four_character_chunks() -> None:
    assert text_token_count("") == 0
    assert text_token_count("a bb cccc") == 3
    assert text_token_count("abcde   fghijklmn") == 2 + 3
    generated = "".join(output_token(prompt_digest("x", 0), i)[1] for i in range(50))
    assert text_token_count(generated) == 50  # output fed back counts exactly
    text, tokens = chat_prompt([{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi there"}])
    assert tokens == CHAT_TOKENS_PRIMING + 2 * CHAT_TOKENS_PER_MESSAGE + (1 + 2) + (1 + 2)
    assert text == "system: be brief\nuser: hi there"
    with pytest.raises(ValueError):
        chat_prompt([])


def test_it_places_the_pseudo_eos_deterministically_by_seed() -> None:
    a = natural_length(prompt_digest("same prompt", 7), 8, 255)
    assert a == natural_length(prompt_digest("same prompt", 7), 8, 255)
    lengths = {natural_length(prompt_digest("same prompt", seed), 8, 255) for seed in range(20)}
    assert len(lengths) > 5 and min(lengths) >= 8 and max(lengths) <= 255
