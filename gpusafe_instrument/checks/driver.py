"""The pass driver: the whole module, function by function.

Launch context convention: every checked ``.entry`` gets one hidden trailing
``.u64`` parameter (``__gpusafe_ctx``) holding the address of the launch
context (``gpusafe_instrument/layout.py``); every ``.func`` defined in the module that
checks an access, or calls one that does, gets the same trailing parameter and
each of its call sites passes the caller's; after it, the hidden parameters of
each pointer parameter that carries a window (``arguments``: two, or three
when every caller passes a known one).  Functions declared but not defined in the module
(``vprintf``, ``malloc``, other modules' functions) keep their signature and
are not checked.

Each function is printed as soon as it is rewritten (a kernel that calls
nothing as soon as it is planned) and its statements freed, so the memory of
the pass follows the module, not the module plus every function's new code.

A function holding an instruction the pass cannot check (an indirect call
that may reach a function needing the context included) is left as it was,
and so is every kernel reaching it: such a kernel keeps its signature and
body, and ``SiteTable.unchecked`` says why.  The other kernels are checked as
usual (they call checked copies of the device functions they share with the
unchecked ones, see ``selection``).  Only a module that cannot be
instrumented at all raises :class:`InstrumentError`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field

from .. import layout, ptx, query
from .. import provenance as prov
from ..nodes import (
    Address,
    ArgumentList,
    Block,
    Function,
    Instruction,
    Module,
    Param,
    RegisterDecl,
    Statement,
    Symbol,
    Variable,
    Verbatim,
)
from ..printer import statements_chunks
from ..runtime import CONTEXT_PARAM, HEAP_WRAPPERS, is_instrumented, link
from ..sites import KernelInfo, RootInfo, SiteTable, SlotInfo
from .arguments import (
    CALL_REGISTERS,
    Caller,
    CallSite,
    hidden_params,
    plan_windows,
    window_arguments,
)
from .emission import CONTEXT_REGISTER, I, limit_param, limits_as_params
from .launch_proof import proven_entry
from .outcome import CannotCheck, InstrumentError, InstrumentResult
from .planning import FunctionPlan
from .rewrite import rewrite_function
from .selection import calls_in, drop_unused_copies, split_selected


def instrument(source: str | Module, *,
               select: Callable[[str], bool] | None = None,
               every_offender: bool = False) -> InstrumentResult:
    """Instrument a PTX module (text or parsed; a parsed module is not modified).

    ``select``: which kernels to check (``gpusafe run --kernel-filter``); None
    checks every kernel.  A kernel for which ``select(name)`` is false, or
    which the pass cannot check (``sites.unchecked`` says why), is left
    exactly as it was (signature and body, no hidden parameter) and keeps
    calling the original, unchecked device functions; the checked kernels
    then call checked copies of the device functions they reach, named
    ``__gpusafe_<name>`` (see ``selection``).  ``sites.kernels`` and
    ``stats`` list only the checked kernels and functions (copies under the
    original names).

    ``every_offender`` (``gpusafe run --every-offender``): every failing
    access claims a violation record, so each offending thread and address
    is kept (as many as the buffer holds), instead of a count and the first
    ``layout.TALLY_OFFENDERS`` offenders in its site's tally; the slow paths
    then keep the record's fields live, which costs registers."""

    def fresh() -> Module:
        return ptx.parse(source) if isinstance(source, str) else copy.deepcopy(source)

    module = fresh()
    _refuse_module(module)
    unchecked: dict[str, str] = {}  # function (original name) -> why it cannot be checked
    while True:
        attempt = _Attempt(module, select, unchecked, every_offender)
        found = attempt.plan()
        if not found:
            break
        unchecked.update(found)
        module = fresh()
    return attempt.finish({k: why for k, why in unchecked.items() if k in attempt.kernels})


