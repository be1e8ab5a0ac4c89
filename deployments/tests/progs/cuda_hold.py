"""Test program: opens a CUDA context on device 0 (as ``CUDA_VISIBLE_DEVICES`` maps it) through
the driver API in ``libcuda.so.1``, prints ``ready`` and holds the context until killed."""
import ctypes
import sys
import time

cuda = ctypes.CDLL("libcuda.so.1")
device = ctypes.c_int()
context = ctypes.c_void_p()
for call, args in (
    ("cuInit", (0,)),
    ("cuDeviceGet", (ctypes.byref(device), 0)),
    ("cuCtxCreate_v2", (ctypes.byref(context), 0, device)),
):
    rc = getattr(cuda, call)(*args)
    if rc != 0:
        print(f"{call} failed with CUresult {rc}", flush=True)
        sys.exit(1)
print("ready", flush=True)
time.sleep(300)
