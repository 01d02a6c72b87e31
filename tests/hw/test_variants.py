"""hw.variants.DEFAULTS: every (op, target, format) has a default under this triton, every row names a variant
of its op and format, the conditional rows apply by their conditions, and `mxidx variants` prints the table."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from click.testing import CliRunner

import hw.variants as hv
from hw._logits_details import paged_keys_m_wgmma
from hw._topk_details.radix_fast import FAST_MAX_WIDTH
from hw.targets import Op, Target
from tools.cli import main

FORMATS = {Op.DECODE: ("fp8", "mxfp4"), Op.PREFILL: ("fp8", "mxfp4"), Op.TOPK: (None,)}


def test_every_row_names_a_variant_of_its_op_and_format():
    for row in hv.DEFAULTS:
        named = [v for v in hv.REGISTRY[row.op] if v.name == row.variant]
        assert named, f"{row}: no {row.op.value} variant named {row.variant!r}"
        assert named[0].kv_dtype == row.kv_dtype, f"{row}: {row.variant} takes {named[0].kv_dtype} inputs"
        assert row.why, f"{row}: say why it is the default"
        assert bool(row.condition) == (row.applies is not None), f"{row}: a condition in words and as a predicate"


@pytest.mark.parametrize("target", list(Target), ids=lambda t: t.value)
@pytest.mark.parametrize("op", list(Op), ids=lambda o: o.value)
def test_a_default_for_every_format_on_every_target(op, target):
    for kv_dtype in FORMATS[op]:
        rows = hv.defaults(op, target, kv_dtype)
        assert rows and not rows[-1].condition, f"{op.value}/{target.value}/{kv_dtype}: the last row is unconditional"
        chosen = hv.select(op, target, kv_dtype)
        assert chosen.runs_on(target) and chosen.name in [r.variant for r in rows if not r.condition]


def test_wide_rows_take_per_row_on_nvidia():
    def call(width):
        return SimpleNamespace(logits=SimpleNamespace(shape=(4, width)))
    assert hv.select(Op.TOPK, Target.NVIDIA, call=call(FAST_MAX_WIDTH)).name == "radix_fast"
    assert hv.select(Op.TOPK, Target.NVIDIA, call=call(FAST_MAX_WIDTH + 1)).name == "per_row"
    assert hv.select(Op.TOPK, Target.NVIDIA).name == "radix_fast"     # no call: the unconditional row


def test_mxfp4_decode_on_nvidia_takes_the_tl_fold_where_gluon_does_not_run_the_call(monkeypatch):
    call = SimpleNamespace(out=object())
    for takes, name in ((True, "mxfp4_keys_m_wgmma"), (False, "mxfp4_keys_m")):
        monkeypatch.setattr(paged_keys_m_wgmma, "takes", lambda c, takes=takes: takes)
        assert hv.select(Op.DECODE, Target.NVIDIA, "mxfp4", call=call).name == name
    # a CPU tensor's call is not an sm_90 launch: the Gluon kernel does not take it
    monkeypatch.undo()
    cpu_call = SimpleNamespace(out=torch.empty(1), head_dim=128, next_n=1, num_heads=32, tiled=False,
                               q_v=torch.empty(64, 1), cap=8192)
    assert not paged_keys_m_wgmma.takes(cpu_call)
    assert hv.select(Op.DECODE, Target.NVIDIA, "mxfp4", call=cpu_call).name == "mxfp4_keys_m"


def test_mxidx_variants_prints_the_table():
    everywhere = CliRunner().invoke(main, ["variants", "--all", "--device", "cpu"])
    assert everywhere.exit_code == 0, everywhere.output
    for row in hv.DEFAULTS:
        lines = [ln for ln in everywhere.output.splitlines()
                 if ln.split()[:4] == [row.op.value, row.target.value, row.kv_dtype or "-", row.variant]]
        when = row.condition or ("otherwise" if any(r.condition for r in hv.defaults(row.op, row.target,
                                                                                      row.kv_dtype)) else "always")
        assert any(ln.endswith(when) or when in ln for ln in lines), f"no line for {row}: {lines}"
    here = CliRunner().invoke(main, ["variants", "--device", "cpu"])
    assert here.exit_code == 0 and "this machine: interpreter" in here.output
    table = here.output.split("registered variants")[0].splitlines()[2:]
    targets = {ln.split()[1] for ln in table if ln.split()[:1] in (["decode"], ["prefill"], ["topk"])}
    assert targets == {"interpreter"}, table
    for op, registered in hv.REGISTRY.items():
        for v in registered:
            assert f"{op.value:8s} {v.name:26s}" in here.output


def test_every_registered_variant_is_a_default_somewhere():
    """A variant that is the default nowhere is deleted (its numbers stay in docs/perf, its code in git history)."""
    named = {(row.op, row.variant) for row in hv.DEFAULTS}
    nowhere = [f"{op.value}/{v.name}" for op, registered in hv.REGISTRY.items() for v in registered
               if (op, v.name) not in named]
    assert not nowhere, f"variants that are the default nowhere: {nowhere}"


def test_every_variants_settings_share_one_schema():
    """Every registered variant's settings, on every target it runs on, are a LaunchSettings record: its fields
    replace by name, and a name it lacks is a TypeError that lists the fields it has."""
    from hw._topk_details.variants import TopKCall
    from hw.targets import LaunchSettings

    scorer = SimpleNamespace(num_heads=32, next_n=1, page_size=64, head_dim=128)
    topk = TopKCall(torch.zeros(2, 64), torch.full((2,), 64, dtype=torch.int32), None,
                    torch.empty(2, 16, dtype=torch.int32))
    checked = 0
    for op, registered in hv.REGISTRY.items():
        for v in registered:
            for target in sorted(v.targets, key=lambda t: t.value):
                settings = v.settings(target, topk if op is Op.TOPK else scorer)
                assert isinstance(settings, LaunchSettings), (v.name, target, type(settings))
                first = settings.field_names()[0]
                assert settings.replace(**{first: getattr(settings, first)}) == settings
                with pytest.raises(TypeError, match=f"no field 'no_such_field'; its fields: {first}, "):
                    settings.replace(no_such_field=1)
                checked += 1
    assert checked >= sum(len(r) for r in hv.REGISTRY.values())
