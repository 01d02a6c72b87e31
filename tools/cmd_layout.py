"""`mxidx layout`: describe a cache geometry (page byte map, sizes, boundary report) and verify a saved cache.

Exit status: 0 clean, 1 hazards found in --cache, 2 bad input (one line naming the argument).
The logic lives in sim.layout, sim.addressing and sim.verify; this module parses, loads files and prints.
"""
from __future__ import annotations

import json
import pickle
import sys
from dataclasses import asdict

import click
import numpy as np

from sim.addressing import INT31, UINT32, boundary_report
from sim.layout import KV_DTYPES, LAYOUTS, PageGeometry, page_regions, scale_offset, value_offset
from sim.verify import verify_cache

from .runtime import BadInput

EXIT_HAZARDS = 1
_PROGRESS_STEPS = 1000
_BOUNDARY_NOTES = {INT31: "int32 byte offsets wrap negative from here",
                   UINT32: "32-bit (buffer) offsets wrap from here"}
_DEFAULT_NOTE = "first failing offset reported in production"


_NPY_MAGIC = b"\x93NUMPY"          # the first bytes of every np.save file
_ZIP_MAGIC = b"PK\x03\x04"         # torch.save writes a zip archive
_SAVE_HINT = "save the pool with np.save(path, pool) (a C-ordered uint8 array) or torch.save(uint8_tensor, path)"


def _file_start(path: str, n: int) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(n)
    except OSError as e:
        raise BadInput(f"--cache: cannot open {path}: {e.strerror or e}") from None


def _load_cache(path: str):
    """A saved pool -> (flat uint8 array, geometry hints from a .pt cache view or {}). BadInput, saying what is
    wrong with the file, for anything that is not a saved uint8 pool."""
    if path.endswith(".pt"):
        return _load_pt(path)
    if _file_start(path, len(_NPY_MAGIC)) != _NPY_MAGIC:
        raise BadInput(f"--cache: {path} is not a .npy file (it does not start with NumPy's header); {_SAVE_HINT}")
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as e:
        if "Python objects" in str(e) or "allow_pickle" in str(e):   # an object array
            raise BadInput(f"--cache: {path} holds Python objects, not bytes; {_SAVE_HINT}") from None
        if "mmap length" in str(e):  # the header promises more data than the file has
            raise BadInput(f"--cache: {path} is truncated: shorter than its .npy header says; save it again") \
                from None
        raise BadInput(f"--cache: {path} has a damaged .npy header; save it again") from None
    except (OSError, EOFError) as e:
        raise BadInput(f"--cache: cannot read {path}: {e}") from None
    if arr.dtype != np.uint8:
        raise BadInput(f"--cache: {path} holds a {arr.dtype} array; the pool must be uint8 bytes; {_SAVE_HINT}")
    if not arr.flags.c_contiguous:
        raise BadInput(f"--cache: {path} holds a Fortran-ordered {arr.ndim}-D array, so its bytes are not in pool "
                       f"order; save np.ascontiguousarray(pool) (or the flat pool) instead")
    return arr.reshape(-1), {}


