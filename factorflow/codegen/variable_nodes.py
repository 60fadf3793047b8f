"""The emitter's rules for the statements of a variable node (``Variable.marginal``,
``.use``, ``.backward``, ``.evidence``): products of a variable's messages over the
plates its uses add, gathers and scatters, and EP's variable evidence.

Each rule is a method of the emitter (``factorflow.codegen.python``), written here as a
function of it: it writes one array statement through ``e.emit``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from factorflow.codegen import names
from factorflow.ir import Ref, Stmt, VarDecl

if TYPE_CHECKING:
    from factorflow.codegen.python import _Emitter


def gather_index(e: _Emitter, index: Ref, use_plates: tuple[str, ...], var: VarDecl) -> str:
    """A gather's index array laid out over the plates it selects along: the use's plates
    but for the variable's other plates, which a gather along its first axis keeps whole
    and last (``copy[idx[n], k]``, a switch case's copy of an entered array: the index
    runs over n only, the case axis k is taken whole; ``channels._use_plates``).  An
    index over fewer of those plates (an observed Switch's condition over n, read in a
    plate opened inside the Switch) is broadcast along the others, so the gather and its
    scatter see one index per use element; so is one observed index (no plates) read
    over plates."""
    rest = var.plates[1:]
    if rest and use_plates[len(use_plates) - len(rest):] == rest:
        use_plates = use_plates[:len(use_plates) - len(rest)]
    own = index.index if all(isinstance(i, str) for i in index.index) else ()
    decl = e.decls.get(index.var)
    if not own and use_plates and decl is not None and decl.role == "observed" \
            and not decl.plates:  # one observed value (a Switch's condition) for them all
        return f"np.broadcast_to({index.var}, {e.shape(use_plates)})"
    if not own or own == use_plates or not set(own) <= set(use_plates):
        return index.var
    positions = tuple(use_plates.index(p) for p in own)
    return (f"np.broadcast_to(align_plates({index.var}, {positions}, {len(use_plates)}), "
            f"{e.shape(use_plates)})")


def reduced(e: _Emitter, name: str, how: tuple, use_plates: tuple[str, ...],
            var: VarDecl) -> str:
    """A use's message over the variable's own plates: multiplied over the plates the
    use adds, placed at its slot, or scattered back through a gather's index."""
    if how[0] == "same":
        return name
    if how[0] == "broadcast":
        axes = tuple(use_plates.index(p) for p in how[1])
        return f"prod_over({name}, {e.shape(use_plates)}, axis={axes})"
    if how[0] == "element":
        axes = tuple(use_plates.index(p) for p in how[2])
        return (f"place_element({name}, {tuple(how[1])}, {e.shape(use_plates)}, "
                f"{axes}, {e.shape(var.plates)})")
    if how[0] == "slots":
        extra = _slot_extra(use_plates, var)
        if extra != tuple(range(len(extra))):  # place_slots multiplies out leading ones
            name = f"prod_over({name}, {e.shape(use_plates)}, axis={extra})"
        return f"place_slots({name}, {tuple(how[1])}, {e.shape(var.plates)})"
    size = var.plates[0]
    return (f"scatter_prod({name}, {gather_index(e, how[1], use_plates, var)}, "
            f"{e.shape(use_plates)}, {size})")


def _slot_extra(use_plates: tuple[str, ...], var: VarDecl) -> tuple[int, ...]:
    """The axes of a ``slots`` use (a gate's clone, its slot axis last) that the cases
    variable ``var`` (its case axis last) does not have: a plate opened inside the gate,
    in a gate inside a plate, lies between the cases' plates and the slot axis."""
    return tuple(i for i, p in enumerate(use_plates[:-1]) if p not in var.plates[:-1])


def marginal(e: _Emitter, s: Stmt, depth: int) -> None:
    """The posterior: the definition's message times every use's, reduced (those it reads:
    a posterior fixed by certain messages reads only those, ``transforms.pruning``)."""
    var = e.decls[s.param("target")]
    hows, uplates = s.param("uses"), s.param("use_plates")
    terms = [dict(s.inputs)["def"].var] if "def" in dict(s.inputs) else []
    done = s.param("reduced_uses", ())  # multiplied over their plates by their operator
    for k, (how, up) in enumerate(zip(hows, uplates, strict=True)):
        key = f"use{k}"
        if key in dict(s.inputs):
            name = dict(s.inputs)[key].var
            terms.append(name if k in done else reduced(e, name, how, up, var))
    product = " * ".join(terms)
    if var.plates:  # a message shared by the whole plate still gives one posterior each
        product = f"fit_plates({product}, {e.shape(var.plates)})"
    e.emit(f"{s.outputs[0].var} = {product}", depth)


