"""What a failing access leaves for the host: a count in its site's tally,
or a violation record.

A root or window check of an access whose width is known when the pass
runs counts in a *site tally* (issue 14, design B, :func:`count`): an
atomic add and, for the first ``layout.TALLY_OFFENDERS``, the address and
the packed thread and block ids, all at immediate offsets below the
violation buffer's header.  The host classifies the kind and the
allocation (``host.decode_tallies``), so the slow path keeps neither live.
Any other check claims a record of the violation buffer as the runtime's
``__gpusafe_record`` does (:func:`record`).
"""

from __future__ import annotations

import dataclasses

from .. import layout, ptx
from .. import provenance as prov
from ..nodes import Address, Instruction, Register, Statement, Symbol, Verbatim
from ..runtime import TALLY_FUNCTION
from .emission import Emitter, I, target_sm
from .planning import Access

_RECORD = layout.VIOLATION_RECORD.offset
_BUFFER = layout.VIOLATION_BUFFER.offset


def tally(em: Emitter, acc: Access) -> int:
    """The first tally of ``acc``'s site (given one now, the first time its
    slow path is written), or -1 when the site writes records: an access of
    a size known only at run time (the host would not know its width), or
    every access when the user asked for every offender."""
    sites = em.plan.sites
    site = sites[acc.site]
    if site.tally >= 0:
        return site.tally
    if acc.access.size is not None or em.plan.every_offender:
        return -1
    v = acc.value
    assert isinstance(v, prov.Ptr)
    root = v.root
    site = dataclasses.replace(
        site, tally=sites.tally_count, alignment=acc.access.alignment,
        root_index=em.plan.root_index[root] if isinstance(root, prov.ParamRoot) else -1,
        root_space=root.space if isinstance(root, prov.VarRoot) else None)
    sites.sites[site.id] = site
    sites.tally_count += site.tallies
    return site.tally


def count(em: Emitter, addr: str, tally: int,
          descriptor: str | None = None) -> list[Statement]:
    """A failing access counted in its site's tally (design B of issue 14):
    one atomic add on the count; while the count was below
    ``layout.TALLY_OFFENDERS``, the address and the packed thread and block
    ids stored in that offender's own store block, every field at an
    immediate offset from the violation buffer.  No record is claimed and no
    kind or tag computed (the host classifies them from the site), so the
    only registers live beside the program's are the buffer, the count and
    one id at a time.  ``descriptor``: the ``.param`` holding the window's
    descriptor of an access through a decided parameter (the host knows
    neither the window nor the root it came from), loaded in each store
    block and kept in the offender's ``descriptor`` word.  A device function
    of a debug build calls the runtime's ``__gpusafe_tally`` instead
    (:func:`_tally_call`)."""
    if _calls_tally(em):
        return _tally_call(em, addr, tally, descriptor)
    ctx, buf = em.ctx(), em.reg("buf", ".b64")
    i, t, u = em.reg("ri", ".b32"), em.reg("rt", ".b32"), em.reg("ru", ".b32")
    full = em.reg("full", ".pred")
    done = em.label("tald")
    blocks = [em.label("tal") for _ in range(layout.TALLY_OFFENDERS)]
    offender = layout.OFFENDER.offset
    out: list[Statement] = [
        em.load_ctx(),
        I("ld.global.u64", buf, Address(Register(ctx), layout.LAUNCH_CONTEXT.offset("violations"))),
        _tally_atomic(em, i, Address(Register(buf), layout.tally_offset(tally))),
        I("setp.ge.u32", full, i, layout.TALLY_OFFENDERS),
        I("bra", done, guard=ptx.Guard(full)),
    ]
    for k in range(1, layout.TALLY_OFFENDERS):
        out.append(I("setp.eq.u32", full, i, k))
        out.append(I("bra", blocks[k], guard=ptx.Guard(full)))
    for k, label in enumerate(blocks):
        at = layout.offender_offset(tally, k)

        def store(field: str, value: str, width: str = "u32", at: int = at) -> None:
            out.append(I(f"st.global.{width}", Address(Register(buf), at + offender(field)),
                         value))

        if k:
            out.append(ptx.Label(label))
        store("address", addr, "u64")
        out.append(I("mov.u32", t, "%tid.x"))
        for axis, shift in (("y", 10), ("z", 20)):
            out.append(I("mov.u32", u, f"%tid.{axis}"))
            out.append(I("shl.b32", u, u, shift))
            out.append(I("or.b32", t, t, u))
        store("thread", t)
        out.append(I("mov.u32", t, "%ctaid.x"))
        store("block_x", t)
        out.append(I("mov.u32", t, "%ctaid.y"))
        out.append(I("mov.u32", u, "%ctaid.z"))
        out.append(I("shl.b32", u, u, 16))
        out.append(I("or.b32", t, t, u))
        store("block_yz", t)
        if descriptor is not None:
            out.append(I("ld.param.u32", t, Address(Symbol(descriptor))))
            store("descriptor", t)
        if k + 1 < len(blocks):
            out.append(I("bra.uni", done))
    out.append(ptx.Label(done))
    return out


