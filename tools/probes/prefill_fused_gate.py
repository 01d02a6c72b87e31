"""Fused prefill scorer + top-k (an online bucket gate in the scorer instead of the logits store): is it worth it at
the hook's prompt of 8192 tokens? The gate's kernel is tools/probes/_fused_gate_kernel.py (a probe, not a variant).

    python3 -m tools.probes.prefill_fused_gate check              the gate keeps every row's top k (interpreter on
                                                                   the CPU, the GPU where there is one)
    python3 -m tools.probes.prefill_fused_gate bytes OUT.json     what the gate writes against the logits (NumPy)
    python3 -m tools.probes.prefill_fused_gate static OUT.json    registers, stack, SASS of the gated key loop
                                                                   against the shipped one (cross-compiled)
    python3 -m tools.probes.prefill_fused_gate time OUT.json      GPU: scorer + top-k against gated scorer + top-k
                                                                   of the candidates, outputs compared

`bytes` models the gate on N(0, 1) and ReLU'd rows of the causal prompt (row i sees i + 1 keys, k = 2048): keys in
column order, 64-key tiles, NB buckets over the row's true range (the best calibration a pre-pass could give),
th refreshed every R tiles. `time` calibrates each row the same way from the unfused logits, outside the timing.
"""
import json
import sys

import numpy as np

K, PROMPT, TILE = 2048, 8192, 64
#: the gated forms: (query tokens per program = MMA columns / 32 heads, pipeline stages, buckets, refresh tiles)
FORMS = {"q8_st3_r8": (8, 3, 256, 8), "q4_st3_r8": (4, 3, 256, 8), "q4_st2_r8": (4, 2, 256, 8),
         "q4_st3_r1": (4, 3, 256, 1), "q4_st3_r8_nb1024": (4, 3, 1024, 8)}