def _refuse_module(module: Module) -> None:
    reason = is_instrumented(module)
    if reason is not None:
        raise InstrumentError(f"this module is already instrumented by gpusafe: {reason}")
    if module.address_size != 64:
        raise InstrumentError(
            f".address_size {module.address_size}: gpusafe supports 64-bit PTX only")
    version = module.version
    if version is not None and version.number < (7, 0):
        raise InstrumentError(f"PTX ISA {version.text} is older than 7.0, which gpusafe needs")


@dataclass
class _Attempt:
    """One try at the module, leaving alone the functions known to be
    uncheckable (and the kernels reaching them)."""

    module: Module
    select: Callable[[str], bool] | None
    skip: dict[str, str]
    every_offender: bool
    plans: list[FunctionPlan] = field(default_factory=list)
    needy: set[str] = field(default_factory=set)
    sites: SiteTable = field(default_factory=SiteTable)
    targets: set[str] | None = None
    display: dict[str, str] = field(default_factory=dict)
    kernels: set[str] = field(default_factory=set)
    call_sites: dict[str, list[CallSite]] = field(default_factory=dict)
    """Calls passing pointer arguments that carry windows, by caller (``arguments``)."""
    kernel_infos: dict[str, KernelInfo] = field(default_factory=dict)
    proven: dict[str, Function] = field(default_factory=dict)
    """The proven entry of each kernel with a launch proof (``launch_proof``)."""
    heap: bool = False  # some function calls the device heap's malloc/free
    freeing: set[str] = field(default_factory=set)  # functions reaching the heap's free

    def plan(self) -> dict[str, str]:
        """Plan every function to check; the functions newly found uncheckable
        (original name -> reason), none when this attempt can be finished."""
        module = self.module
        self.kernels = {f.name for f in query.kernels(module)}
        select = self.select
        if self.kernels & set(self.skip):
            user = select
            select = (lambda n: n not in self.skip and (user is None or user(n)))  # noqa: E731
        self.targets, self.display = split_selected(module, select)
        module_vars: dict[str, prov.VarRoot] = {}
        for v in module.variables:
            root = prov.variable_root(v)
            if root is not None:
                module_vars[v.name] = root
        problems: dict[str, str] = {}
        files = module.files
        functions = {f.name for f in module.functions}
        candidates = [fn for fn in module.functions
                      if fn.body is not None and self._original(fn.name) not in self.skip
                      and (self.targets is None or fn.name in self.targets)]

        def new_plan(fn: Function) -> FunctionPlan:
            return FunctionPlan(module, fn, module_vars, self.sites,
                                display=self.display.get(fn.name, fn.name), files=files,
                                every_offender=self.every_offender)

        # the functions that take or pass pointer arguments are planned
        # together (their windows are a property of the call graph); any
        # other is planned on its own, and a kernel calling nothing is
        # finished at once (nothing the rest of the module decides changes
        # it), so that its statements do not wait in memory for the others
        linked = {fn.name: new_plan(fn) for fn in candidates
                  if calls_in(fn.body or []) or not fn.is_kernel}
        self.call_sites = plan_windows(list(linked.values()))
        for fn in candidates:
            fp = linked.get(fn.name) or new_plan(fn)
            try:
                fp.plan()
            except CannotCheck as e:
                problems[fp.fn.name] = e.reason
                continue
            self.plans.append(fp)
            if fp.kernel and not fp.calls.direct and not fp.calls.indirect \
                    and not (fp.calls.symbols.keys() & functions):
                self._finish_function(fp, _Arguments(set(), {}, {}, Caller(set(), set(), {})))
        self.needy = _needing_context(self.plans)
        self.freeing = _mark_freeing(self.plans)
        for fp in self.plans:
            why = _call_problem(fp, self.needy)
            if why is not None:
                problems[fp.fn.name] = why
        problems = _reaching(problems, self.plans, self.display)
        return {self._original(name): why for name, why in problems.items()}

    def _original(self, name: str) -> str:
        return self.display.get(name, name)

    def _finish_function(self, fp: FunctionPlan, arguments: _Arguments) -> None:
        """Rewrite one planned function, pass the hidden arguments at its
        calls, and print it: its statements (old and new) are then freed, so
        the memory of the pass is the module's, not the module's plus every
        rewritten function's nodes."""
        rewrite_function(fp)
        arguments.heap = fp.heap_calls
        arguments.cache = fp.uses_cache
        self.heap = self.heap or bool(fp.heap_calls)
        _pass_context(fp.fn, arguments)
        fp.stats.slots = len(fp.slots)
        if fp.kernel:
            self.kernel_infos[fp.fn.name] = _kernel_info(fp)
            if fp.original_body is not None:
                self.proven[fp.fn.name] = Function(
                    ".entry", proven_entry(fp.fn.name), list(fp.fn.params),
                    linkage=fp.fn.linkage, directives=fp.fn.directives,
                    body=[Verbatim(text) for text in statements_chunks(fp.original_body)])
                fp.original_body = None
        body = fp.fn.body
        assert body is not None
        fp.release()
        fp.fn.body = None
        fp.fn.body = [Verbatim(text) for text in statements_chunks(body)]
        fp.finished = True

    def finish(self, unchecked: dict[str, str]) -> InstrumentResult:
        module, needy = self.module, self.needy
        # the hidden parameters of the windows each needy function takes (a
        # function that checks nothing through its pointers takes none)
        windows = {fp.fn.name: {k: hidden_params(fp, k) for k in sorted(fp.windows)}
                   for fp in self.plans if fp.windows and fp.fn.name in needy}
        for fp in self.plans:
            if fp.finished:
                continue
            if fp.fn.name in needy:
                fp.needs_ctx = True
            calls = {id(c.instr): c for c in self.call_sites.get(fp.fn.name, ())}
            own = set(windows.get(fp.fn.name, ()))
            caller = Caller(own, own & fp.decided, fp.root_index)
            self._finish_function(fp, _Arguments(needy, windows, calls, caller,
                                                 freeing=self.freeing))
        stats = {fp.display: fp.stats for fp in self.plans}
        for fp in self.plans:
            if fp.kernel:
                self.sites.kernels[fp.fn.name] = self.kernel_infos[fp.fn.name]
        printed = {fp.fn.name: fp.calls.direct for fp in self.plans}
        for fn in module.functions:
            if not fn.is_kernel and fn.name in needy:
                fn.params.append(Param(CONTEXT_PARAM, ".b64"))
                for names in windows.get(fn.name, {}).values():
                    fn.params.extend(Param(name, ".b64") for name in names[:2])
                    fn.params.extend(Param(name, ".b32") for name in names[2:])
        if self.targets is not None:
            # copies no checked kernel reaches through a checked call path are dead
            drop_unused_copies(module, set(self.display), printed)
        self.sites.unchecked = dict(sorted(unchecked.items()))
        # each kernel with a launch proof is followed by its proven entry
        items = []
        for item in module.items:
            items.append(item)
            if isinstance(item, Function) and item.name in self.proven:
                items.append(self.proven[item.name])
        module.items[:] = items
        link(module, heap=self.heap)
        return InstrumentResult(ptx.emit(module), self.sites, stats, module)