def _calls_tally(em: Emitter) -> bool:
    """Whether ``em``'s function counts in its tallies through a call: a
    device function of a debug build.  ptxas at -O0 allocates a device
    function in R0-R15 and, when it needs more, in R32 and up (never in the
    callee-saved R16-R31): the inline tally's buffer and count, beside the
    function's values and its hidden parameters, took ``table_sum`` (the
    corpus's ``device_global_ptr`` -G) from 24 registers to 43, and its
    caller with it; behind a call, 34.  An optimised build compiles each
    callee into its caller, where the inline tally costs less than a call,
    and a kernel has no callee-saved registers to avoid."""
    return not em.plan.kernel and em.debug


def _tally_call(em: Emitter, addr: str, tally: int,
                descriptor: str | None) -> list[Statement]:
    """``__gpusafe_tally(ctx, tally offset, addr, descriptor or 0)``: the call
    sequence in a ``{ }`` block, written as text (its ``.param`` declarations
    are local to the block)."""
    ctx, d = em.ctx(), em.reg("rt", ".b32")
    out: list[Statement] = [em.load_ctx()]
    if descriptor is not None:
        out.append(I("ld.param.u32", d, Address(Symbol(descriptor))))
    value = d if descriptor is not None else "0"
    out.append(Verbatim(
        "\n\t{"
        "\n\t.param .b64 __gs_targ0;\n\tst.param.b64 \t[__gs_targ0], " + ctx + ";"
        "\n\t.param .b32 __gs_targ1;\n\tst.param.b32 \t[__gs_targ1], "
        + str(layout.tally_offset(tally)) + ";"
        "\n\t.param .b64 __gs_targ2;\n\tst.param.b64 \t[__gs_targ2], " + addr + ";"
        "\n\t.param .b32 __gs_targ3;\n\tst.param.b32 \t[__gs_targ3], " + value + ";"
        "\n\tcall.uni \t" + TALLY_FUNCTION
        + ", (__gs_targ0, __gs_targ1, __gs_targ2, __gs_targ3);"
        "\n\t}"))
    return out


def tallied_window(em: Emitter, acc: Access, addr: str, tally: int,
                   do: str) -> list[Statement]:
    """``slow_path._inline_window`` for a tallied site of a variable of static size,
    in one 64-bit temporary (issue 14, regw: a slow path's temporaries count
    in the kernel's registers where they are live beside the program's,
    and the general form kept the window's two ends, its span and the
    width in four): the offset from the variable, compared unsigned with
    the room the variable leaves for the access (an address below the
    variable wraps above it), then the alignment.  The tallies are those of
    ``_inline_window``: the host classifies the null page and the space.
    Ends where a refused access goes on (not performed: the caller's)."""
    a = acc.access
    v = acc.value
    assert isinstance(v, prov.Ptr) and isinstance(v.root, prov.VarRoot)
    root = v.root
    assert root.size is not None and a.size is None
    bad, off = em.reg("bad", ".pred"), em.reg("off", ".b64")
    record, misaligned, refused = em.label("rec"), em.label("recm"), em.label("refd")
    out: list[Statement] = []
    if root.space == "global" or v.space == "generic":
        out.append(I("setp.lt.u64", bad, addr, layout.NULL_PAGE))
        out.append(I("bra", record, guard=ptx.Guard(bad)))
    out.append(I("mov.u64", off, root.name))
    if v.space == "generic":
        out.append(I(f"cvta.{root.space}.u64", off, off))
    out.append(I("sub.u64", off, addr, off))
    room = root.size - a.width  # a static zero-width access may start at the end
    if room < 0:
        out.append(I("bra.uni", record))
    else:
        out.append(I("setp.gt.u64", bad, off, room))
        out.append(I("bra", record, guard=ptx.Guard(bad)))
        if a.alignment > 1:
            out.append(I("and.b64", off, addr, a.alignment - 1))
            out.append(I("setp.ne.u64", bad, off, 0))
            out.append(I("bra", misaligned, guard=ptx.Guard(bad)))
        out.append(I("bra.uni", do))
    out.append(ptx.Label(record))
    out.extend(count(em, addr, tally))
    if a.alignment > 1:
        out.append(I("bra.uni", refused))
        out.append(ptx.Label(misaligned))
        out.extend(count(em, addr, tally + 1))
    out.append(ptx.Label(refused))
    return out


