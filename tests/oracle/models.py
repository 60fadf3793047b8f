"""Hypothesis strategies for random small models, as :class:`~tests.oracle.spec.Spec` data.

Three families:

* :func:`discrete` -- Bernoulli/Discrete variables with constant probabilities, gate groups
  (If/IfNot, Case, Switch; nested; exit variables; observed and latent conditions; observed
  variables with a different factor in each branch), an optional plate of size 0-4;
* :func:`linear_gaussian` -- Gaussians with known precision, sums ``a + b`` and scalings
  ``c * a``, observed children, an optional plate of size 0-4 (a hierarchy, observations,
  or a regression ``y[n] ~ N(x1[n] * w1 + x2[n] * w2 (+ b), .)``); with ``gated=True`` also
  discrete conditions selecting the mean or precision of an observed Gaussian, Gaussian exit
  variables, a variable drawn identically in every case of a Switch (and maybe a scaling
  or shift of it there too), and mixtures
  (``Switch(z): x ~ N(means[z], .)``);
* :func:`one_continuous` -- one Beta, Gamma, Dirichlet or Gaussian variable with conjugate
  observations (Bernoulli/Binomial, Poisson or Gaussian precision, Discrete, Gaussian),
  gated observations, latent discrete children, and for a Gaussian truncations
  ``constrain_true(x > t)`` / ``ff.is_positive`` and gates on comparisons.

The number of joint configurations of the latent discrete variables is kept under
``max_configurations`` (the references enumerate them).
"""

from __future__ import annotations

from hypothesis import strategies as st

from tests.oracle.spec import (
    Const,
    Constrain,
    Draw,
    Gate,
    Greater,
    Index,
    PerElement,
    Plate,
    Ref,
    Scale,
    Spec,
    Sum,
)