def _mark_freeing(plans: list[FunctionPlan]) -> set[str]:
    """Mark the functions calling the device heap's ``free``, directly or
    through their calls (``frees_heap``); returns their names."""
    freeing = {fp.fn.name for fp in plans if fp.frees_heap}
    changed = True
    while changed:
        changed = False
        for fp in plans:
            if fp.fn.name not in freeing and fp.calls.direct & freeing:
                freeing.add(fp.fn.name)
                fp.frees_heap = changed = True
    return freeing


def _needing_context(plans: list[FunctionPlan]) -> set[str]:
    """The device functions that need the launch context: those checking an
    access and, transitively, those calling one."""
    needy = {fp.fn.name for fp in plans if not fp.kernel and fp.needs_ctx}
    changed = True
    while changed:
        changed = False
        for fp in plans:
            if fp.kernel or fp.fn.name in needy:
                continue
            if fp.calls.direct & needy:
                needy.add(fp.fn.name)
                changed = True
    return needy


def _call_problem(fp: FunctionPlan, needy: set[str]) -> str | None:
    """Why the calls of ``fp`` cannot be checked, if they cannot: an indirect
    call may reach a function that needs the context (its prototype has no
    room for it), and a function whose address is taken may be called so."""
    if fp.calls.indirect and needy:
        instr = fp.calls.indirect[0]
        return CannotCheck(instr, "an indirect call in a module whose device functions need "
                                  "gpusafe's launch context: the callee cannot receive it").reason
    for name, instr in fp.calls.symbols.items():
        if name in needy:
            return CannotCheck(instr, f"takes the address of device function {name}, which "
                                      f"needs gpusafe's launch context: indirect calls to it "
                                      f"cannot pass it").reason
    return None


