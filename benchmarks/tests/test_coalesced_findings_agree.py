"""A llama.cpp sweep (one sequence at a time on a CPU; every point flagged ``itl_coalesced`` and
``tokens_estimated``) gets findings that agree on which metrics they use: throughput as measured,
TTFT (the time to the first streamed read, which follows the wait for admission and prefill) for
queueing, mean TPOT for the decode fit, never ITL, and never TTFT's share of E2E for the bottleneck.
The inputs are the demo's llama.cpp sweep as the sweep service builds its points."""
from benchmarks.analysis import ANALYSIS_VERSION, LatencyStats, SweepPoint, ceiling_analyse

FLAGS = ["itl_coalesced", "tokens_estimated"]


def _pt(c: int, tok_s: float, ttft_ms: float, tpot_ms: float, flags=FLAGS) -> SweepPoint:
    return SweepPoint(concurrency=c, output_throughput_tok_s=tok_s, ttft_ms=LatencyStats(mean=ttft_ms, p50=ttft_ms),
                      tpot_ms=LatencyStats(mean=tpot_ms), input_len=256, output_len=64, flags=list(flags))


DEMO = [_pt(1, 385.2, 28.4, 2.5), _pt(8, 337.3, 2400.0, 2.9), _pt(16, 391.3, 4810.0, 2.4)]


def test_every_finding_of_a_coalesced_sweep_names_the_metrics_it_uses():
    r = ceiling_analyse(DEMO, num_gpus=1, topology="single", gpus_known=False)
    assert r.bottleneck == "unknown"
    assert r.findings == [
        "The decode step-time fit is not possible: 2 distinct running batch sizes; at least 3 are needed for a line "
        "whose quality can be judged.",
        "The bottleneck cannot be classified: the output events of every point came grouped into network reads "
        "(itl_coalesced: c=1, c=8, c=16), so their TTFT may hold decode time and their E2E cannot be split into "
        "prefill and decode.",
        "Throughput plateaus at 337-391 tok/s from c=1: going to c=16 (x16.0 load) changes it by +2% "
        "(385 -> 391 tok/s).",
        "The ceiling is about 391 tok/s (observed at c=16); 90% of it is reached by c=1.",
        "Queueing from c=1 to c=8: mean TTFT grows x84.5 while throughput changes x0.88 (x8.0 load). Queueing is "
        "judged on TTFT and throughput only; at c=1, c=8, c=16, whose output events came grouped into network reads "
        "(itl_coalesced), TTFT is the time to the first read, which still counts the wait for admission and prefill.",
        "c=1, c=8 and c=16 are flagged (itl_coalesced, tokens_estimated); their output events came grouped into "
        "network reads (itl_coalesced), so their ITL times the reads, not decode steps, and is not used. Used as "
        "measured: their throughput (tokens_estimated: output tokens counted from the streamed events, the server "
        "gave no count); their TTFT, the time to the first read, for queueing, since a request's wait for admission "
        "and prefill all comes before that read; their mean TPOT, first to last read over the tokens, for the decode "
        "fit. Not used: TTFT's share of E2E for the bottleneck, since a first read may hold tokens decoded after the "
        "first, so that share is no prefill time.",
    ]
    text = " ".join(r.findings)
    # none of the sentences the findings used to contradict each other with
    assert "not used for the bottleneck." not in text and "time network reads, not prefill and decode" not in text


def test_one_coalesced_point_among_timed_ones_is_left_out_of_the_bottleneck_only():
    timed = [_pt(1, 100.0, 50.0, 10.0, flags=[]), _pt(4, 300.0, 80.0, 13.0, flags=[])]
    r = ceiling_analyse([*timed, _pt(8, 310.0, 900.0, 25.0, flags=["itl_coalesced"])], num_gpus=1,
                        topology="single", gpus_known=False)
    text = " ".join(r.findings)
    assert ("c=8 is left out of the bottleneck: its output events came grouped into network reads (itl_coalesced), "
            "so its TTFT may hold decode time and its E2E cannot be split into prefill and decode.") in text, text
    assert ("c=8 is flagged (itl_coalesced); its output events came grouped into network reads (itl_coalesced), so "
            "its ITL times the reads, not decode steps, and is not used. Used as measured: its throughput; its TTFT, "
            "the time to the first read, for queueing") in text, text
    assert [s for s in r.findings if s.startswith("Queueing from c=4 to c=8")][0].endswith(
        "at c=8, whose output events came grouped into network reads (itl_coalesced), TTFT is the time to the first "
        "read, which still counts the wait for admission and prefill."), r.findings


def test_the_analysis_version_was_bumped_for_the_new_sentences():
    assert ANALYSIS_VERSION >= 7
