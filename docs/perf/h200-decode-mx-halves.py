"""MXFP4 decode at 128 query columns (next_n 2 x H 64, next_n 4 x H 32) on the H200: the `tl` fold `mxfp4_keys_m`
with the key tile's query columns as two MMA chains of whole tokens (paged_keys_m.KeysMSettings.halves) under its
register cap (MX_HALVES_MAXNREG), the same halves without the cap, and one MMA chain over all 128 columns, each at
the grid's default tiles, and the shipped rule (halves with the cap, but on grids of at most one program per SM);
beside them the sm_90 MXFP4 default `mxfp4_keys_m_wgmma` (the Gluon kernel where it takes the grid, else the `tl`
fold under the shipped rule) and FP8 `fp8_keys_m`. Timed like `mxidx bench` times the decode scorer (median of
CUDA-graph replays over 4 rotating input sets), two rounds alternating the forms, against the copy bandwidth of the
same run; the logits of the halves (capped) and of one MMA compared on the first input set over the columns every
query row sees (the others are unspecified without clean_logits): bit equality, the largest difference over the
entries finite in both, and the count of entries finite in only one. Command:
PYTHONPATH=. python3 docs/perf/h200-decode-mx-halves.py OUT.json
"""
import json
import sys

import torch
import triton

from hw._logits_details import paged_keys_m as km
from hw._logits_details import paged_keys_m_wgmma as wgmma
from hw.targets import Target, sm_count
from tools.cmd_bench import INPUT_SETS, _copy_GBps, _graph_time_us, decode_inputs
from tools.runtime import choose_device

#: (batch, context, next_n, heads)
SHAPES = [(64, 2048, 2, 64), (1, 131072, 2, 64), (8, 8192, 2, 64), (16, 8192, 2, 64), (4, 32768, 2, 64),
          (64, 8192, 2, 64), (256, 8192, 2, 64), (8, 2048, 2, 64), (1, 32768, 2, 64), (64, 8192, 4, 32)]
COMMON = dict(head_dim=128, page_size=64, layout=None)
#: the forms of mxfp4_keys_m, as launch_settings ({}: the shipped rule)
FORMS = {"shipped": {}, "halves": {"halves": True, "maxnreg": km.MX_HALVES_MAXNREG},
         "halves_uncapped": {"halves": True, "maxnreg": None}, "one_mma": {"halves": False, "maxnreg": None}}
ROUNDS = 2


def _inputs(kv_dtype: str, variant: str, shape: dict, setting: dict | None = None):
    """INPUT_SETS input sets of `variant`; `setting`: the launch_settings dict every call reads (changed in place
    between timings, so that the sets are built once for every form)."""
    return [decode_inputs(kv_dtype, "cuda", seed=i, variant=variant, launch_settings=setting, **shape, **COMMON)
            for i in range(INPUT_SETS)]


def _time(sets) -> float:
    return round(_graph_time_us([call for call, _ in sets], inner=20, replays=20), 2)


def main(out_path: str) -> None:
    choose_device("cuda")
    copy = _copy_GBps(inner=5, replays=20)["copy_GBps"]
    sms = sm_count(torch.device("cuda"))
    rows = []
    for batch, context, next_n, heads in SHAPES:
        shape = dict(batch=batch, context=context, next_n=next_n, heads=heads)
        s = km.keys_m_settings(Target.NVIDIA, "mxfp4", heads, next_n, COMMON["page_size"], path="fold",
                               grid=(batch, context, sms))
        pages = triton.cdiv(context, COMMON["page_size"])
        columns = triton.next_power_of_2(next_n) * triton.next_power_of_2(heads)
        row = {**shape, "programs": batch * triton.cdiv(pages, s.tiles * s.tile_pages), "tiles": s.tiles,
               "shipped_halves": s.halves, "shipped_maxnreg": s.maxnreg,
               "gluon_takes_grid": wgmma.takes_grid(batch, context, columns, sms)}
        setting = {}
        fold = _inputs("mxfp4", "mxfp4_keys_m", shape, setting)
        bytes_moved = fold[0][1]
        logits = {}
        for name in ("halves", "one_mma"):
            setting.clear()
            setting.update(FORMS[name])
            logits[name] = fold[0][0]().clone()
        references = {"mxfp4_keys_m_wgmma": _inputs("mxfp4", "mxfp4_keys_m_wgmma", shape),
                      "fp8_keys_m": _inputs("fp8", "fp8_keys_m", shape)}
        for _ in range(ROUNDS):
            for name, form in FORMS.items():
                setting.clear()
                setting.update(form)
                row.setdefault(f"{name}_us", []).append(_time(fold))
            for name, sets in references.items():
                row.setdefault(f"{name}_us", []).append(_time(sets))
        row["halves_frac_copy"] = bytes_moved / min(row["halves_us"]) / 1e3 / copy
        seen = context - (next_n - 1)
        on, off = logits["halves"][:, :seen], logits["one_mma"][:, :seen]
        both = torch.isfinite(on) & torch.isfinite(off)
        row.update(bit_equal=bool(torch.equal(on.view(torch.int32), off.view(torch.int32))),
                   max_abs_diff=(on[both] - off[both]).abs().max().item() if both.any() else 0.0,
                   finite_in_one=int((torch.isfinite(on) != torch.isfinite(off)).sum()))
        rows.append(row)
        print(json.dumps(row), flush=True)
        with open(out_path, "w") as f:
            json.dump({"copy_GBps": copy, "common": COMMON, "forms": FORMS, "rows": rows}, f, indent=1)
        del fold, references, logits
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1])