def _load_pt(path: str):
    try:
        import torch  # only for .pt files: `mxidx layout` stays torch-free otherwise
    except ImportError:
        raise BadInput(f"--cache: reading {path} needs torch; save the pool with np.save instead") from None
    if _file_start(path, len(_ZIP_MAGIC)) != _ZIP_MAGIC:
        raise BadInput(f"--cache: {path} is not a torch.save file (not a zip archive); {_SAVE_HINT}")
    try:
        t = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:   # weights_only refuses anything but tensors and plain containers
        raise BadInput(f"--cache: {path} holds Python objects other than tensors; save a uint8 tensor") from None
    except (OSError, RuntimeError, EOFError, ValueError):
        raise BadInput(f"--cache: {path} is a damaged or truncated torch.save file; save it again") from None
    if not isinstance(t, torch.Tensor) or t.dtype != torch.uint8:
        raise BadInput(f"--cache: {path} must hold a uint8 tensor, got {getattr(t, 'dtype', type(t).__name__)}")
    if t.dim() != 4:
        return t.contiguous().reshape(-1).numpy(), {}
    # A 4-D cache view [num_pages, P, 1, bytes_per_token] into a pool: verify it where it lies in the pool.
    if t.shape[2] != 1 or t.stride(1) != t.shape[3] or t.stride(3) != 1:
        raise BadInput(f"--cache: the saved cache view must be [num_pages, P, 1, bytes_per_token] with "
                       f"stride(1) == bytes_per_token and stride(3) == 1 (DESIGN §8), got shape "
                       f"{list(t.shape)}, strides {list(t.stride())}")
    storage = t.untyped_storage()
    flat = torch.empty(0, dtype=torch.uint8).set_(storage, 0, (storage.nbytes(),)).numpy()
    return flat, {"num_pages": t.shape[0], "page_stride": t.stride(0), "view_offset": t.storage_offset(),
                  "page_size": t.shape[1], "bytes_per_token": t.shape[3]}


def _load_block_table(path: str) -> np.ndarray:
    try:
        table = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        raise BadInput(f"--block-table: cannot read {path}: {e}") from None
    if not isinstance(table, np.ndarray) or table.dtype.kind not in "iu":
        raise BadInput(f"--block-table: {path} must hold one integer array (.npy), got "
                       f"{getattr(table, 'dtype', type(table).__name__)}")
    if table.ndim not in (1, 2):
        raise BadInput(f"--block-table: {path} must be [max_pages] or [batch, max_pages], got shape "
                       f"{list(table.shape)}")
    return table


def _geometry(kv_dtype, layout, page_size, head_dim, page_stride, num_pages, view_offset, pool, hints):
    """Build the geometry; options not given come from the .pt view, then (num_pages) from the pool size. A .pt
    view's page size and token size must agree with --page-size and --kv-dtype/--head-dim."""
    hints = dict(hints)
    view_token_bytes = hints.pop("bytes_per_token", None)
    given = {"page_stride": page_stride, "num_pages": num_pages, "view_offset": view_offset, "page_size": page_size}
    for name, hint in hints.items():
        if given[name] is None:
            given[name] = hint
        elif given[name] != hint:
            raise BadInput(f"--{name.replace('_', '-')} {given[name]} disagrees with the saved cache view's {hint}")
    if given["view_offset"] is None:
        given["view_offset"] = 0
    try:
        if given["num_pages"] is None:
            if pool is None:
                raise BadInput("--num-pages is required without --cache")
            one = PageGeometry(kv_dtype, page_size, head_dim, 1, given["page_stride"], layout, given["view_offset"])
            if pool.size < one.pool_bytes:
                raise BadInput(f"--cache holds {pool.size} bytes, less than one page at this --view-offset")
            given["num_pages"] = (pool.size - one.pool_bytes) // one.page_stride + 1
        geom = PageGeometry(kv_dtype, page_size, head_dim, given["num_pages"], given["page_stride"], layout,
                            given["view_offset"])
    except ValueError as e:
        raise BadInput(f"invalid geometry: {e}") from None
    if view_token_bytes is not None and view_token_bytes != geom.bytes_per_token:
        raise BadInput(f"--head-dim {head_dim} gives {geom.bytes_per_token} bytes per token for {kv_dtype}, the saved "
                       f"cache view has {view_token_bytes}")
    return geom


