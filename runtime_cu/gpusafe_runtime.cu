// gpusafe device runtime: the slow path of every bounds check.
//
// The instrumenter (gpusafe_instrument/checks/) inlines a few compares before each
// memory access; when they fail it calls __gpusafe_check, which decides
// precisely (null page, bounds of the root allocation or of the allocation
// table entry containing the address, shared window, alignment), records a
// violation when there is one, and tells the caller whether to perform the
// access.  Record layouts come from gpusafe_layout.h, generated from
// gpusafe_instrument/layout.py.
//
// Compiled to PTX by scripts/build_runtime.py (NVRTC, -rdc=true); the PTX is
// committed as gpusafe_runtime.ptx and linked into every instrumented module.
// Every external symbol starts with __gpusafe_ so it cannot clash with the
// program's own.

#include "gpusafe_layout.h"

typedef unsigned long long gs_u64;
typedef unsigned int gs_u32;

extern __shared__ unsigned char __gpusafe_dynamic_shared[];

// Append one record to the violation buffer (or count it as dropped).
extern "C" __device__ __noinline__ gs_u32 __gpusafe_record(const gpusafe_launch_context* ctx,
                                                          gs_u32 kind, gs_u32 site, gs_u64 addr,
                                                          gs_u32 width, gs_u32 tag)
{
    gpusafe_violation_buffer* buf = (gpusafe_violation_buffer*)ctx->violations;
    if (buf == 0) return kind;
    gs_u32 i = atomicAdd(&buf->count, 1u);
    if (i < buf->capacity) {
        gpusafe_violation_record* r = (gpusafe_violation_record*)(buf + 1) + i;
        r->kind = kind;
        r->site = site;
        r->address = addr;
        r->width = width;
        r->tag = tag;
        r->thread[0] = threadIdx.x;
        r->thread[1] = threadIdx.y;
        r->thread[2] = threadIdx.z;
        r->block[0] = blockIdx.x;
        r->block[1] = blockIdx.y;
        r->block[2] = blockIdx.z;
    } else {
        atomicAdd(&buf->dropped, 1u);
    }
    return kind;
}

// Count a failing access in its site's tally (issue 14, design B), as the
// inline tally of checks/records.py does, for the instrumented device
// functions of a debug (-G) build: ptxas at -O0 allocates a device function
// in R0-R15 and, when it needs more, in R32 and up, so the inline tally's
// buffer and count beside the function's own values and its hidden
// parameters took 43 registers where the function alone takes 24; behind a
// call it takes 34.  at: the tally's byte offset from the violation buffer's
// header (negative); descriptor: an argument site's window descriptor, else 0.
extern "C" __device__ __noinline__ void __gpusafe_tally(gs_u64 ctx_addr, int at, gs_u64 addr,
                                                        gs_u32 descriptor)
{
    const gpusafe_launch_context* ctx = (const gpusafe_launch_context*)ctx_addr;
    gpusafe_site_tally* t = (gpusafe_site_tally*)((unsigned char*)ctx->violations + at);
    gs_u32 i = atomicAdd(&t->count, 1u);
    if (i < GPUSAFE_TALLY_OFFENDERS) {
        gpusafe_offender* o = (gpusafe_offender*)(t + 1) + i;
        o->address = addr;
        o->thread = threadIdx.x | threadIdx.y << 10 | threadIdx.z << 20;
        o->block_x = blockIdx.x;
        o->block_yz = blockIdx.y | blockIdx.z << 16;
        o->descriptor = descriptor;
    }
}

// The table entry whose [base, base+size) contains addr, or 0.
static __device__ __forceinline__ const gpusafe_allocation_entry* gs_find(
    const gpusafe_launch_context* ctx, gs_u64 addr)
{
    const gpusafe_allocation_entry* t = (const gpusafe_allocation_entry*)ctx->table;
    gs_u32 lo = 0, hi = ctx->table_len;
    while (lo < hi) {  // first entry with base > addr
        gs_u32 mid = lo + (hi - lo) / 2;
        if (t[mid].base <= addr) lo = mid + 1;
        else hi = mid;
    }
    if (lo == 0) return 0;
    const gpusafe_allocation_entry* e = &t[lo - 1];
    return addr - e->base < e->size ? e : 0;
}

// The device heap table of the launch's context (in-kernel malloc), or 0.
static __device__ __forceinline__ gpusafe_heap_header* gs_heap(const gpusafe_launch_context* ctx)
{
    return (gpusafe_heap_header*)ctx->heap;
}

