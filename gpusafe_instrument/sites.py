"""The site table: one entry per check the pass emitted.

A device-side violation record carries a site id; the site table turns it
back into what a report shows: the function and PTX line of the original
instruction, the CUDA source location from ``.loc``, the instruction text, the
access kind, width and state space, and how the check was made (its
provenance).  ``kernels`` describes each instrumented kernel's launch ABI: the
pointer roots the host must resolve into the launch context and the check
slots whose limits it computes (see ``gpusafe_instrument/layout.py``); ``unchecked``
names the kernels the pass left as they were, and why.

Plain data, JSON-serialisable both ways (:meth:`SiteTable.to_json` /
:meth:`SiteTable.from_json`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

SCHEMA = "gpusafe-sites/1"


@dataclass(frozen=True)
class Site:
    id: int
    function: str  # the .entry or .func holding the instruction
    ptx_line: int  # line of the original instruction in the input PTX
    file: str | None
    line: int | None
    column: int | None
    instruction: str
    access: str  # "read" | "write" | "atomic"
    width: int
    space: str  # "global" | "shared" | "local" | "generic"
    check: str  # "root" | "window" | "lookup" | "alignment"
    root: str | None = None  # the parameter or variable the address derives from
    tally: int = -1
    """The site's first tally (``layout.SITE_TALLY``): a failing access counts
    there and the host classifies it (``host.decode_tallies``); -1: the site
    writes violation records.  A window site of alignment > 1 has a second
    tally, ``tally + 1``, for the accesses inside the variable but
    misaligned (the host knows no variable's address); so has an argument
    site (a decided parameter's callers may pass variables)."""
    alignment: int = 1  # the access's required alignment
    root_index: int = -1  # a root site's root (``KernelInfo.roots``)
    root_space: str | None = None  # a window site's variable's state space

    @property
    def tallies(self) -> int:
        """How many tallies the site has."""
        if self.tally < 0:
            return 0
        return 2 if self.check in ("window", "argument") and self.alignment > 1 else 1


@dataclass(frozen=True)
class RootInfo:
    """A pointer root: kernel parameter ``param_index`` (named ``param``), at
    byte ``offset`` inside it; ``param_offset`` is the parameter's offset in the
    packed parameter buffer."""

    param_index: int
    param: str
    offset: int
    param_offset: int


@dataclass(frozen=True)
class SlotInfo:
    """A check slot: limit = min over ``roots`` of valid start offsets for an
    access ending ``end`` bytes after it, 0 unless each root's pointer is a
    multiple of ``align``."""

    roots: tuple[int, ...]
    end: int
    align: int


PROVEN_SUFFIX = "__gpusafe_proven"
"""A kernel's proven entry is its name followed by this (``KernelInfo.proof``)."""


@dataclass(frozen=True)
class KernelInfo:
    name: str
    params: tuple[tuple[str, int, int], ...]  # (name, offset in the param buffer, size)
    context_param_offset: int  # offset of the hidden parameter in the param buffer
    roots: tuple[RootInfo, ...]
    slots: tuple[SlotInfo, ...]
    limit_params: bool = False  # each slot's limit is a hidden .u64 after the context pointer
    proof: str | None = None
    """The launch proof (JSON, ``checks/launch_proof.py``): when set, the
    module holds the kernel's proven entry (``proven_entry``), which takes
    the same parameters and is launched instead when the host proves the
    launch (``host.proven``)."""

    @property
    def proven_entry(self) -> str:
        """The name of the kernel's proven entry (``proof`` set)."""
        return self.name + PROVEN_SUFFIX

    @property
    def param_buffer_size(self) -> int:
        """Bytes of the instrumented kernel's parameters: the original ones,
        then the hidden ``.u64`` context pointer (and the slots' limits)."""
        return self.context_param_offset + 8 + 8 * len(self.hidden_limit_offsets)

    @property
    def hidden_limit_offsets(self) -> tuple[int, ...]:
        """Offsets of the hidden limit parameters in the parameter buffer."""
        if not self.limit_params:
            return ()
        return tuple(self.context_param_offset + 8 + 8 * i for i in range(len(self.slots)))

    @property
    def hidden_offsets(self) -> tuple[int, ...]:
        """Offsets of every hidden parameter: the context pointer, the limits."""
        return (self.context_param_offset, *self.hidden_limit_offsets)


@dataclass
class SiteTable:
    sites: list[Site] = field(default_factory=list)
    kernels: dict[str, KernelInfo] = field(default_factory=dict)
    unchecked: dict[str, str] = field(default_factory=dict)
    """Kernels left exactly as they were because the pass cannot check them:
    kernel name -> the reason (``PTX line N: cannot check `...`: why``).  They
    take no hidden parameter and are not in ``kernels``."""
    tally_count: int = 0
    """Site tallies of the module (``Site.tally``): the violation buffer has
    room for them below its header."""

    def __getitem__(self, site_id: int) -> Site:
        return self.sites[site_id]

    def __len__(self) -> int:
        return len(self.sites)

    def add(self, **fields) -> Site:
        site = Site(id=len(self.sites), **fields)
        self.sites.append(site)
        return site

    def to_dict(self) -> dict:
        return {
            "schema": SCHEMA,
            "sites": [asdict(s) for s in self.sites],
            "kernels": {k: asdict(v) for k, v in self.kernels.items()},
            "unchecked": dict(self.unchecked),
            "tally_count": self.tally_count,
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: dict) -> SiteTable:
        if data.get("schema") != SCHEMA:
            raise ValueError(f"not a gpusafe site table (schema {data.get('schema')!r})")
        sites = [Site(**s) for s in data["sites"]]
        kernels = {}
        for name, k in data["kernels"].items():
            kernels[name] = KernelInfo(
                name=k["name"],
                params=tuple(tuple(p) for p in k["params"]),
                context_param_offset=k["context_param_offset"],
                roots=tuple(RootInfo(**r) for r in k["roots"]),
                slots=tuple(SlotInfo(tuple(s["roots"]), s["end"], s["align"]) for s in k["slots"]),
                limit_params=bool(k.get("limit_params", False)),
                proof=k.get("proof"),
            )
        return cls(sites, kernels, dict(data.get("unchecked", {})),
                   int(data.get("tally_count", 0)))

    @classmethod
    def from_json(cls, text: str) -> SiteTable:
        return cls.from_dict(json.loads(text))
