"""tools.timing.queued_time_us on the GPU: the device time of calls whose host time is the longer."""
import time

import pytest
import torch

from tools.timing import eager_time_us, queued_time_us

pytestmark = pytest.mark.gpu


def _host_bound(cycles: int):
    """A call of a GPU wait of `cycles` that holds the host 1 ms first: eager, the host's time is the mean."""
    def call():
        end = time.perf_counter() + 1e-3
        while time.perf_counter() < end:
            pass
        torch.cuda._sleep(cycles)
    return call


def test_queued_time_is_the_device_time_of_host_bound_calls():
    """A call of 1 ms of host time and a short GPU wait: eager means follow the host (>= 1 ms), the queued time is
    the wait's own (measured alone with the GPU already busy), the host time about 1 ms."""
    cycles = 200_000
    alone = eager_time_us(lambda: torch.cuda._sleep(cycles), iters=20)   # the GPU busy: no host gaps
    if alone >= 400:   # a card held at a low clock: scale the wait to about 200 us, well under the host's 1 ms
        cycles = int(cycles * 200 / alone)
        alone = eager_time_us(lambda: torch.cuda._sleep(cycles), iters=20)
    assert alone < 500, alone
    call = _host_bound(cycles)
    assert eager_time_us(call, iters=20) >= 900
    device_us, host_us = queued_time_us(call, iters=20)
    assert device_us == pytest.approx(alone, rel=0.2), (device_us, alone)
    assert 1000 <= host_us < 2000, host_us


def test_a_call_that_syncs_never_gets_ahead():
    def syncs():
        torch.cuda._sleep(1000)
        torch.cuda.synchronize()
    with pytest.raises(RuntimeError, match="sync the host"):
        queued_time_us(syncs, iters=5, max_wait_ms=50.0)
