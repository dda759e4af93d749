// goheap.go - a cgo program that registers Go heap memory through the program's verbs,
// as Go RDMA bindings do: after runtime.GC and debug.FreeOSMemory the Go runtime hands
// the heap's free pages back with madvise(MADV_DONTNEED) as a raw system call (under
// cgo only its mmap and munmap go through libc), new slices come back at the same
// addresses, and a cached MR would be stale. Each round registers a fresh 1 MiB slice and
// writes through it (the MR stays cached after its deregistration), lets it go and
// returns the heap to the kernel: a slice at an address registered before (or in memory
// an earlier registration covered) must see the write through its MR. Prints one TAP line: ok, not ok, or SKIP when no slice came back
// at an address registered before. EXPECT_STALE=1 inverts the verdict (a run whose sources
// cannot see the discard: proof the check can fail).
package main

/*
#cgo CFLAGS: -I${SRCDIR}/../lib -I${SRCDIR}/../snic
#include "common.h"

static int go_open(void) { open_nic(); return pd != NULL; }
static void *go_reg(void *p, size_t len) { return ibv_reg_mr(pd, p, len, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE)); }
static int go_write_visible(void *mr, void *p, size_t len, int v) { return write_visible(mr, p, len, (unsigned char)v); }
static int go_dereg(void *mr) { return ibv_dereg_mr(mr); }
static int go_uffd_on(void) { int m = mrcache_monitors(); return m > 0 && (m & MRCACHE_MONITOR_UFFD); }
*/
import "C"

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"unsafe"
)

const size = 1 << 20
const rounds = 40

func main() {
	if C.go_open() == 0 {
		fmt.Println("not ok - test_go_heap_open # the device did not open")
		os.Exit(1)
	}
	expectStale := os.Getenv("EXPECT_STALE") == "1"
	seen := map[uintptr]bool{}
	checks, stale := 0, 0
	for r := 0; r < rounds; r++ {
		b := make([]byte, size)
		p := unsafe.Pointer(&b[0])
		mr := C.go_reg(p, size)
		if mr == nil {
			fmt.Println("not ok - test_go_heap_discarded_and_reused # a registration failed")
			os.Exit(1)
		}
		visible := C.go_write_visible(mr, p, size, C.int(0x11+r%64)) != 0
		if seen[uintptr(p)] {
			checks++ // the address was registered, released and discarded before
		}
		// A slice at a new address may still lie in memory an earlier registration
		// covered (rounded out, merged or expanded around its slice): stale too.
		if !visible {
			stale++
		}
		seen[uintptr(p)] = true
		C.go_dereg(mr)
		runtime.KeepAlive(b)
		b = nil
		runtime.GC()
		debug.FreeOSMemory()
	}
	name := "test_go_heap_discarded_and_reused"
	switch {
	case checks == 0 && stale == 0:
		fmt.Printf("ok - %s # SKIP none of %d slices came back at an address registered before\n", name, rounds)
	case expectStale && stale > 0, !expectStale && stale == 0:
		fmt.Printf("ok - %s\n", name)
	default:
		fmt.Fprintf(os.Stderr, "%d of %d slices stale (uffd source %v)\n", stale, rounds, C.go_uffd_on() != 0)
		fmt.Printf("not ok - %s\n", name)
	}
	fmt.Fprintf(os.Stderr, "# %d of %d slices at an address registered before, %d stale\n", checks, rounds, stale)
}