def admitted(row: np.ndarray, nb: int, refresh: int, k: int = K) -> int:
    """Entries the gate keeps from `row` (keys in column order, ideal calibration)."""
    o, span = float(row.min()), float(row.max() - row.min())
    b = np.minimum(((row - o) * (nb / max(span, 1e-30))).astype(np.int64), nb - 1)
    hist = np.zeros(nb, np.int64)
    th, n = -1, 0
    for t0 in range(0, len(row), TILE):
        kept = b[t0:t0 + TILE][b[t0:t0 + TILE] >= th]
        n += len(kept)
        np.add.at(hist, kept, 1)
        if (t0 // TILE) % refresh == refresh - 1:
            reach = np.nonzero(np.cumsum(hist[::-1])[::-1] >= k)[0]
            th = max(th, int(reach.max())) if len(reach) else th
    return n


def record_ratios(prompt: int, k: int = K) -> tuple[float, float]:
    """A causal prompt of `prompt` tokens (row i sees i + 1 keys) under an exact running threshold, which keeps about
    k (1 + ln(L / k)) entries of a row of L > k exchangeable values: (bytes the candidates take, 8 a kept entry,
    over the visible logits' 4 an entry; the traffic, the candidates written and their values read back, 12 a
    kept entry, over the logits written and read back, 8 an entry)."""
    lengths = np.arange(1, prompt + 1, dtype=np.float64)
    kept = np.where(lengths <= k, lengths, k * (1 + np.log(np.maximum(lengths, k) / k))).sum()
    return 8 * kept / (4 * lengths.sum()), 12 * kept / (8 * lengths.sum())


def bytes_model(out_path: str, prompt: int = PROMPT, samples: int = 24) -> dict:
    """The gate modelled on the causal prompt's rows (module docstring) -> the JSON written to out_path: what each
    form keeps and writes against the visible logits, and the record bound's ratios for longer prompts."""
    rng = np.random.default_rng(1)
    lengths = np.arange(1, prompt + 1)
    sample = np.unique(np.linspace(K + 1, prompt, samples).astype(int))
    logits_mb = 4 * lengths.sum() / 1e6              # the visible logits: written by the scorer, read by top-k
    exact_mb = 8 * np.minimum(lengths, K).sum() / 1e6
    result = {"prompt": prompt, "k": K, "visible_logits_MB": logits_mb, "exact_threshold_candidates_MB": exact_mb,
              "exact_threshold_traffic_over_logits": 1.5 * exact_mb / (2 * logits_mb), "forms": {},
              "record_bound_by_prompt": {P: dict(zip(("written", "traffic"), record_ratios(P)))
                                         for P in (8192, 16384, 32768, 65536, 131072)}}
    for dist in ("normal", "relu"):
        for nb, refresh in ((256, 1), (256, 8), (1024, 1), (4096, 1)):
            frac = {}
            for n in sample:
                row = rng.standard_normal(n).astype(np.float32)
                frac[int(n)] = admitted(np.maximum(row, 0) if dist == "relu" else row, nb, refresh) / n
            kept = np.interp(lengths, sample, [frac[int(n)] for n in sample])
            kept[lengths <= K] = 1.0
            cand_mb = 8 * (kept * lengths).sum() / 1e6              # value + column per kept entry
            result["forms"][f"{dist}/nb{nb}/r{refresh}"] = {
                "candidates_MB": cand_mb, "candidates_over_logits": cand_mb / logits_mb,
                "traffic_over_logits": 1.5 * cand_mb / (2 * logits_mb),
                "kept_fraction_of_the_longest_row": frac[int(sample[-1])],
                "online_record_bound": K * (1 + np.log(prompt / K)) / prompt}
            print(dist, nb, refresh, json.dumps(result["forms"][f"{dist}/nb{nb}/r{refresh}"]), flush=True)
    print("record bound by prompt:", json.dumps(result["record_bound_by_prompt"]), flush=True)
    with open(out_path, "w") as f:
        json.dump(result, f, indent=1)
    return result


def _gated_spec(target: str, block_q: int, stages: int, nb: int, refresh: int):
    from hw.isa_spec import CompileSpec
    from tools.probes import _fused_gate_kernel as g

    ptrs = {n: "*fp32" for n in ("k_s_ptr", "w_ptr", "o_ptr", "inv_ptr", "cand_v_ptr")}
    ptrs.update({n: "*u8" for n in ("q_v_ptr", "k_v_ptr")})
    ptrs.update({n: "*i32" for n in ("ks_ptr", "ke_ptr", "hist_ptr", "count_ptr", "cand_i_ptr")})
    return CompileSpec(
        label=f"fused_gate/q{block_q}/st{stages}/nb{nb}/r{refresh}", fn=g.gated_fp8_kernel, types=ptrs,
        constexprs=dict(H=32, H_PAD=32, D=128, BLOCK_Q=block_q, BLOCK_K=TILE, NUM_STAGES=stages, K_SEL=K,
                        CAP=PROMPT, NB=nb, REFRESH=refresh),
        num_warps=4, aligned=(*ptrs, "stride_qv_s", "stride_qv_h", "stride_kv_t", "stride_w_s", "SK"),
        targets=(target,))


def static(out_path: str) -> dict:
    """Registers, stack and instruction counts of the shipped FP8 prefill kernel (H32, D128) and the gated forms."""
    import dataclasses
    import os

    os.environ.pop("TRITON_INTERPRET", None)     # compiled, not run: run it in a fresh process, before hw's import
    from hw.variants import isa_specs

    rows = {}
    for target in ("sm90", "gfx950"):
        specs = [dataclasses.replace(spec, targets=(target,)) for spec in isa_specs()
                 if spec.label == "prefill_keys_m/fp8/mma/D128/H32" and target in spec.targets]
        specs += [_gated_spec(target, *form) for form in FORMS.values()]
        for spec in specs:
            row = _resources(spec, target)
            rows[f"{target}/{spec.label}"] = row
            print(target, spec.label, json.dumps(row), flush=True)
    with open(out_path, "w") as f:
        json.dump(rows, f, indent=1)
    return rows


def _resources(spec, target: str) -> dict:
    """tools.isa's reading of the compiled kernel (registers, spills, scratch, shared memory, occupancy), and on
    sm_90 the SASS instruction counts (all, and the MMAs, spill stores / loads, global atomics and stores, barriers)."""
    import collections
    import re
    import subprocess
    import tempfile

    import triton

    from tools import isa

    k = isa.analyze(spec, target)
    row = {**dict(k.registers), "spills": k.spills, "scratch_bytes": k.scratch_bytes,
           "shared_bytes": k.shared_bytes, "occupancy": k.occupancy}
    if target == "sm90":
        compiled, _ = isa.compile_spec(spec, target)
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
            f.write(compiled.asm["cubin"])
            f.flush()
            sass = subprocess.run([triton.knobs.nvidia.cuobjdump.path, "-sass", f.name], capture_output=True,
                                  text=True, check=True).stdout
        ops = collections.Counter(m.group(1).split(".")[0] for m in re.finditer(
            r"/\*[0-9a-f]{4,6}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", sass))
        row.update(sass=sum(ops.values()), **{op: ops[op] for op in ("QGMMA", "STL", "LDL", "REDG", "STG", "BAR")})
    return row


def _gated(inputs, block_q, stages, nb, refresh, o, inv, hist, count, cand_v, cand_i, k=K):
    """Launch the gate kernel on `inputs` (q_v, k_v, k_s, w, ks, ke), keeping each row's top k."""
    import triton

    from tools.probes import _fused_gate_kernel as g

    q_v, k_v, k_s, w, ks, ke = inputs
    S, H, D = q_v.shape
    hist.zero_()
    g.gated_fp8_kernel[(triton.cdiv(S, block_q),)](
        q_v, k_v, k_s, w, ks, ke, o, inv, hist, count, cand_v, cand_i, S, k_v.shape[0], q_v.stride(0),
        q_v.stride(1), k_v.stride(0), k_s.stride(0), w.stride(0), H=H, H_PAD=triton.next_power_of_2(H), D=D,
        BLOCK_Q=block_q, BLOCK_K=TILE, NUM_STAGES=stages, K_SEL=k, CAP=cand_v.shape[1],
        NB=nb, REFRESH=refresh, num_warps=4)


def _calibration(logits, ks, ke, nb):
    """The rows' bucket maps from their visible finite logits (min and max): o, inv fp32 [S]."""
    import torch

    cols = torch.arange(logits.shape[1], device=logits.device)
    seen = (cols[None, :] >= ks[:, None].long()) & (cols[None, :] < ke[:, None].long()) & torch.isfinite(logits)
    lo = torch.where(seen, logits, float("inf")).amin(1)
    hi = torch.where(seen, logits, float("-inf")).amax(1)
    lo = torch.where(torch.isfinite(lo), lo, 0.0)
    span = torch.where(torch.isfinite(hi), hi - lo, 0.0).clamp(min=1e-30)
    return lo.contiguous(), (nb / span).contiguous()


def _selected(cand_i, idx):
    """The columns of the candidates at places `idx` (top-k of the candidates; -1 stays -1)."""
    import torch

    return torch.where(idx >= 0, torch.gather(cand_i, 1, idx.clamp(min=0).long()), -1).to(torch.int32)


def check(device: str | None = None) -> None:
    """The gate on a small integer-valued prompt (every logit exact): the candidates are the scorer's own values
    at distinct visible columns, in column order, holding every row's top k with its ties; then the top-k of the
    candidates equals the top-k of the logits."""
    from tools.runtime import choose_device
    device = choose_device(device)
    import torch

    import hw

    rng = np.random.default_rng(0)
    S, SK, H, D, k, nb = 24, 700, 32, 64, 40, 64
    fp8 = lambda a: torch.from_numpy(a.astype(np.float32)).to(hw.logits.FP8_DTYPE).to(device)   # noqa: E731
    q, kv = fp8(rng.integers(-2, 3, (S, H, D))), fp8(rng.integers(-2, 3, (SK, D)))
    k_s = rng.choice([0.5, 1.0, 2.0], SK).astype(np.float32)
    k_s[rng.choice(SK, 30, replace=False)] = np.nan          # NaN columns (the lowest), +-inf and NaN ones
    k_s[rng.choice(SK, 30, replace=False)] = np.inf
    k_s[[2, 9, 17, 25]] = np.inf                             # -inf and +inf in the short row 1 (30 keys < k)
    k_s = torch.from_numpy(k_s).to(device)
    w = rng.choice([-1.0, 0.5, 1.0], (S, H)).astype(np.float32)
    w[1] = -1.0                                              # row 1's logits <= 0: its inf-scaled keys are -inf
    w = torch.from_numpy(w).to(device)
    ke = torch.from_numpy(np.minimum(np.arange(S) * 29 + 1, SK).astype(np.int32)).to(device)
    ks = torch.from_numpy(np.where(np.arange(S) % 5 == 4, 3, 0).astype(np.int32)).to(device)
    logits = hw.fp8_fp4_mqa_logits((q, None), (kv, k_s), w, ks, ke, clean_logits=True)
    want = hw.top_k_per_row(logits, ke, k, starts=ks, sorted=False)
    inputs = (q.view(torch.uint8), kv.view(torch.uint8), k_s, w, ks, ke)
    ref, lo, hi = logits.cpu().numpy(), ks.cpu().numpy(), ke.cpu().numpy()
    assert hi[1] - lo[1] < k and np.isneginf(ref[1, lo[1]:hi[1]]).any(), "the fixture's short row holds -inf"
    o, inv = _calibration(logits, ks, ke, nb)
    o_fine, inv_fine = _calibration(logits, ks, ke, 4096)
    # (buckets, map): calibrated, eight times coarser, with the lower half of the row below bucket 0, and fine
    # enough that the largest values have buckets of their own
    maps = {"x1": (nb, o, inv), "x1/8": (nb, o, inv / 8), "raised": (nb, o + nb / inv / 2, inv),
            "fine": (4096, o_fine, inv_fine)}
    for refresh in (1, 3):
        for name, (buckets, o_map, inv_map) in maps.items():
            hist = torch.empty((S, buckets + 1), dtype=torch.int32, device=device)
            count = torch.full((S,), -7, dtype=torch.int32, device=device)
            cand_v = torch.full((S, SK), float("nan"), device=device)
            cand_i = torch.full((S, SK), -5, dtype=torch.int32, device=device)
            _gated(inputs, 4, 1, buckets, refresh, o_map, inv_map, hist, count, cand_v, cand_i, k)
            n_all = count.cpu().numpy()
            for i in range(S):
                n, cols = int(n_all[i]), cand_i[i, :int(n_all[i])].cpu().numpy()
                assert 0 <= n <= hi[i] - lo[i], (i, n)
                assert np.all(np.diff(cols) > 0) and np.all((cols >= lo[i]) & (cols < hi[i])), i
                assert np.array_equal(cand_v[i, :n].cpu().numpy(), ref[i, cols], equal_nan=True), i
                row = ref[i, lo[i]:hi[i]]
                ordered = np.sort(row[~np.isnan(row)])[::-1]
                need = np.isnan(row) if len(ordered) < k else np.zeros(len(row), bool)   # NaN: only to fill k
                if len(ordered):
                    need |= row >= ordered[min(k, len(ordered)) - 1]
                assert set((np.nonzero(need)[0] + lo[i]).tolist()) <= set(cols.tolist()), i
            got = _selected(cand_i, hw.top_k_per_row(cand_v, count, k, sorted=False))
            assert torch.equal(got, want), (refresh, name)
            print(f"refresh {refresh} map {name}: kept {n_all.sum()} of {int((ke - ks).sum())} visible, "
                  f"largest row {n_all.max()} for k = {k}: top-k equal", flush=True)
    # every key the same vector, so a row's logits are its one head sum times the keys' scales: the first tile holds
    # k - 1 large values, a middle one and small ones, the second one value between the middle and the large ones
    # (the row's k-th largest in the end) and small ones: after the first tile the threshold may rise to the middle
    # value's bucket, not beyond
    SK = 2 * TILE
    scales = (0.01 * np.arange(1, SK + 1)).astype(np.float32)
    scales[:k - 1] = 100 + np.arange(k - 1)
    scales[k - 1], scales[TILE + 5] = 10.0, 20.0
    k_s = torch.from_numpy(scales).to(device)
    kv = fp8(np.ones((SK, D)))
    q, w = fp8(np.ones((4, H, D))), torch.ones((4, H), device=device)
    ks, ke = torch.zeros(4, dtype=torch.int32, device=device), torch.full((4,), SK, dtype=torch.int32, device=device)
    logits = hw.fp8_fp4_mqa_logits((q, None), (kv, k_s), w, ks, ke, clean_logits=True)
    o, inv = _calibration(logits, ks, ke, 4096)
    count = torch.empty(4, dtype=torch.int32, device=device)
    cand_v = torch.empty((4, SK), device=device)
    cand_i = torch.empty((4, SK), dtype=torch.int32, device=device)
    _gated((q.view(torch.uint8), kv.view(torch.uint8), k_s, w, ks, ke), 4, 1, 4096, 1, o, inv,
           torch.empty((4, 4097), dtype=torch.int32, device=device), count, cand_v, cand_i, k)
    got = _selected(cand_i, hw.top_k_per_row(cand_v, count, k, sorted=False))
    assert torch.equal(got, hw.top_k_per_row(logits, ke, k, starts=ks, sorted=False)), "the crafted rows"
    assert int(count[0]) == TILE + 1, int(count[0])   # the whole first tile, the second tile's one
    print(f"crafted rows: kept {int(count[0])} of {SK} for k = {k}: top-k equal", flush=True)


def time(out_path: str) -> None:
    """The causal prompt (8192 and 4096 tokens, H32 / D128, FP8): the shipped scorer (clean_logits False, as the
    hook runs it) + column-order top-k of its rows, against each gated form + column-order top-k of the candidates
    + the columns gathered; each piece alone too; two rounds in opposite orders; each gated form's output compared
    with the unfused one on the same tile."""
    from tools.runtime import choose_device
    choose_device("cuda")
    import torch
    import triton

    from tools.timing import graph_time_us

    rows = []
    for prompt in (PROMPT, PROMPT // 2):
        rows += _time_prompt(prompt, "cuda", lambda fn: graph_time_us([fn], inner=3, replays=10))
        torch.cuda.empty_cache()
    with open(out_path, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
                   "rows": rows}, f, indent=1)


def _time_prompt(prompt: int, device: str, timer) -> list:
    """The rows of `time` for one prompt; timer(fn) -> us."""
    import torch

    import hw

    gen = torch.Generator(device=device).manual_seed(0)
    q_vals, w = hw.quantize_q_fp8(torch.randn(prompt, 32, 128, device=device, generator=gen).to(torch.bfloat16),
                                  torch.randn(prompt, 32, device=device, generator=gen))
    k_vals, k_sc = hw.quantize_q_fp8(torch.randn(prompt, 1, 128, device=device, generator=gen).to(torch.bfloat16),
                                     torch.ones(prompt, 1, device=device))
    kv = (k_vals[:, 0], k_sc[:, 0].contiguous())
    ks = torch.zeros(prompt, dtype=torch.int32, device=device)
    ke = torch.arange(1, prompt + 1, dtype=torch.int32, device=device)
    logits = hw.fp8_fp4_mqa_logits((q_vals, None), kv, w, ks, ke, clean_logits=False)
    inputs = (q_vals.view(torch.uint8), kv[0].view(torch.uint8), kv[1], w, ks, ke)
    count = torch.empty(prompt, dtype=torch.int32, device=device)
    cand_v = torch.empty((prompt, prompt), device=device)
    cand_i = torch.empty((prompt, prompt), dtype=torch.int32, device=device)

    def scorer():
        return hw.fp8_fp4_mqa_logits((q_vals, None), kv, w, ks, ke, clean_logits=False)

    def topk():
        return hw.top_k_per_row(logits, ke, K, starts=ks, sorted=False)

    def unfused():
        return hw.top_k_per_row(scorer(), ke, K, starts=ks, sorted=False)

    def top_of_candidates():
        return _selected(cand_i, hw.top_k_per_row(cand_v, count, K, sorted=False))

    def reference(block_q):
        """The unfused top-k with the scorer on the gate's tile (the head sums' order follows the tile)."""
        tiled = hw.fp8_fp4_mqa_logits((q_vals, None), kv, w, ks, ke, clean_logits=False,
                                      launch_settings={"block_q": block_q, "h_pad": 32, "block_k": TILE,
                                                       "num_warps": 4})
        return hw.top_k_per_row(tiled, ke, K, starts=ks, sorted=False)

    pieces = {"scorer": scorer, "topk": topk, "scorer+topk": unfused}
    rows = []
    for name, (block_q, stages, nb, refresh) in FORMS.items():
        o, inv = _calibration(logits, ks, ke, nb)
        hist = torch.empty((prompt, nb + 1), dtype=torch.int32, device=device)

        def gate(form=(block_q, stages, nb, refresh), o=o, inv=inv, hist=hist):
            _gated(inputs, *form, o, inv, hist, count, cand_v, cand_i, K)

        def fused(gate=gate):
            gate()
            return top_of_candidates()

        pieces[f"{name}/gate"] = gate
        pieces[f"{name}/gate+topk"] = fused
        rows.append({"prompt": prompt, "form": name, "output_equal": torch.equal(fused(), reference(block_q)),
                     "kept": int(count.sum()), "visible": int((ke - ks).sum()), "longest": int(count.max())})
        print(json.dumps(rows[-1]), flush=True)
    for r in range(2):
        for name, fn in (list(pieces.items()) if r == 0 else list(pieces.items())[::-1]):
            rows.append({"prompt": prompt, "piece": name, "round": r,
                         "time_us": timer(fn)})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    modes = {"check": lambda: check(), "bytes": lambda: bytes_model(argv[1]), "static": lambda: static(argv[1]),
             "time": lambda: time(argv[1])}
    if not argv or argv[0] not in modes or (argv[0] != "check" and len(argv) < 2):
        raise SystemExit(__doc__)
    modes[argv[0]]()


if __name__ == "__main__":
    main()
