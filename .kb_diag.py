import os, sys, time
os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
def touched():
    return any("libcuda.so" in l for l in open("/proc/self/maps"))
t=time.time()
import torch; print("torch", touched(), round(time.time()-t,2))
import triton; print("triton", touched())
import importlib
from openkernel.evaluation.worker import main
orig = importlib.import_module
seen=[False]
import builtins
real_import = builtins.__import__
def imp(name, *a, **k):
    m = real_import(name, *a, **k)
    if not seen[0] and touched():
        seen[0]=True
        import traceback; print("FIRST libcuda after import of", name); traceback.print_stack(limit=12)
    return m
builtins.__import__ = imp
main.imports(); print("main.imports", touched())
for mode in ("sweep", "probe", "reference_timing", "float64"):
    __import__(f"openkernel.evaluation.worker.{mode}"); print(mode, touched())
