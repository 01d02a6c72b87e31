"""GPU timers: how `mxidx bench`, `tools.tune`, `tools.bench_cp` and the probes of tools/probes time a call.

graph_time_us   the median time of one call over replays of a CUDA graph that holds the calls back to back (launch
                gaps amortised as in a captured decode step); the figure every benchmark of this package reports.
eager_time_us   the mean time of one call over eager back-to-back calls, for calls that cannot be captured (host
                lengths, host syncs).
queued_time_us  the device time of one such call: eager calls queued behind a GPU-side wait, so that the host's
                launch time is not timed (what a model sees when its host runs ahead of the GPU), and the host's
                time a call.

All three run on the current CUDA device and synchronize it; torch is imported when a timer is called, so that importing
this module needs no GPU stack.
"""
from __future__ import annotations

import statistics


def graph_time_us(fns, *, inner: int, replays: int) -> float:
    """Median time of one call in microseconds, from `replays` replays of a graph holding `inner` calls that cycle
    through `fns` (several input sets, so that repeated calls do not just re-read the L2: the H200's is 60 MB).

    Each of `fns` is called once outside the capture first (compiling what it launches), then `inner` times inside
    it; the graph is replayed once untimed before the timed replays. `fns` must be capturable: no host syncs, no
    allocations that change between calls."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up (compiles) outside capture
        for fn in fns:
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(inner):
            fns[i % len(fns)]()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / inner)
    return statistics.median(times)


def eager_time_us(fn, *, iters: int) -> float:
    """Mean time of one call in microseconds over `iters` back-to-back eager calls (after one warm-up call), from
    CUDA events around the whole run."""
    import torch

    fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / iters


def queued_time_us(fn, *, iters: int, max_wait_ms: float = 2000.0) -> tuple[float, float]:
    """(device time of one call, host time of one call) in microseconds, for eager calls without host syncs.

    The device time is the mean over `iters` calls queued behind a GPU-side wait (torch.cuda._sleep) that outlasts
    the host's enqueueing of all of them, from CUDA events after the wait and after the last call: the calls then
    run back to back, as in a model whose host runs ahead of the GPU. The wait starts at twice the host's time for
    `iters` calls and doubles until it outlasts the enqueueing; RuntimeError past max_wait_ms (a call that syncs
    the host never gets ahead). The host time is the mean of `iters` calls enqueued without a sync."""
    import time

    import torch

    fn()
    torch.cuda.synchronize()
    begin = time.perf_counter()
    for _ in range(iters):
        fn()
    host_s = (time.perf_counter() - begin) / iters
    torch.cuda.synchronize()
    cycles_per_ms = _sleep_cycles_per_ms()
    wait_ms = max(2e3 * host_s * iters, 1.0)
    while wait_ms <= max_wait_ms:
        before, start, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        before.record()
        torch.cuda._sleep(int(wait_ms * cycles_per_ms))
        start.record()
        begin = time.perf_counter()
        for _ in range(iters):
            fn()
        enqueued_ms = (time.perf_counter() - begin) * 1e3
        end.record()
        end.synchronize()
        if enqueued_ms < 0.9 * before.elapsed_time(start):   # every call was queued before the first ran
            return start.elapsed_time(end) * 1e3 / iters, host_s * 1e6
        wait_ms *= 2
    raise RuntimeError(f"the host did not get ahead of the GPU within a {max_wait_ms:.0f} ms wait: does the "
                       "call sync the host?")


def _sleep_cycles_per_ms() -> float:
    """GPU clock cycles of torch.cuda._sleep per millisecond, measured."""
    import torch

    cycles = 10_000_000
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(cycles // 10)   # the clock up before the measured wait
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return cycles / start.elapsed_time(end)