TALLY_WRAP = 0xFFFFFFFE
"""The bound of a tally's ``atom.inc`` (the count after it is 0: as an add
wraps, one count earlier)."""


def _tally_atomic(em: Emitter, old: str, count: Address) -> Instruction:
    """The atomic counting one offender in a tally, ``old`` its count before.
    Below sm_90 an ``atom.inc`` with the bound :data:`TALLY_WRAP`: ptxas
    turns an ``atom.add`` of 1 (or ``atom.inc`` with the bound 0xffffffff)
    whose old value is used into a warp-aggregated atomic (FLO, POPC, SHFL
    and the lane mask: 3-4 registers at the slow path's peak), and an
    ``atom.inc`` with another bound it cannot (``atomic_inc_dec`` sm_75 20
    -> 17 registers, 142 kernels fewer over the corpus at sm_75/80, none
    more).  At sm_90 the add (the aggregation there costs little: 12
    kernels fewer with the inc, 2 more, ``matmul_tiled16`` 32 -> 38)."""
    if 0 < target_sm(em.plan.module) < 90:
        return I("atom.global.inc.u32", old, count, TALLY_WRAP)
    return I("atom.global.add.u32", old, count, 1)


def record(em: Emitter, acc: Access, addr: str, kind: str,
            tag: object = 0) -> list[Statement]:
    """``__gpusafe_record`` inline (tag 0: a variable is no allocation): claim
    a record of the violation buffer, or count it as dropped when the buffer
    is full."""
    a = acc.access
    ctx, buf, rec = em.ctx(), em.reg("buf", ".b64"), em.reg("rec", ".b64")
    i, cap = em.reg("ri", ".b32"), em.reg("rcap", ".b32")
    full = em.reg("full", ".pred")
    done, dropped = em.label("recd"), em.label("drop")
    out: list[Statement] = [
        em.load_ctx(),
        I("ld.global.u64", buf, Address(Register(ctx), layout.LAUNCH_CONTEXT.offset("violations"))),
        I("setp.eq.u64", full, buf, 0),
        I("bra", done, guard=ptx.Guard(full)),
        I("atom.add.u32", i, Address(Register(buf), _BUFFER("count")), 1),
        I("ld.u32", cap, Address(Register(buf), _BUFFER("capacity"))),
        I("setp.ge.u32", full, i, cap),
        I("bra", dropped, guard=ptx.Guard(full)),
        I("mul.wide.u32", rec, i, layout.VIOLATION_RECORD.size),
        I("add.u64", rec, rec, buf),
    ]
    base = layout.VIOLATION_BUFFER.size

    def store(field: str, value: object, width: str = "u32", index: int = 0) -> None:
        out.append(I(f"st.{width}", Address(Register(rec), base + _RECORD(field) + 4 * index),
                     value))

    store("kind", kind)
    store("site", acc.site)
    store("address", addr, "u64")
    store("width", a.size.name if a.size is not None else a.width)
    store("tag", tag)
    t = em.reg("rt", ".b32")
    for field, sreg in (("thread", "%tid"), ("block", "%ctaid")):
        for k, axis in enumerate("xyz"):
            out.append(I("mov.u32", t, f"{sreg}.{axis}"))
            store(field, t, index=k)
    out.append(I("bra.uni", done))
    out.append(ptx.Label(dropped))
    out.append(I("atom.add.u32", i, Address(Register(buf), _BUFFER("dropped")), 1))
    out.append(ptx.Label(done))
    return out
