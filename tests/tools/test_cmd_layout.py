"""`mxidx layout`: the byte map and boundary report, --json, verification of saved caches, exit codes 0/1/2."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from sim import fp8, layout, mxfp4
from sim.layout import PageGeometry
from tools.cli import main

ACCEPTANCE = ["--kv-dtype", "mxfp4", "--page-size", "64", "--head-dim", "128", "--page-stride", "1077120",
              "--num-pages", "5000"]


def run(*args):
    return CliRunner().invoke(main, ["layout", *map(str, args)])


def test_acceptance_boundary_report():
    r = run(*ACCEPTANCE)
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    for boundary, page in (("2,147,483,648", 1994), ("4,294,967,296", 3988), ("4,608,000,000", 4279)):
        line = next(ln for ln in lines if ln.strip().startswith(boundary + ":"))
        assert f"page {page} " in line, line
    assert "68 per token" in r.stdout and "4,352 per page" in r.stdout


def test_json_matches_the_library():
    r = run(*ACCEPTANCE, "--layout", "mxfp4_tiled", "--view-offset", 4096, "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    geom = PageGeometry("mxfp4", 64, 128, 5000, 1077120, "mxfp4_tiled", 4096)
    assert d["geometry"]["layout"] == "mxfp4_tiled" and d["pool_bytes"] == geom.pool_bytes == 4096 + d["view_bytes"]
    assert [b["first_page"] for b in d["boundaries"]] == [1994, 3988, 4279]
    assert [r["name"] for r in d["regions"]] == ["values", "scales", "gap"]
    for e in d["examples"]:
        want = (layout.value_offset(geom, e["t"], e["d"]) if e["kind"] == "value"
                else layout.scale_offset(geom, e["t"], e["g"]))
        assert e["byte"] == int(want), e
    assert d["verify"] is None and d["block_table"] is None


def test_block_table_pages_crossing(tmp_path):
    table = tmp_path / "bt.npy"
    np.save(table, np.array([[1, 1994, 4000, -1], [3988, 4279, 99999, 5000]], np.int32))
    r = run(*ACCEPTANCE, "--block-table", table, "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["block_table"] == {"pages": 5, "out_of_range_entries": 3}
    assert [b["touched_pages"] for b in d["boundaries"]] == [[1994, 3988, 4000, 4279], [3988, 4000, 4279], [4279]]
    text = run(*ACCEPTANCE, "--block-table", table).stdout
    assert "pages at or past 4,608,000,000: 1 (4279)" in text


def saved_cache(tmp_path, *, hazard=None, num_pages=6, view_offset=32, stride=2240):
    """A .npy pool with canonical MXFP4 tokens in half the slots (rest 0xFF), optionally one planted hazard."""
    rng = np.random.default_rng(0)
    geom = PageGeometry("mxfp4", 32, 128, num_pages, page_stride=stride, view_offset=view_offset)
    pool = layout.new_pool(geom)
    slots = rng.permutation(num_pages * 32)[: num_pages * 16]
    layout.write_tokens(pool, geom, slots, *mxfp4.quantize(rng.standard_normal((slots.size, 128)).astype(np.float32)))
    if hazard is not None:
        page, t = divmod(int(slots[0]), 32)
        pool[view_offset + page * stride + int(layout.scale_offset(geom, t, 2))] = hazard
    path = tmp_path / "cache.npy"
    np.save(path, pool)
    return path, geom, (page, t) if hazard is not None else None


GEOM_ARGS = ["--kv-dtype", "mxfp4", "--page-size", 32, "--head-dim", 128, "--page-stride", 2240,
             "--view-offset", 32]


def test_verify_clean_cache(tmp_path):
    path, geom, _ = saved_cache(tmp_path)
    r = run(*GEOM_ARGS, "--cache", path)      # --num-pages inferred from the file size
    assert r.exit_code == 0, r.output
    assert "verify: 6 pages, 192 token slots (96 unwritten" in r.stdout and "  clean" in r.stdout
    assert "verifying" in r.stderr and "verifying" not in r.stdout


@pytest.mark.parametrize("byte, kind", [(255, "nan_scale_block"), (0, "zero_scale_nonzero_block")])
def test_verify_planted_hazard_exits_1(tmp_path, byte, kind):
    path, geom, (page, t) = saved_cache(tmp_path, hazard=byte)
    r = run(*GEOM_ARGS, "--num-pages", 6, "--cache", path, "--json")
    assert r.exit_code == 1, r.output
    v = json.loads(r.stdout)["verify"]
    assert v["hazards"] == 1 and not v["clean"]
    assert v["first_hazard"] == {"kind": kind, "page": page, "token": t, "index": 2}
    text = run(*GEOM_ARGS, "--cache", path)
    assert text.exit_code == 1 and f"first: {kind} at page {page}, token {t}, group 2" in text.stdout


def test_verify_only_block_table_pages(tmp_path):
    path, geom, (page, _) = saved_cache(tmp_path, hazard=255)
    table = tmp_path / "bt.npy"
    np.save(table, np.array([(page + 1) % 6, (page + 2) % 6, 2**31 - 1], np.int64))
    r = run(*GEOM_ARGS, "--cache", path, "--block-table", table)
    assert r.exit_code == 0, r.output
    assert "verify: 2 pages" in r.stdout and "1 out-of-range block-table entries skipped" in r.stdout


def test_verify_pt_cache_view(tmp_path):
    """A .pt 4-D cache view keeps its pool placement: stride, offset and page count come from the view."""
    torch = pytest.importorskip("torch")
    path, geom, (page, t) = saved_cache(tmp_path, hazard=0)
    pool = torch.from_numpy(np.load(path))
    view = torch.as_strided(pool, (6, 32, 1, 68), (2240, 68, 68, 1), 32)
    torch.save(view, tmp_path / "view.pt")
    r = run("--kv-dtype", "mxfp4", "--page-size", 32, "--head-dim", 128, "--cache", tmp_path / "view.pt", "--json")
    assert r.exit_code == 1, r.output
    d = json.loads(r.stdout)
    assert (d["geometry"]["page_stride"], d["geometry"]["view_offset"], d["geometry"]["num_pages"]) == (2240, 32, 6)
    assert d["verify"]["first_hazard"]["page"] == page
    bad = run("--kv-dtype", "mxfp4", "--page-size", 32, "--head-dim", 128, "--page-stride", 4352,
              "--cache", tmp_path / "view.pt")
    assert bad.exit_code == 2 and "--page-stride 4352 disagrees with the saved cache view's 2240" in bad.output


@pytest.mark.parametrize("args, message", [
    (["--kv-dtype", "mxfp4", "--page-size", 48, "--head-dim", 128, "--num-pages", 2], "page_size must be one of"),
    (["--kv-dtype", "mxfp4", "--page-size", 64, "--head-dim", 80, "--num-pages", 2], "head_dim must be"),
    (["--kv-dtype", "mxfp4", "--layout", "mxfp4_tiled", "--page-size", 64, "--head-dim", 64, "--num-pages", 2],
     "mxfp4_tiled needs head_dim"),
    (["--kv-dtype", "fp8", "--layout", "mxfp4", "--page-size", 64, "--head-dim", 128, "--num-pages", 2],
     "layout 'mxfp4' is not valid"),
    (["--kv-dtype", "mxfp4", "--page-size", 64, "--head-dim", 128, "--num-pages", 2, "--page-stride", 100],
     "page_stride must be"),
    (["--kv-dtype", "mxfp4", "--page-size", 64, "--head-dim", 128, "--num-pages", 2, "--view-offset", 3],
     "view_offset must be"),
    (["--kv-dtype", "mxfp4", "--page-size", 64, "--head-dim", 128], "--num-pages is required without --cache"),
    (["--kv-dtype", "mxfp4", "--page-size", 64, "--head-dim", 128, "--cache", "/nonexistent/x.npy"],
     "--cache: cannot open /nonexistent/x.npy: No such file or directory"),
    (["--kv-dtype", "mxfp4", "--page-size", 64, "--head-dim", 128, "--num-pages", 2, "--block-table",
      "/nonexistent/bt.npy"], "--block-table: cannot read"),
])
def test_bad_input_exits_2_with_one_line(args, message):
    r = run(*args)
    assert r.exit_code == 2, r.output
    assert r.stdout == "" and message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "Traceback" not in r.output


def test_bad_files_exit_2(tmp_path):
    floats = tmp_path / "f.npy"
    np.save(floats, np.zeros(10, np.float32))
    r = run(*GEOM_ARGS, "--cache", floats)
    assert r.exit_code == 2 and "--cache: " in r.stderr and "uint8" in r.stderr
    r = run(*GEOM_ARGS, "--num-pages", 2, "--block-table", floats)
    assert r.exit_code == 2 and "--block-table: " in r.stderr and "integer array" in r.stderr
    cube = tmp_path / "cube.npy"
    np.save(cube, np.zeros((2, 2, 2), np.int32))
    r = run(*GEOM_ARGS, "--num-pages", 2, "--block-table", cube)
    assert r.exit_code == 2 and "must be [max_pages] or [batch, max_pages], got shape [2, 2, 2]" in r.stderr
    small = tmp_path / "small.npy"
    np.save(small, np.zeros(5000, np.uint8))
    r = run(*GEOM_ARGS, "--num-pages", 6, "--cache", small)
    assert r.exit_code == 2 and "--cache holds 5,000 bytes" in r.stderr
    r = run(*GEOM_ARGS, "--cache", tmp_path / "junk.npy")
    assert r.exit_code == 2


@pytest.mark.parametrize("args", [["--kv-dtype", "mxfp5", "--page-size", 64, "--head-dim", 128],
                                  ["--kv-dtype", "mxfp4", "--page-size", "x", "--head-dim", 128],
                                  ["--kv-dtype", "mxfp4", "--head-dim", 128]])
def test_click_usage_errors_exit_2(args):
    r = run(*args)
    assert r.exit_code == 2 and "Traceback" not in r.output


@pytest.mark.parametrize("geometry_args, view_strides, view_offset, message", [
    (["--page-size", 32, "--head-dim", 64], (2240, 68, 68, 1), 32, "--head-dim 64 gives 34 bytes per token"),
    (["--page-size", 16, "--head-dim", 128], (2240, 68, 68, 1), 32, "--page-size 16 disagrees with the saved cache"),
    (["--page-size", 32, "--head-dim", 128], (2240, 69, 69, 1), 0, "stride(1) == bytes_per_token"),
])
def test_pt_cache_view_must_match_the_geometry(tmp_path, geometry_args, view_strides, view_offset, message):
    """A 4-D view [num_pages, P, 1, bytes_per_token] (DESIGN §8) whose P, token size or token stride disagree
    with the options would be decoded as garbage: exit 2 naming the option instead."""
    torch = pytest.importorskip("torch")
    path, _, _ = saved_cache(tmp_path)
    pool = torch.from_numpy(np.load(path))
    view = torch.as_strided(pool, (6, 32, 1, 68), view_strides, view_offset)
    torch.save(view, tmp_path / "view.pt")
    r = run("--kv-dtype", "mxfp4", *geometry_args, "--cache", tmp_path / "view.pt")
    assert r.exit_code == 2, r.output
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_verify_fp8_cache(tmp_path):
    """FP8 pools through the CLI: canonical writer output is clean (exit 0); one NaN value byte -> exit 1."""
    rng = np.random.default_rng(1)
    geom = PageGeometry("fp8", 16, 64, 4, page_stride=1152)
    pool = layout.new_pool(geom)
    slots = rng.permutation(64)[:40]
    x = rng.standard_normal((40, 64)).astype(np.float32)
    layout.write_tokens(pool, geom, slots, *fp8.quantize(x))
    np.save(tmp_path / "fp8.npy", pool)
    args = ["--kv-dtype", "fp8", "--page-size", 16, "--head-dim", 64, "--page-stride", 1152]
    r = run(*args, "--cache", tmp_path / "fp8.npy", "--json")
    assert r.exit_code == 0, r.output
    v = json.loads(r.stdout)["verify"]
    assert v["clean"] and v["tokens"] == 64 and v["unwritten_tokens"] == 24
    page, t = divmod(int(slots[7]), 16)
    pool[page * 1152 + int(layout.value_offset(geom, t, 5))] = 0xFF
    np.save(tmp_path / "fp8.npy", pool)
    r = run(*args, "--cache", tmp_path / "fp8.npy")
    assert r.exit_code == 1, r.output
    assert f"first: fp8_nan_value at page {page}, token {t}, element 5" in r.stdout


def _garbage(path):
    path.write_bytes(bytes(range(256)) * 2)


def _truncated_npy(path):
    np.save(path, np.zeros(100_000, np.uint8))
    path.write_bytes(path.read_bytes()[:5000])


def _fortran_npy(path):
    np.save(path, np.asfortranarray(np.zeros((64, 100), np.uint8)))


def _object_npy(path):
    np.save(path, np.array([{"a": 1}], dtype=object), allow_pickle=True)


def _truncated_pt(path):
    import torch
    torch.save(torch.zeros(1000, dtype=torch.uint8), path)
    path.write_bytes(path.read_bytes()[:300])


class _NotATensor:
    pass


def _object_pt(path):
    import torch
    torch.save(_NotATensor(), path)


@pytest.mark.parametrize("name, make, message", [
    ("garbage.npy", _garbage, "is not a .npy file (it does not start with NumPy's header)"),
    ("truncated.npy", _truncated_npy, "is truncated: shorter than its .npy header says"),
    ("fortran.npy", _fortran_npy, "holds a Fortran-ordered 2-D array, so its bytes are not in pool order"),
    ("objects.npy", _object_npy, "holds Python objects, not bytes"),
    ("garbage.pt", _garbage, "is not a torch.save file (not a zip archive)"),
    ("truncated.pt", _truncated_pt, "is a damaged or truncated torch.save file"),
    ("objects.pt", _object_pt, "holds Python objects other than tensors"),
])
def test_unreadable_cache_files_say_what_is_wrong(tmp_path, name, make, message):
    """Each file problem gets one line about the file, none of numpy's or torch's internals."""
    path = tmp_path / name
    make(path)
    r = run(*GEOM_ARGS, "--cache", path)
    assert r.exit_code == 2, r.output
    assert r.stderr.startswith(f"Error: --cache: {path} {message}") and len(r.stderr.strip().splitlines()) == 1
    for internal in ("allow_pickle", "weights_only", "miniz", "mmap length", "Traceback"):
        assert internal not in r.output