PROBABILITIES = (0.1, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
MEANS = (-2.0, -1.0, 0.0, 0.5, 1.0, 2.0, 3.0)
PRECISIONS = (0.25, 0.5, 1.0, 2.0, 4.0)
DATA = (-2.3, -1.1, -0.4, 0.0, 0.7, 1.2, 1.9, 2.6, 3.4)
SCALES = (-2.0, -1.0, 0.5, 2.0, 3.0)
FEATURES = (-1.5, -0.5, 0.0, 0.3, 1.0, 1.2, 2.0)


class _Gen:
    """Drawing state: fresh names, and the configuration budget."""

    def __init__(self, draw, max_configurations: int):
        self.draw = draw
        self.count = 0
        self.budget = max_configurations

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def pick(self, options):
        return self.draw(st.sampled_from(options))

    def flag(self, p_true: float = 0.5) -> bool:
        return self.draw(st.integers(0, 99)) < 100 * p_true

    def afford(self, categories: int, elements: int) -> bool:
        """Whether a latent variable with ``categories`` over ``elements`` fits the budget
        (and, if so, spend it)."""
        cost = categories ** elements
        if cost <= self.budget:
            self.budget //= cost
            return True
        return False

    def probs(self, k: int) -> tuple[float, ...]:
        weights = [self.draw(st.integers(1, 6)) for _ in range(k)]
        total = sum(weights)
        head = [round(w / total, 3) for w in weights[:-1]]
        return tuple(head + [round(1.0 - sum(head), 3)])

    def observed_value(self, family: str, k: int | None, elements: int | None):
        def one():
            if family == "Bernoulli":
                return self.flag()
            if family == "Discrete":
                return self.draw(st.integers(0, k - 1))
            if family == "Gaussian":
                return self.pick(DATA)
            if family == "Poisson":
                return self.draw(st.integers(0, 6))
            raise ValueError(family)
        return one() if elements is None else tuple(one() for _ in range(elements))


# ----- discrete ----------------------------------------------------------------------------
class _Discrete:
    """Blocks of discrete statements; ``scope`` lists readable variables as
    (name, categories, observed, plate elements or None)."""

    def __init__(self, g: _Gen, nested: bool = False):
        self.g = g
        self.cased: set[str] = set()  # conditions already met by a Case gate
        self.switches = 0  # how many Switch bodies the block being drawn is inside
        #: ``discrete(nested=True)``: deeper and more frequent gates, a Switch after Case
        #: gates on its condition, ff.Case(z, k) inside ff.Switch(z) (the k-th case alone),
        #: and gates on the selectors of exit variables inside gates on those exits
        self.nested = nested
        self.switched: list[str] = []  # the conditions of the Switches around
        self.exit_of: dict[str, str] = {}  # an exit variable -> its gate's condition

    def draw_var(self, scope, elements, depth):
        g = self.g
        family = g.pick(("Bernoulli", "Bernoulli", "Discrete"))
        k = 2 if family == "Bernoulli" else g.pick((2, 3))
        arg = Const(g.pick(PROBABILITIES)) if family == "Bernoulli" else Const(g.probs(k))
        latent = g.flag(0.6 if depth == 0 else 0.35) and g.afford(k, elements or 1)
        observed = None if latent else g.observed_value(family, k, elements)
        name = g.name("o" if observed is not None else ("c" if family == "Bernoulli" else "z"))
        return Draw(name, family, (arg,), observed), (name, family, k, observed, elements)

    def block(self, scope, elements, depth, items, enclosing=()):
        """``items`` statements; ``enclosing`` names the conditions of the gates around
        (a gate on one of them again would select nothing new)."""
        out = []
        scope = list(scope)
        for _ in range(items):
            conditions = [v for v in scope if v[1] in ("Bernoulli", "Discrete")
                          and v[0] not in enclosing]
            if elements is not None and depth > 0:  # a gate on a latent condition
                # outside the plate, nested in another gate inside it, cannot be hoisted
                # out of the plate: factorflow refuses it by name
                conditions = [v for v in conditions if v[4] is not None or v[3] is not None]
            if self.switches:  # inside a Switch's body a variable leaves every gate it is
                # defined in (it has no Switch axis): factorflow refuses a latent gate there
                # unless each of its variables is defined in all of its cases, so only
                # observed conditions gate inside a Switch here
                conditions = [v for v in conditions if v[3] is not None]
                if self.nested:  # ff.Case(z, k) inside ff.Switch(z): the k-th case alone
                    conditions += [v for v in scope if v[0] == self.switched[-1]]
            if conditions and depth < (3 if self.nested else 2) and \
                    self.g.flag(0.7 if self.nested else 0.55):
                stmt, exits = self.gate(scope, conditions, elements, depth, enclosing)
                out.append(stmt)
                scope += exits
            else:
                stmt, var = self.draw_var(scope, elements, depth)
                out.append(stmt)
                scope.append(var)
        return out, scope

    def gate(self, scope, conditions, elements, depth, enclosing):
        g = self.g
        local = [c for c in conditions if c[4] is not None]  # conditions over the plate
        cond = g.pick(local if local and g.flag(0.7) else conditions)
        if self.nested:  # a gate on an exit variable, and inside it on the exit's
            # selector (oracle seed 8's pattern), more often than by chance
            inside = [c for c in conditions if enclosing and
                      self.exit_of.get(enclosing[-1]) == c[0]]
            exits = [c for c in conditions if c[0] in self.exit_of]
            if inside and g.flag(0.8):
                cond = g.pick(inside)
            elif exits and g.flag(0.5):
                cond = g.pick(exits)
        name, family, k, _, _ = cond
        if family == "Bernoulli":
            kind = "case" if g.flag(0.03) else "if"
            keys = (True, False) if kind == "if" else (0, 1)
        else:
            # (a Switch after Case gates on the same condition was refused by factorflow
            # before session 15: only ``nested`` draws it, the default keeps its models)
            # (a Switch inside a plate on a condition outside it is refused too, with a
            # ModelError asking for the gate outside the plate: Case gates there instead)
            kind = "switch" if g.flag(0.25) and (self.nested or name not in self.cased) \
                and name not in self.switched and (
                elements is None or cond[4] is not None) else "case"
            keys = (None,) if kind == "switch" else tuple(range(k))
            if kind == "case":
                self.cased.add(name)
        complete = kind == "switch" or g.flag(0.7)
        if not complete:
            keys = keys[:g.draw(st.integers(1, len(keys) - 1))] if len(keys) > 1 else keys
        # an exit variable: the same name drawn in every branch (maybe observed: a
        # different factor per branch for one observed value)
        exit_spec = None
        if complete and g.flag(0.7):
            fam = g.pick(("Bernoulli", "Bernoulli", "Discrete"))
            kk = 2 if fam == "Bernoulli" else g.pick((2, 3))
            latent = g.flag(0.5) and g.afford(kk, elements or 1)
            obs = None if latent else g.observed_value(fam, kk, elements)
            exit_spec = (g.name("o" if obs is not None else "e"), fam, kk, obs)
        branches = []
        self.switches += kind == "switch"
        if kind == "switch":
            self.switched.append(name)
        for key in keys:
            body = []
            inner_scope = list(scope)
            if exit_spec is not None:
                ename, fam, kk, obs = exit_spec
                arg = Const(g.pick(PROBABILITIES)) if fam == "Bernoulli" else \
                    Const(g.probs(kk))
                body.append(Draw(ename, fam, (arg,), obs))
                inner_scope.append((ename, fam, kk, obs, elements))
            more, _ = self.block(inner_scope, elements, depth + 1,
                                 g.draw(st.integers(0 if exit_spec and not (
                                     self.nested and name in self.exit_of) else 1, 2)),
                                 enclosing + (name,))
            body += more
            branches.append((key, tuple(body)))
        self.switches -= kind == "switch"
        if kind == "switch":
            self.switched.pop()
        exits = []
        if exit_spec is not None:
            ename, fam, kk, obs = exit_spec
            exits.append((ename, fam, kk, obs, elements))
            self.exit_of[ename] = name
        return Gate(kind, name, tuple(branches)), exits


@st.composite
def discrete(draw, max_configurations: int = 256, nested: bool = False):
    """A random discrete model (see the module docstring); ``nested``: see
    ``_Discrete.nested``."""
    g = _Gen(draw, max_configurations)
    d = _Discrete(g, nested)
    body, scope = d.block([], None, 0, draw(st.integers(1, 3)))
    if draw(st.booleans()):
        size = draw(st.integers(0, 4))
        inner, _ = d.block(scope, size, 0, draw(st.integers(1, 3)))
        body.append(Plate("n", size, tuple(inner)))
    return Spec("discrete", tuple(body))


# ----- linear-Gaussian -----------------------------------------------------------------------
class _Gaussian:
    def __init__(self, g: _Gen):
        self.g = g
        self.reals: list[str] = []  # global latent reals (drawn or derived)
        #: a derived real as Σ c·(drawn real): a sum whose random parts cancel (g - g) is a
        #: constant, which the model API refuses, so the generator never writes one
        self.forms: dict[str, dict[str, float]] = {}

    def form(self, name: str) -> dict[str, float]:
        return self.forms.get(name, {name: 1.0})

    def gaussian(self, mean_choices, observed_elements=None, latent=True, name=None):
        g = self.g
        mean = g.pick(mean_choices) if mean_choices else Const(g.pick(MEANS))
        prec = Const(g.pick(PRECISIONS))
        if latent:
            name = name or g.name("g")
            return Draw(name, "Gaussian", (mean, prec))
        name = name or g.name("y")
        return Draw(name, "Gaussian", (mean, prec),
                    g.observed_value("Gaussian", None, observed_elements))

    def means(self):
        return [Ref(r) for r in self.reals]

    def core(self):
        """Roots, derived sums and scalings, latent and observed children."""
        g = self.g
        out = []
        for _ in range(g.draw(st.integers(1, 2))):
            s = self.gaussian(None)
            out.append(s)
            self.reals.append(s.name)
        for _ in range(g.draw(st.integers(0, 5))):
            choice = g.pick(("child", "child", "sum", "scale", "observe", "observe"))
            if choice == "child":
                s = self.gaussian(self.means() + [Const(g.pick(MEANS))])
                self.reals.append(s.name)
            elif choice == "sum":
                a, b = g.pick(self.reals), g.pick(self.reals)
                form = dict(self.form(a))
                for k, c in self.form(b).items():
                    form[k] = form.get(k, 0.0) + c
                random_b = g.flag(0.85) and any(c != 0 for c in form.values())
                s = Sum(g.name("s"), Ref(a), Ref(b) if random_b else Const(g.pick(MEANS)))
                self.forms[s.name] = form if random_b else self.form(a)
                self.reals.append(s.name)
            elif choice == "scale":
                c, a = g.pick(SCALES), g.pick(self.reals)
                s = Scale(g.name("s"), c, Ref(a))
                self.forms[s.name] = {k: c * v for k, v in self.form(a).items()}
                self.reals.append(s.name)
            else:
                s = self.gaussian(self.means(), latent=False)
            out.append(s)
        if g.flag(0.8):  # something is observed
            out.append(self.gaussian(self.means(), latent=False))
        return out

    def plate(self, size):
        """A plate of ``size`` (and the global weights of a regression): a latent Gaussian
        per element with an observed child, observations of a global real, or a
        regression ``y[n] ~ N(x1[n] * w1 + x2[n] * w2 (+ b), .)`` with fresh weights and
        features that may be nearly collinear."""
        g = self.g
        body, before = [], []
        choice = g.pick(("hierarchy", "observations", "regression"))
        if choice == "regression":
            terms, first = [], None
            for _ in range(g.draw(st.integers(1, 3))):
                w = self.gaussian([Const(0.0)], name=g.name("w"))
                before.append(w)
                if first is not None and g.flag(0.5):  # nearly the same feature again
                    jitter = g.pick((-0.1, 0.0, 0.1))
                    x = tuple(round(v + jitter * (i % 2), 2) for i, v in enumerate(first))
                else:
                    x = tuple(g.pick(FEATURES) for _ in range(size))
                first = first or x
                t = Scale(g.name("s"), PerElement(x), Ref(w.name))
                body.append(t)
                terms.append(t.name)
            if g.flag(0.5):
                terms.append(g.pick(self.reals))  # an intercept
            total = terms[0]
            for t in terms[1:]:
                s = Sum(g.name("s"), Ref(total), Ref(t))
                body.append(s)
                total = s.name
            body.append(self.gaussian([Ref(total)], size, latent=False))
        elif choice == "hierarchy":
            x = self.gaussian(self.means())
            body += [x, self.gaussian([Ref(x.name)], size, latent=False)]
        else:
            body.append(self.gaussian(self.means(), size, latent=False))
        return before + [Plate("n", size, tuple(body))]

    def selector(self, elements=None, discrete=False):
        """A latent or observed Bernoulli or Discrete condition."""
        g = self.g
        fam = "Discrete" if discrete else g.pick(("Bernoulli", "Discrete"))
        k = 2 if fam == "Bernoulli" else g.pick((2, 3))
        arg = Const(g.pick(PROBABILITIES)) if fam == "Bernoulli" else Const(g.probs(k))
        latent = g.flag(0.75) and g.afford(k, elements or 1)
        obs = None if latent else g.observed_value(fam, k, elements)
        return Draw(g.name("c" if fam == "Bernoulli" else "z"), fam, (arg,), obs), k

    def branches(self, sel: Draw, k: int, make):
        g = self.g
        if sel.family == "Bernoulli":
            keys = (True, False) if g.flag(0.75) else ((True,), (False,))[g.draw(
                st.integers(0, 1))]
            return Gate("if", sel.name, tuple((key, make(key)) for key in keys))
        return Gate("case", sel.name, tuple((j, make(j)) for j in range(k)))

    def gated(self):
        """One gated construct, after the core."""
        g = self.g
        kind = g.pick(("observation", "observation", "exit", "switch-same", "mixture",
                       "nested"))
        if kind == "nested":  # an observation's gate inside another gate (or a Switch)
            outer, k1 = self.selector(discrete=g.flag(0.4))
            inner, k2 = self.selector()
            value = g.observed_value("Gaussian", None, None)
            name = g.name("y")
            gate = self.branches(inner, k2, lambda _key: (Draw(
                name, "Gaussian", (g.pick(self.means() + [Const(g.pick(MEANS))]),
                                   Const(g.pick(PRECISIONS))), value),))
            if outer.family == "Discrete" and g.flag(0.5):
                return [outer, inner, Gate("switch", outer.name, ((None, (gate,)),))]
            return [outer, inner, self.branches(outer, k1, lambda _key: (gate,))]
        if kind in ("observation", "exit"):
            sel, k = self.selector()
            out = [sel]
        elif kind == "switch-same":
            sel, k = self.selector(discrete=True)
            out = [sel]
        if kind == "observation":  # a condition selects the mean or precision of a datum
            value = g.observed_value("Gaussian", None, None)
            name = g.name("y")
            out.append(self.branches(sel, k, lambda _key: (Draw(
                name, "Gaussian", (g.pick(self.means() + [Const(g.pick(MEANS))]),
                                   Const(g.pick(PRECISIONS))), value),)))
        elif kind == "exit":  # a Gaussian drawn in every branch, read after the gate
            name = g.name("e")
            gate = self.branches(sel, k, lambda _key: (Draw(
                name, "Gaussian", (g.pick(self.means() + [Const(g.pick(MEANS))]),
                                   Const(g.pick(PRECISIONS)))),))
            out.append(gate)
            if len(gate.branches) == (2 if sel.family == "Bernoulli" else k):
                self.reals.append(name)
                out.append(self.gaussian([Ref(name)], latent=False))
        elif kind == "switch-same":
            name = g.name("e")
            body = [self.gaussian(self.means() + [Const(g.pick(MEANS))], name=name)]
            if g.flag(0.5):  # and a deterministic function of it in the body too (fuzz
                # seed 19: its per-case local was not derived, and VMP counted x twice)
                c = g.pick(SCALES)
                body.append(Scale(g.name("s"), c, Ref(name)) if g.flag() else
                            Sum(g.name("s"), Ref(name), Const(g.pick(MEANS))))
                self.forms[body[-1].name] = {name: c if isinstance(body[-1], Scale) else 1.0}
                self.reals.append(name)
                name = body[-1].name
            out.append(Gate("switch", sel.name, ((None, tuple(body)),)))
            self.reals.append(name)
            out.append(self.gaussian([Ref(name)], latent=False))
        else:  # a mixture: Switch(z): x ~ N(means[z], .), one datum or a plate of them
            kk = g.pick((2, 3))
            out = []
            means = g.name("m")
            out.append(Plate(g.name("k"), kk, (Draw(means, "Gaussian", (
                PerElement(tuple(g.pick(MEANS) for _ in range(kk))),
                Const(g.pick(PRECISIONS)))),)))
            size = g.draw(st.integers(0, 3)) if g.flag(0.4) else None
            arg = Const(g.probs(kk))
            z = g.name("z")
            latent = g.afford(kk, size or 1)
            zobs = None if latent else g.observed_value("Discrete", kk, size)
            x = Draw(g.name("y"), "Gaussian", (Index(means, z), Const(g.pick(PRECISIONS))),
                     g.observed_value("Gaussian", None, size))
            inner = (Draw(z, "Discrete", (arg,), zobs), Gate("switch", z, ((None, (x,)),)))
            out += list(inner) if size is None else [Plate(g.name("r"), size, inner)]
        return out


@st.composite
def linear_gaussian(draw, gated: bool = False, max_configurations: int = 64):
    """A random linear-Gaussian model, with discrete gates if ``gated``."""
    g = _Gen(draw, max_configurations)
    G = _Gaussian(g)
    body = G.core()
    if gated:
        for _ in range(draw(st.integers(1, 2))):
            body += G.gated()
    if draw(st.booleans()):
        body += G.plate(draw(st.integers(0, 4)))
    return Spec("linear-Gaussian" + (" gated" if gated else ""), tuple(body))


# ----- one continuous variable -------------------------------------------------------------
@st.composite
def one_continuous(draw, max_configurations: int = 64):
    """One Beta / Gamma / Dirichlet / Gaussian variable with conjugate or non-conjugate
    neighbours (see the module docstring)."""
    g = _Gen(draw, max_configurations)
    kind = g.pick(("Beta", "Gamma", "Dirichlet", "Gaussian"))
    body: list = []
    t = "t"
    if kind == "Beta":
        body.append(Draw(t, "Beta", (Const(g.pick((0.5, 1.0, 2.0, 3.5))),
                                     Const(g.pick((0.5, 1.0, 2.0, 3.5))))))
    elif kind == "Gamma":
        body.append(Draw(t, "Gamma", (Const(g.pick((0.5, 1.0, 2.0, 3.0))),
                                      Const(g.pick((0.5, 1.0, 2.0))))))
    elif kind == "Dirichlet":
        k = g.pick((2, 3))
        body.append(Draw(t, "Dirichlet", (Const(tuple(
            g.pick((0.5, 1.0, 1.0, 2.0, 3.0)) for _ in range(k))),)))
    else:
        body.append(Draw(t, "Gaussian", (Const(g.pick(MEANS)), Const(g.pick(PRECISIONS)))))
    k = len(body[0].args[0].value) if kind == "Dirichlet" else None

    def child(elements=None, name=None, value=None):
        """An observation of t, in t's conjugate family."""
        name = name or g.name("y")
        if kind == "Beta":
            if g.flag(0.6):
                return Draw(name, "Bernoulli", (Ref(t),),
                            value if value is not None else g.observed_value(
                                "Bernoulli", 2, elements))
            trials = g.pick((1, 3, 5))
            obs = tuple(g.draw(st.integers(0, trials)) for _ in range(elements)) \
                if elements is not None else g.draw(st.integers(0, trials))
            return Draw(name, "Binomial", (Const(trials), Ref(t)), obs)
        if kind == "Gamma":
            if g.flag(0.5):
                return Draw(name, "Poisson", (Ref(t),), g.observed_value(
                    "Poisson", None, elements))
            return Draw(name, "Gaussian", (Const(g.pick(MEANS)), Ref(t)),
                        g.observed_value("Gaussian", None, elements))
        if kind == "Dirichlet":
            return Draw(name, "Discrete", (Ref(t),), g.observed_value("Discrete", k, elements))
        return Draw(name, "Gaussian", (Ref(t), Const(g.pick(PRECISIONS))),
                    g.observed_value("Gaussian", None, elements))

    def alternative(name, template):
        """The same observation with a constant parameter (the other branch)."""
        if template.family == "Bernoulli":
            return Draw(name, "Bernoulli", (Const(g.pick(PROBABILITIES)),), template.observed)
        if template.family == "Binomial":
            return Draw(name, "Binomial", (template.args[0], Const(g.pick(PROBABILITIES))),
                        template.observed)
        if template.family == "Poisson":
            return Draw(name, "Poisson", (Const(g.pick((0.5, 1.0, 3.0))),), template.observed)
        if template.family == "Discrete":
            return Draw(name, "Discrete", (Const(g.probs(k)),), template.observed)
        if template.args[1] == Ref(t):  # a Gaussian with precision t
            return Draw(name, "Gaussian", (template.args[0], Const(g.pick(PRECISIONS))),
                        template.observed)
        return Draw(name, "Gaussian", (Const(g.pick(MEANS)), template.args[1]),
                    template.observed)

    for _ in range(g.draw(st.integers(0, 3))):
        choice = g.pick(("child", "plate", "gated", "gated", "latent-child")
                        + (("truncation", "truncation", "comparison-gate")
                           if kind == "Gaussian" else ()))
        if choice == "child":
            body.append(child())
        elif choice == "plate":
            size = g.draw(st.integers(0, 4))
            body.append(Plate(g.name("n"), size, (child(size),)))
        elif choice == "gated":  # an observation of t only where a condition holds
            fam = g.pick(("Bernoulli", "Discrete"))
            kk = 2 if fam == "Bernoulli" else g.pick((2, 3))
            latent = g.flag(0.7) and g.afford(kk, 1)
            cname = g.name("c" if fam == "Bernoulli" else "z")
            carg = Const(g.pick(PROBABILITIES)) if fam == "Bernoulli" else Const(g.probs(kk))
            body.append(Draw(cname, fam, (carg,), None if latent else
                             g.observed_value(fam, kk, None)))
            first = child()
            keys = (True, False) if fam == "Bernoulli" else tuple(range(kk))
            branches = [(keys[0], (first,))]
            for key in keys[1:]:
                if g.flag(0.7):
                    branches.append((key, (alternative(first.name, first),)))
            body.append(Gate("if" if fam == "Bernoulli" else "case", cname, tuple(branches)))
        elif choice == "latent-child" and kind in ("Beta", "Dirichlet"):
            # a latent draw with probabilities t, and an observation gated on it
            fam = "Bernoulli" if kind == "Beta" else "Discrete"
            kk = 2 if kind == "Beta" else k
            if not g.afford(kk, 1):
                continue
            cname = g.name("c" if fam == "Bernoulli" else "z")
            body.append(Draw(cname, fam, (Ref(t),)))
            oname = g.name("o")
            value = g.flag()
            keys = (True, False) if fam == "Bernoulli" else tuple(range(kk))
            body.append(Gate("if" if fam == "Bernoulli" else "case", cname, tuple(
                (key, (Draw(oname, "Bernoulli", (Const(g.pick(PROBABILITIES)),), value),))
                for key in keys)))
        elif choice == "truncation":  # constrain_true(x > t), maybe under a gate
            threshold = g.pick((None, -1.0, 0.5, 1.0))
            b = g.name("b")
            stmts = (Greater(b, Ref(t), threshold), Constrain(Ref(b)))
            if g.flag(0.3):
                cname = g.name("c")
                latent = g.flag(0.5) and g.afford(2, 1)
                body.append(Draw(cname, "Bernoulli", (Const(g.pick(PROBABILITIES)),),
                                 None if latent else g.flag()))
                body.append(Gate("if", cname, ((True, stmts),)))
            else:
                body += list(stmts)
        elif choice == "comparison-gate":  # a datum whose probability depends on x > t
            b = g.name("b")
            body.append(Greater(b, Ref(t), g.pick((None, -1.0, 0.5, 1.0))))
            oname = g.name("o")
            value = g.flag()
            body.append(Gate("if", b, tuple(
                (key, (Draw(oname, "Bernoulli", (Const(g.pick(PROBABILITIES)),), value),))
                for key in (True, False))))
    return Spec(f"one {kind}", tuple(body))


__all__ = ["discrete", "linear_gaussian", "one_continuous"]