// A copy of the newest published heap block whose [base, base + size + red
// zone) holds addr; false when there is none.  Blocks are appended by many
// threads at once (__gpusafe_malloc): an entry counts once its state is
// published, after its other fields.  Newest first, so a block the heap
// handed out again after the quarantine wins over the freed one before it.
extern "C" __device__ __noinline__ bool __gpusafe_heap_find(const gpusafe_launch_context* ctx,
                                                            gs_u64 addr, gpusafe_heap_entry* out)
{
    gpusafe_heap_header* h = gs_heap(ctx);
    if (h == 0) return false;
    gs_u32 n = *(volatile gs_u32*)&h->count;
    if (n > h->capacity) n = h->capacity;
    volatile gpusafe_heap_entry* t = (volatile gpusafe_heap_entry*)(h + 1);
#pragma unroll 1
    for (gs_u32 i = n; i-- > 0;) {
        gs_u32 state = t[i].state;
        if (state == 0) continue;
        gs_u64 base = t[i].base, size = t[i].size;
        if (addr - base < size + GPUSAFE_HEAP_RED_ZONE) {
            out->base = base;
            out->size = size;
            out->tag = t[i].tag;
            out->state = state;
            return true;
        }
    }
    return false;
}

// In-kernel malloc, as the instrumented code calls it: the block gets a red
// zone and an entry of the heap table (atomically claimed), so accesses
// through its pointer are judged against it.  A block that finds the table
// full is counted (the host reports it) and returned unrecorded.
extern "C" __device__ __noinline__ void* __gpusafe_malloc(gs_u64 size, gs_u64 ctx_addr,
                                                          gs_u32 site)
{
    const gpusafe_launch_context* ctx = (const gpusafe_launch_context*)ctx_addr;
    if (size > ~0ull - GPUSAFE_HEAP_RED_ZONE) return 0;
    void* p = malloc(size + GPUSAFE_HEAP_RED_ZONE);
    gpusafe_heap_header* h = gs_heap(ctx);
    if (p == 0 || h == 0) return p;
    gs_u32 i = atomicAdd(&h->count, 1u);
    if (i >= h->capacity) {
        atomicAdd(&h->unrecorded, 1u);
        return p;
    }
    gpusafe_heap_entry* e = (gpusafe_heap_entry*)(h + 1) + i;
    e->base = (gs_u64)p;
    e->size = size;
    e->tag = GPUSAFE_HEAP_TAG_BASE + i;
    e->alloc_site = site;
    e->alloc_origin = ctx->origin;
    e->free_site = 0;
    e->free_origin = 0;
    __threadfence();
    atomicExch(&e->state, (gs_u32)GPUSAFE_ALLOC_LIVE);
    return p;
}

// In-kernel free, as the instrumented code calls it.  A bad free (not the
// start of a heap block, or a block freed already) is recorded and not
// performed.  A good one marks the block freed (its entry stays: later
// accesses are use-after-free) and puts it in the quarantine ring; the block
// it displaces from the ring goes back to the heap.
extern "C" __device__ __noinline__ void __gpusafe_free(gs_u64 addr, gs_u64 ctx_addr, gs_u32 site)
{
    const gpusafe_launch_context* ctx = (const gpusafe_launch_context*)ctx_addr;
    if (addr == 0) return;
    gpusafe_heap_header* h = gs_heap(ctx);
    if (h == 0) {
        free((void*)addr);
        return;
    }
    gpusafe_heap_entry found;
    if (!__gpusafe_heap_find(ctx, addr, &found)) {
        if (*(volatile gs_u32*)&h->unrecorded != 0) {
            free((void*)addr);  // perhaps a block the full table could not record
            return;
        }
        const gpusafe_allocation_entry* a = gs_find(ctx, addr);
        __gpusafe_record(ctx, GPUSAFE_INVALID_FREE, site, addr, 0, a ? a->tag : 0);
        return;
    }
    if (found.base != addr) {
        __gpusafe_record(ctx, GPUSAFE_INVALID_FREE, site, addr, 0, found.tag);
        return;
    }
    gpusafe_heap_entry* e = (gpusafe_heap_entry*)(h + 1) + (found.tag - GPUSAFE_HEAP_TAG_BASE);
    if (atomicCAS(&e->state, (gs_u32)GPUSAFE_ALLOC_LIVE, (gs_u32)GPUSAFE_ALLOC_FREED) !=
        GPUSAFE_ALLOC_LIVE) {
        __gpusafe_record(ctx, GPUSAFE_DOUBLE_FREE, site, addr, 0, found.tag);
        return;
    }
    e->free_site = site;
    e->free_origin = ctx->origin;
    if (h->ring_size == 0) {
        free((void*)addr);
        return;
    }
    gs_u64* ring = (gs_u64*)((gpusafe_heap_entry*)(h + 1) + h->capacity);
    gs_u32 slot = atomicAdd(&h->ring_head, 1u) % h->ring_size;
    gs_u64 old = atomicExch(&ring[slot], addr);
    if (old != 0) free((void*)old);
}

