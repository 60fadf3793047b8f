"""Clinical trial (Infer.NET's tutorial) with EP: is the treatment effective?

Model selection with a gate: if effective, the control and treated groups have their own
recovery probabilities; if not, they share one.  P(effective) is the posterior of the
gate's condition, computed from the evidence of each branch.
"""

from __future__ import annotations

import factorflow as ff

CONTROL = [False, False, True, False, False]
TREATED = [True, False, True, True, True]


def build() -> ff.Model:
    """The model: separate recovery rates if the treatment is effective, else one."""
    with ff.Model("clinical_trial") as model:
        effective = ff.Bernoulli("effective", 0.5)
        nc, nt = ff.Range("control", len(CONTROL)), ff.Range("treated", len(TREATED))
        with ff.If(effective):
            p_control = ff.Beta("p_control", 1.0, 1.0)
            p_treated = ff.Beta("p_treated", 1.0, 1.0)
            with ff.Plate(nc):
                ff.Bernoulli("control_if", p_control, observed=CONTROL)
            with ff.Plate(nt):
                ff.Bernoulli("treated_if", p_treated, observed=TREATED)
        with ff.IfNot(effective):
            p_all = ff.Beta("p_all", 1.0, 1.0)
            with ff.Plate(nc):
                ff.Bernoulli("control_ifnot", p_all, observed=CONTROL)
            with ff.Plate(nt):
                ff.Bernoulli("treated_ifnot", p_all, observed=TREATED)
    return model


def main() -> dict[str, float]:
    result = build().infer("ep")
    p = float(result["effective"].p)
    print(f"P(effective) = {p:.8f}  (exact 2772/3672 = {2772 / 3672:.8f})")
    print(f"recovery if effective: treated {float(result['p_treated'].mean):.7f}, "
          f"control {float(result['p_control'].mean):.7f}")
    print(f"log evidence = {result.log_evidence:.9f}")
    return {"p_effective": p}


if __name__ == "__main__":
    main()