def _reaching(problems: dict[str, str], plans: list[FunctionPlan],
              display: dict[str, str]) -> dict[str, str]:
    """``problems`` and every planned function calling one of them, directly
    or not (with the reason of the one it reaches)."""
    out = dict(problems)
    changed = True
    while changed:
        changed = False
        for fp in plans:
            name = fp.fn.name
            if name in out:
                continue
            callee = next((c for c in sorted(fp.calls.direct) if c in out), None)
            if callee is not None:
                shown = display.get(callee, callee)
                out[name] = f"calls {shown}, which gpusafe cannot check: {out[callee]}"
                changed = True
    return out


def _kernel_info(fp: FunctionPlan) -> KernelInfo:
    """The launch ABI of a checked kernel: its parameters, the hidden one
    appended here, its pointer roots and check slots."""
    params = fp.fn.params
    offsets = _param_offsets(params)
    own = len(params)
    limits = limits_as_params(params, len(fp.slots))
    params.append(Param(CONTEXT_PARAM, ".u64"))
    if limits:
        params.extend(Param(limit_param(i), ".u64") for i in range(len(fp.slots)))
    return KernelInfo(
        name=fp.fn.name,
        params=tuple((p.name, off, p.size)
                     for p, off in zip(params[:own], offsets, strict=True)),
        context_param_offset=_param_offsets(params)[own],
        roots=tuple(RootInfo(r.index, r.param, r.offset, offsets[r.index]) for r in fp.roots),
        slots=tuple(SlotInfo(s.roots, s.end, s.align) for s in fp.slots),
        limit_params=limits,
        proof=fp.launch_proof,
    )


def _param_offsets(params: list[Param]) -> list[int]:
    return [slot.offset for slot in query.param_layout(params)[0]]


# --------------------------------------------------------------------------
# call sites


@dataclass
class _Arguments:
    """What the calls of one function pass in hidden arguments: the launch
    context to every function in ``needy``, and to a function of
    ``windows`` (its windowed parameters' hidden ones) the window of each
    pointer argument that carries one (from ``calls``, the call's sources;
    ``caller``: the windows the caller itself receives, which it forwards,
    and its roots)."""

    needy: set[str]
    windows: dict[str, dict[int, tuple[str, ...]]]
    calls: dict[int, CallSite]
    caller: Caller
    heap: dict[int, int] = field(default_factory=dict)
    """The device heap's malloc/free calls (id -> site): they go to the runtime."""
    cache: bool = False  # the caller keeps a lookup cache (``uclo``/``uchi``)
    freeing: set[str] = field(default_factory=set)
    """Functions that may free a heap block: after a call, the cache is forgotten."""

    def wanted(self, s: Statement) -> bool:
        return type(s) is Instruction and s.op == "call" and (
            query.call_target(s) in self.needy or id(s) in self.heap)