// True when [addr, addr+width) lies inside [low, high).
static __device__ __forceinline__ bool gs_inside(gs_u64 addr, gs_u32 width, gs_u64 low,
                                                 gs_u64 high)
{
    return addr >= low && high >= low && high - low >= width && addr - low <= high - low - width;
}

static __device__ __forceinline__ gs_u32 gs_oob_kind(gs_u32 space)
{
    if (space == GPUSAFE_SPACE_SHARED) return GPUSAFE_SHARED_OUT_OF_BOUNDS;
    if (space == GPUSAFE_SPACE_LOCAL) return GPUSAFE_LOCAL_OUT_OF_BOUNDS;
    return GPUSAFE_GLOBAL_OUT_OF_BOUNDS;
}

// Judge one access.  how: mode (bits 0..2), HOW_GENERIC (bit 3), space (bits
// 4..7), root index (bits 8..).  Returns status 0 to perform the access, or the
// violation kind recorded; low/high: the allocation (or, for a pointer
// argument, the local variable) window found by a lookup (the caller's
// unknown-provenance cache), or the empty window.
extern "C" __device__ __noinline__ gpusafe_check_result __gpusafe_check(
    gs_u64 ctx_addr, gs_u64 addr, gs_u64 lo, gs_u64 hi, gs_u32 width, gs_u32 align,
    gs_u32 site, gs_u32 how)
{
    const gpusafe_launch_context* ctx = (const gpusafe_launch_context*)ctx_addr;
    gpusafe_check_result res;
    res.low = GPUSAFE_EMPTY_LOW;
    res.high = GPUSAFE_EMPTY_HIGH;
    res.status = 0;
    res.reserved = 0;
    gs_u32 mode = how & 7u;
    bool generic = (how & GPUSAFE_HOW_GENERIC) != 0;
    gs_u32 space = (how >> 4) & 15u;
    bool misaligned = align > 1 && (addr & (gs_u64)(align - 1)) != 0;

    if ((generic || space == GPUSAFE_SPACE_GLOBAL) && addr < GPUSAFE_NULL_PAGE) {
        res.status = __gpusafe_record(ctx, GPUSAFE_NULL_POINTER, site, addr, width, 0);
        return res;
    }

    if (mode == GPUSAFE_MODE_ROOT) {
        const gpusafe_root_bounds* roots = (const gpusafe_root_bounds*)(ctx + 1);
        const gpusafe_root_bounds r = roots[how >> 8];
        if (r.tag != 0) {
            // the order of the oracle: freed (where the access starts), outside, misaligned
            if (addr >= r.low && addr < r.high && r.state != GPUSAFE_ALLOC_LIVE)
                res.status = __gpusafe_record(ctx, GPUSAFE_USE_AFTER_FREE, site, addr, width, r.tag);
            else if (!gs_inside(addr, width, r.low, r.high))
                res.status = __gpusafe_record(ctx, GPUSAFE_GLOBAL_OUT_OF_BOUNDS, site, addr, width, r.tag);
            else if (misaligned)
                res.status = __gpusafe_record(ctx, GPUSAFE_MISALIGNED_ACCESS, site, addr, width, r.tag);
            return res;
        }
        mode = GPUSAFE_MODE_UNKNOWN;  // the host found no allocation: look it up
        space = generic ? GPUSAFE_SPACE_GENERIC : GPUSAFE_SPACE_GLOBAL;
    }

    if (mode == GPUSAFE_MODE_ARGUMENT) {
        // A pointer argument of a device function; lo/hi: the generic window
        // of the caller's local variable it points into (0, 0: not known).
        // A local address is judged against it; any other as of unknown
        // provenance.
        const void* p = (const void*)addr;
        bool local = generic ? __isLocal(p) : space == GPUSAFE_SPACE_LOCAL;
        if (local && hi > lo) {
            gs_u64 low = generic ? lo : (gs_u64)__cvta_generic_to_local((const void*)lo);
            gs_u64 high = low + (hi - lo);
            if (!gs_inside(addr, width, low, high))
                res.status = __gpusafe_record(ctx, GPUSAFE_LOCAL_OUT_OF_BOUNDS, site, addr, width, 0);
            else if (misaligned)
                res.status = __gpusafe_record(ctx, GPUSAFE_MISALIGNED_ACCESS, site, addr, width, 0);
            else if (generic) {
                res.low = lo;  // the lookup cache of the caller's generic accesses
                res.high = hi;
            }
            return res;
        }
        mode = GPUSAFE_MODE_UNKNOWN;
    }

    if (mode == GPUSAFE_MODE_WINDOW) {
        if (!gs_inside(addr, width, lo, hi))
            res.status = __gpusafe_record(ctx, gs_oob_kind(space), site, addr, width, 0);
        else if (misaligned)
            res.status = __gpusafe_record(ctx, GPUSAFE_MISALIGNED_ACCESS, site, addr, width, 0);
        return res;
    }

    // MODE_UNKNOWN: classify a generic address by its real space.
    gs_u64 a = addr;
    if (space == GPUSAFE_SPACE_GENERIC) {
        const void* p = (const void*)addr;
        if (__isShared(p)) {
            space = GPUSAFE_SPACE_SHARED;
            a = (gs_u64)__cvta_generic_to_shared(p);
        } else if (__isLocal(p)) {
            space = GPUSAFE_SPACE_LOCAL;
        } else {
            space = GPUSAFE_SPACE_GLOBAL;
        }
    }
    if (space == GPUSAFE_SPACE_GLOBAL) {
        const gpusafe_allocation_entry* e = gs_find(ctx, a);
        gpusafe_heap_entry b;
        if (e == 0 && __gpusafe_heap_find(ctx, a, &b)) {
            // a device-heap block (the caller forgets its cached window at
            // each device free it makes or calls)
            if (b.state != GPUSAFE_ALLOC_LIVE && a - b.base < b.size)
                res.status = __gpusafe_record(ctx, GPUSAFE_USE_AFTER_FREE, site, addr, width, b.tag);
            else if (!gs_inside(a, width, b.base, b.base + b.size))
                res.status = __gpusafe_record(ctx, GPUSAFE_GLOBAL_OUT_OF_BOUNDS, site, addr, width,
                                              b.tag);
            else if (misaligned)
                res.status = __gpusafe_record(ctx, GPUSAFE_MISALIGNED_ACCESS, site, addr, width,
                                              b.tag);
            else if (b.size >= 16) {
                res.low = b.base;
                res.high = b.base + b.size;
            }
            return res;
        }
        if (e != 0 && e->state != GPUSAFE_ALLOC_LIVE)
            res.status = __gpusafe_record(ctx, GPUSAFE_USE_AFTER_FREE, site, addr, width, e->tag);
        else if (e == 0 || !gs_inside(a, width, e->base, e->base + e->size))
            res.status = __gpusafe_record(ctx, GPUSAFE_GLOBAL_OUT_OF_BOUNDS, site, addr, width,
                                          e ? e->tag : 0);
        else if (misaligned)
            res.status = __gpusafe_record(ctx, GPUSAFE_MISALIGNED_ACCESS, site, addr, width, e->tag);
        else if (e->size >= 16) {
            res.low = e->base;
            res.high = e->base + e->size;
        }
        return res;
    }
    if (space == GPUSAFE_SPACE_SHARED) {
        // The block's shared window: static variables, then dynamic shared memory.
        gs_u64 end = (gs_u64)__cvta_generic_to_shared(__gpusafe_dynamic_shared) +
                     ctx->dynamic_shared_size;
        if (!gs_inside(a, width, 0, end))
            res.status = __gpusafe_record(ctx, GPUSAFE_SHARED_OUT_OF_BOUNDS, site, addr, width, 0);
        else if (misaligned)
            res.status = __gpusafe_record(ctx, GPUSAFE_MISALIGNED_ACCESS, site, addr, width, 0);
        return res;
    }
    // Local memory through a pointer of unknown provenance: the frame it
    // belongs to is not known here; alignment is still checked.
    if (misaligned)
        res.status = __gpusafe_record(ctx, GPUSAFE_MISALIGNED_ACCESS, site, addr, width, 0);
    return res;
}
