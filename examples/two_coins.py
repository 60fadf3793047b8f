"""Two coins (Infer.NET's first tutorial) with EP: P(both heads), then conditioning."""

from __future__ import annotations

import factorflow as ff


def main() -> dict[str, float]:
    with ff.Model("two_coins") as model:
        first = ff.Bernoulli("first", 0.5)
        second = ff.Bernoulli("second", 0.5)
        both = first & second
    p_both = float(model.infer("ep")[both.name].p)
    print(f"P(both heads) = {p_both:.6f}")

    with ff.Model("two_coins_not_both") as conditioned:
        first = ff.Bernoulli("first", 0.5)
        second = ff.Bernoulli("second", 0.5)
        ff.constrain_true(~(first & second))
    result = conditioned.infer("ep")
    p_first = float(result["first"].p)
    print(f"P(first heads | not both heads) = {p_first:.6f}")
    return {"p_both": p_both, "p_first": p_first}


if __name__ == "__main__":
    main()
