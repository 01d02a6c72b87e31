"""`mxidx bench`: the GPU-only command refuses a CPU machine clearly; its input builder runs on any device."""
from __future__ import annotations

import pytest
import torch
from click.testing import CliRunner

from tools.cli import main
from tools.cmd_bench import decode_inputs, prefill_inputs


def test_bench_without_gpu_exits_2(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = CliRunner().invoke(main, ["bench"])
    assert result.exit_code == 2
    assert "sees no GPU" in result.output and "mxidx diff --quick" in result.output


@pytest.mark.parametrize("kv_dtype,layout,bpt,q_bytes_per_head", [
    ("fp8", None, 64 + 4, 64),                  # e4m3 values + fp32 scale; q: D e4m3 bytes
    ("mxfp4", None, 32 + 2, 32 + 2),            # D/2 codes + D/32 E8M0; q the same per head
])
def test_decode_inputs_run_and_count_bytes(kv_dtype, layout, bpt, q_bytes_per_head, device):
    batch, next_n, heads, head_dim, context, page = 2, 2, 3, 64, 40, 16
    call, moved = decode_inputs(kv_dtype, device.type, batch=batch, next_n=next_n, heads=heads, head_dim=head_dim,
                                context=context, page_size=page, layout=layout)
    logits = call()
    assert logits.shape == (batch * next_n, context) and logits.dtype == torch.float32
    # 1-D context lens: row n of a sequence sees context - next_n + n + 1 keys (DESIGN §4)
    for n in range(next_n):
        visible = context - next_n + n + 1
        assert torch.isfinite(logits[n::next_n, :visible]).all()
    want = (batch * context * bpt + batch * next_n * heads * q_bytes_per_head + batch * next_n * heads * 4
            + batch * next_n * context * 4)
    assert moved == want


@pytest.mark.parametrize("kv_dtype", ["fp8", "mxfp4"])
@pytest.mark.parametrize("causal", [False, True])
def test_prefill_inputs_run_and_count_flops(kv_dtype, causal, device):
    queries, keys, heads, head_dim = 6, 9, 3, 64
    call, flops = prefill_inputs(kv_dtype, device.type, queries=queries, keys=keys, heads=heads, head_dim=head_dim,
                                 causal=causal)
    logits = call()
    assert logits.shape == (queries, keys)
    # causal: query i (the last `queries` of the keys' positions) sees keys j <= i + keys - queries
    visible = [i + 1 + keys - queries if causal else keys for i in range(queries)]
    for i, v in enumerate(visible):
        assert torch.isfinite(logits[i, :v]).all() and (logits[i, v:] == float("-inf")).all()
    assert flops == 2 * heads * head_dim * sum(visible)


def test_inputs_pass_the_variant_and_settings(device):
    """The bench's calls run the variant they are given, with the settings overrides (a bad field is refused)."""
    call, _ = decode_inputs("mxfp4", device.type, batch=1, next_n=1, heads=2, head_dim=64, context=20, page_size=16,
                            layout=None, variant="mxfp4_keys_m", launch_settings={"tiles": 1})
    assert call().shape == (1, 20)
    call, _ = prefill_inputs("fp8", device.type, queries=3, keys=3, heads=2, head_dim=32, causal=True,
                             variant="fp8_keys_m", launch_settings={"no_such_field": 1})
    with pytest.raises(TypeError, match="no_such_field"):
        call()



# (start clock, end clock, the card's maximum): the warnings expected at the start (stderr) and in the report
CLOCKS = {"full clock": (1980.0, 1975.0, 1980.0), "throttled": (283.0, 290.0, 1980.0),
          "throttled at the end": (1975.0, 283.0, 1980.0), "maximum unknown": (283.0, 283.0, None)}


@pytest.mark.parametrize("clocks", CLOCKS.values(), ids=CLOCKS.keys())
def test_bench_runs_every_variant_and_writes_json(monkeypatch, tmp_path, clocks):
    """The orchestration, with the GPU timings replaced by stand-ins: every decode / prefill / top-k variant of
    the GPU target is timed, the decode step, prefill at both sizes, the hook's prefill, top-k at both widths and
    over the hook's prefill rows; the JSON has them, and the SM clocks at the run's start and end, with a warning
    when they are far below the card's maximum."""
    import json

    from hw.targets import Op, Target
    from hw.variants import variants
    from tools import cmd_bench

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "stand-in GPU")
    monkeypatch.setattr(cmd_bench, "choose_device", lambda device: device)
    monkeypatch.setattr("hw.logits.scorer_target", lambda device: Target.NVIDIA)
    monkeypatch.setattr(cmd_bench, "_ceilings", lambda **kw: {"copy_GBps": 4000.0, "copy_ways_GBps": {"eager": 4000.0},
                                                              "bf16_TFLOPs": 700.0, "sm_clock_start_MHz": clocks[0],
                                                              "sm_clock_max_MHz": clocks[2]})
    monkeypatch.setattr(cmd_bench, "sm_clock_MHz", lambda: clocks[1])
    monkeypatch.setattr(cmd_bench, "decode_case", lambda kv_dtype, **kw: {
        "format": kv_dtype, "time_us": 20.0, "GBps": 3000.0, "MB_moved": 60.0, "variant_arg": kw["variant"]})
    monkeypatch.setattr(cmd_bench, "_prefill_case", lambda kv_dtype, **kw: {
        "format": kv_dtype, "time_us": 200.0, "TFLOPs": 700.0, "variant_arg": kw["variant"]})
    monkeypatch.setattr(cmd_bench, "_hook_prefill_case", lambda kv_dtype, **kw: {
        "format": kv_dtype, "time_us": 900.0, "device_us": 300.0, "host_us": 880.0})
    monkeypatch.setattr(cmd_bench, "_topk_case", lambda **kw: {**kw, "time_us": 40.0, "torch_topk_us": 60.0,
                                                               "vs_torch": 0.67})
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(main, ["bench", "--json-out", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    top = "" if clocks[2] is None else " of 1980"
    assert f"SM clock {clocks[0]:.0f} / {clocks[1]:.0f}{top} MHz (start / end)" in result.output
    assert report["ceilings"]["sm_clock_end_MHz"] == clocks[1]
    low_start, low_end = (clocks[2] is not None and c < 1000 for c in clocks[:2])
    # said at the start on stderr (CliRunner's output holds both streams), in the report and the JSON at the end
    assert ("MHz (at the start)" in result.output) == low_start
    assert ("MHz (start / end of the run)" in result.output) == (low_start or low_end)
    assert (report["throttle_warning"] is not None) == (low_start or low_end)
    decode = {r["variant_arg"] for r in report["decode"]}
    assert decode == {v.name for v in variants(Op.DECODE, target=Target.NVIDIA)}
    assert [r["variant"] for r in report["decode_step"]] == [
        f"{f} scorer + {o} top-k 2048" for f in ("fp8", "mxfp4") for o in ("column-order", "sorted")]
    assert all(r["vs_scorer"] == 1.0 for r in report["decode_step"])   # the stand-in times are equal
    assert {r["variant_arg"] for r in report["prefill"]} >= {v.name for v in variants(Op.PREFILL, target=Target.NVIDIA)}
    assert {r["queries"] for r in report["prefill"]} == {4096, 8192}
    assert {(r["format"], r["prompt"]) for r in report["hook_prefill"]} == {("fp8", 8192), ("mxfp4", 8192)}
    assert all(r["vs_fp8_causal_scorer"] == 900.0 / 200.0 for r in report["hook_prefill"])
    assert all(r["device_vs_fp8_causal_scorer"] == 300.0 / 200.0 for r in report["hook_prefill"])
    rows = [r for r in report["topk"] if not r.get("causal")]
    assert sorted((r["variant"], r["width"], r.get("sorted", True)) for r in rows) == sorted(
        [(v.name, w, True) for w in (8192, 131072) for v in variants(Op.TOPK, target=Target.NVIDIA)]
        + [("radix_fast", w, False) for w in (8192, 131072)])   # and the hook's form: column order
    causal = [r for r in report["topk"] if r.get("causal")]     # the hook's prefill rows, the default variant
    assert [(r["variant"], r["rows"], r["width"], r["sorted"]) for r in causal] == [
        ("radix_fast", 8192, 8192, True), ("radix_fast", 8192, 8192, False)]


def test_throttle_warning_names_the_clocks_and_the_maximum():
    """A clock under 3/4 of the card's maximum at either end of the run is flagged with both figures; none when the
    maximum is not known or both clocks reach it."""
    from tools.cmd_bench import throttle_warning

    warning = throttle_warning([283.0, 1900.0], 1980.0)
    assert warning.startswith("warning: the SM clock measured 283 / 1900 MHz (start / end of the run), 14% of this "
                              "card's 1980 MHz") and "do not represent" in warning
    assert throttle_warning([1900.0, 283.0], 1980.0) is not None                 # either end
    assert throttle_warning([1484.0], 1980.0, "at the start").startswith(
        "warning: the SM clock measured 1484 MHz (at the start), 75%")            # just under 3/4 of the maximum
    assert throttle_warning([1485.0, 1980.0], 1980.0) is None                    # at 3/4
    assert throttle_warning([283.0, 283.0], None) is None                        # the maximum not known
    assert throttle_warning([None, None], 1980.0) is None                        # clocks not measured (AMD)


@pytest.mark.gpu
def test_sm_clock_is_measured_below_the_cards_maximum():
    """The spin-timed clock is a clock: positive and not above the card's maximum by more than the timing's noise;
    NVML answers for the current device wherever nvidia-ml-py is installed on an NVIDIA machine."""
    import importlib.util

    from tools.cmd_bench import max_sm_clock_MHz, sm_clock_MHz

    clock, top = sm_clock_MHz(), max_sm_clock_MHz()
    assert clock > 0
    if importlib.util.find_spec("pynvml") is not None and not torch.version.hip:
        assert top is not None and clock <= 1.1 * top, (clock, top)
