#!/usr/bin/env python3
"""test_bind_ctypes.py - verbs called from Python through ctypes, which binds every
function from the library's handle (CDLL("libibverbs.so.1").ibv_reg_mr), never through
the preload's exports. Under the preload (EXPECT_CACHED=1) a repeat registration must be
served without the NIC; with and without it every deregistration must succeed, the PD
and the device must close and nothing may stay registered."""
import ctypes
import mmap
import os
import sys

failed = 0


def report(name, ok, why=""):
    global failed
    failed += not ok
    print(("ok - " if ok else "not ok - ") + name + ("" if ok else "  # " + why))


class Stats(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in
                ("live_mrs", "live_pds", "reg_calls", "dereg_calls", "iova2_entries", "pinned_bytes", "pinned_peak")]


class MR(ctypes.Structure):
    _fields_ = [("context", ctypes.c_void_p), ("pd", ctypes.c_void_p), ("addr", ctypes.c_void_p),
                ("length", ctypes.c_size_t), ("handle", ctypes.c_uint32), ("lkey", ctypes.c_uint32),
                ("rkey", ctypes.c_uint32)]


v = ctypes.CDLL("libibverbs.so.1", use_errno=True)
vp = ctypes.c_void_p
v.ibv_get_device_list.restype = ctypes.POINTER(vp)
v.ibv_open_device.restype = vp
v.ibv_open_device.argtypes = [vp]
v.ibv_alloc_pd.restype = vp
v.ibv_alloc_pd.argtypes = [vp]
v.ibv_reg_mr.restype = ctypes.POINTER(MR)
v.ibv_reg_mr.argtypes = [vp, vp, ctypes.c_size_t, ctypes.c_int]
v.ibv_dereg_mr.argtypes = [ctypes.POINTER(MR)]
v.ibv_dealloc_pd.argtypes = [vp]
v.ibv_close_device.argtypes = [vp]
v.snic_get_stats.argtypes = [ctypes.POINTER(Stats)]
expect_cached = os.environ.get("EXPECT_CACHED") == "1"


def stats():
    s = Stats()
    v.snic_get_stats(ctypes.byref(s))
    return s


devs = v.ibv_get_device_list(None)
ctx = v.ibv_open_device(devs[0])
pd = v.ibv_alloc_pd(ctx)
size = 1 << 20
buf = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)  # shared memory is not cached
addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
LOCAL_WRITE = 1

before = stats().reg_calls
derefs = []
for i in range(4):
    mr = v.ibv_reg_mr(pd, addr, size, LOCAL_WRITE)
    derefs.append(bool(mr) and v.ibv_dereg_mr(mr) == 0)
regs = stats().reg_calls - before
report("repeats_cached" if expect_cached else "repeats_registered", regs == (1 if expect_cached else 4),
       "%d of 4 registrations reached the NIC" % regs)
report("every_dereg_succeeds", all(derefs), "deregistrations: %s" % derefs)
report("pd_deallocates", v.ibv_dealloc_pd(pd) == 0, os.strerror(ctypes.get_errno()))
report("device_closes", v.ibv_close_device(ctx) == 0, os.strerror(ctypes.get_errno()))
s = stats()
report("nothing_registered_at_close", s.live_mrs == 0 and s.pinned_bytes == 0,
       "%d MRs, %d bytes" % (s.live_mrs, s.pinned_bytes))
sys.exit(1 if failed else 0)
