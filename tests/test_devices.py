"""How candidates are spread over GPUs, and what happens when a GPU fails (no GPU needed)."""

import threading
import time

import pytest

from openkernel.evaluation.host.devices import DevicePool, NoDeviceLeft, is_device_fault
from openkernel.evaluation.host.environment import worker_env


def test_one_worker_per_gpu_round_robin():
    pool = DevicePool([0, 1, 2])
    got = [pool.acquire(), pool.acquire(), pool.acquire()]
    assert sorted(got) == [0, 1, 2]
    with pytest.raises(TimeoutError):
        pool.acquire(timeout=0.05)  # every GPU busy: the next candidate waits
    pool.release(1)
    assert pool.acquire(timeout=0.05) == 1


def test_waiting_worker_gets_the_released_gpu():
    pool = DevicePool([0])
    first = pool.acquire()
    result = []
    t = threading.Thread(target=lambda: result.append(pool.acquire(timeout=5)))
    t.start()
    time.sleep(0.1)
    pool.release(first)
    t.join()
    assert result == [0]


def test_failed_gpu_is_quarantined_and_work_moves_on():
    pool = DevicePool([0, 1], per_device=2)
    a = pool.acquire()
    pool.quarantine(a, "GPU has fallen off the bus")
    pool.release(a)
    assert pool.healthy == [1 - a]
    assert {pool.acquire(), pool.acquire()} == {1 - a}  # both slots of the healthy GPU
    pool.quarantine(1 - a, "uncorrectable ECC error")
    with pytest.raises(NoDeviceLeft, match="ECC"):
        pool.acquire(timeout=0.05)


def test_a_waiting_worker_wakes_when_its_only_gpu_fails():
    pool = DevicePool([0])
    pool.acquire()
    errors = []

    def wait():
        try:
            pool.acquire(timeout=5)
        except NoDeviceLeft as err:
            errors.append(err)

    t = threading.Thread(target=wait)
    t.start()
    time.sleep(0.1)
    pool.quarantine(0, "no CUDA-capable device is detected")
    t.join(2)
    assert errors and not t.is_alive()


def test_device_faults_are_told_from_candidate_faults():
    assert is_device_fault("RuntimeError: CUDA driver initialization failed, you might not have a CUDA gpu.")
    assert is_device_fault("torch.cuda: no CUDA-capable device is detected")
    assert not is_device_fault("RuntimeError: CUDA error: an illegal memory access was encountered")
    assert not is_device_fault("Segmentation fault")


def test_slots_map_through_cuda_visible_devices(tmp_path):
    env = worker_env({"PATH": "/usr/bin", "CUDA_VISIBLE_DEVICES": "4,6"}, tmp_path, "cuda", 1)
    assert env["CUDA_VISIBLE_DEVICES"] == "6"
    env = worker_env({"PATH": "/usr/bin"}, tmp_path, "cuda", 0)
    assert env["CUDA_VISIBLE_DEVICES"] == "0"