def _examples(geom: PageGeometry) -> list[dict]:
    """A few (t, d) -> byte / nibble and (t, g) -> byte lines covering the page's corners and a tile change."""
    P, D = geom.page_size, geom.head_dim
    out = []
    for t, d in sorted({(0, 0), (0, 1), (1, 0), (1, 33), (P - 1, D - 1), (0, D // 2)}):
        nibble = None if geom.kv_dtype == "fp8" else ("low" if d % 2 == 0 else "high")
        out.append({"kind": "value", "t": t, "d": d, "byte": int(value_offset(geom, t, d)), "nibble": nibble})
    groups = [0] if geom.kv_dtype == "fp8" else sorted({0, D // 32 - 1})
    for t in sorted({0, 1, P // 4, P - 1}):
        for g in groups:
            out.append({"kind": "scale", "t": t, "g": g, "byte": int(scale_offset(geom, t, g))})
    return out


def _describe(geom, report, verify, block_table_given):
    return {
        "geometry": asdict(geom),
        "value_bytes_per_token": geom.value_bytes_per_token, "scale_bytes_per_token": geom.scale_bytes_per_token,
        "bytes_per_token": geom.bytes_per_token, "page_bytes": geom.page_bytes, "view_bytes": geom.view_bytes,
        "pool_bytes": geom.pool_bytes,
        "regions": [asdict(r) for r in page_regions(geom)],
        "examples": _examples(geom),
        "boundaries": [asdict(c) for c in report.crossings],
        "block_table": ({"pages": report.block_table_pages, "out_of_range_entries": report.block_table_out_of_range}
                        if block_table_given else None),
        "verify": None if verify is None else {**{k: v for k, v in asdict(verify).items() if k != "geometry"},
                                               "hazards": verify.hazards, "clean": verify.clean},
    }


def _format_text(d: dict) -> str:
    g, lines = d["geometry"], []
    add = lines.append
    add(f"geometry: kv_dtype {g['kv_dtype']}, layout {g['layout']}, P={g['page_size']} tokens/page, "
        f"D={g['head_dim']}, page stride {g['page_stride']:,} B, {g['num_pages']} pages, "
        f"view offset {g['view_offset']:,} B")
    add(f"bytes: {d['bytes_per_token']} per token ({d['value_bytes_per_token']} value + "
        f"{d['scale_bytes_per_token']} scale), {d['page_bytes']:,} per page, view {d['view_bytes']:,}, "
        f"pool {d['pool_bytes']:,}")
    add("page byte map (page-local offsets; t token, d element, g = d//32):")
    for r in d["regions"]:
        add(f"  [{r['start']:,}, {r['end']:,})  {r['name']}: {r['rule']}")
    for e in d["examples"]:
        if e["kind"] == "value":
            nibble = f", {e['nibble']} nibble" if e["nibble"] else ""
            add(f"    value (t={e['t']}, d={e['d']}) -> byte {e['byte']:,}{nibble}")
        else:
            add(f"    scale (t={e['t']}, g={e['g']}) -> byte {e['byte']:,}")
    add("boundary report (bytes from the view base; the first page with any byte at or past):")
    for c in d["boundaries"]:
        if c["in_view"]:
            where = (f"page {c['first_page']} (base {c['first_page_base']:,}"
                     f"{', straddles it' if c['straddles'] else ''}); {c['pages_past']} pages at or past")
        else:
            where = f"no page (page {c['first_page']} would be the first; the view ends before)"
        add(f"  {c['boundary']:>13,}: {where}  [{_BOUNDARY_NOTES.get(c['boundary'], _DEFAULT_NOTE)}]")
    if d["block_table"] is not None:
        bt = d["block_table"]
        add(f"block table: {bt['pages']} distinct pages, {bt['out_of_range_entries']} out-of-range entries "
            "(sentinels, ignored)")
        for c in d["boundaries"]:
            pages = c["touched_pages"]
            shown = ", ".join(str(p) for p in pages[:8]) + (", ..." if len(pages) > 8 else "")
            add(f"  pages at or past {c['boundary']:,}: {len(pages)}" + (f" ({shown})" if pages else ""))
    v = d["verify"]
    if v is not None:
        add(f"verify: {v['pages']} pages, {v['tokens']} token slots ({v['unwritten_tokens']} unwritten: all 0xFF), "
            f"{v['block_table_out_of_range']} out-of-range block-table entries skipped")
        if g["kv_dtype"] == "fp8":
            add(f"  NaN values (0x7F/0xFF): {v['fp8_nan_values']}; NaN scales: {v['fp8_nan_scales']}; "
                f"other bad scales (inf, <= 0, subnormal, not 2^k): {v['fp8_bad_scales']}")
        else:
            add(f"  {v['blocks']} blocks: NaN scale (255): {v['nan_scale_blocks']}; byte-0 scale over nonzero codes: "
                f"{v['zero_scale_nonzero_blocks']} (Triton's compiled dot_scaled reads byte 0 as 0); "
                f"byte-0 scale over zero codes: {v['zero_scale_empty_blocks']} (empty blocks, fine)")
        h = v["first_hazard"]
        add("  clean" if v["clean"] else
            f"  {v['hazards']} hazards; first: {h['kind']} at page {h['page']}, token {h['token']}, "
            f"{'element' if h['kind'] == 'fp8_nan_value' else 'group'} {h['index']}")
    return "\n".join(lines)


@click.command()
@click.option("--kv-dtype", type=click.Choice(KV_DTYPES), required=True, help="Cache format.")
@click.option("--layout", type=click.Choice(LAYOUTS), default=None,
              help="Page layout (default: the format's planar one).")
@click.option("--page-size", type=int, required=True, help="Tokens per page P (16, 32, 64, 128, 256).")
@click.option("--head-dim", type=int, required=True, help="Head dim D (multiple of 32, 32..256).")
@click.option("--page-stride", type=int, default=None, help="Bytes between page bases (default: the page's bytes).")
@click.option("--num-pages", type=int, default=None,
              help="Pages in the view: required without --cache (with --cache, default: all that fit).")
@click.option("--view-offset", type=int, default=None, help="Byte offset of the view in its pool (default 0).")
@click.option("--cache", "cache_path", type=str, default=None,
              help="Saved pool to verify: .npy uint8 array or .pt uint8 tensor (a 4-D cache view keeps its placement).")
@click.option("--block-table", "block_table_path", type=str, default=None,
              help=".npy integer block table: verify only its pages; report which cross a boundary.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
def layout(kv_dtype, layout, page_size, head_dim, page_stride, num_pages, view_offset, cache_path, block_table_path,
           as_json):
    """Print a cache geometry's page byte map, sizes and 2^31 / 2^32 / 4.608e9 boundary report; with --cache,
    verify a saved cache (exit 1 if it has hazards: NaN scales, byte-0 scales over nonzero codes, FP8 NaNs)."""
    try:
        pool, hints = _load_cache(cache_path) if cache_path else (None, {})
        geom = _geometry(kv_dtype, layout, page_size, head_dim, page_stride, num_pages, view_offset, pool, hints)
        block_table = _load_block_table(block_table_path) if block_table_path else None
        if pool is not None and pool.size < geom.pool_bytes:
            raise BadInput(f"--cache holds {pool.size:,} bytes; the geometry needs {geom.pool_bytes:,}")
        report = boundary_report(geom, block_table)
        verify = None
        if pool is not None:
            with click.progressbar(length=_PROGRESS_STEPS, label="verifying", file=sys.stderr) as bar:
                def progress(done, total):
                    bar.update(done * _PROGRESS_STEPS // total - bar.pos)
                verify = verify_cache(pool, geom, block_table, progress=progress)
    except (ValueError, OSError) as e:   # anything the checks above did not word already
        raise BadInput(str(e)) from None
    described = _describe(geom, report, verify, block_table is not None)
    click.echo(json.dumps(described, indent=1) if as_json else _format_text(described))
    if verify is not None and not verify.clean:
        click.get_current_context().exit(EXIT_HAZARDS)