def _pass_context(fn: Function, args: _Arguments) -> None:
    """Every direct call of ``fn`` to a function needing the context passes it
    (and the windows the callee takes); a call of the device heap's
    ``malloc``/``free`` becomes a call of the runtime's wrapper, passed the
    context and its site."""
    if not args.needy and not args.heap:
        return
    body = fn.body
    assert body is not None
    for i, s in enumerate(body):
        if type(s) is Block:
            _pass_context_in_block(s, args)
        elif args.wanted(s):
            assert type(s) is Instruction
            body[i] = Block(_hidden_arguments(s, args))


def _pass_context_in_block(blk: Block, args: _Arguments) -> None:
    out: list[Statement] = []
    declared = False  # the block's scope holds one set of argument variables
    for s in blk.statements:
        if args.wanted(s):
            assert type(s) is Instruction
            if declared:
                out.append(Block(_hidden_arguments(s, args)))
            else:
                out.extend(_hidden_arguments(s, args))
                declared = True
            continue
        if type(s) is Block:
            _pass_context_in_block(s, args)
        out.append(s)
    blk.statements[:] = out


_CTX_ARGUMENT = "__gs_ctxarg"
_SITE_ARGUMENT = "__gs_sitearg"
_CACHE_LOW, _CACHE_HIGH = "%__gs_uclo", "%__gs_uchi"  # the Emitter's lookup cache


def _hidden_arguments(call: Instruction, args: _Arguments) -> list[Statement]:
    """The statements replacing ``call``: the hidden arguments declared and
    stored, and the call with them appended to its argument list."""
    callee = query.call_target(call)
    assert callee is not None
    names = [_CTX_ARGUMENT]
    out: list[Statement] = [
        Variable(".param", ".b64", _CTX_ARGUMENT),
        I("ld.param.u64", CONTEXT_REGISTER, Address(Symbol(CONTEXT_PARAM))),
        I("st.param.b64", Address(Symbol(_CTX_ARGUMENT)), CONTEXT_REGISTER),
    ]
    heap_site = args.heap.get(id(call))
    if heap_site is not None:
        names.append(_SITE_ARGUMENT)
        out += [Variable(".param", ".b32", _SITE_ARGUMENT),
                I("st.param.b32", Address(Symbol(_SITE_ARGUMENT)), heap_site)]
    taken = args.windows.get(callee, {})
    if taken:
        site = args.calls.get(id(call))
        out += [RegisterDecl(t, ((r, None),)) for r, t in CALL_REGISTERS]
        for k, hidden in taken.items():
            source = site.sources[k] if site is not None and k < len(site.sources) else None
            passed = (f"__gs_w{k}lo", f"__gs_w{k}hi", f"__gs_w{k}d")[:len(hidden)]
            names += passed
            out += [Variable(".param", ".b64", n) for n in passed[:2]]
            out += [Variable(".param", ".b32", n) for n in passed[2:]]
            out += window_arguments(source, passed, args.caller)
    ops = list(call.operands)
    idx = next(i for i, o in enumerate(ops) if isinstance(o, Symbol))
    if heap_site is not None:
        ops[idx] = Symbol(HEAP_WRAPPERS[callee])
    extra = tuple(Symbol(n) for n in names)
    rest = ops[idx + 1] if idx + 1 < len(ops) else None
    if isinstance(rest, ArgumentList):
        ops[idx + 1] = ArgumentList(rest.items + extra)
    else:
        ops.insert(idx + 1, ArgumentList(extra))
    out.append(Instruction(call.opcode, tuple(ops), call.guard, line=call.line))
    if args.cache and (callee in args.freeing or (heap_site is not None and callee == "free")):
        # the block whose window the cache holds may have been freed
        out += [I("mov.u64", _CACHE_LOW, layout.EMPTY_WINDOW[0]),
                I("mov.u64", _CACHE_HIGH, layout.EMPTY_WINDOW[1])]
    return out
