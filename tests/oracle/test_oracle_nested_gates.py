"""The oracle on random discrete models with nested gates (gatebound15, issues 10/11).

``models.discrete(nested=True)``: gates up to three deep, more often; If inside Case
inside Switch; a Switch after Case gates on its condition, and ``ff.Case(z, k)`` inside
``ff.Switch(z)`` (its k-th case alone); exit variables read by later gates, on observed and
latent conditions, so gates on an exit's selector inside gates on the exit (oracle seed
8: a VMP bound above log Z, now moved outside by ``transforms.gate_order``).  Checks:

* EP: log Z and the marginals exact where the model is a tree (``traits.ep_exact``);
* VMP: the bound at most log Z, never falling with more sweeps, and equal to the ELBO
  of its posteriors computed directly by enumeration, E_q[log p(x, data)] + H[q], to
  1e-10, where q is the returned marginals times, for each exit variable e of a gate on
  z, its posterior in each case, q(e | z) (the gate's own, read from a checkpoint):
  models whose latent variables inside gates are such exits, drawn directly in the
  branches of a top-level gate (others hold more per case);
* a VMP refusal of an exit read beside its selector outside its gates is allowed
  (documented), any other exception is a failure.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given

from tests.oracle import models
from tests.oracle.checks import oracle_settings
from tests.oracle.exact import _assignment, _Walk, latent_discrete_slots
from tests.oracle.spec import Draw, Gate, Plate, declared
from tests.oracle.test_oracle_discrete import ep_checks, vmp_checks

SETTINGS = oracle_settings(120)


def _top_exits(spec) -> dict[str, Gate] | None:
    """The exit variables of gates on latent conditions at the top level (or directly in
    the plate), each with its gate, when every latent variable drawn inside a gate is
    one of them, drawn directly in the gate's branches; else None (VMP holds other
    variables per case, which :func:`direct_elbo` does not model)."""
    variables = declared(spec)
    exits: dict[str, Gate] = {}

    def latent_draws(stmts) -> list[str]:
        out = []
        for s in stmts:
            if isinstance(s, Draw) and s.observed is None:
                out.append(s.name)
            elif isinstance(s, Gate):
                out += [n for _, b in s.branches for n in latent_draws(b)]
            elif isinstance(s, Plate):
                out += latent_draws(s.body)
        return out

    def top(stmts) -> bool:
        for s in stmts:
            if isinstance(s, Plate) and not top(s.body):
                return False
            if not isinstance(s, Gate):
                continue
            inner = [latent_draws(b) for _, b in s.branches]
            direct = [[d.name for d in b if isinstance(d, Draw) and d.observed is None]
                      for _, b in s.branches]
            if inner != direct or any(set(names) != set(inner[0]) for names in inner):
                return False  # a latent variable deeper, or defined in some cases only
            complete = s.kind == "switch" or len(s.branches) == variables[s.cond].categories
            if inner[0] and not (complete and variables[s.cond].latent):
                return False  # a variable of some cases only, or of an observed condition
            exits.update({name: s for name in inner[0]})
        return True

    return exits if top(spec.body) else None


def direct_elbo(spec, posteriors, per_case=None) -> float:
    """E_q[log p(latents, data)] + H[q] by enumeration of every configuration of the
    latent discrete variables (``exact``'s walk), for q the product of ``posteriors``
    (name -> probabilities per element, last axis the category), except that an exit
    variable in ``per_case`` (name -> (its gate, probabilities per element and case:
    VMP's q(e | z))) takes the row of its gate's case in each configuration."""
    variables = declared(spec)
    slots = latent_discrete_slots(variables)
    assignment, count = _assignment(variables, slots, 1 << 16)
    walk = _Walk(spec, variables, assignment, None)
    log_q = np.zeros(count)
    for slot in slots:
        name, i = slot
        x = np.asarray(assignment[slot]).astype(int).ravel()
        if per_case and name in per_case:
            gate, probs = per_case[name]
            probs = probs if i is None else probs[i]
            cond = variables[gate.cond]
            selector = np.asarray(assignment[(gate.cond, None if cond.range is None
                                              else i)]).astype(int).ravel()
            # a boolean condition's case 0 is True (ff.Case(b, 1) is ff.If(b))
            case = (1 - selector) if cond.domain == "bool" else selector
            rows = probs[case]
        else:
            probs = np.asarray(posteriors[name], float)
            rows = np.broadcast_to(probs if i is None else probs[i], (count, probs.shape[-1]))
        log_q += np.log(rows[np.arange(count), x])
    q = np.exp(log_q)
    logw = np.broadcast_to(walk.logw, (count, 1))[:, 0]
    with np.errstate(invalid="ignore"):
        return float(np.sum(np.where(q > 0, q * (logw - log_q), 0.0)))


def _probs(post) -> np.ndarray:
    if hasattr(post, "probs"):
        return np.asarray(post.probs, float)
    p = np.asarray(post.p, float)
    return np.stack([1.0 - p, p], axis=-1)


@SETTINGS
@given(models.discrete(nested=True))
def test_ep_on_nested_gates(spec):
    ep_checks(spec).verdict()


def _per_case(c, exits: dict[str, Gate], path) -> dict[str, tuple[Gate, np.ndarray]]:
    """VMP's q(e | z) of each exit variable: the gate transform's clone of e (attr
    ``exit_of``), read from the run's checkpoint at ``path``."""
    from factorflow.runtime.checkpoint import read
    compiled = c._compile()
    names = compiled.compilation.bindings.names
    messages = read(path)[1]["messages"]
    out = {}
    for name, gate in exits.items():
        ident = names[c.labels[name]]
        clone = next(d.name for d in compiled.program.decls if d.attr("exit_of") == ident)
        out[name] = (gate, _probs(messages[f"{clone}__marginal"]))
    return out


@SETTINGS
@given(spec=models.discrete(nested=True))
def test_vmp_on_nested_gates(tmp_path_factory, spec):
    c = vmp_checks(spec)
    c.verdict()
    exits = _top_exits(spec)
    if c.refused is not None or exits is None:
        return
    path = tmp_path_factory.mktemp("vmp") / "run.ckpt"
    result = c._compile().run(iterations=200, progress=False, checkpoint=path)
    posteriors = {name: _probs(result.posteriors[label])
                  for name, label in c.labels.items() if label in result.posteriors
                  and declared(spec)[name].latent}
    elbo = direct_elbo(spec, posteriors, _per_case(c, exits, path) if exits else None)
    assert result.log_evidence <= c.ref.log_z + 1e-9 * max(1.0, abs(c.ref.log_z))
    assert abs(result.log_evidence - elbo) <= 1e-10 * max(1.0, abs(elbo)), (
        f"VMP bound {result.log_evidence!r} against the ELBO of its posteriors {elbo!r}"
        f"\n{spec}")
