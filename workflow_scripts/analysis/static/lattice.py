"""The types of the flow inference: a small join lattice of value kinds, tuples, sequences, modules and references.

``join`` merges the types a name can have on two paths (a tensor on either side stays a tensor); ``clip`` bounds
their size so that loops, recursion and unions cannot grow them without limit. (Not named ``types``: that would
shadow the standard library's module for anything run from inside this folder.)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Union


class Kind(Enum):
    TENSOR = "tensor"
    INT = "int"  # python scalars: ints, floats, bools
    SHAPE = "shape"  # a tuple of ints from x.shape / x.size() / x.stride()
    PTR = "ptr"  # derived from data_ptr() / id() / hash(): an int that names an object
    OTHER = "other"  # unknown / None / strings / dicts: the bottom of the join


@dataclass(frozen=True)
class Tup:
    elts: tuple


@dataclass(frozen=True)
class Seq:
    elem: object


@dataclass(frozen=True)
class Mod:
    """An nn.Module instance: possible classes ("torch.nn.Conv2d", "local:Block") and container elements."""

    quals: frozenset
    elems: frozenset = frozenset()


@dataclass(frozen=True)
class Refs:
    """References to callables/modules: dotted external names or "func:", "kernel:", "class:", "method:",
    "local:" entries for things defined in the answer."""

    names: frozenset


@dataclass(frozen=True)
class SelfTy:
    cls: str
    super_of: str | None = None  # set for super(): look up after this class in the MRO


@dataclass(frozen=True)
class Bound:
    recv: object
    name: str


@dataclass(frozen=True)
class LambdaTy:
    key: int


Ty = Union[Kind, Tup, Seq, Mod, Refs, SelfTy, Bound, LambdaTy]
T, I, S, P, O = Kind.TENSOR, Kind.INT, Kind.SHAPE, Kind.PTR, Kind.OTHER


def refs(*names: str) -> Refs:
    return Refs(frozenset(names))


# Size bounds of inferred types, so that loops, recursion and unions cannot grow them without limit.
_MAX_SET = 8
_MAX_TUPLE = 16
_MAX_NEST = 4
_MAX_DOTS = 8


def clip(ty: Ty, depth: int = 0) -> Ty:
    if isinstance(ty, Kind) or isinstance(ty, (SelfTy, LambdaTy)):
        return ty
    if depth >= _MAX_NEST:
        return O
    if isinstance(ty, Refs):
        names = sorted(n for n in ty.names if n.count(".") <= _MAX_DOTS)[:_MAX_SET]
        if not names:
            return O
        return ty if len(names) == len(ty.names) else Refs(frozenset(names))
    if isinstance(ty, Tup):
        if len(ty.elts) > _MAX_TUPLE:
            return Seq(clip(join_all(ty.elts), depth + 1))
        return Tup(tuple(clip(e, depth + 1) for e in ty.elts))
    if isinstance(ty, Seq):
        return Seq(clip(ty.elem, depth + 1))
    if isinstance(ty, Bound):
        return Bound(clip(ty.recv, depth + 1), ty.name)
    if isinstance(ty, Mod):
        quals = frozenset(sorted(ty.quals)[:_MAX_SET])
        elems = frozenset(clip(e, depth + 1) for e in sorted(ty.elems, key=repr)[:_MAX_SET])
        return Mod(quals, elems)
    return O


def join(a: Ty, b: Ty) -> Ty:
    return clip(_join(a, b))


def _join(a: Ty, b: Ty) -> Ty:
    if a == b:
        return a
    if a is O:
        return b
    if b is O:
        return a
    if a is T or b is T:
        return T  # a tensor on either side stays a tensor
    if {a, b} <= {I, P}:
        return P  # pointer taint survives
    if isinstance(a, Tup) and isinstance(b, Tup) and len(a.elts) == len(b.elts):
        return Tup(tuple(join(x, y) for x, y in zip(a.elts, b.elts)))
    if S in (a, b) and (isinstance(a, Tup) or isinstance(b, Tup)):
        return S
    if isinstance(a, Seq) and isinstance(b, Seq):
        return Seq(join(a.elem, b.elem))
    if isinstance(a, Mod) and isinstance(b, Mod):
        return Mod(a.quals | b.quals, a.elems | b.elems)
    if isinstance(a, Refs) and isinstance(b, Refs):
        return Refs(a.names | b.names)
    return O


def join_all(types: Iterable[Ty]) -> Ty:
    out: Ty = O
    for t in types:
        out = join(out, t)
    return out


def contains(ty: Ty, kind: Kind) -> bool:
    if ty is kind:
        return True
    if isinstance(ty, Tup):
        return any(contains(e, kind) for e in ty.elts)
    if isinstance(ty, Seq):
        return contains(ty.elem, kind)
    return False


def elem_of(ty: Ty) -> Ty:
    """Type of the items produced by iterating / indexing ``ty``."""
    if ty is T:
        return T
    if ty is S:
        return I
    if isinstance(ty, Seq):
        return ty.elem
    if isinstance(ty, Tup):
        return join_all(ty.elts)
    if isinstance(ty, Mod):
        return container_elem(ty)
    return O


def container_elem(mod: Mod) -> Ty:
    if mod.elems:
        return join_all(mod.elems)
    return Mod(frozenset(q + "[]" for q in mod.quals))  # unknown elements of a torch container: torch layers
