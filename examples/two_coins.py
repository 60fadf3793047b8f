"""Two coins (Infer.NET's first tutorial) with EP: P(both heads), then conditioning."""

from __future__ import annotations

import factorflow as ff


def build(not_both: bool = False) -> ff.Model:
    """Two fair coins and whether both are heads; ``not_both``: given that they are not."""
    with ff.Model("two_coins_not_both" if not_both else "two_coins") as model:
        first = ff.Bernoulli("first", 0.5)
        second = ff.Bernoulli("second", 0.5)
        both = first & second
        if not_both:
            ff.constrain_true(~both)
    return model


def main() -> dict[str, float]:
    p_both = float(build().infer("ep")["(first & second)"].p)
    print(f"P(both heads) = {p_both:.6f}")

    result = build(not_both=True).infer("ep")
    p_first = float(result["first"].p)
    print(f"P(first heads | not both heads) = {p_first:.6f}")
    return {"p_both": p_both, "p_first": p_first}


if __name__ == "__main__":
    main()