def use(e: _Emitter, s: Stmt, depth: int) -> None:
    """The message to a use: the posterior laid out on the use's plates (EP: divided by
    the use's own message)."""
    var = e.decls[s.param("target")]
    k = s.param("use")
    how, up = s.param("uses")[k], s.param("use_plates")[k]
    ins = dict(s.inputs)
    marg = ins["marginal"].var
    if how[0] == "gather":
        marg = f"{marg}.take({gather_index(e, how[1], up, var)})"
    elif how[0] == "element":
        marg = f"take_element({marg}, {tuple(how[1])})"
        rest = tuple(p for i, p in enumerate(var.plates) if i not in dict(how[1]))
        if rest and up[-len(rest):] != rest:
            marg = f"align_plates({marg}, {tuple(up.index(p) for p in rest)}, {len(up)})"
    elif how[0] == "slots":
        marg = f"take_slots({marg}, {tuple(how[1])})"
        extra = _slot_extra(up, var)
        if extra != tuple(range(len(extra))):  # not broadcast from the left: laid out
            marg = (f"align_plates({marg}, "
                    f"{tuple(up.index(p) for p in var.plates[:-1]) + (len(up) - 1,)}, "
                    f"{len(up)})")
    elif how[0] == "broadcast" and var.plates and up[-len(var.plates):] != var.plates:
        marg = f"align_plates({marg}, {tuple(up.index(p) for p in var.plates)}, {len(up)})"
    rhs = f"{marg} / {ins['use'].var}" if "use" in ins else marg
    if id(s) in e.cavities:  # (EP, the one use: the posterior over its message is F)
        rhs = _over(e, e.cavities[id(s)], var)
    e.emit(f"{s.outputs[0].var} = {rhs}", depth)


def _over(e: _Emitter, name: str, var: VarDecl) -> str:
    """The message ``name`` over exactly the plates of ``var`` (a message shared by the
    plate as a broadcast view, as a product with a uniform one over them gives)."""
    return f"fit_plates({name}, {e.shape(var.plates)})" if var.plates else name


def backward(e: _Emitter, s: Stmt, depth: int) -> None:
    """The message to the definition: the uses' product for a derived variable, else the
    posterior (EP: divided by the definition's message)."""
    ins = dict(s.inputs)
    out = s.outputs[0].var
    if s.param("derived"):
        var = e.decls[s.param("target")]
        fam = e.symbol(var_family(e.decls, out), "family", var_family(e.decls,
                                                                           out))
        terms = []
        done = s.param("reduced_uses", ())
        for k, (how, up) in enumerate(zip(s.param("uses"), s.param("use_plates"),
                                          strict=True)):
            name = ins[f"use{k}"].var
            bare = k in done or how[0] == "same"
            if e.hoisting and bare and name in e.uniform and \
                    e.decls[name].plates == var.plates:
                # uniform all run long, over the variable's plates: a product with the
                # uniform factor in front returns the other factor itself (left out)
                continue
            terms.append(name if bare else reduced(e, name, how, up, var))
        one = terms[0] if len(terms) == 1 else None
        if e.hoisting and one in e.decls and e.decls[one].plates == var.plates \
                and e.deferred.get(one) is not None:
            # the uniform factor times one message over the variable's plates is that
            # message (a deferred one stays deferred, ``common.Deferred``): no product
            e.emit(f"{out} = {one if e.deferred[one] else _over(e, one, var)}", depth)
            return
        uniform = e.hoist(f"{fam}.uniform({e.shape(var.plates)}{e.event(e.decls[out])})",
                          f"uniform_{fam}")  # (made once per run: see ``hoist``)
        e.emit(f"{out} = {' * '.join([uniform] + terms)}", depth)
    elif id(s) in e.cavities:  # (EP, the one use: the posterior over F is its message)
        e.emit(f"{out} = {_over(e, e.cavities[id(s)], e.decls[s.param('target')])}", depth)
    elif "def" in ins:
        e.emit(f"{out} = {ins['marginal'].var} / {ins['def'].var}", depth)
    else:
        e.emit(f"{out} = {ins['marginal'].var}", depth)


def evidence(e: _Emitter, s: Stmt, depth: int) -> None:
    """The variable's evidence term: VMP's entropy term, or EP's edge corrections."""
    ins = dict(s.inputs)
    marg = ins["marginal"].var
    var = e.decls[s.param("target")]
    # the term runs over the variable's plates; sent to a gate, over those of the case's
    # message (a variable defined in a plate opened inside a Switch: in another order)
    loops = e.decls[s.outputs[0].var].plates if s.param("to_gate") else var.plates
    order = (tuple(var.plates.index(p) for p in loops)
             if var.plates != loops and sorted(var.plates) == sorted(loops) else None)
    if s.param("algorithm") == "vmp":
        term = f"vmp_variable_evidence({marg})"
        e.evidence_term(s, f"permute_plates({term}, {order})" if order else term, depth)
        return
    v = s.param("target")
    edges = [f"({names.forward(v)}, {ins['def'].var}, None, ())"]
    for k, (how, up) in enumerate(zip(s.param("uses"), s.param("use_plates"),
                                      strict=True)):
        if how[0] == "gather":
            h = f"('gather', {gather_index(e, how[1], up, var)})"
        elif how[0] == "broadcast":
            h = f"('broadcast', None, {tuple(up.index(p) for p in how[1])})"
        elif how[0] in ("element", "slots"):
            h = repr((how[0], tuple(how[1]), tuple(up.index(p) for p in how[2])) if
                     how[0] == "element" else ("slots", tuple(how[1])))
        else:
            h = "('same',)"
        use_f = ins[f"use{k}"].var
        # a use inside an observed condition is an edge only where the condition holds
        mask = e.mask_of(s.param("use_masks", ((),) * len(s.param("uses")))[k], up)
        edges.append(f"({names.backward(names.split_derived(use_f)[0])}, {use_f}, {h}, "
                     f"{e.shape(up)}" + (f", {mask})" if mask else ")"))
    term = f"ep_variable_evidence({marg}, [{', '.join(edges)}], {e.shape(var.plates)})"
    e.evidence_term(s, f"permute_plates({term}, {order})" if order else term, depth)


def var_family(decls: dict[str, VarDecl], name: str) -> str:
    """The message family of the declaration ``name``."""
    family = decls[name].family
    assert family is not None
    return family
